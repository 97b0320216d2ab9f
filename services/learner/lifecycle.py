"""The learner's life around its iterations: the loop, the halts, the shutdown.

``run`` resumes (or refuses a halted run), then runs the iteration it is given until
``--iterations`` (a total of the run, over every resume and restart), ``timestep_limit``, a
stop or a halt. Exit codes (``royalefleet/launcher.py`` reads them): 0 finished or stopped, 3
halted (an alarm, the operator's ``/halt``, or ``checkpoint.max_failed_saves`` failed saves).
A halt writes ``halted.json`` so every later start refuses until ``--clear-halt``
(``halt.py``). ``shutdown`` joins an overlapped collection (counting its rows), delivers held
episodes once more and saves the checkpoint of the last row's state when it is not saved yet.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from services.learner import checkpointing, resume
from services.learner.halt import HALTED_FILE, mark_halted
from services.learner.stops import AlarmHalt, SaveHalt, StopRequested
from shared import transport
from shared.config import RunConfig, dump_config
from shared.run_dir import OPERATOR_HALT, RunDir

if TYPE_CHECKING:
    from collections.abc import Callable

    from services.learner.parts import IterationState, LearnerParts, RunOptions, Say


def timestep_limit_reached(cfg: RunConfig, state: IterationState, say: Say) -> bool:
    """``timestep_limit`` (``--timesteps N``): a total of the run's learner timesteps, checked
    at each iteration boundary, so the run stops at the first one at or past it."""
    limit = cfg.timestep_limit
    if 0 < limit <= state.timesteps:
        say(f"learner: {state.timesteps:,} learner timesteps at iteration {state.iteration} reach "
            f"timestep_limit {limit:,} (a total of the run): stopping")
        return True
    return False


def run(parts: LearnerParts, state: IterationState, options: RunOptions, iterate: Callable[[], object]) -> int:
    """The learner's whole run; returns its exit code (module docstring). ``iterate``: one
    iteration (``Learner.run_iteration``), raising StopRequested when a stop ended it."""
    if not resume.halt_cleared(parts, options):
        state.closed = True  # nothing trained, nothing to checkpoint
        if parts.halt_endpoint is not None:
            parts.halt_endpoint.close()
        return 3
    resume.resume_run(parts, state, options)
    parts.pool.courier.load()
    # iterations_limit is the run's total, not this process's count: a learner restarted
    # after a crash (by the launcher or Compose) or resumed by hand stops at the same row.
    limit = options.iterations_limit
    if 0 < limit <= state.iteration:
        parts.say(f"learner: the run is at iteration {state.iteration}, and --iterations {limit} "
                    "is the run's total: nothing to train (pass a larger total to go on)")
    try:
        while not parts.collector.stop_requested and (limit <= 0 or state.iteration < limit):
            if timestep_limit_reached(parts.cfg, state, parts.say):
                break
            iterate()
        # An operator halt that lands between two iterations ends the loop without a
        # StopRequested; it is a halt all the same.
        if state.halt_reason is not None:
            return operator_halt(parts, state)
    except StopRequested:
        if state.halt_reason is not None:
            return operator_halt(parts, state)
    except AlarmHalt as exc:
        parts.say(f"learner: {exc}")
        shutdown(parts, state)
        mark_halted(parts.run_dir, state.iteration, str(exc))
        return 3
    except SaveHalt as exc:
        # No bundle and no last save at shutdown: the saves are what failed.
        parts.say(f"learner: {exc}")
        shutdown(parts, state, save=False)
        try:
            mark_halted(parts.run_dir, state.iteration, str(exc))
        except OSError as err:
            parts.say(f"learner: the halt record {HALTED_FILE} could not be written either ({err}); "
                        "a restart will resume from the newest checkpoint")
        return 3
    finally:
        if not state.closed:
            shutdown(parts, state)
    return 0


# A halt must stay a halt: Compose restarts a learner that exited non-zero
# (restart: on-failure), and a plain `make run` would resume it. The marker makes every later
# start refuse (exit 3 again, so Compose gives up after its retries) until a human clears it.
def operator_halt(parts: LearnerParts, state: IterationState) -> int:
    """An operator halt: the bundle names the reason; shutdown writes the checkpoint."""
    from services.learner.alarms import write_bundle

    it = state.iteration
    path = write_bundle(parts.run_dir, it, list(parts.alarms.recent_rows), [], dump_config(parts.cfg),
                        checkpoint_path=str(RunDir("").checkpoint(it)))
    with open(os.path.join(path, OPERATOR_HALT), "w") as fh:
        fh.write(f"{state.halt_reason}\n")
    parts.say(f"learner: halted by the operator at iteration {it} ({state.halt_reason}); bundle {path}")
    shutdown(parts, state)
    mark_halted(parts.run_dir, it, f"halted by the operator at iteration {it}: {state.halt_reason}")
    return 3


def shutdown(parts: LearnerParts, state: IterationState, save: bool = True) -> None:
    """Close the learner (module docstring); ``save`` False after failed saves (``SaveHalt``)."""
    from services.learner.overlap_steps import stop_collection

    state.closed = True
    stop_collection(parts, state)  # a collection running beside: stopped, its rows counted
    if parts.halt_endpoint is not None:
        parts.halt_endpoint.close()
    if parts.viser_status is not None:
        parts.viser_status.close()
    if parts.pool.courier.batches:  # one more try; what stays held is in episodes.held.jsonl for the next start
        parts.pool.deliver_episodes([], state.iteration)
    snapshot = state.snapshot
    if save and snapshot is not None and state.saved_iteration < snapshot.iteration:
        checkpointing.save_checkpoint(parts, state, snapshot)
    elif save and snapshot is None and state.saved_iteration < 0:
        parts.say("learner: no iteration finished; nothing to checkpoint")
    parts.ladder.close()
    parts.ckpt.close()
    parts.sock.close(linger=transport.LINGER_MS)
