"""The learner service: owns the policy, collects, trains, reports.

The learner reads as its stages, one module each (docs/iteration.md):

1-2. boundary and collection with central inference (``collection.collect_iteration``:
     ``boundary.py`` takes the rollouts registered now, derives the rectangle, asks the ladder
     for the plan and sends it; ``collect.Collector`` files the rounds and answers them);
3.   the value pass and GAE (``advantages.values_and_advantages``);
4.   the PPO update (``update.run_update``);
5.   the metric row (``row.assemble_row``, ``row.write_row``): appended to
     ``runs/<run>/metrics.jsonl``, exported on ``/metrics``, one progress line printed;
6.   finished episodes to the ladder's result log and pool candidates (``pool_client.PoolClient``);
     the checkpoint of the row's state, and the resume from one (``resume.py``,
     ``checkpointing.py``).

This module wires them together (``Learner``) and holds the loop, the halts and the CLI.
SIGINT/SIGTERM stop it at the next safe point: a checkpoint of the state the last metric row
describes is written (never weights an unwritten row would have to describe), then it exits.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass

import numpy as np

from services.learner import checkpointing, resume
from services.learner.admission import HelloLimits
from services.learner.advantages import values_and_advantages
from services.learner.battle_states import BattleStateBook
from services.learner.boundary import JOIN_WAIT_S, STARTUP_WAIT_S, wait_for_rollouts
from services.learner.collection import Collected, collect_iteration
from services.learner.determinism import DeterminismError, apply_determinism
from services.learner.halt import HALTED_FILE, mark_halted
from shared import service_settings
from shared.run_dir import OPERATOR_HALT, RunDir
from shared.service_settings import option, port_or_config
from services.learner.curves import TensorBoardCurves
from services.learner.fleet import Fleet
from services.learner.strength_hook import strength_due
from services.learner.frame_history import make_frame_history
from services.learner.fleet_idle import IdleMeter
from services.learner.frozen import FrozenActors, checkpoint_fetcher
from services.learner.pool_client import PoolClient
from services.learner.row import assemble_row, write_row
from services.learner.row_keys import evaluate_schedules, progress_line
from services.learner.stops import AlarmHalt, SaveHalt, StopRequested
from services.learner.update import run_update
from services.learner.vram import DeviceMemoryError
from shared import transport
from shared.config import ConfigError, RunConfig, dump_config, load_config
from shared.identity import action_digest_of, compute_identity, describe_device, run_id
from shared.messages import Decoder, FromCheckpoint, FromLadder, ToLearner, Welcome
from shared.seeding import stream
from shared.writer_token import checkpoint_token

# Names other modules and the tests import from here.
__all__ = ["AlarmHalt", "DeterminismError", "JOIN_WAIT_S", "Learner", "STARTUP_WAIT_S", "SaveHalt", "StopRequested",
           "apply_determinism", "evaluate_schedules", "main", "make_learner", "progress_line"]


class Learner:
    def __init__(self, cfg: RunConfig, *, bind: str, ladder: str, checkpoint: str, runs_dir: str,
                 metrics_port: int | None, metrics_host: str, iterations: int, min_rollouts: int = 1,
                 allow_identity_drift: bool = False, clear_halt: bool = False, start_fresh: bool = False,
                 perturb_resume: tuple[str, ...] = (), halt_port: int = 0,
                 say=print):
        import torch

        from services.learner.alarms import AlarmMonitor
        from services.learner.collect import Collector
        from services.learner.lr_backoff import LrBackoff
        from services.learner.returns import ReturnScaler
        from services.learner.metrics import LearnerMetrics
        from shared.nn.model import ActorCritic
        from shared.nn.policy import Policy
        from services.learner.ppo import make_optimizers
        from shared.codec import RowDecompressor, describe_table, table_digest
        from shared.nn.snapshot import actor_builder
        from shared.preflight import run_preflight

        self.cfg, self.say, self.iterations_limit = cfg, say, iterations
        self.min_rollouts, self.first_iteration = max(1, min_rollouts), True
        self.allow_identity_drift, self.perturb_resume = allow_identity_drift, perturb_resume
        self.clear_halt, self.start_fresh = clear_halt, start_fresh
        self.t_start = time.monotonic()
        device = cfg.net.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        apply_determinism(cfg, device)
        self.device = torch.device(device)
        self.run_dir = os.path.join(runs_dir, cfg.run_name)
        os.makedirs(self.run_dir, exist_ok=True)

        self.pf = run_preflight(cfg.env, cfg.master_seed, frame_stack=cfg.obs.frame_stack)
        say(f"learner: {describe_table(self.pf.table)}; {self.pf.codec.row_bytes} B a row (preflight {self.pf.seconds:.1f} s); "
            f"wire codec {cfg.services.wire_codec} served to rollouts that speak it")
        say(f"learner: engine {self.pf.engine.describe()}")
        self.codec_digest = table_digest(self.pf.table)
        self.identity = compute_identity(
            cfg, engine=self.pf.engine, obs_digest=self.pf.spec.digest(), action_digest=action_digest_of(self.pf.spec),
            codec_table_digest=self.codec_digest, device_kind=describe_device(device),
            torch_version=str(torch.__version__))
        self.run_id = run_id(self.identity)
        self.resumed_with_drift = False
        self.model = ActorCritic(self.pf.spec, cfg.net, seed=int(stream(cfg.master_seed, "torch/init").integers(2**62))).to(self.device)
        self.opt_actor, self.opt_critic = make_optimizers(self.model, cfg.ppo)
        if self.device.type == "cuda":  # before any socket is bound: a refusal leaves nothing behind
            from services.learner.vram import check_update_fits

            check_update_fits(self.model, self.opt_actor, self.opt_critic, self.pf.spec, cfg.ppo,
                              self.pf.codec.row_bytes, self.device, say)
        counts = self.model.parameter_count()
        say(f"learner: actor {counts['actor']:,} parameters, critic {counts['critic']:,}; device {self.device}, "
            f"{cfg.determinism.torch_threads} threads, tier {cfg.determinism.tier}")
        self.policy = Policy(self.model, self.pf.codec, self.device)
        self.dqn = None
        """The DQN learner's stages and state (``learner.algorithm = "dqn"``; services/learner/dqn/learner.py)."""
        if cfg.learner.algorithm == "dqn":
            from services.learner.dqn.learner import DqnLearner

            self.dqn = DqnLearner(self)
        self.return_scaler = ReturnScaler(cfg.advantage.reward_clip)
        self.lr_backoff = LrBackoff(cfg.ppo.lr_backoff)
        self.closed = False

        self.metrics = LearnerMetrics(metrics_port, metrics_host, expected_rollouts=self.min_rollouts)
        self.alarms = AlarmMonitor(cfg.alarms, self.metrics.registry, run_dir=self.run_dir, say=say)
        self.sock = transport.bind_router(bind, max_bytes=cfg.services.max_message_mb << 20,
                                          curve=transport.curve_server_keys())
        self.ladder = transport.Client(ladder, Decoder(FromLadder), name="ladder",
                                       timeout_s=cfg.services.request_timeout_s,
                                       curve=transport.curve_client_keys())
        self.ckpt_token = checkpoint_token()  # shared/writer_token.py: only this run's learner writes
        self.ckpt = transport.Client(checkpoint, Decoder(FromCheckpoint), name="checkpoint service",
                                     max_bytes=cfg.services.max_message_mb << 20,
                                     timeout_s=cfg.services.request_timeout_s,
                                     curve=transport.curve_client_keys())
        self.overlapped = None
        """The next iteration's collection, running while this one trains (``rollout.overlap``)."""
        self.untrained_rows = 0
        """Rows overlapped collections inferred that nothing trained (``overlap.untrained_rows``)."""
        if cfg.rollout.overlap:  # the collection thread and the main thread share these clients
            from services.learner.overlap import LockedClient

            self.ladder, self.ckpt = LockedClient(self.ladder), LockedClient(self.ckpt)
        self.pool = PoolClient(cfg, self.ladder, self.ckpt, self.ckpt_token, self.run_dir,
                               self.metrics.ladder_unanswered_plans, say)
        self.fleet = Fleet()
        # the pool snapshots that hold GROUP_FROZEN seats (services/learner/frozen.py).
        self.frozen = FrozenActors(
            cfg.ladder.pool.max_resident_opponents + 2,
            checkpoint_fetcher(self.ckpt, cfg.run_name, cfg.services.request_timeout_s),
            actor_builder(self.pf.spec, cfg.net),
            {"arch_digest": self.identity.arch_digest, "obs_digest": self.identity.obs_digest,
             "codec_table_digest": self.identity.codec_table_digest},
            self.pf.codec, self.device, say)
        self.halt_reason: str | None = None
        self.halt_endpoint = None
        token = os.environ.get("ROYALEFLEET_HALT_TOKEN", "")
        if token and halt_port:
            from services.learner.halt import HaltEndpoint

            self.halt_endpoint = HaltEndpoint(metrics_host, halt_port, token, self.request_halt, self.metrics.halt_requests)
            say(f"learner: halt endpoint on http://{metrics_host}:{self.halt_endpoint.port}/halt (bearer token)")
        self.collector = Collector(self.sock, Decoder(ToLearner), self.fleet, self._welcome, self.pf.engine, say,
                                   self.metrics.refused, HelloLimits.at_start(cfg, self.pf.codec.row_bytes),
                                   wire_codec=cfg.services.wire_codec,
                                   decompressor=RowDecompressor(self.pf.codec.row_bytes, cfg.services.max_message_mb << 20))
        self.collector.configure_batching(cfg.determinism.tier, cfg.rollout.inference_max_batch_rows,
                                          cfg.rollout.inference_max_wait_ms)
        self.frame_history = make_frame_history(cfg.obs.frame_stack, self.pf.codec.row_bytes)  # obs.frame_stack
        self.collector.frame_history = self.frame_history if cfg.obs.frame_stack > 1 else None
        self.idle_meter = IdleMeter()  # throughput/rollout_idle_frac
        self.collector.user_code = self.identity.user_code  # a Hello with other user code is refused
        self.battle_states = BattleStateBook(self.pf.engine, say)  # exact battles in the checkpoint
        self.collector.on_states = self.battle_states.on_message
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

    # ------------------------------------------------------------------ helpers

    def _welcome(self, wire_codec: int) -> Welcome:
        return Welcome(env=self.cfg.env, master_seed=self.cfg.master_seed, codec=self.pf.table, engine=self.pf.engine,
                       random_legal_noop_prob=self.cfg.ladder.random_legal_noop_prob, rollout=self.cfg.rollout,
                       wire_codec=wire_codec)

    def request_stop(self, *_):
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

    # ------------------------------------------------------------------ checkpoints

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

    # ------------------------------------------------------------------ one iteration

    def run_iteration(self) -> dict:
        """One iteration, stage by stage; returns its metric row. Under ``rollout.overlap`` its
        rectangle was collected while the previous iteration trained (``overlap.py``)."""
        overlapped = self.overlapped is not None
        if overlapped:
            c = self.join_overlap()
        else:
            policy = self.dqn.behaviour(self.iteration + 1) if self.dqn is not None else self.policy
            c = collect_iteration(self, self.iteration + 1, self.env_steps, policy)
        if self.stopping or c is None:
            if overlapped:
                # every row it inferred goes untrained, lag 0 or 1 (after the update ended the
                # live actor inferred the rest): counted, never silently dropped
                self._count_untrained(c)
            raise StopRequested
        return self.train_and_report(c)

    def join_overlap(self):
        """The overlapped collection's ``Collected`` (None when a stop ended it before it had a
        rectangle); the torch threads are the run's again."""
        overlapped, self.overlapped = self.overlapped, None
        return overlapped.join()

    def _count_untrained(self, c) -> None:
        from services.learner.overlap import untrained_rows

        n = untrained_rows(c)
        if n:
            self.untrained_rows += n
            self.metrics.untrained_rows.inc(n)
            self.say(f"learner: {n} rows of iteration {c.iteration} collected under overlap are not trained "
                     f"(the run stops at iteration {self.iteration}); counted in "
                     "royalefleet_learner_untrained_rows_total")

    def _start_overlap(self, c: Collected):
        """Start iteration ``c.iteration + 1``'s collection with a behaviour snapshot of the
        actor as it is now, before the update (``overlap.py``); None when overlap is off or no
        further iteration is wanted."""
        if not self.cfg.rollout.overlap or (0 < self.iterations_limit <= c.iteration):
            return None
        limit = self.cfg.timestep_limit
        if 0 < limit <= self.timesteps + int(np.count_nonzero(c.rect.trainable())):
            return None  # this update reaches timestep_limit: no further iteration is wanted
        from services.learner.overlap import BehaviourPolicy, OverlappedCollection, behaviour_snapshot
        from shared.nn.policy import Policy

        behaviour = BehaviourPolicy(Policy(behaviour_snapshot(self.model), self.pf.codec, self.device), lag=1)
        self.overlapped = OverlappedCollection(self, c.iteration + 1, self.env_steps + c.stats.env_steps, behaviour,
                                               c.members, c.iteration)
        return behaviour

    def train_and_report(self, c: Collected) -> dict:
        """Stages 3-6 over a collected rectangle: values and GAE, the update, the row, the
        result log, the checkpoint."""
        cfg, it, rect = self.cfg, c.iteration, c.rect
        for m in c.members:
            m.fresh = False
        # Every battle is idle at the point its cycle-T round describes: the rollouts save their
        # states now, while the update runs, and the row's checkpoint reads them (gather).
        self.battle_states.request(self.sock, c.members, it)
        c.ordinals = dict(self.fleet.ordinal)  # the boundary's: an overlapped collection moves fleet.ordinal on
        behaviour = self._start_overlap(c)
        if self.dqn is not None:
            adv, upd, behaviour_row = self.dqn.train(c)
        else:
            adv = values_and_advantages(self.policy, rect, self.return_scaler, frame_history=self.frame_history, gamma=c.sched["gamma"],
                                        lam=cfg.advantage.gae_lambda, standardize_rewards=cfg.advantage.standardize_rewards)
            upd = run_update(self, rect, adv, iteration=it, sched=c.sched, inference_precision=c.inference_precision,
                             behaviour_model=getattr(c.policy, "behaviour_model", None))
        if behaviour is not None:
            behaviour.switch(self.policy, 0)  # the rest of iteration it + 1 is inferred by the updated actor

        # Counters, a pool candidate when due, and the row.
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
        row, reported = assemble_row(self, c, adv, upd, learner_eps)
        if self.dqn is not None:  # no PPO ran: its keys would describe an update that did not happen
            row = {k: v for k, v in row.items() if not k.startswith("ppo/")}
            row.update(behaviour_row)
        return self.report(c, row, reported)

    def report(self, c: Collected, row: dict, reported: list) -> dict:
        """Stage 6: episodes to the ladder's result log, the ladder's status, the battle states,
        the checkpoint snapshot of this row's state; the row written, the alarms read it, the
        checkpoint saved when due; halts raised."""
        from services.learner import metric_log

        cfg, it = self.cfg, c.iteration
        t0 = time.perf_counter()
        self.pool.deliver_episodes(reported, it)
        row["health/episodes_held"] = self.pool.courier.held()
        row.update(self.pool.status.poll())  # ladder/ keys; absent when the ladder does not answer
        if self.overlapped is not None:  # the collection thread owns the socket and gathers them
            self.overlapped.states_gathered.wait(cfg.rollout.round_timeout_s + 5.0)
        else:
            self.battle_states.gather(self.collector, c.members, it, cfg.rollout.round_timeout_s)
        row.update(self.battle_states.row_keys())
        self.boundary_ordinals = c.ordinals
        try:
            self.snapshot = checkpointing.capture(self)
        finally:
            self.boundary_ordinals = None
        row["run/state_digest"] = self.snapshot.state_digest
        row["run/run_id"] = self.run_id
        if self.resumed_with_drift:
            row["run/resumed_with_drift"] = 1
        row.update(self.idle_meter.row_keys(self.collector.busy_seconds,
                                            [m.instance for m in self.fleet.members.values() if not m.lost]))
        row["time/checkpoint"] = time.perf_counter() - t0
        row["time/iteration"] = time.perf_counter() - c.t_start
        row["throughput/overall_steps_per_second"] = row["health/trainable_rows"] / row["time/iteration"]
        # The row first, then the alarms read it, then the checkpoint it describes. One plain
        # copy (no numpy scalars) serves the file, the alarms and any bundle.
        row = metric_log.plain_row(row)
        line, row_written = write_row(self, row)
        checkpointing.attach_row(self.snapshot, line)  # the row travels with the checkpoint of its state
        verdict = self.alarms.observe(row)
        # A row the disk refused lives only in the snapshot now: its checkpoint is due.
        if verdict.halt_due or it % cfg.checkpoint.every_iterations == 0 or not row_written:
            resume.save_checkpoint(self, self.snapshot)
            if self.failed_saves >= cfg.checkpoint.max_failed_saves:
                raise SaveHalt(f"halted at iteration {it}: {self.failed_saves} checkpoint saves in a row failed "
                               f"(checkpoint.max_failed_saves = {cfg.checkpoint.max_failed_saves}); "
                               + (f"the newest checkpoint is of iteration {self.saved_iteration}"
                                  if self.saved_iteration >= 0 else "the run has no checkpoint")
                               + ". Free the disk or mend the "
                               "checkpoint service (its log says why), then resume with --clear-halt")
        bundle = verdict.halt_due or any(r.bundle for r in verdict.fired)
        if bundle:
            from services.learner.alarms import write_bundle

            path = write_bundle(self.run_dir, it, list(self.alarms.recent_rows), verdict.fired, dump_config(cfg),
                                checkpoint_path=f"checkpoints/{it:08d}" if self.saved_iteration == it else None)
            self.say(f"learner: diagnostic bundle written to {path}")
        if verdict.halt_due:
            names = ", ".join(r.name for r in verdict.fired if r.severity == "halt")
            raise AlarmHalt(f"halted by alarm {names} at iteration {it}; see {self.run_dir}/bundles/ and alarms.jsonl")
        return row

    # ------------------------------------------------------------------ main loop

    def _timestep_limit_reached(self) -> bool:
        """``timestep_limit`` (``--timesteps N``): a total of the run's learner timesteps, checked
        at each iteration boundary, so the run stops at the first one at or past it."""
        limit = self.cfg.timestep_limit
        if 0 < limit <= self.timesteps:
            self.say(f"learner: {self.timesteps:,} learner timesteps at iteration {self.iteration} reach "
                     f"timestep_limit {limit:,} (a total of the run): stopping")
            return True
        return False

    def run(self) -> int:
        if not resume.halt_cleared(self):
            self.closed = True  # nothing trained, nothing to checkpoint
            if self.halt_endpoint is not None:
                self.halt_endpoint.close()
            return 3
        self.resume()
        self.pool.courier.load()
        # iterations_limit is the run's total, not this process's count: a learner restarted
        # after a crash (by the launcher or Compose) or resumed by hand stops at the same row.
        if 0 < self.iterations_limit <= self.iteration:
            self.say(f"learner: the run is at iteration {self.iteration}, and --iterations {self.iterations_limit} "
                     "is the run's total: nothing to train (pass a larger total to go on)")
        try:
            while not self.stopping and (self.iterations_limit <= 0 or self.iteration < self.iterations_limit):
                if self._timestep_limit_reached():
                    break
                self.run_iteration()
            # An operator halt that lands between two iterations ends the loop without a
            # StopRequested; it is a halt all the same.
            if self.halt_reason is not None:
                return self._operator_halt()
        except StopRequested:
            if self.halt_reason is not None:
                return self._operator_halt()
        except AlarmHalt as exc:
            self.say(f"learner: {exc}")
            self.shutdown()
            self._mark_halted(str(exc))
            return 3
        except SaveHalt as exc:
            # No bundle and no last save at shutdown: the saves are what failed.
            self.say(f"learner: {exc}")
            self.shutdown(save=False)
            try:
                self._mark_halted(str(exc))
            except OSError as err:
                self.say(f"learner: the halt record {HALTED_FILE} could not be written either ({err}); "
                         "a restart will resume from the newest checkpoint")
            return 3
        finally:
            if not self.closed:
                self.shutdown()
        return 0

    def _operator_halt(self) -> int:
        """An operator halt: the bundle names the reason; shutdown writes the checkpoint."""
        from services.learner.alarms import write_bundle

        path = write_bundle(self.run_dir, self.iteration, list(self.alarms.recent_rows), [], dump_config(self.cfg),
                            checkpoint_path=str(RunDir("").checkpoint(self.iteration)))
        with open(os.path.join(path, OPERATOR_HALT), "w") as fh:
            fh.write(self.halt_reason + "\n")
        self.say(f"learner: halted by the operator at iteration {self.iteration} ({self.halt_reason}); bundle {path}")
        self.shutdown()
        self._mark_halted(f"halted by the operator at iteration {self.iteration}: {self.halt_reason}")
        return 3

    # A halt must stay a halt: Compose restarts a learner that exited non-zero
    # (restart: on-failure), and a plain `make run` would resume it. The marker makes every later
    # start refuse (exit 3 again, so Compose gives up after its retries) until a human clears it.
    def _mark_halted(self, reason: str) -> None:
        mark_halted(self.run_dir, self.iteration, reason)

    def shutdown(self, save: bool = True) -> None:
        self.closed = True
        if self.overlapped is not None:  # stop it (it owns the socket) and count what it collected
            self.collector.stop_requested = True
            self._count_untrained(self.join_overlap())
        if self.halt_endpoint is not None:
            self.halt_endpoint.close()
        if self.pool.courier.batches:  # one more try; what stays held is in episodes.held.jsonl for the next start
            self.pool.deliver_episodes([], self.iteration)
        if save and self.snapshot is not None and self.saved_iteration < self.snapshot.iteration:
            resume.save_checkpoint(self, self.snapshot)
        elif save and self.snapshot is None and self.saved_iteration < 0:
            self.say("learner: no iteration finished; nothing to checkpoint")
        self.ladder.close()
        self.ckpt.close()
        self.sock.close(linger=transport.LINGER_MS)


