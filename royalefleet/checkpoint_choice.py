"""``royalefleet resume RUN --checkpoint N``: go on from a chosen checkpoint, not the newest.

Before any service starts, checkpoint N is verified (every file's sha256 and size against its
manifest, the manifest's iteration against the index, and a metric row of iteration N carrying
its state digest, the learner's own resume check: ``metric_log.described``); then every later
checkpoint's folder is moved, whole, into ``checkpoints/set-aside-<UTC time>/`` and dropped from
the run's index, so that the learner's ordinary resume (the newest checkpoint that verifies)
starts from N. Nothing is deleted: the set-aside folder holds the later folders and an
``index.json`` of their entries (it is a checkpoint store of its own: ``CheckpointStore(folder)``
lists and verifies them), and the learner moves the metric rows past N to
``metrics.purged.jsonl`` as any resume from an older checkpoint does. The run keeps its run id.

A missing or corrupt N is refused before anything moves, naming every checkpoint of the run and
whether it verifies.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import msgspec

from services.checkpoint.store import CheckpointCorrupt, CheckpointIndex, CheckpointStore, INDEX
from services.learner.metric_log import described
from shared.durable import fsync_dir

SET_ASIDE_PREFIX = "set-aside-"
"""The set-aside folders' names under ``checkpoints/``: this, then the UTC time of the move."""


class ChoiceRefused(ValueError):
    """Checkpoint N cannot be resumed from; the text says why and lists the run's checkpoints."""


class _Described(msgspec.Struct):
    """What the metric-row check reads of a checkpoint's meta (``checkpointing.CheckpointMeta``)."""

    iteration: int
    state_digest: str


def existing(store: CheckpointStore) -> str:
    """The run's checkpoints as one line: ``1 ok, 2 ok, 3 CORRUPT (actor/model.safetensors: ...)``."""
    entries = store.list_entries()
    if not entries:
        return "the run has no checkpoint"
    return "the run's checkpoints: " + ", ".join(
        f"{e.iteration} ok" if e.ok else f"{e.iteration} CORRUPT ({e.problem})" for e in entries)


def verify_choice(store: CheckpointStore, iteration: int, metrics_path: str | os.PathLike) -> None:
    """Raise ChoiceRefused unless checkpoint ``iteration`` is in the index and verifies (module
    docstring); the text names the run's checkpoints and their status."""
    def refuse(why: str) -> ChoiceRefused:
        return ChoiceRefused(f"--checkpoint {iteration}: {why}; {existing(store)}. Choose one that is ok "
                             "(`royalefleet checkpoints RUN` lists them)")

    names = [e.name for e in store.index().entries if e.iteration == iteration]
    if not names:
        raise refuse(f"no checkpoint of iteration {iteration} in {store.root / INDEX}")
    try:
        manifest, _ = store.read(names[-1])
    except CheckpointCorrupt as exc:
        raise refuse(f"checkpoint {iteration} does not verify ({exc.file}: {exc.problem})") from None
    if manifest.iteration != iteration:
        raise refuse(f"checkpoint {names[-1]} holds iteration {manifest.iteration}, the index says {iteration}")
    try:
        meta = msgspec.json.decode(manifest.meta, type=_Described)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise refuse(f"checkpoint {iteration}'s meta is not a learner checkpoint's ({exc})") from None
    ok, note = described(meta, str(metrics_path))
    if not ok:
        raise refuse(f"checkpoint {iteration}: {note}")


def set_aside_after(checkpoints: str | os.PathLike, iteration: int, metrics_path: str | os.PathLike, *,
                    now: float | None = None) -> tuple[Path | None, list[int]]:
    """Verify checkpoint ``iteration`` of the store at ``checkpoints`` (``verify_choice``), then
    move every later index entry's folder into ``checkpoints/set-aside-<YYYYmmddTHHMMSSZ>/``
    (``now``: the time, default the clock) with an ``index.json`` of those entries, and drop them
    from the run's index. Returns (the set-aside folder, the iterations moved, oldest first);
    (None, []) when ``iteration`` is the newest. The folders move first and the index is
    replaced after, so a crash in between leaves index entries whose folders are gone, which a
    resume skips, never a folder that nothing names. Raises ChoiceRefused (nothing moved), and
    OSError when the disk refuses a move (the folders moved so far stay in the set-aside folder
    and its index names them)."""
    store = CheckpointStore(checkpoints, say=lambda text: None)
    verify_choice(store, iteration, metrics_path)
    index = store.index()
    later = [e for e in index.entries if e.iteration > iteration]
    if not later:
        return None, []
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    folder, n = store.root / f"{SET_ASIDE_PREFIX}{stamp}", 1
    while folder.exists():
        n += 1
        folder = store.root / f"{SET_ASIDE_PREFIX}{stamp}-{n}"
    folder.mkdir()
    aside = CheckpointStore(folder)
    aside._write_index(CheckpointIndex(later))
    for entry in later:
        if (store.root / entry.name).exists():
            os.replace(store.root / entry.name, folder / entry.name)
    fsync_dir(folder)
    store._write_index(CheckpointIndex([e for e in index.entries if e.iteration <= iteration]))
    fsync_dir(store.root)
    return folder, [e.iteration for e in later]


