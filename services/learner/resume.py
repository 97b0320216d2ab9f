"""The resume: from the newest checkpoint that verifies (identity, described-by-a-row, state
digest), and the halt record a restart must respect. What a checkpoint holds, and its save to
the checkpoint service, is ``services/learner/checkpointing.py``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import msgspec

from services.learner import checkpointing, extension_hooks, metric_log
from services.learner.halt import read_halt_mark
from shared import transport
from shared.config import config_differences
from shared.identity import identity_differences
from shared.messages import Loaded, LoadLatest, NotFound
from shared.run_dir import RunDir

if TYPE_CHECKING:
    from services.learner.parts import IterationState, LearnerParts, RunOptions


def resume_run(parts: LearnerParts, state: IterationState, options: RunOptions) -> None:
    """Continue from the run's newest checkpoint that verifies, or start fresh when the run
    has none. A run whose checkpoints exist and none verifies is refused (SystemExit naming
    each one and its failing file), nothing purged, unless ``start_fresh``.

    Refuses (SystemExit naming everything) a checkpoint whose identity differs from this
    run's (unless allow_identity_drift, which records the drift), and one whose state no
    metric row of its iteration describes. Config differences outside the identity are
    printed and continued past. In order: ``latest_checkpoint``, ``start_fresh`` or
    ``verified_meta``, ``restore_state``, ``mend_metric_log``."""
    reply, arrays = latest_checkpoint(parts, options)
    if isinstance(reply, NotFound):
        start_fresh(parts, reply)
        return
    meta = verified_meta(parts, state, options, reply)
    files = {n: bytes(arrays[n]) for n in reply.names}
    restore_state(parts, state, options, meta, files, reply.path)
    mend_metric_log(parts, meta, files, reply.path)
    if options.perturb_resume:
        parts.say(f"learner: PERTURBED resume (test hook): did not load {', '.join(options.perturb_resume)}")
    parts.say(f"learner: resumed iteration {meta.iteration} at {meta.counters.timesteps:,} timesteps from "
              f"{reply.path} (state {meta.state_digest})")


def latest_checkpoint(parts: LearnerParts, options: RunOptions) -> tuple[Loaded | NotFound, dict]:
    """The checkpoint service's answer to ``LoadLatest`` and its arrays: ``Loaded``, or
    ``NotFound`` when there is none or (``start_fresh`` only) none verifies. Raises SystemExit
    when the service does not answer, answers otherwise, or finds checkpoints none of which
    verifies (nothing purged: a person decides)."""
    cfg = parts.cfg
    try:
        reply, arrays = parts.ckpt.request(LoadLatest(request_id=parts.ckpt.next_id(), run_name=cfg.run_name))
    except transport.ServiceTimeout as exc:
        raise SystemExit(f"learner: cannot reach the checkpoint service to look for a checkpoint: {exc}")
    if isinstance(reply, NotFound) and reply.skipped and not options.start_fresh:
        # Checkpoints exist and none verifies: starting fresh would purge the run's record
        # and overwrite its checkpoint folders. Purge nothing; a person decides.
        raise SystemExit(
            f"learner: refusing to start run {cfg.run_name!r}: it has {len(reply.skipped)} checkpoint(s) "
            "and none verifies:\n" + "\n".join(f"  {s}" for s in reply.skipped)
            + "\nNothing was changed. Repair or restore a checkpoint folder (royalefleet checkpoints lists "
            "them), start another run_name, or start this run over with `royalefleet resume --start-fresh` "
            "(ROYALEFLEET_START_FRESH=1; Compose: FLEET_START_FRESH=1 for one `up -d learner`), which moves "
            f"its metric rows to {metric_log.PURGED_NAME} and overwrites its checkpoints as new ones are written")
    if not isinstance(reply, (Loaded, NotFound)):
        raise SystemExit(f"learner: the checkpoint service could not load the latest checkpoint: "
                         f"{getattr(reply, 'reason', reply)}")
    return reply, arrays


def start_fresh(parts: LearnerParts, reply: NotFound) -> None:
    """A run without a checkpoint: its stray rows moved out, the seed snapshots admitted, the
    extensions' starting weights (the warm start) loaded before iteration 1."""
    name = parts.cfg.run_name
    if reply.skipped:
        parts.say(f"learner: starting run {name!r} over (--start-fresh); none of its "
                  f"{len(reply.skipped)} checkpoint(s) verifies:\n" + "\n".join(f"  {s}" for s in reply.skipped))
    parts.say(f"learner: no checkpoint for run {name!r}; starting fresh")
    moved, _ = metric_log.purge_after(parts.metrics_path, 0)
    if moved:  # a process killed before its first checkpoint: its rows describe nothing kept
        parts.say(f"learner: {moved} metric row(s) of a process that wrote no checkpoint moved from "
                  f"metrics.jsonl to {metric_log.PURGED_NAME}")
    parts.pool.admit_seed_snapshots(parts.identity, parts.pf.spec, parts.cfg.net)  # a resumed pool holds them
    extension_hooks.start(parts, fresh=True)