@dataclass(frozen=True)
class Settings:
    """The learner's settings (``shared.service_settings``: flag, else variable, else default;
    None and -1 mean "what the config says")."""

    config: str | None = option(None, env="ROYALEFLEET_CONFIG", default_text="the machine's profile",
                                help="config JSON (a profile plus overrides)")
    bind: str | None = option(None, env="ROYALEFLEET_LEARNER_BIND", default_text="tcp://<services.host>:<learner_port>",
                              help="address rollouts connect to")
    ladder: str | None = option(None, env="ROYALEFLEET_LADDER", default_text="tcp://<services.host>:<ladder_port>",
                                help="ladder address")
    checkpoint: str | None = option(None, env="ROYALEFLEET_CHECKPOINT",
                                    default_text="tcp://<services.host>:<checkpoint_port>",
                                    help="checkpoint service address")
    runs_dir: str | None = option(None, env="ROYALEFLEET_RUNS_DIR", default_text="config runs_dir", help="runs folder")
    metrics_port: int = option(-1, env="ROYALEFLEET_METRICS_PORT", parse=port_or_config,
                               default_text="services.learner_metrics_port", help="port of /metrics, 0 = off")
    metrics_host: str = option("127.0.0.1", env="ROYALEFLEET_METRICS_HOST", help="address /metrics listens on")
    iterations: int = option(0, env="ROYALEFLEET_ITERATIONS",
                             help="stop once the run has reached this iteration (a total over every resume and "
                             "restart), 0 = run until stopped")
    min_rollouts: int = option(1, env="ROYALEFLEET_MIN_ROLLOUTS", help="rollouts the first iteration waits for (up to 120 s)")
    halt_port: int = option(-1, env="ROYALEFLEET_HALT_PORT", parse=port_or_config,
                            default_text="services.learner_halt_port",
                            help="port of the authenticated POST /halt endpoint (needs ROYALEFLEET_HALT_TOKEN; 0 = off)")
    allow_identity_drift: bool = option(False, env="ROYALEFLEET_ALLOW_IDENTITY_DRIFT",
                                        help="resume a checkpoint whose run identity differs, recording the drift "
                                        "in drift.json")
    clear_halt: bool = option(False, env="ROYALEFLEET_CLEAR_HALT",
                              help="continue a run that was halted (an alarm or an operator wrote halted.json in "
                              "its folder)")
    start_fresh: bool = option(False, env="ROYALEFLEET_START_FRESH",
                               help="start the run over when it has checkpoints and none verifies (its metric rows "
                               "are moved to metrics.purged.jsonl); without it such a start is refused")


