"""The learner service: owns the policy, collects, trains, reports.

The learner reads as the steps of docs/iteration.md, one module each; ``Learner.run_iteration``
and ``train_and_report`` below call them in order (the numbers are the document's):

1-2. the boundary and the collection with central inference (``collection.collect_iteration``:
     ``boundary.py`` takes the rollouts registered now, derives the rectangle, asks the ladder
     for the plan and sends it; ``rounds.py`` files the rounds and answers them), or the
     collection an overlapped thread ran during the previous update (``overlap.py``);
3-4. the value pass and GAE (``advantages.values_and_advantages``);
5.   the PPO update (``update.run_update``), or the DQN learner's (``dqn/learner.py``);
6.   the counters, a pool candidate when due (``pool_client.PoolClient``), the metric row
     (``row.assemble_row``), published (``publish.publish``: the result log,
     ``runs/<run>/metrics.jsonl``, ``/metrics``, the alarms);
7.   with the checkpoint of its state (``checkpointing.capture``, ``checkpointing.save_checkpoint``).

Around them: the parts (``parts.py``) and the start-up that builds them (``startup.py``), the
loop, the halts and the shutdown (``lifecycle.py``), the resume (``resume.py``), the command
line (``main.py``, which imports this module, never the other way round). SIGINT/SIGTERM stop
the learner at the next safe point: a checkpoint of the state the last metric row describes is
written (never weights an unwritten row would have to describe), then it exits.
"""

from __future__ import annotations

