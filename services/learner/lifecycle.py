"""The learner's life around its iterations: the loop, the halts, the shutdown.

``run`` resumes (or refuses a halted run), then runs ``Learner.run_iteration`` until
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
    from services.learner.parts import IterationState, Say
    from services.learner.service import Learner


def timestep_limit_reached(cfg: RunConfig, state: IterationState, say: Say) -> bool:
    """``timestep_limit`` (``--timesteps N``): a total of the run's learner timesteps, checked
    at each iteration boundary, so the run stops at the first one at or past it."""
    limit = cfg.timestep_limit
    if 0 < limit <= state.timesteps:
        say(f"learner: {state.timesteps:,} learner timesteps at iteration {state.iteration} reach "
            f"timestep_limit {limit:,} (a total of the run): stopping")
        return True
    return False


def run(learner: Learner) -> int:
    """The learner's whole run; returns its exit code (module docstring)."""
    if not resume.halt_cleared(learner):
        learner.state.closed = True  # nothing trained, nothing to checkpoint
        if learner.parts.halt_endpoint is not None:
            learner.parts.halt_endpoint.close()
        return 3
    learner.resume()
    learner.parts.pool.courier.load()
    # iterations_limit is the run's total, not this process's count: a learner restarted
    # after a crash (by the launcher or Compose) or resumed by hand stops at the same row.
    limit = learner.options.iterations_limit
    if 0 < limit <= learner.state.iteration:
        learner.parts.say(f"learner: the run is at iteration {learner.state.iteration}, and --iterations {limit} "
                    "is the run's total: nothing to train (pass a larger total to go on)")
    try:
        while not learner.stopping and (limit <= 0 or learner.state.iteration < limit):
            if timestep_limit_reached(learner.parts.cfg, learner.state, learner.parts.say):
                break
            learner.run_iteration()
        # An operator halt that lands between two iterations ends the loop without a
        # StopRequested; it is a halt all the same.
        if learner.state.halt_reason is not None:
            return operator_halt(learner)
    except StopRequested:
        if learner.state.halt_reason is not None:
            return operator_halt(learner)
    except AlarmHalt as exc:
        learner.parts.say(f"learner: {exc}")
        shutdown(learner)
        mark_halted(learner.parts.run_dir, learner.state.iteration, str(exc))
        return 3
    except SaveHalt as exc:
        # No bundle and no last save at shutdown: the saves are what failed.
        learner.parts.say(f"learner: {exc}")
        shutdown(learner, save=False)
        try:
            mark_halted(learner.parts.run_dir, learner.state.iteration, str(exc))
        except OSError as err:
            learner.parts.say(f"learner: the halt record {HALTED_FILE} could not be written either ({err}); "
                        "a restart will resume from the newest checkpoint")
        return 3
    finally:
        if not learner.state.closed:
            shutdown(learner)
    return 0


# A halt must stay a halt: Compose restarts a learner that exited non-zero
# (restart: on-failure), and a plain `make run` would resume it. The marker makes every later
# start refuse (exit 3 again, so Compose gives up after its retries) until a human clears it.
def operator_halt(learner: Learner) -> int:
    """An operator halt: the bundle names the reason; shutdown writes the checkpoint."""
    from services.learner.alarms import write_bundle

    it = learner.state.iteration
    path = write_bundle(learner.parts.run_dir, it, list(learner.parts.alarms.recent_rows), [], dump_config(learner.parts.cfg),
                        checkpoint_path=str(RunDir("").checkpoint(it)))
    with open(os.path.join(path, OPERATOR_HALT), "w") as fh:
        fh.write(f"{learner.state.halt_reason}\n")
    learner.parts.say(f"learner: halted by the operator at iteration {it} ({learner.state.halt_reason}); bundle {path}")
    shutdown(learner)
    mark_halted(learner.parts.run_dir, it, f"halted by the operator at iteration {it}: {learner.state.halt_reason}")
    return 3


def shutdown(learner: Learner, save: bool = True) -> None:
    """Close the learner (module docstring); ``save`` False after failed saves (``SaveHalt``)."""
    from services.learner.overlap import count_untrained, join_overlap

    learner.state.closed = True
    if learner.state.overlapped is not None:  # stop it (it owns the socket) and count what it collected
        learner.parts.collector.stop_requested = True
        count_untrained(learner, join_overlap(learner))
    if learner.parts.halt_endpoint is not None:
        learner.parts.halt_endpoint.close()
    if learner.parts.viser_status is not None:
        learner.parts.viser_status.close()
    if learner.parts.pool.courier.batches:  # one more try; what stays held is in episodes.held.jsonl for the next start
        learner.parts.pool.deliver_episodes([], learner.state.iteration)
    snapshot = learner.state.snapshot
    if save and snapshot is not None and learner.state.saved_iteration < snapshot.iteration:
        checkpointing.save_checkpoint(learner, snapshot)
    elif save and snapshot is None and learner.state.saved_iteration < 0:
        learner.parts.say("learner: no iteration finished; nothing to checkpoint")
    learner.parts.ladder.close()
    learner.parts.ckpt.close()
    learner.parts.sock.close(linger=transport.LINGER_MS)
