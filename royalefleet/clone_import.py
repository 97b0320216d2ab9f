"""A clone from another run for a warm start or a KL anchor: brought into the run before the
learner reads its config.

The learner's ``warm_start.snapshot`` and ``imitation.reference`` name a snapshot of the run's
own store (``snap:<id>``). ``royalefleet up`` / ``resume`` also take, in a ``--config`` file:

- ``"<run>:snap:<id>"``: a snapshot of another run under the same runs folder (its critic in
  ``<run>/clones/<id>/`` comes along when there);
- the path of a folder ``royalefleet export`` wrote (``bot.json`` beside the weights).

Either is verified by its sha256 (the snapshot id is the first 16 hex of the sha256 of the actor
weights, and an export's ``bot.json`` carries the whole digest), copied into this run's snapshot
store, and the config names it as ``snap:<id>`` from then on (what the run records). The
learner then loads it as any clone of the run (its probe rows verified as well).
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import msgspec

REFERENCES = (("warm_start", "snapshot"), ("imitation", "reference"))
"""The config fields that name a clone: (section, field)."""
_OWN = re.compile(r"^snap:[0-9a-f]{16}$")
_OTHER_RUN = re.compile(r"^(?P<run>[^:/\\]+):snap:(?P<sid>[0-9a-f]{16})$")


class CloneImportRefused(ValueError):
    """A clone that cannot be brought over; the text names the field, the source and the fix."""


def _from_run(runs_dir: Path, run: str, sid: str, field: str) -> tuple[bytes, bytes, Path | None]:
    from services.checkpoint.snapshots import SnapshotCorrupt, SnapshotStore
    from shared.run_dir import RunDir

    source = RunDir.of(runs_dir, run)
    if not source.root.is_dir():
        from royalefleet.run_options import RunNotFound

        raise CloneImportRefused(f"{field}: {run}:snap:{sid}: {RunNotFound(runs_dir, run)}")
    try:
        actor, spec = SnapshotStore(source.snapshots).read(sid)  # verified: the id is the sha256 prefix
    except FileNotFoundError:
        raise CloneImportRefused(f"{field}: run {run!r} has no snapshot {sid} under {source.snapshots} "
                                 f"(`royalefleet snapshots {run}` lists them)") from None
    except SnapshotCorrupt as exc:
        raise CloneImportRefused(f"{field}: {exc}") from None
    critic = source.clones / sid / "critic.safetensors"
    return actor, spec, critic if critic.is_file() else None


def _from_export(folder: Path, field: str) -> tuple[bytes, bytes, Path | None]:
    from royalefleet.bot import ACTOR_FILE, BOT_FILE, SPEC_FILE

    try:
        manifest = msgspec.json.decode((folder / BOT_FILE).read_bytes())
        actor, spec = (folder / ACTOR_FILE).read_bytes(), (folder / SPEC_FILE).read_bytes()
        want = str(manifest["actor_sha256"])
    except (OSError, msgspec.DecodeError, KeyError, TypeError) as exc:
        raise CloneImportRefused(f"{field}: {folder}: not a readable exported bot ({exc}); `royalefleet export RUN "
                                 "snap:<id> FOLDER` writes one") from None
    digest = hashlib.sha256(actor).hexdigest()
    if digest != want:
        raise CloneImportRefused(f"{field}: {folder / ACTOR_FILE}: sha256 {digest[:16]}... is not bot.json's "
                                 f"{want[:16]}...: the weights were changed or damaged; export the clone again")
    return actor, spec, None


def import_clone(source: str, runs_dir: str | Path, run_name: str, field: str) -> str:
    """``snap:<id>`` of ``source`` (``<run>:snap:<id>`` or an exported folder) in run
    ``run_name``'s snapshot store under ``runs_dir``, copied there (with the clone's critic when
    the source run has one) after its sha256 is verified. Raises CloneImportRefused naming
    ``field``, the source and the fix."""
    from services.checkpoint.snapshots import SnapshotStore
    from shared.run_dir import RunDir

    m = _OTHER_RUN.match(source)
    if m:
        actor, spec, critic = _from_run(Path(runs_dir), m["run"], m["sid"], field)
    elif (Path(source) / "bot.json").is_file():
        actor, spec, critic = _from_export(Path(source), field)
    else:
        raise CloneImportRefused(f"{field}: {source!r}: expected snap:<id> (this run's), <run>:snap:<id> (another "
                                 "run's under the same runs folder) or the folder `royalefleet export` wrote")
    target = RunDir.of(runs_dir, run_name)
    sid, _, _ = SnapshotStore(target.snapshots).write(actor, spec)
    if critic is not None and not (target.clones / sid / critic.name).exists():
        (target.clones / sid).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(critic, target.clones / sid / critic.name)
    return f"snap:{sid}"


def bring_clones(doc: dict, runs_dir: str | Path, run_name: str, say) -> dict:
    """``doc`` (a config document) with every clone reference (``REFERENCES``) that is not
    ``snap:<id>`` imported (``import_clone``) and rewritten as ``snap:<id>``; ``say`` gets one
    line for each. Returns a new document; raises CloneImportRefused."""
    out = dict(doc)
    for section, key in REFERENCES:
        body = out.get(section)
        value = body.get(key) if isinstance(body, dict) else None
        if not isinstance(value, str) or not value or _OWN.match(value):
            continue
        field = f"{section}.{key}"
        ref = import_clone(value, runs_dir, run_name, field)
        out[section] = {**body, key: ref}
        say(f"{field}: {value} verified by its sha256 and copied into run {run_name!r}'s snapshots as {ref}")
    return out