def set_aside_folders(checkpoints: str | os.PathLike) -> list[tuple[Path, list[int]]]:
    """Every set-aside folder under ``checkpoints``, oldest first, with the iterations its index
    lists ([] when its index cannot be read)."""
    root = Path(checkpoints)
    if not root.is_dir():
        return []
    out = []
    for folder in sorted(p for p in root.iterdir() if p.name.startswith(SET_ASIDE_PREFIX) and p.is_dir()):
        try:
            its = [e.iteration for e in CheckpointStore(folder).index().entries]
        except CheckpointCorrupt:
            its = []
        out.append((folder, its))
    return out


ONE_SHOT_ENV = ("ROYALEFLEET_CONFIG", "ROYALEFLEET_RUNS_DIR", "ROYALEFLEET_CHECKPOINTS_RUNS_DIR")
"""What the one-shot form reads (compose.yaml's ``resume-checkpoint``; the Kubernetes Job in
docs/kubernetes.md): the learner's config file (its ``run_name``), the folder holding the run's
``metrics.jsonl`` (the learner's volume) and the one holding its ``checkpoints/`` (the
checkpoint service's volume), each as ``<folder>/<run_name>/...``."""


def main(argv: list[str] | None = None, environ=os.environ) -> int:
    """``python -m royalefleet.checkpoint_choice N``: ``resume --checkpoint N`` for a stack whose
    learner and checkpoint service are stopped (Compose, Kubernetes): verify N and set the later
    checkpoints aside (``set_aside_after``); the next start of the learner resumes from N.
    Exit 0 done, 2 refused (the reason and the run's checkpoints printed)."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m royalefleet.checkpoint_choice",
                                description="Go on from checkpoint N: verify it and set the later ones aside "
                                            "(the learner and the checkpoint service stopped). docs/compose.md.")
    p.add_argument("checkpoint", type=int, metavar="N", help="the checkpoint's iteration (`royalefleet checkpoints`)")
    args = p.parse_args(argv)
    missing = [name for name in ONE_SHOT_ENV if not environ.get(name)]
    if missing:
        print(f"resume-checkpoint: {', '.join(missing)} not set (compose.yaml's resume-checkpoint service sets them)",
              file=sys.stderr)
        return 2
    from shared.config import load_config

    try:
        run_name = load_config(environ["ROYALEFLEET_CONFIG"]).run_name
    except (OSError, ValueError) as exc:
        print(f"resume-checkpoint: {exc}", file=sys.stderr)
        return 2
    from shared.run_dir import RunDir

    checkpoints = RunDir.of(environ["ROYALEFLEET_CHECKPOINTS_RUNS_DIR"], run_name).checkpoints
    metrics = RunDir.of(environ["ROYALEFLEET_RUNS_DIR"], run_name).metrics
    try:
        folder, moved = set_aside_after(checkpoints, args.checkpoint, metrics)
    except (ChoiceRefused, OSError) as exc:
        print(f"resume-checkpoint: {exc}", file=sys.stderr)
        return 2
    if moved:
        print(f"resume-checkpoint: checkpoint {args.checkpoint} of run {run_name!r} verifies; the later checkpoint(s) "
              f"{', '.join(map(str, moved))} set aside in {folder} (kept); start the learner: it resumes from "
              f"{args.checkpoint}")
    else:
        print(f"resume-checkpoint: checkpoint {args.checkpoint} of run {run_name!r} verifies and is the newest; "
              "nothing set aside")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
