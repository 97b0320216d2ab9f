"""Steps 6-7 of an iteration: the row published with the checkpoint of the state it describes
(docs/iteration.md, steps 6 and 7).

In order: the finished episodes to the ladder's result log (held while it does not answer),
the ladder's status keys, the battle states the rollouts saved during the update, the in-memory
checkpoint snapshot of this row's state, the row's last keys; then the row is written
(``row.write_row``), the alarms read it, and the checkpoint is saved when due (every
``checkpoint.every_iterations``, on a halt, or at once when the row could not be written);
a diagnostic bundle when an alarm asks for one; ``SaveHalt`` / ``AlarmHalt`` raised last.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from services.learner import checkpointing, metric_log
from services.learner.row import write_row
from services.learner.stops import AlarmHalt, SaveHalt
from shared.config import dump_config

if TYPE_CHECKING:
    from services.learner.collected import Collected
    from services.learner.parts import IterationState, LearnerParts

LABELS_PER_HOUR = (("search/decisions", "throughput/labels_per_hour"),
                   ("expit/labels_added", "throughput/replay_labels_per_hour"))
"""(count key, per-hour key): a row with the count gets it per hour of the iteration's wall time
(``time/iteration``), as ``throughput/overall_steps_per_second`` is the trainable rows per second."""


def publish(parts: LearnerParts, state: IterationState, c: Collected, row: dict, reported: list) -> dict:
    """Publish iteration ``c.iteration``'s ``row`` (module docstring); returns the row as written.
    ``reported``: the finished episodes for the ladder's result log (``row.assemble_row``).
    Raises SaveHalt after ``checkpoint.max_failed_saves`` failed saves in a row, AlarmHalt when
    an alarm of severity halt fired."""
    cfg, it = parts.cfg, c.iteration
    t0 = time.perf_counter()
    parts.pool.deliver_episodes(reported, it)
    row["health/episodes_held"] = parts.pool.courier.held()
    row.update(parts.pool.status.poll())  # ladder/ keys; absent when the ladder does not answer
    # whoever owns the rollouts' socket gathers them (an overlapped collection's thread, or here)
    state.collection.gather_states(
        lambda: parts.battle_states.gather(parts.collector, c.members, it, cfg.rollout.round_timeout_s),
        cfg.rollout.round_timeout_s + 5.0)
    row.update(parts.battle_states.row_keys())
    state.boundary_ordinals = c.ordinals
    try:
        state.snapshot = checkpointing.capture(parts, state)
    finally:
        state.boundary_ordinals = None
    row["run/state_digest"] = state.snapshot.state_digest
    row["run/run_id"] = parts.run_id
    if state.resumed_with_drift:
        row["run/resumed_with_drift"] = 1
    row.update(parts.idle_meter.row_keys(parts.collector.busy_seconds,
                                           [m.instance for m in parts.fleet.members.values() if not m.lost]))
    row["time/checkpoint"] = time.perf_counter() - t0
    row["time/iteration"] = time.perf_counter() - c.t_start
    row["throughput/overall_steps_per_second"] = row["health/trainable_rows"] / row["time/iteration"]
    for count, key in LABELS_PER_HOUR:  # a searched learner's labels (policy targets) per hour of this iteration
        if count in row:
            row[key] = 3600.0 * row[count] / row["time/iteration"]
    # The row first, then the alarms read it, then the checkpoint it describes. One plain
    # copy (no numpy scalars) serves the file, the alarms and any bundle.
    row = metric_log.plain_row(row)
    line, row_written = write_row(parts, row)
    checkpointing.attach_row(state.snapshot, line)  # the row travels with the checkpoint of its state
    verdict = parts.alarms.observe(row)
    # A row the disk refused lives only in the snapshot now: its checkpoint is due.
    if verdict.halt_due or it % cfg.checkpoint.every_iterations == 0 or not row_written:
        checkpointing.save_checkpoint(parts, state, state.snapshot)
        if state.failed_saves >= cfg.checkpoint.max_failed_saves:
            raise SaveHalt(f"halted at iteration {it}: {state.failed_saves} checkpoint saves in a row failed "
                           f"(checkpoint.max_failed_saves = {cfg.checkpoint.max_failed_saves}); "
                           + (f"the newest checkpoint is of iteration {state.saved_iteration}"
                              if state.saved_iteration >= 0 else "the run has no checkpoint")
                           + ". Free the disk or mend the "
                           "checkpoint service (its log says why), then resume with --clear-halt")
    if verdict.bundle_due:
        from services.learner.alarms import write_bundle

        path = write_bundle(parts.run_dir, it, list(parts.alarms.recent_rows), verdict.fired, dump_config(cfg),
                            checkpoint_path=f"checkpoints/{it:08d}" if state.saved_iteration == it else None,
                            table=parts.alarms.by_name)
        parts.say(f"learner: diagnostic bundle written to {path}")
    if verdict.halt_due:
        names = ", ".join(r.name for r in verdict.fired if r.severity == "halt")
        raise AlarmHalt(f"halted by alarm {names} at iteration {it}; see {parts.run_dir}/bundles/ and alarms.jsonl")
    return row