from services.learner import checkpointing, extension_hooks, lifecycle, resume, startup
from services.learner.advantages import values_and_advantages
from services.learner.boundary import JOIN_WAIT_S, STARTUP_WAIT_S, wait_for_rollouts
from services.learner.collection import Collected, collect_iteration, evaluate_schedules
from services.learner.determinism import DeterminismError, apply_determinism
from services.learner.parts import IterationState, LearnerParts, RunOptions, Say
from services.learner.pool_client import strength_due
from services.learner.publish import publish
from services.learner.row import assemble_row
from services.learner.measures import progress_line
from services.learner.stops import AlarmHalt, SaveHalt, StopRequested
from services.learner.update import run_update
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

    # ------------------------------------------------------------------ state a checkpoint holds

    def counters(self) -> checkpointing.Counters:
        st = self.state
        return checkpointing.Counters(iteration=st.iteration, timesteps=st.timesteps, env_steps=st.env_steps,
                                      episodes=st.episodes)

    def update_state(self) -> dict:
        """State of the update that lives outside the optimizers (return scaler, LR backoff, and
        the extensions' own under ``extensions`` when the run has any)."""
        out = {"return_scaler": self.parts.return_scaler.state(), "lr_backoff": self.parts.lr_backoff.state()}
        if self.parts.extensions:
            out["extensions"] = extension_hooks.states(self.parts.extensions)
        return out

    def load_update_state(self, state: dict) -> None:
        self.parts.return_scaler.load_state(state["return_scaler"])
        self.parts.lr_backoff.load_state(state["lr_backoff"])
        extension_hooks.load_states(self.parts.extensions, state.get("extensions", {}))

    def resume(self) -> None:
        resume.resume_run(self)

    def wait_for_rollouts(self) -> list:
        """Step 1's wait (``boundary.wait_for_rollouts``): the members of the next rectangle."""
        p = self.parts
        return wait_for_rollouts(p.collector, self.state, min_rollouts=self.options.min_rollouts,
                                 round_timeout_s=p.cfg.rollout.round_timeout_s,
                                 forgotten=p.metrics.rollouts_forgotten, say=p.say)

    # ------------------------------------------------------------------ one iteration, stage by stage

    def run_iteration(self) -> dict:
        """One iteration; returns its metric row. Steps 1-2 here (or, under ``rollout.overlap``,
        the rectangle collected while the previous iteration trained), 3-7 in ``train_and_report``.
        Raises StopRequested when a stop ended the collection (nothing trains on it)."""
        from services.learner.overlap import count_untrained, join_overlap

        overlapped = self.state.overlapped is not None
        if overlapped:
            c = join_overlap(self)
        else:
            dqn, az = self.parts.dqn, self.parts.alphazero
            policy = dqn.behaviour(self.state.iteration + 1) if dqn is not None else self.parts.policy
            if az is not None:
                # the search book starts the iteration empty, with the critic's reward scale for leaves
                policy = az.behaviour(policy, self.parts.return_scaler.divisor())
            c = collect_iteration(self, self.state.iteration + 1, self.state.env_steps, policy)
        if self.stopping or c is None:
            if overlapped:
                # every row it inferred goes untrained, lag 0 or 1 (after the update ended the
                # live actor inferred the rest): counted, never silently dropped
                count_untrained(self, c)
            raise StopRequested
        return self.train_and_report(c)

    def train_and_report(self, c: Collected) -> dict:
        """Steps 3-7 over a collected rectangle: values and GAE, the update, the counters and
        the row's keys, the row published with its checkpoint."""
        from services.learner.overlap import count_untrained, start_overlap

        for m in c.members:
            m.fresh = False
        # Every battle is idle at the point its cycle-T round describes: the rollouts save their
        # states now, while the update runs, and the row's checkpoint reads them (gather).
        self.parts.battle_states.request(self.parts.sock, c.members, c.iteration)
        c.ordinals = dict(self.parts.fleet.ordinal)  # the boundary's: an overlapped collection moves fleet.ordinal on
        behaviour = start_overlap(self, c)  # iteration + 1 collects during this update
        try:
            adv, upd, extra = self.train(c)
        except StopRequested:
            # the stop abandoned this update (update.py): its rows are trained by no one, and
            # the checkpoint written is the previous row's state; the overlapped collection's
            # rows are counted when shutdown joins it
            count_untrained(self, c, "whose update the stop abandoned")
            raise
        if behaviour is not None:
            behaviour.switch(self.parts.policy, 0)  # the rest of iteration + 1 is inferred by the updated actor
        learner_eps = self.advance(c, upd)
        row, reported = assemble_row(self, c, adv, upd, learner_eps)
        if extra is not None:  # DQN, AlphaZero: no PPO ran, its keys would describe an update that did not happen
            row = {k: v for k, v in row.items() if not k.startswith("ppo/")} | extra
        return publish(self, c, row, reported)

    def train(self, c: Collected):
        """Steps 3-5: (advantages, the update's result, the DQN's row keys or None)."""
        p = self.parts
        if p.dqn is not None:
            return p.dqn.train(c)
        if p.alphazero is not None:
            return p.alphazero.train(self, c)
        a = p.cfg.advantage
        adv = values_and_advantages(p.policy, c.rect, p.return_scaler, frame_history=p.frame_history,
                                    gamma=c.sched["gamma"], lam=a.gae_lambda, standardize_rewards=a.standardize_rewards)
        upd = run_update(self, c.rect, adv, iteration=c.iteration, sched=c.sched,
                         inference_precision=c.inference_precision,
                         behaviour_model=getattr(c.policy, "behaviour_model", None))
        return adv, upd, None

    def advance(self, c: Collected, upd) -> list:
        """Step 6's counters, and a pool candidate (or a strength snapshot) when due; returns the
        learner's finished episodes of the iteration."""
        p, st, it = self.parts, self.state, c.iteration
        st.iteration = it
        st.timesteps += upd.n_train
        every = p.cfg.ladder.pool.candidate_every_env_steps
        crossed = (st.env_steps + c.stats.env_steps) // every > st.env_steps // every
        st.env_steps += c.stats.env_steps
        measure = strength_due(p.cfg.evaluation.strength.every_iterations, it)
        if (crossed or measure) and upd.n_train:
            p.pool.snapshot_actor(p.model.actor, run_id=p.run_id, identity=p.identity, iteration=st.iteration,
                                  env_steps=st.env_steps, timesteps=st.timesteps, candidate=crossed, strength=measure)
        learner_eps = [e for e in c.stats.episodes if e.player == "learner"]
        st.episodes += len(learner_eps)
        return learner_eps

    # ------------------------------------------------------------------ the run

    def run(self) -> int:
        """Resume, iterate, halt or stop; the exit code (``lifecycle.run``)."""
        return lifecycle.run(self)

    def shutdown(self, save: bool = True) -> None:
        lifecycle.shutdown(self, save)

    def close(self) -> None:
        """Nothing left to close (``shared.service_main`` calls it after ``run``): ``run`` shuts
        the learner down on every way it returns (``lifecycle.shutdown``), and a refusal it
        raises ends the process."""

