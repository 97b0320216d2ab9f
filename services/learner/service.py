"""The learner service: owns the policy, collects, trains, reports.

The learner reads as its stages, one module each (docs/iteration.md); ``Learner.run_iteration``
and ``train_and_report`` below call them in order:

1-2. boundary and collection with central inference (``collection.collect_iteration``:
     ``boundary.py`` takes the rollouts registered now, derives the rectangle, asks the ladder
     for the plan and sends it; ``collect.Collector`` files the rounds and answers them), or the
     collection an overlapped thread ran during the previous update (``overlap.py``);
3.   the value pass and GAE (``advantages.values_and_advantages``);
4.   the PPO update (``update.run_update``), or the DQN stages (``dqn/learner.py``);
5.   the counters, a pool candidate when due (``pool_client.PoolClient``), the metric row's keys
     (``row.assemble_row``);
6-7. the row published with the checkpoint of its state (``publish.publish``: the result log,
     ``runs/<run>/metrics.jsonl``, ``/metrics``, the alarms, ``resume.save_checkpoint``).

Around them: the start-up wiring (``startup.py``), the loop, the halts and the shutdown
(``lifecycle.py``), the command line (``cli.py``). SIGINT/SIGTERM stop the learner at the next
safe point: a checkpoint of the state the last metric row describes is written (never weights an
unwritten row would have to describe), then it exits.
"""

from __future__ import annotations

import os
import time

from services.learner import checkpointing, lifecycle, resume, startup
from services.learner.advantages import values_and_advantages
from services.learner.boundary import JOIN_WAIT_S, STARTUP_WAIT_S, wait_for_rollouts
from services.learner.cli import main, make_learner
from services.learner.collection import Collected, collect_iteration
from services.learner.curves import TensorBoardCurves
from services.learner.determinism import DeterminismError, apply_determinism
from services.learner.publish import publish
from services.learner.row import assemble_row
from services.learner.row_keys import evaluate_schedules, progress_line
from services.learner.stops import AlarmHalt, SaveHalt, StopRequested
from services.learner.strength_hook import strength_due
from services.learner.update import run_update
from shared.config import RunConfig
from shared.messages import Welcome
from shared.run_dir import RunDir

# Names other modules and the tests import from here.
__all__ = ["AlarmHalt", "DeterminismError", "JOIN_WAIT_S", "Learner", "STARTUP_WAIT_S", "SaveHalt", "StopRequested",
           "apply_determinism", "evaluate_schedules", "main", "make_learner", "progress_line"]