def verified_meta(parts: LearnerParts, state: IterationState, options: RunOptions,
                  reply: Loaded) -> checkpointing.CheckpointMeta:
    """The checkpoint's meta, once its format, its identity (or the recorded drift, under
    ``allow_identity_drift``) and a metric row describing its state are checked; raises
    SystemExit naming what refuses it."""
    for problem in reply.skipped:  # the fallback to an older checkpoint, said where it is seen
        parts.say(f"learner: skipped a newer checkpoint that does not verify: {problem}")
    try:
        meta = msgspec.json.decode(reply.meta, type=checkpointing.CheckpointMeta)
    except msgspec.ValidationError as exc:
        raise SystemExit(f"learner: checkpoint {reply.path} was written by another format ({exc}); "
                         "start a new run_name or resume with the build that wrote it")
    diffs = identity_differences(meta.identity, parts.identity)
    if diffs:
        lines = [f"  {k}: checkpoint {a!r}, this run {b!r}" for k, (a, b) in diffs.items()]
        if not options.allow_identity_drift:
            raise SystemExit(
                f"learner: refusing to resume {reply.path}: the run identity differs in {len(diffs)} field(s):\n"
                + "\n".join(lines)
                + "\nThese change the numbers the run produces. Start a new run_name, or pass "
                "--allow-identity-drift to record the drift and continue.")
        state.resumed_with_drift = True
        RunDir(parts.run_dir).append_drift(msgspec.json.encode({
            "iteration": meta.iteration, "from_run_id": meta.run_id, "to_run_id": parts.run_id,
            "fields": {k: [str(a), str(b)] for k, (a, b) in diffs.items()}}))
        parts.say("learner: resuming across an identity drift (recorded in drift.json):\n" + "\n".join(lines))
    ok, note = checkpointing.described(meta, parts.metrics_path)
    if not ok:
        raise SystemExit(f"learner: refusing to resume {reply.path}: {note}. Resume from an earlier "
                         "checkpoint (royalefleet checkpoints lists them).")
    if note:
        parts.say(f"learner: note: {note}")
    return meta


def restore_state(parts: LearnerParts, state: IterationState, options: RunOptions, meta: checkpointing.CheckpointMeta,
                  files: dict[str, bytes], path: str) -> None:
    """Load the checkpoint's ``files`` into ``parts`` and ``state`` (the config's learning
    rates kept, the LR backoff applied), capture the restored state and check it hashes to the
    checkpoint's; raises SystemExit naming ``path`` when a component refuses or the state
    differs."""
    try:
        checkpointing.restore(parts, state, files, skip=options.perturb_resume)
    except checkpointing.ResumeRefused as exc:
        raise SystemExit(f"learner: refusing to resume {path}: {exc}")
    # Learning rates come from this config (an lr change on resume takes effect).
    for opt, lr in ((parts.opt_actor, parts.cfg.ppo.lr_actor), (parts.opt_critic, parts.cfg.ppo.lr_critic)):
        for group in opt.param_groups:
            group["lr"] = lr
    parts.lr_backoff.apply(parts.opt_actor, parts.opt_critic)  # a backoff outlives a resume
    state.saved_iteration = meta.iteration
    state.snapshot = checkpointing.capture(parts, state)
    extension_hooks.start(parts, fresh=False)  # the checkpoint's weights stand; each extension says so
    if state.snapshot.state_digest != meta.state_digest and not options.perturb_resume:
        raise SystemExit(f"learner: the restored state hashes to {state.snapshot.state_digest}, the checkpoint "
                         f"says {meta.state_digest}: the restore lost something")
    for key, (a, b) in config_differences(meta.config, parts.cfg).items():
        parts.say(f"learner: config differs from the checkpoint's: {key} {a!r} -> {b!r}")


def mend_metric_log(parts: LearnerParts, meta: checkpointing.CheckpointMeta, files: dict[str, bytes],
                    path: str) -> None:
    """metrics.jsonl as the resumed state's record: rows past the checkpoint (or torn) moved
    out, the checkpoint's own row written back when it was lost."""
    moved, lost = metric_log.purge_after(parts.metrics_path, meta.iteration)
    if moved:
        span = (f"iterations {lost[0]}-{lost[-1]}" if len(lost) > 1 else f"iteration {lost[0]}" if lost
                else "a torn line")
        parts.say(f"learner: {moved} metric row(s) that describe no weights this run goes on from ({span}: "
                 f"past checkpoint {meta.iteration}, torn, or superseded) moved from metrics.jsonl to "
                 f"{metric_log.PURGED_NAME}")
    row = checkpointing.missing_row(meta, files, parts.metrics_path)
    if row is not None:  # the checkpointed iteration's row was torn or lost: it is part of the checkpoint
        metric_log.append_row(parts.metrics_path, row)
        parts.say(f"learner: the metric row of iteration {meta.iteration} was missing from metrics.jsonl; "
                 f"restored from {path}/{checkpointing.ROW_FILE}")


def halt_cleared(parts: LearnerParts, options: RunOptions) -> bool:
    """False (after saying why and how to go on) when the run was halted and not cleared."""
    what = read_halt_mark(parts.run_dir)
    if what is None:
        return True
    if options.clear_halt:
        RunDir(parts.run_dir).clear_halt()
        parts.say(f"learner: clearing the halt of run {parts.cfg.run_name!r} {what}")
        return True
    parts.say(f"learner: run {parts.cfg.run_name!r} was halted {what}. Read {parts.run_dir}/bundles/ and "
             f"alarms.jsonl, then continue with `royalefleet resume --clear-halt` (or ROYALEFLEET_CLEAR_HALT=1; "
             f"Compose: FLEET_CLEAR_HALT=1 for one `up -d learner`), or start another run_name")
    return False
