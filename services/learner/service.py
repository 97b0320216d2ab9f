"""The learner service: owns the policy, collects, trains, reports.

The learner reads as the steps of docs/iteration.md, one module each; ``Learner.run_iteration``
and ``train_and_report`` below call them in order (the numbers are the document's):

1-2. the boundary and the collection with central inference (``collection.collect_iteration``:
     it takes the rollouts registered now, derives the rectangle, asks the ladder for the plan
     and sends it; ``rounds.py`` files the rounds and answers them, with the
     algorithm's behaviour and round hooks), or the collection an overlapped thread ran during
     the previous update (``overlap.py``);
3-5. the algorithm's training (``parts.algorithm.train``: ``ppo/learner.py``, ``dqn/learner.py``,
     ``alphazero/learner.py``, behind ``algorithm.Algorithm``; ``registry.py`` picks it by
     ``learner.algorithm``);
6.   the counters, a pool candidate when due (``pool_client.PoolClient``), the metric row
     (``row.assemble_row``, with the algorithm's ``row_keys``), published (``publish.publish``:
     the result log, ``runs/<run>/metrics.jsonl``, ``/metrics``, the alarms);
7.   with the checkpoint of its state (``checkpointing.capture``, ``checkpointing.save_checkpoint``).

Around them: the parts (``parts.py``) and the start-up that builds them (``startup.py``), the
loop, the halts and the shutdown (``lifecycle.py``), the resume (``resume.py``), the command
line (``main.py``, which imports this module, never the other way round). Only this module
holds a ``Learner``: every step takes the parts and state it uses. SIGINT/SIGTERM stop the
learner at the next safe point: a checkpoint of the state the last metric row describes is
written (never weights an unwritten row would have to describe), then it exits.
"""

from __future__ import annotations

from services.learner import lifecycle, startup
from services.learner.algorithm import TrainContext, TrainResult
from services.learner.collected import Collected
from services.learner.collection import JOIN_WAIT_S, STARTUP_WAIT_S, collect_iteration, evaluate_schedules
from services.learner.determinism import DeterminismError, apply_determinism
from services.learner.measures import progress_line
from services.learner.overlap_steps import count_untrained, start_overlap, take_collection
from services.learner.parts import IterationState, LearnerParts, RunOptions, Say
from services.learner.pool_client import strength_due
from services.learner.publish import publish
from services.learner.row import assemble_row
from services.learner.stops import AlarmHalt, SaveHalt, StopRequested
from shared.config import RunConfig

# Names other modules and the tests import from here.
__all__ = ["AlarmHalt", "DeterminismError", "JOIN_WAIT_S", "Learner", "STARTUP_WAIT_S", "SaveHalt", "StopRequested",
           "apply_determinism", "evaluate_schedules", "progress_line"]