class Learner:
    """One run's learner: its parts (``startup.py``), its state (counters, the last snapshot),
    and its iteration as the stages in order."""

    def __init__(self, cfg: RunConfig, *, bind: str, ladder: str, checkpoint: str, runs_dir: str,
                 metrics_port: int | None, metrics_host: str, iterations: int, min_rollouts: int = 1,
                 allow_identity_drift: bool = False, clear_halt: bool = False, start_fresh: bool = False,
                 perturb_resume: tuple[str, ...] = (), halt_port: int = 0,
                 say=print):
        self.cfg, self.say, self.iterations_limit = cfg, say, iterations
        self.min_rollouts, self.first_iteration = max(1, min_rollouts), True
        self.allow_identity_drift, self.perturb_resume = allow_identity_drift, perturb_resume
        self.clear_halt, self.start_fresh = clear_halt, start_fresh
        self.t_start = time.monotonic()
        self.closed = False
        self.halt_reason: str | None = None
        self.overlapped = None
        """The next iteration's collection, running while this one trains (``rollout.overlap``)."""
        self.untrained_rows = 0
        """Rows overlapped collections inferred that nothing trained (``overlap.count_untrained``)."""
        startup.build_model(self, runs_dir)  # refusals (tier, GPU memory) come before any bind
        startup.connect(self, bind=bind, ladder=ladder, checkpoint=checkpoint, metrics_port=metrics_port,
                        metrics_host=metrics_host, halt_port=halt_port)
        startup.build_collector(self)
        self.iteration = 0
        self.timesteps = 0
        self.env_steps = 0
        self.episodes = 0
        self.saved_iteration = -1
        self.failed_saves = 0
        """Checkpoint saves failed in a row (``resume.save_checkpoint``); ``checkpoint.max_failed_saves`` halts."""
        self.snapshot: checkpointing.Snapshot | None = None
        self.metrics_path = str(RunDir(self.run_dir).metrics)
        self.curves = TensorBoardCurves(self.run_dir, self.say)
        say(f"learner: run id {self.run_id}; listening for rollouts on {bind}; run folder {self.run_dir}")

    # ------------------------------------------------------------------ control

    def welcome(self, wire_codec: int) -> Welcome:
        """What a registered rollout is told (the collector sends it)."""
        return Welcome(env=self.cfg.env, master_seed=self.cfg.master_seed, codec=self.pf.table, engine=self.pf.engine,
                       random_legal_noop_prob=self.cfg.ladder.random_legal_noop_prob, rollout=self.cfg.rollout,
                       wire_codec=wire_codec)

    def request_stop(self, *_):
        """SIGINT/SIGTERM: stop at the next safe point."""
        if self.collector.stop_requested:
            return
        self.collector.stop_requested = True
        self.say("learner: stop requested; finishing at the next safe point")

    def request_halt(self, reason: str) -> None:
        """From the halt endpoint's thread: stop at the next safe point, as an alarm halt does."""
        if self.halt_reason is None:
            self.halt_reason = reason
            self.say(f"learner: {reason}")
        self.collector.stop_requested = True

    @property
    def stopping(self) -> bool:
        return self.collector.stop_requested

    # ------------------------------------------------------------------ state a checkpoint holds

    def counters(self) -> checkpointing.Counters:
        return checkpointing.Counters(iteration=self.iteration, timesteps=self.timesteps, env_steps=self.env_steps,
                                      episodes=self.episodes)

    def update_state(self) -> dict:
        """State of the update that lives outside the optimizers (return scaler, LR backoff)."""
        return {"return_scaler": self.return_scaler.state(), "lr_backoff": self.lr_backoff.state()}

    def load_update_state(self, state: dict) -> None:
        self.return_scaler.load_state(state["return_scaler"])
        self.lr_backoff.load_state(state["lr_backoff"])

    def resume(self) -> None:
        resume.resume_run(self)

    def wait_for_rollouts(self) -> list:
        return wait_for_rollouts(self)

    # ------------------------------------------------------------------ one iteration, stage by stage

    def run_iteration(self) -> dict:
        """One iteration; returns its metric row. Stages 1-2 here (or, under ``rollout.overlap``,
        the rectangle collected while the previous iteration trained), 3-7 in ``train_and_report``.
        Raises StopRequested when a stop ended the collection (nothing trains on it)."""
        from services.learner.overlap import count_untrained, join_overlap

        overlapped = self.overlapped is not None
        if overlapped:
            c = join_overlap(self)
        else:
            policy = self.dqn.behaviour(self.iteration + 1) if self.dqn is not None else self.policy
            c = collect_iteration(self, self.iteration + 1, self.env_steps, policy)
        if self.stopping or c is None:
            if overlapped:
                # every row it inferred goes untrained, lag 0 or 1 (after the update ended the
                # live actor inferred the rest): counted, never silently dropped
                count_untrained(self, c)
            raise StopRequested
        return self.train_and_report(c)

    def train_and_report(self, c: Collected) -> dict:
        """Stages 3-7 over a collected rectangle: values and GAE, the update, the counters and
        the row's keys, the row published with its checkpoint."""
        from services.learner.overlap import count_untrained, start_overlap

        for m in c.members:
            m.fresh = False
        # Every battle is idle at the point its cycle-T round describes: the rollouts save their
        # states now, while the update runs, and the row's checkpoint reads them (gather).
        self.battle_states.request(self.sock, c.members, c.iteration)
        c.ordinals = dict(self.fleet.ordinal)  # the boundary's: an overlapped collection moves fleet.ordinal on
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
            behaviour.switch(self.policy, 0)  # the rest of iteration + 1 is inferred by the updated actor
        learner_eps = self.advance(c, upd)
        row, reported = assemble_row(self, c, adv, upd, learner_eps)
        if extra is not None:  # DQN: no PPO ran, its keys would describe an update that did not happen
            row = {k: v for k, v in row.items() if not k.startswith("ppo/")} | extra
        return publish(self, c, row, reported)

    def train(self, c: Collected):
        """Stages 3-4: (advantages, the update's result, the DQN's row keys or None)."""
        if self.dqn is not None:
            return self.dqn.train(c)
        a = self.cfg.advantage
        adv = values_and_advantages(self.policy, c.rect, self.return_scaler, frame_history=self.frame_history,
                                    gamma=c.sched["gamma"], lam=a.gae_lambda, standardize_rewards=a.standardize_rewards)
        upd = run_update(self, c.rect, adv, iteration=c.iteration, sched=c.sched,
                         inference_precision=c.inference_precision,
                         behaviour_model=getattr(c.policy, "behaviour_model", None))
        return adv, upd, None

    def advance(self, c: Collected, upd) -> list:
        """Stage 5's counters, and a pool candidate (or a strength snapshot) when due; returns the
        learner's finished episodes of the iteration."""
        cfg, it = self.cfg, c.iteration
        self.iteration = it
        self.timesteps += upd.n_train
        every = cfg.ladder.pool.candidate_every_env_steps
        crossed = (self.env_steps + c.stats.env_steps) // every > self.env_steps // every
        self.env_steps += c.stats.env_steps
        measure = strength_due(cfg.evaluation.strength.every_iterations, it)
        if (crossed or measure) and upd.n_train:
            self.pool.snapshot_actor(self.model.actor, run_id=self.run_id, identity=self.identity,
                                     iteration=self.iteration, env_steps=self.env_steps, timesteps=self.timesteps,
                                     candidate=crossed, strength=measure)
        learner_eps = [e for e in c.stats.episodes if e.player == "learner"]
        self.episodes += len(learner_eps)
        return learner_eps

    # ------------------------------------------------------------------ the run

    def run(self) -> int:
        """Resume, iterate, halt or stop; the exit code (``lifecycle.run``)."""
        return lifecycle.run(self)

    def shutdown(self, save: bool = True) -> None:
        lifecycle.shutdown(self, save)