def parse_settings(argv: list[str] | None = None, environ=None) -> Settings:
    """The learner's settings from flags, else variables, else defaults; a bad value exits 2
    naming the flag or the variable."""
    return service_settings.parse_settings(
        Settings, argv, environ, prog="python -m services.learner",
        description="The learner: central inference, GAE and PPO over rounds from the rollouts. "
        "Every flag also reads an environment variable (shown), which is how Compose configures it.")


def main(argv=None) -> int:
    env = os.environ.get
    a = parse_settings(argv)
    # A test hook, not a user option: resume WITHOUT these components, to show that
    # verify-resume catches a resume that lost state (tests/royalefleet/test_verify_resume.py).
    perturb = tuple(x for x in env("ROYALEFLEET_PERTURB_RESUME", "").split(",") if x)

    def say(text):
        print(text, flush=True)

    try:
        cfg = load_config(a.config)
    except ConfigError as exc:
        say(str(exc))
        return 2
    try:
        learner = make_learner(cfg, a, perturb, say)
    except (DeterminismError, DeviceMemoryError) as exc:
        say(f"learner: {exc}")
        return 2
    signal.signal(signal.SIGTERM, learner.request_stop)
    signal.signal(signal.SIGINT, learner.request_stop)
    try:
        return learner.run()
    except SystemExit as exc:
        if isinstance(exc.code, str):
            say(exc.code)
            return 2
        raise


def make_learner(cfg: RunConfig, a, perturb, say) -> "Learner":
    s = cfg.services
    return Learner(
        cfg,
        bind=a.bind or transport.tcp(s.host, s.learner_port),
        ladder=a.ladder or transport.tcp(s.host, s.ladder_port),
        checkpoint=a.checkpoint or transport.tcp(s.host, s.checkpoint_port),
        runs_dir=a.runs_dir or cfg.runs_dir,
        metrics_port=(s.learner_metrics_port if a.metrics_port < 0 else a.metrics_port) or None,
        metrics_host=a.metrics_host,
        iterations=a.iterations,
        min_rollouts=a.min_rollouts,
        allow_identity_drift=a.allow_identity_drift,
        clear_halt=a.clear_halt,
        start_fresh=a.start_fresh,
        perturb_resume=perturb,
        halt_port=s.learner_halt_port if a.halt_port < 0 else a.halt_port,
        say=say,
    )