class Learner:
    """One run's learner: its parts (``parts.LearnerParts``, built by ``startup.build_parts``),
    its state (``parts.IterationState``), how it was asked to run (``parts.RunOptions``), and
    its iteration as the stages in order."""

    parts: LearnerParts
    state: IterationState
    options: RunOptions

    def __init__(self, cfg: RunConfig, *, bind: str, ladder: str, checkpoint: str, runs_dir: str,
                 metrics_port: int | None, metrics_host: str, iterations: int, min_rollouts: int = 1,
                 allow_identity_drift: bool = False, clear_halt: bool = False, start_fresh: bool = False,
                 perturb_resume: tuple[str, ...] = (), halt_port: int = 0, viser: str = "", say: Say = print):
        self.options = RunOptions(iterations_limit=iterations, min_rollouts=max(1, min_rollouts),
                                  allow_identity_drift=allow_identity_drift, clear_halt=clear_halt,
                                  start_fresh=start_fresh, perturb_resume=perturb_resume, viser=viser)
        self.state = IterationState()
        self.parts = startup.build_parts(cfg, self.options, runs_dir=runs_dir, bind=bind, ladder=ladder,
                                         checkpoint=checkpoint, metrics_port=metrics_port, metrics_host=metrics_host,
                                         halt_port=halt_port, on_halt=self.request_halt, say=say)
        say(f"learner: run id {self.parts.run_id}; listening for rollouts on {bind}; run folder {self.parts.run_dir}")

    # ------------------------------------------------------------------ control

    def request_stop(self, *_):
        """SIGINT/SIGTERM: stop at the next safe point."""
        if self.parts.collector.stop_requested:
            return
        self.parts.collector.stop_requested = True
        self.parts.say("learner: stop requested; finishing at the next safe point")

    def request_halt(self, reason: str) -> None:
        """From the halt endpoint's thread: stop at the next safe point, as an alarm halt does."""
        if self.state.halt_reason is None:
            self.state.halt_reason = reason
            self.parts.say(f"learner: {reason}")
        self.parts.collector.stop_requested = True

    @property
    def stopping(self) -> bool:
        return self.parts.collector.stop_requested

    # ------------------------------------------------------------------ one iteration, stage by stage

    def run_iteration(self) -> dict:
        """One iteration; returns its metric row. Steps 1-2 here (or, under ``rollout.overlap``,
        the rectangle collected while the previous iteration trained), 3-7 in ``train_and_report``.
        Raises StopRequested when a stop ended the collection (nothing trains on it)."""
        p, st = self.parts, self.state

        def collect() -> Collected:
            behaviour = p.algorithm.behaviour(st.iteration + 1, p.policy, p.return_scaler.divisor())
            return collect_iteration(p, st, self.options.min_rollouts, st.iteration + 1, st.env_steps, behaviour)

        c, untrained = take_collection(st, collect)  # the overlapped thread's, or collected here
        if self.stopping or c is None:
            # an overlapped collection's rows go untrained, lag 0 or 1 (after the update ended
            # the live actor inferred the rest): counted, never silently dropped
            count_untrained(p, st, untrained)
            raise StopRequested
        return self.train_and_report(c)

    def train_and_report(self, c: Collected) -> dict:
        """Steps 3-7 over a collected rectangle: the algorithm's training, the counters and the
        row's keys, the row published with its checkpoint."""
        p, st = self.parts, self.state
        for m in c.members:
            m.fresh = False
        # Every battle is idle at the point its cycle-T round describes: the rollouts save their
        # states now, while the update runs, and the row's checkpoint reads them (gather).
        p.battle_states.request(p.sock, c.members, c.iteration)
        c.ordinals = dict(p.fleet.ordinal)  # the boundary's: an overlapped collection moves fleet.ordinal on
        behaviour = start_overlap(p, st, self.options, c)  # iteration + 1 collects during this update
        context = self.train_context()
        try:
            result = p.algorithm.train(c, context)
        except StopRequested:
            # the stop abandoned this update: its rows are trained by no one, and the
            # checkpoint written is the previous row's state; the overlapped collection's
            # rows are counted when shutdown joins it
            count_untrained(p, st, c, "whose update the stop abandoned")
            raise
        if behaviour is not None:
            behaviour.switch(p.policy, 0)  # the rest of iteration + 1 is inferred by the updated actor
        learner_eps = self.advance(c, result)
        keys = p.algorithm.row_keys(c, result, context)
        row, reported = assemble_row(p, st, self.options.t_start, c, result, keys, learner_eps)
        return publish(p, st, c, row, reported)

    def train_context(self) -> TrainContext:
        """What the algorithm's ``train`` may use (``algorithm.TrainContext``)."""
        p = self.parts
        return TrainContext(cfg=p.cfg, model=p.model, opt_actor=p.opt_actor, opt_critic=p.opt_critic, policy=p.policy,
                            return_scaler=p.return_scaler, lr_backoff=p.lr_backoff, frame_history=p.frame_history,
                            extensions=p.extensions, n_actions=p.pf.spec.n_actions, device=p.device,
                            env_steps=self.state.env_steps, stopping=lambda: self.stopping)

    def advance(self, c: Collected, result: TrainResult) -> list:
        """Step 6's counters, and a pool candidate (or a strength snapshot) when due; returns the
        learner's finished episodes of the iteration."""
        p, st, it = self.parts, self.state, c.iteration
        n_train = result.update.n_train
        st.iteration = it
        st.timesteps += n_train
        every = p.cfg.ladder.pool.candidate_every_env_steps
        crossed = (st.env_steps + c.stats.env_steps) // every > st.env_steps // every
        st.env_steps += c.stats.env_steps
        measure = strength_due(p.cfg.evaluation.strength.every_iterations, it)
        if (crossed or measure) and n_train:
            p.pool.snapshot_actor(p.model.actor, run_id=p.run_id, identity=p.identity, iteration=st.iteration,
                                  env_steps=st.env_steps, timesteps=st.timesteps, candidate=crossed, strength=measure)
        learner_eps = [e for e in c.stats.episodes if e.player == "learner"]
        st.episodes += len(learner_eps)
        return learner_eps

    # ------------------------------------------------------------------ the run

    def run(self) -> int:
        """Resume, iterate, halt or stop; the exit code (``lifecycle.run``)."""
        return lifecycle.run(self.parts, self.state, self.options, self.run_iteration)

    def shutdown(self, save: bool = True) -> None:
        lifecycle.shutdown(self.parts, self.state, save)

    def close(self) -> None:
        """Nothing left to close (``shared.service_main`` calls it after ``run``): ``run`` shuts
        the learner down on every way it returns (``lifecycle.shutdown``), and a refusal it
        raises ends the process."""
