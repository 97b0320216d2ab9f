"""The learner service: owns the policy, collects, trains, reports.

One iteration (docs/iteration.md):

1. boundary: take the rollouts registered now (``Fleet.arrange``), derive the rectangle
   (R slots, T cycles) once, ask the ladder for the episodes' assignments, send each rollout
   its Plan;
2. collect T cycles with central inference (``collect.Collector``);
3. value pass over the rectangle and the truncated episodes' final observations, GAE;
4. PPO update;
5. the metric row: appended to ``runs/<run>/metrics.jsonl``, exported on ``/metrics``, one
   progress line printed;
6. finished episodes to the ladder's result log; a checkpoint when due.

SIGINT/SIGTERM stop it at the next safe point: a checkpoint of the state the last metric row
describes is written (never weights an unwritten row would have to describe), then it exits.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import msgspec
import numpy as np

from services.learner import checkpointing, metric_log
from services.learner.admission import HelloLimits, plan_size
from services.learner.battle_states import BattleStateBook
from services.learner.episode_courier import EpisodeCourier
from services.learner.halt import HALTED_FILE, mark_halted, read_halt_mark
from services.learner.fleet import Fleet
from services.learner.frozen import FrozenActors, checkpoint_fetcher, frozen_metrics, plan_snapshots
from services.learner.ladder_status import LadderStatusPoller
from services.learner.rectangle import Rectangle
from services.learner.vram import DeviceMemoryError
from shared import transport
from shared.config import ConfigError, RunConfig, config_differences, dump_config, load_config
from shared.identity import action_digest_of, compute_identity, describe_device, identity_differences, run_id
from shared.matchmaking import plan_assignments, role_counts
from shared.messages import (
    AdmitCandidate, Admitted, Decoder, FromCheckpoint, FromLadder, Loaded, LoadLatest, NotFound, Plan,
    PlanReply, PlanRequest, SaveCheckpoint, Saved, SaveSnapshot, SnapshotSaved, ToLearner, Welcome,
    snapshot_of,
)
from shared.schedules import value_at
from shared.seeding import stream
from shared.stats import wilson_interval
from shared.writer_token import checkpoint_token

STARTUP_WAIT_S = 120.0
"""How long the first iteration waits for ``min_rollouts`` before starting with fewer."""

JOIN_WAIT_S = 30.0
"""The longest a boundary waits for a registered rollout that is still building its battles."""


class StopRequested(Exception):
    pass


class AlarmHalt(Exception):
    """A halt-severity alarm spent its patience: the checkpoint and the bundle are written."""


class SaveHalt(Exception):
    """``checkpoint.max_failed_saves`` saves in a row failed: stop, without a bundle (the disk
    that refused the checkpoints would refuse it too)."""


class DeterminismError(RuntimeError):
    pass


def apply_determinism(cfg: RunConfig, device: str) -> dict:
    """Put this process into the configured tier, or refuse a run that would silently not be
    reproducible, naming the setting.

    run_exact: deterministic torch algorithms, a fixed thread count, and the BLAS thread counts
    pinned in the environment BEFORE numpy loaded (the launcher and Compose set them; they
    cannot be set from here, so they are checked), plus CUBLAS_WORKSPACE_CONFIG on CUDA; cuDNN
    deterministic, its benchmark off, TF32 off.
    throughput: torch may pick nondeterministic kernels, and cuDNN benchmarks them per shape
    (the fastest convolution for each minibatch shape); env-exactness still holds."""
    import torch

    tier, threads = cfg.determinism.tier, cfg.determinism.torch_threads
    torch.set_num_threads(threads)
    if tier == "run_exact":
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            if os.environ.get(var) != str(threads):
                raise DeterminismError(
                    f"determinism.tier run_exact needs {var}={threads} in the environment before the learner starts "
                    f"(found {os.environ.get(var)!r}); royalefleet up and compose.yaml set it. Set it, or choose "
                    f"determinism.tier \"throughput\"")
        if device.startswith("cuda") and os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in (":4096:8", ":16:8"):
            raise DeterminismError("determinism.tier run_exact on CUDA needs CUBLAS_WORKSPACE_CONFIG=:4096:8 set "
                                   "before the learner starts")
        torch.use_deterministic_algorithms(True, warn_only=False)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    else:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False
        torch.backends.cudnn.benchmark = device.startswith("cuda")
    return {"tier": tier, "torch_threads": threads}


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

        self.pf = run_preflight(cfg.env, cfg.master_seed)
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
        self.ladder_status = LadderStatusPoller(self.ladder, cfg.run_name, cfg.services.ladder_status_timeout_s, say)
        self.courier = EpisodeCourier(self.ladder, cfg.run_name, self.run_dir, say)  # exactly once, held if unanswered
        self.ckpt_token = checkpoint_token()  # shared/writer_token.py: only this run's learner writes
        self.ckpt = transport.Client(checkpoint, Decoder(FromCheckpoint), name="checkpoint service",
                                     max_bytes=cfg.services.max_message_mb << 20,
                                     timeout_s=cfg.services.request_timeout_s,
                                     curve=transport.curve_client_keys())
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
        self.ladder_silent = False
        """The ladder left the last plan request unanswered (``_request_plan``)."""
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
        self.collector.user_code = self.identity.user_code  # a Hello with other user code is refused
        self.battle_states = BattleStateBook(self.pf.engine, say)  # exact battles in the checkpoint
        self.collector.on_states = self.battle_states.on_message
        self.iteration = 0
        self.timesteps = 0
        self.env_steps = 0
        self.episodes = 0
        self.saved_iteration = -1
        self.failed_saves = 0
        """Checkpoint saves failed in a row (``_save``); ``checkpoint.max_failed_saves`` halts."""
        self.snapshot: checkpointing.Snapshot | None = None
        self.metrics_path = os.path.join(self.run_dir, "metrics.jsonl")
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

    def _save(self, snapshot: checkpointing.Snapshot, attempts: int = 3) -> bool:
        names = list(snapshot.files)
        for attempt in range(1, attempts + 1):
            try:
                req = SaveCheckpoint(request_id=self.ckpt.next_id(), run_name=self.cfg.run_name,
                                     iteration=snapshot.iteration, names=names, meta=snapshot.meta,
                                     token=self.ckpt_token)
                reply, _ = self.ckpt.request(req, {n: np.frombuffer(snapshot.files[n], np.uint8) for n in names})
                if isinstance(reply, Saved):
                    self.saved_iteration = snapshot.iteration
                    self.failed_saves = 0
                    self.say(f"learner: checkpoint of iteration {snapshot.iteration} written to {reply.path}")
                    return True
                self.say(f"learner: checkpoint service refused the save ({getattr(reply, 'reason', reply)}); "
                         f"attempt {attempt}/{attempts}")
            except transport.ServiceTimeout as exc:
                self.say(f"learner: checkpoint save failed ({exc}); attempt {attempt}/{attempts}, state kept in memory")
            if attempt < attempts:
                time.sleep(min(2.0 * attempt, 5.0))
        self.metrics.checkpoint_failures.inc()
        self.failed_saves += 1
        self.say(f"learner: checkpoint of iteration {snapshot.iteration} NOT written after {attempts} attempts "
                 f"({self.failed_saves} failed save(s) in a row; the learner halts at "
                 f"checkpoint.max_failed_saves = {self.cfg.checkpoint.max_failed_saves}); the state stays in memory")
        return False

    def _snapshot_actor(self) -> None:
        """A frozen copy of the actor (fp16, no critic, no optimizer) into the snapshot store:
        a pool candidate every ``ladder.pool.candidate_every_env_steps``."""
        import copy

        from shared.nn.statefiles import module_to_bytes

        actor = module_to_bytes(copy.deepcopy(self.model.actor).half())
        spec = msgspec.json.encode({
            "run_id": self.run_id, "iteration": self.iteration, "env_steps": self.env_steps,
            "arch_digest": self.identity.arch_digest, "obs_digest": self.identity.obs_digest,
            "codec_table_digest": self.identity.codec_table_digest, "dtype": "float16"})
        try:
            reply, _ = self.ckpt.request(SaveSnapshot(request_id=self.ckpt.next_id(), run_name=self.cfg.run_name,
                                                      spec=spec, token=self.ckpt_token),
                                         {"actor": np.frombuffer(actor, np.uint8)})
        except transport.ServiceTimeout as exc:
            self.say(f"learner: snapshot not written: {exc}")
            return
        if isinstance(reply, SnapshotSaved):
            self.say(f"learner: pool candidate snapshot {reply.snapshot_id} at {self.env_steps:,} env steps")
            self._admit_candidate(reply.snapshot_id)
        else:
            self.say(f"learner: the checkpoint service refused the snapshot: {getattr(reply, 'reason', reply)}")

    def _admit_candidate(self, snapshot_id: str) -> None:
        """Offer a stored snapshot to the ladder's pool (AdmitCandidate) and say what it did."""
        try:
            reply, _ = self.ladder.request(AdmitCandidate(
                request_id=self.ladder.next_id(), run_name=self.cfg.run_name, snapshot_id=snapshot_id,
                env_steps=self.env_steps, iteration=self.iteration),
                timeout_s=self.cfg.services.ladder_status_timeout_s if self.ladder_silent else None)
        except transport.ServiceTimeout as exc:
            self.say(f"learner: candidate snap:{snapshot_id} not offered to the pool: {exc}")
            return
        if isinstance(reply, Admitted):
            what = {"admitted_free": "admitted free as the run's first snapshot: it is the champion",
                    "pending": "pending: it waits for a gate",
                    "duplicate": "already known to the pool"}.get(reply.status, reply.status)
            self.say(f"learner: pool candidate snap:{snapshot_id} {what}")
        else:
            self.say(f"learner: the ladder refused candidate snap:{snapshot_id}: {getattr(reply, 'reason', reply)}")

    def _admit_seed_snapshots(self) -> None:
        """``ladder.pool.seed_snapshots`` read, checked (sha256, spec digests, weights),
        stored and admitted as seeds before the first plan (services/learner/seeds.py). Raises
        SystemExit naming every problem: the run does not start without its seeds."""
        seeds = self.cfg.ladder.pool.seed_snapshots
        if not seeds:
            return
        from services.learner.seeds import SeedRefused, admit_seeds, read_seeds
        from shared.nn.snapshot import actor_builder

        expected = {"arch_digest": self.identity.arch_digest, "obs_digest": self.identity.obs_digest,
                    "codec_table_digest": self.identity.codec_table_digest}
        try:
            admit_seeds(read_seeds(seeds, expected, actor_builder(self.pf.spec, self.cfg.net)), self.cfg.run_name,
                        self.ckpt, self.ladder, self.say, token=self.ckpt_token)
        except SeedRefused as exc:
            raise SystemExit(f"learner: refusing to start: {exc}")

    def resume(self) -> None:
        """Continue from the run's newest checkpoint that verifies, or start fresh when the run
        has none. A run whose checkpoints exist and none verifies is refused (SystemExit naming
        each one and its failing file), nothing purged, unless ``start_fresh``.

        Refuses (SystemExit naming everything) a checkpoint whose identity differs from this
        run's (unless allow_identity_drift, which records the drift), and one whose state no
        metric row of its iteration describes. Config differences outside the identity are
        printed and continued past."""
        try:
            reply, arrays = self.ckpt.request(LoadLatest(request_id=self.ckpt.next_id(), run_name=self.cfg.run_name))
        except transport.ServiceTimeout as exc:
            raise SystemExit(f"learner: cannot reach the checkpoint service to look for a checkpoint: {exc}")
        if isinstance(reply, NotFound) and reply.skipped and not self.start_fresh:
            # Checkpoints exist and none verifies: starting fresh would purge the run's record
            # and overwrite its checkpoint folders. Purge nothing; a person decides.
            raise SystemExit(
                f"learner: refusing to start run {self.cfg.run_name!r}: it has {len(reply.skipped)} checkpoint(s) "
                "and none verifies:\n" + "\n".join(f"  {s}" for s in reply.skipped)
                + "\nNothing was changed. Repair or restore a checkpoint folder (royalefleet checkpoints lists "
                "them), start another run_name, or start this run over with `royalefleet resume --start-fresh` "
                "(ROYALEFLEET_START_FRESH=1; Compose: FLEET_START_FRESH=1 for one `up -d learner`), which moves "
                f"its metric rows to {metric_log.PURGED_NAME} and overwrites its checkpoints as new ones are written")
        if isinstance(reply, NotFound):
            if reply.skipped:
                self.say(f"learner: starting run {self.cfg.run_name!r} over (--start-fresh); none of its "
                         f"{len(reply.skipped)} checkpoint(s) verifies:\n" + "\n".join(f"  {s}" for s in reply.skipped))
            self.say(f"learner: no checkpoint for run {self.cfg.run_name!r}; starting fresh")
            moved, _ = metric_log.purge_after(self.metrics_path, 0)
            if moved:  # a process killed before its first checkpoint: its rows describe nothing kept
                self.say(f"learner: {moved} metric row(s) of a process that wrote no checkpoint moved from "
                         f"metrics.jsonl to {metric_log.PURGED_NAME}")
            self._admit_seed_snapshots()  # fresh start only; a resumed pool already holds them
            return
        if not isinstance(reply, Loaded):
            raise SystemExit(f"learner: the checkpoint service could not load the latest checkpoint: "
                             f"{getattr(reply, 'reason', reply)}")
        for problem in reply.skipped:  # the fallback to an older checkpoint, said where it is seen
            self.say(f"learner: skipped a newer checkpoint that does not verify: {problem}")
        try:
            meta = msgspec.json.decode(reply.meta, type=checkpointing.CheckpointMeta)
        except msgspec.ValidationError as exc:
            raise SystemExit(f"learner: checkpoint {reply.path} was written by another format ({exc}); "
                             "start a new run_name or resume with the build that wrote it")
        diffs = identity_differences(meta.identity, self.identity)
        if diffs:
            lines = [f"  {k}: checkpoint {a!r}, this run {b!r}" for k, (a, b) in diffs.items()]
            if not self.allow_identity_drift:
                raise SystemExit(
                    f"learner: refusing to resume {reply.path}: the run identity differs in {len(diffs)} field(s):\n"
                    + "\n".join(lines)
                    + "\nThese change the numbers the run produces. Start a new run_name, or pass "
                    "--allow-identity-drift to record the drift and continue.")
            self.resumed_with_drift = True
            with open(os.path.join(self.run_dir, "drift.json"), "ab") as fh:
                fh.write(msgspec.json.encode({"iteration": meta.iteration, "from_run_id": meta.run_id,
                                              "to_run_id": self.run_id,
                                              "fields": {k: [str(a), str(b)] for k, (a, b) in diffs.items()}}) + b"\n")
            self.say("learner: resuming across an identity drift (recorded in drift.json):\n" + "\n".join(lines))
        ok, note = checkpointing.described(meta, self.metrics_path)
        if not ok:
            raise SystemExit(f"learner: refusing to resume {reply.path}: {note}. Resume from an earlier "
                             "checkpoint (royalefleet checkpoints lists them).")
        if note:
            self.say(f"learner: note: {note}")
        files = {n: bytes(arrays[n]) for n in reply.names}
        try:
            checkpointing.restore(self, files, skip=self.perturb_resume)
        except checkpointing.ResumeRefused as exc:
            raise SystemExit(f"learner: refusing to resume {reply.path}: {exc}")
        # Learning rates come from this config (an lr change on resume takes effect).
        for opt, lr in ((self.opt_actor, self.cfg.ppo.lr_actor), (self.opt_critic, self.cfg.ppo.lr_critic)):
            for group in opt.param_groups:
                group["lr"] = lr
        self.lr_backoff.apply(self.opt_actor, self.opt_critic)  # a backoff outlives a resume
        self.saved_iteration = meta.iteration
        self.snapshot = checkpointing.capture(self)
        if self.snapshot.state_digest != meta.state_digest and not self.perturb_resume:
            raise SystemExit(f"learner: the restored state hashes to {self.snapshot.state_digest}, the checkpoint "
                             f"says {meta.state_digest}: the restore lost something")
        for path, (a, b) in config_differences(meta.config, self.cfg).items():
            self.say(f"learner: config differs from the checkpoint's: {path} {a!r} -> {b!r}")
        moved, lost = metric_log.purge_after(self.metrics_path, meta.iteration)
        if moved:
            span = (f"iterations {lost[0]}-{lost[-1]}" if len(lost) > 1 else f"iteration {lost[0]}" if lost
                    else "a torn line")
            self.say(f"learner: {moved} metric row(s) that describe no weights this run goes on from ({span}: "
                     f"past checkpoint {meta.iteration}, torn, or superseded) moved from metrics.jsonl to "
                     f"{metric_log.PURGED_NAME}")
        row = checkpointing.missing_row(meta, files, self.metrics_path)
        if row is not None:  # the checkpointed iteration's row was torn or lost: it is part of the checkpoint
            metric_log.append_row(self.metrics_path, row)
            self.say(f"learner: the metric row of iteration {meta.iteration} was missing from metrics.jsonl; "
                     f"restored from {reply.path}/{checkpointing.ROW_FILE}")
        if self.perturb_resume:
            self.say(f"learner: PERTURBED resume (test hook): did not load {', '.join(self.perturb_resume)}")
        self.say(f"learner: resumed iteration {meta.iteration} at {meta.counters.timesteps:,} timesteps from "
                 f"{reply.path} (state {meta.state_digest})")

    # ------------------------------------------------------------------ one iteration

    def _plan(self, members, slot_map, gamma: float) -> tuple[int, int, list]:
        cfg = self.cfg
        n = slot_map.n_battles
        T, learner_rows, lookahead = plan_size(cfg, n)  # one formula with the Hello limits (admission.py)
        battles = [int(b) for b in slot_map.battle_ids]
        ordinals = [self.fleet.ordinal.get(b, 0) for b in battles]
        reply = self._request_plan(PlanRequest(
            request_id=self.ladder.next_id(), iteration=self.iteration + 1, n_battles=n, battles=battles,
            next_ordinals=ordinals, lookahead=lookahead))
        by_battle: dict[int, list] = {}
        for a in reply.assignments:
            by_battle.setdefault(a.battle, []).append(a)
        # battles continuing a recorded episode (a resume) are in flight, never restarted.
        continued = self.battle_states.hand_out(self.sock, self.collector, members, self.fleet, self.iteration + 1,
                                                cfg.rollout.round_timeout_s)
        # which snapshot holds each frozen seat (the plan as the rollouts will apply it).
        self.fleet.record_plan(members, reply.assignments, continued)
        for m in members:
            restart = [self.fleet.ordinal.get(b, 0) if m.fresh and b not in continued else -1 for b in m.battle_ids]
            plan = Plan(iteration=self.iteration + 1, battles=m.battle_ids, restart_ordinals=restart, gamma=gamma,
                        assignments=[a for b in m.battle_ids for a in by_battle.get(b, [])], fresh=m.fresh)
            transport.send(self.sock, plan, identity=m.identity)
        # load the plan's snapshots now (the rollouts reset meanwhile), so the collection
        # meets no load: those of the episodes in flight first, as many as the LRU holds.
        self.frozen.new_iteration()
        self.frozen.prefetch(plan_snapshots(self.fleet, battles, self.frozen.capacity))
        return T, learner_rows, list(reply.role_counts)

    def _request_plan(self, req: PlanRequest) -> PlanReply:
        """The ladder's plan, or, when it does not answer, the same pure function
        (``shared.matchmaking.plan_assignments``) drawn here over the pool the last plan named
        (uniform over those snapshots; PFSP weights live in the ladder): collection needs no
        ladder. While it stays silent each boundary asks again with the short status timeout,
        so a dead ladder costs one request timeout, not one per iteration."""
        timeout = self.cfg.services.ladder_status_timeout_s if self.ladder_silent else None
        try:
            reply, _ = self.ladder.request(req, timeout_s=timeout)
        except transport.ServiceTimeout as exc:
            pool = sorted({a.opponent for a in self.fleet.assignments.values()
                           if a.role == "pool" and snapshot_of(a.opponent) is not None})
            if not self.ladder_silent:
                self.say(f"learner: the ladder did not answer the plan request ({exc}); collecting with assignments "
                         f"drawn here over the last plan's pool ({len(pool)} snapshot(s)) until it answers; "
                         "finished episodes are held for it, never dropped")
            self.ladder_silent = True
            self.metrics.ladder_unanswered_plans.inc()
            lad = self.cfg.ladder
            assignments = plan_assignments(self.cfg.master_seed, req.n_battles, req.battles, req.next_ordinals,
                                           req.lookahead, tuple(lad.mix), tuple(lad.scripted_opponents),
                                           pool_members=pool)
            return PlanReply(request_id=req.request_id, assignments=assignments,
                             role_counts=role_counts(tuple(lad.mix), req.n_battles))
        if not isinstance(reply, PlanReply):
            raise RuntimeError(f"the ladder refused the plan request: {getattr(reply, 'reason', reply)}")
        if self.ladder_silent:
            self.say(f"learner: the ladder answers again (iteration {req.iteration})")
            self.ladder_silent = False
        return reply

    def _deliver_episodes(self, episodes: list, iteration: int) -> None:
        """Episodes to the result log (services/learner/episode_courier.py), with the short
        status timeout while the ladder is silent."""
        self.courier.deliver(episodes, iteration,
                             self.cfg.services.ladder_status_timeout_s if self.ladder_silent else None)

    def wait_for_rollouts(self) -> list:
        """Block (handling messages) until a rollout is registered; before the first iteration,
        until ``min_rollouts`` are or ``startup_wait_s`` has passed (so a local stack does not
        start its first iteration with whichever rollout built its battles first)."""
        announced = False
        deadline = time.monotonic() + (STARTUP_WAIT_S if self.first_iteration else 0.0)
        # A rollout that said Hello is building its battles (0.3 s a battle, more under load):
        # wait for it, boundedly, so a restarted rollout rejoins at the next boundary. The bound
        # runs from its Hello, not from this boundary: one killed while building (a ghost) is
        # forgotten once, never waited for again at every later boundary.
        join_wait = max(self.cfg.rollout.round_timeout_s, JOIN_WAIT_S)
        self.collector.poll(0, lambda *a: None)  # Hellos that arrived during the update count
        while not self.stopping:
            for m in self.fleet.forget_unready(join_wait):
                self.metrics.rollouts_forgotten.inc()
                self.say(f"learner: forgot rollout {m.label()}: registered {join_wait:.0f} s ago and never said it "
                         "was ready (killed while building its battles?); a live one is told to rejoin")
            members = [m for m in self.fleet.members.values() if not m.lost]
            waiting = sum(1 for m in members if m.ready or m.active)
            building = any(not (m.ready or m.active) for m in members)
            if waiting and not building and (waiting >= self.min_rollouts or time.monotonic() >= deadline):
                self.first_iteration = False
                return self.fleet.arrange()
            if not announced:
                self.say(f"learner: waiting for {self.min_rollouts - waiting} more rollout(s) to register")
                announced = True
            self.collector.poll(200, lambda *a: None)
        raise StopRequested

    def run_iteration(self) -> dict:
        from services.learner.gae import compute_gae, credit_horizon_seconds
        from services.learner.ppo import UpdateData, ppo_update

        cfg = self.cfg
        t_iter = time.perf_counter()
        sched = evaluate_schedules(cfg, self.env_steps)
        members = self.wait_for_rollouts()
        slot_map = self.fleet.slot_map(members)
        T, learner_rows, roles = self._plan(members, slot_map, sched["gamma"])
        rect = Rectangle(T, slot_map.n_slots, self.pf.codec.row_bytes, self.pf.codec.omask)
        it = self.iteration + 1
        self.model.last_precision.clear()  # this iteration's forwards say what they ran in
        if self.device.type == "cuda":
            from services.learner.vram import reset_peak

            reset_peak(self.device)

        t0 = time.perf_counter()
        stats = self.collector.collect(it, members, slot_map, rect, self.policy, cfg.master_seed, cfg.rollout.round_timeout_s,
                                       frozen=self.frozen)
        t_collect = time.perf_counter() - t0
        inference_precision = self.model.last_precision.get("actor")
        if self.stopping:
            raise StopRequested
        for m in members:
            m.fresh = False
        # Every battle is idle at the point its cycle-T round describes: the rollouts save their
        # states now, while the update runs, and the row's checkpoint reads them (gather).
        self.battle_states.request(self.sock, members, it)
        # Values for every learner cell, and for the truncated episodes' final observations.
        t0 = time.perf_counter()
        cells = rect.learner_cells()
        values = np.zeros((T + 1, rect.R), np.float32)
        values[cells] = self.policy.values(rect.rows[cells])
        final_values = np.zeros((T, rect.R), np.float32)
        if rect.final_rows:
            # (cycle, slot) order, never arrival order: a CPU forward can round a row differently
            # depending on its place in the batch, so the batch itself must be reproducible.
            keys = sorted(rect.final_rows)
            fv = self.policy.values(np.stack([rect.final_rows[k] for k in keys]))
            for (t, r), v in zip(keys, fv):
                final_values[t, r] = v
        t_critic = time.perf_counter() - t0
        t0 = time.perf_counter()
        trainable = rect.trainable()
        gamma, lam = sched["gamma"], cfg.advantage.gae_lambda
        # Judge the batch before learning from it: a non-finite value or reward is counted
        # (health/nan_guard_trips, a halting alarm) and the update is skipped.
        nan_trips = int(np.count_nonzero(~np.isfinite(values[cells])) + np.count_nonzero(~np.isfinite(final_values))
                        + np.count_nonzero(~np.isfinite(rect.reward[trainable])))
        scale_stats: dict = {}
        rewards = rect.reward
        if cfg.advantage.standardize_rewards and not nan_trips:
            rewards, scale_stats = self.return_scaler.scale(rect.reward, rect.terminated, rect.truncated, trainable, gamma)
        adv, ret = compute_gae(rewards, values, final_values, rect.terminated, rect.truncated, trainable, gamma, lam)
        nan_trips += int(np.count_nonzero(~np.isfinite(adv[trainable])))
        t_gae = time.perf_counter() - t0
        t_idx, r_idx = np.nonzero(trainable)
        n_train = len(t_idx) if not nan_trips else 0
        update_stats: dict = {}
        t0 = time.perf_counter()
        if n_train:
            # CUDA: the trainable rows go to the device once, here; CPU: numpy per minibatch.
            batch_of = self.policy.fetcher(rect.rows.reshape(-1, rect.row_bytes), t_idx * rect.R + r_idx)

            def fetch(idx):
                # Called once per minibatch: the point where a stop request abandons the
                # update (the checkpoint written is then the last row's state, not this one).
                if self.stopping:
                    raise StopRequested
                return batch_of(idx)

            data = UpdateData(
                actions=rect.actions[t_idx, r_idx], old_log_probs=rect.log_probs[t_idx, r_idx],
                advantages=adv[t_idx, r_idx], returns=ret[t_idx, r_idx], old_values=values[t_idx, r_idx],
                n_legal=rect.n_legal[t_idx, r_idx],
                fetch=fetch, old_log_prob_precision=inference_precision,
            )

            def epoch_rng(e: int):
                return stream(cfg.master_seed, "ppo/minibatch/iteration/{iteration}/epoch/{epoch}", iteration=it, epoch=e)

            update_stats = ppo_update(self.model, self.opt_actor, self.opt_critic, data, cfg.ppo, epoch_rng, self.device,
                                      ent_coef=sched["ent_coef"], ent_coef_noop=sched["ent_coef_noop"])
            self.lr_backoff.observe(update_stats.get("ppo/kl"), self.opt_actor, self.opt_critic)
        t_update = time.perf_counter() - t0

        # Counters and the row.
        self.iteration = it
        self.timesteps += n_train
        every = cfg.ladder.pool.candidate_every_env_steps
        crossed = (self.env_steps + stats.env_steps) // every > self.env_steps // every
        self.env_steps += stats.env_steps
        if crossed and n_train:
            self._snapshot_actor()
        learner_eps = [e for e in stats.episodes if e.player == "learner"]
        self.episodes += len(learner_eps)
        lost_cells = _lost_cells(rect, T)
        row = {
            "run/iteration": it, "run/timesteps": self.timesteps, "run/env_steps": self.env_steps,
            "run/episodes": self.episodes, "run/wall_seconds": time.monotonic() - self.t_start,
            "run/gamma": gamma, "run/credit_horizon_seconds": credit_horizon_seconds(gamma, lam, self.pf.spec.decision_ms),
            "run/cycles": T, "run/slots": rect.R, "run/battles": slot_map.n_battles, "run/learner_rows_per_cycle": learner_rows,
            "throughput/collected_steps_per_second": n_train / t_collect if t_collect > 0 else 0.0,
            "throughput/env_steps_per_second": stats.env_steps / t_collect if t_collect > 0 else 0.0,
            "throughput/inference_ms_per_round": 1000 * stats.inference_seconds / max(stats.rounds, 1),
            "throughput/parent_wait_frac": stats.wait_seconds / t_collect if t_collect > 0 else 0.0,
            "time/collection": t_collect, "time/inference": stats.inference_seconds, "time/critic_pass": t_critic,
            "time/gae": t_gae, "time/update": t_update,
            "health/rollouts": len(members), "health/rollouts_lost": len(stats.lost),
            "health/rows_invalid": lost_cells, "health/rows_invalid_frac": lost_cells / max(1, learner_rows * T),
            "health/trainable_rows": n_train, "health/messages_refused": stats.refused,
            "health/illegal_action_rate": stats.illegal / max(1, n_train),
            "health/nan_guard_trips": nan_trips,
            "health/obs_codec_clipped": stats.codec_clipped, "health/obs_codec_rounded": stats.codec_rounded,
            "health/buffer_fill_frac": rect.writes / ((T + 1) * rect.R),
            "throughput/rollout_capacity_ratio": t_update / t_collect if t_collect > 0 else 0.0,
            "ppo/ent_coef": sched["ent_coef"], "ppo/ent_coef_noop": sched["ent_coef_noop"],
        }
        row.update(play_metrics(rect, self.pf, T))
        row.update(choice_metrics(rect, trainable))
        row.update(scale_stats)
        row.update(self.lr_backoff.metrics(self.opt_actor, self.opt_critic))
        if stats.rows_received:
            row["throughput/wire_bytes_per_row"] = stats.wire_bytes / stats.rows_received
            row["throughput/wire_encode_us_per_row"] = 1e6 * stats.wire_encode_seconds / stats.rows_received
            row["throughput/wire_decode_us_per_row"] = 1e6 * stats.wire_decode_seconds / stats.rows_received
        if self.device.type == "cuda":  # CUDA only: a CPU learner has no device memory to watch
            from services.learner.vram import vram_row

            row.update(vram_row(self.device))
        if inference_precision:
            row["run/inference_precision"] = inference_precision
        if n_train:
            row["run/train_precision"] = self.model.last_precision.get("critic", "fp32")
            row["ppo/advantage_mean"] = float(adv[trainable].mean())
            row["ppo/return_mean"] = float(ret[trainable].mean())
        row.update(update_stats)
        row.update(_episode_metrics(learner_eps, cfg.env.max_steps, stats.frozen.tainted))
        # an episode whose frozen seat played the no-op (its snapshot could not play) was
        # no game against that snapshot: kept out of the result log (services/learner/frozen.py).
        reported = [e for e in stats.episodes if (e.battle, e.ordinal) not in stats.frozen.tainted]
        row.update(frozen_metrics(stats.frozen, self.frozen, len(stats.episodes) - len(reported)))
        if stats.frozen.noop_rows:
            self.say(f"learner: {sum(stats.frozen.noop_rows.values())} frozen-seat rows played the no-op "
                     f"({', '.join(f'{k} {v}' for k, v in sorted(stats.frozen.noop_rows.items()))}); "
                     f"{len(stats.episodes) - len(reported)} seat-episodes kept out of the result log")

        # Episodes to the ladder's result log; the checkpoint snapshot of this row's state.
        t0 = time.perf_counter()
        self._deliver_episodes(reported, it)
        row["health/episodes_held"] = self.courier.held()
        row.update(self.ladder_status.poll())  # ladder/ keys; absent when the ladder does not answer
        self.battle_states.gather(self.collector, members, it, cfg.rollout.round_timeout_s)
        row.update(self.battle_states.row_keys())
        self.snapshot = checkpointing.capture(self)
        row["run/state_digest"] = self.snapshot.state_digest
        row["run/run_id"] = self.run_id
        if self.resumed_with_drift:
            row["run/resumed_with_drift"] = 1
        row["time/checkpoint"] = time.perf_counter() - t0
        row["time/iteration"] = time.perf_counter() - t_iter
        row["throughput/overall_steps_per_second"] = n_train / row["time/iteration"]
        # The row first, then the alarms read it, then the checkpoint it describes. One plain
        # copy (no numpy scalars) serves the file, the alarms and any bundle.
        row = metric_log.plain_row(row)
        line, row_written = self._write_row(row)
        checkpointing.attach_row(self.snapshot, line)  # the row travels with the checkpoint of its state
        verdict = self.alarms.observe(row)
        # A row the disk refused lives only in the snapshot now: its checkpoint is due.
        if verdict.halt_due or it % cfg.checkpoint.every_iterations == 0 or not row_written:
            self._save(self.snapshot)
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

    def _write_row(self, row: dict) -> tuple[bytes, bool]:
        """Append ``row`` (plain: ``metric_log.plain_row``) to metrics.jsonl, export and print it; returns (the encoded line,
        whether the file took it). A disk that refuses (OSError) is said, not raised."""
        line = msgspec.json.encode(row) + b"\n"
        written = True
        try:
            metric_log.append_row(self.metrics_path, line)
        except OSError as exc:
            written = False
            self.say(f"learner: metric row of iteration {row['run/iteration']} NOT written to {self.metrics_path} "
                     f"({exc}); it is kept with this iteration's checkpoint, which a resume restores it from")
        self.metrics.export(row)
        self.say(progress_line(row))
        return line, written

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
        if not self._halt_cleared():
            self.closed = True  # nothing trained, nothing to checkpoint
            if self.halt_endpoint is not None:
                self.halt_endpoint.close()
            return 3
        self.resume()
        self.courier.load()
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
                            checkpoint_path=f"checkpoints/{self.iteration:08d}")
        with open(os.path.join(path, "operator_halt.txt"), "w") as fh:
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

    def _halt_cleared(self) -> bool:
        """False (after saying why and how to go on) when the run was halted and not cleared."""
        what = read_halt_mark(self.run_dir)
        if what is None:
            return True
        if self.clear_halt:
            os.remove(os.path.join(self.run_dir, HALTED_FILE))
            self.say(f"learner: clearing the halt of run {self.cfg.run_name!r} {what}")
            return True
        self.say(f"learner: run {self.cfg.run_name!r} was halted {what}. Read {self.run_dir}/bundles/ and "
                 f"alarms.jsonl, then continue with `royalefleet resume --clear-halt` (or ROYALEFLEET_CLEAR_HALT=1; "
                 f"Compose: FLEET_CLEAR_HALT=1 for one `up -d learner`), or start another run_name")
        return False

    def shutdown(self, save: bool = True) -> None:
        self.closed = True
        if self.halt_endpoint is not None:
            self.halt_endpoint.close()
        if self.courier.batches:  # one more try; what stays held is in episodes.held.jsonl for the next start
            self._deliver_episodes([], self.iteration)
        if save and self.snapshot is not None and self.saved_iteration < self.snapshot.iteration:
            self._save(self.snapshot)
        elif save and self.snapshot is None and self.saved_iteration < 0:
            self.say("learner: no iteration finished; nothing to checkpoint")
        self.ladder.close()
        self.ckpt.close()
        self.sock.close(linger=transport.LINGER_MS)


def evaluate_schedules(cfg: RunConfig, env_steps: int) -> dict[str, float]:
    """Every scheduled scalar, once, at the top of an iteration: the reward, GAE and the metric
    row then use one number each (seed 004, ScheduleState)."""
    return {
        "gamma": value_at(cfg.advantage.gamma, env_steps),
        "ent_coef": value_at(cfg.ppo.ent_coef, env_steps),
        "ent_coef_noop": value_at(cfg.ppo.ent_coef_noop, env_steps),
    }


def choice_metrics(rect: Rectangle, trainable: np.ndarray) -> dict:
    """How much choice the learner had and how often it waited: legal-action counts over its
    trainable rows (the no-op included), and the no-op share of its choice rows."""
    n_legal = rect.n_legal[:-1][trainable]
    if not len(n_legal):
        return {}
    p05, p50, p95 = np.percentile(n_legal, [5, 50, 95])
    out = {"policy/legal_actions_p05": float(p05), "policy/legal_actions_p50": float(p50),
           "policy/legal_actions_p95": float(p95)}
    choice = trainable & (rect.n_legal[:-1] > 1)
    if choice.any():
        out["policy/noop_rate"] = float(np.mean(rect.actions[choice] == 0))
    return out


def play_metrics(rect: Rectangle, pf, T: int) -> dict:
    """Where the learner plays: ``policy/tile_top1_share`` (share of its card plays on its most
    used tile: tile spam) and ``policy/card_tile_top10_share`` (share on its ten most used
    (card, tile) pairs: an exploited artefact). Absent when it played no card."""
    acted = rect.acted & (rect.actions > 0)
    t_idx, r_idx = np.nonzero(acted)
    if not len(t_idx):
        return {}
    spec = pf.spec
    tiles_per_slot = spec.height * spec.width
    a = rect.actions[t_idx, r_idx] - 1
    hand_slot, tile = a // tiles_per_slot, a % tiles_per_slot
    # The card in that hand slot, read off the row's own one-hot (by field name, never by offset).
    vector = pf.codec.unpack(rect.rows[t_idx, r_idx])["vector"]
    hand = vector[:, spec.field("own_hand_cards")].reshape(len(a), spec.hand_slots, -1)
    card = hand[np.arange(len(a)), hand_slot].argmax(axis=1)
    _, tile_counts = np.unique(tile, return_counts=True)
    _, pair_counts = np.unique(card * tiles_per_slot + tile, return_counts=True)
    return {
        "policy/tile_top1_share": float(tile_counts.max() / len(a)),
        "policy/card_tile_top10_share": float(np.sort(pair_counts)[::-1][:10].sum() / len(a)),
        "policy/cards_played": int(len(a)),
    }


def _lost_cells(rect: Rectangle, T: int) -> int:
    """Learner cells whose transition never arrived: for each slot, the cycles after its last
    received step, counted while the slot's last known holder was the learner."""
    lost = 0
    for r in range(rect.R):
        got = np.flatnonzero(rect.step_valid[:, r])
        first_missing = (got[-1] + 1) if len(got) else 0
        if first_missing < T:
            seen = np.flatnonzero(rect.obs_valid[:, r])
            last_group = rect.group[seen[-1], r] if len(seen) else 0
            if last_group == 0:
                lost += T - int(first_missing)
    return lost


def _episode_metrics(episodes: list, max_steps: int, tainted=frozenset()) -> dict:
    """The row's env/ keys over the learner's finished seat-episodes (``EpisodeRecord``s); empty
    without any. ``tainted``: (battle, ordinal) of episodes whose frozen seat played the no-op
    (``FrozenStats.tainted``), which are no game against their snapshot: left out of
    ``env/win_rate_pool``."""
    if not episodes:
        return {}
    out: dict = {"env/episodes": len(episodes)}
    steps = np.array([e.episode_steps for e in episodes], float)
    out["env/episode_steps_p50"] = float(np.percentile(steps, 50))
    out["env/episode_steps_p95"] = float(np.percentile(steps, 95))
    out["env/episode_steps_at_cap_frac"] = float(np.mean([e.truncated for e in episodes]))
    out["env/draw_rate"] = float(np.mean([e.outcome == 0 for e in episodes]))
    out["env/return_mean"] = float(np.mean([e.undiscounted_return for e in episodes]))
    out["policy/cards_per_match"] = float(np.mean([e.cards_played for e in episodes]))
    exact = [e.elixir_count_exact for e in episodes]
    out["env/elixir_count_exact_frac"] = float(np.mean(exact))
    terms: dict[str, list[float]] = {}
    for e in episodes:
        for name, value in e.reward_terms_abs.items():
            terms.setdefault(name, []).append(value)
    for name, values in terms.items():
        out[f"env/reward_terms_step_abs/{name}"] = float(np.mean(values))
    signed: dict[str, list[float]] = {}
    for e in episodes:
        for name, value in e.reward_terms.items():
            signed.setdefault(name, []).append(value)
    for name, values in signed.items():
        out[f"env/reward_terms/{name}"] = float(np.mean(values))
    if any(e.reward_terms_abs for e in episodes):
        # Per seat, before any averaging: a zero-sum term averaged over both seats reads 0.
        out["env/reward_shaping_abs"] = float(np.mean([sum(v for k, v in e.reward_terms_abs.items() if k != "terminal")
                                                       for e in episodes]))
        out["env/reward_terminal_abs"] = float(np.mean([e.reward_terms_abs.get("terminal", 0.0) for e in episodes]))
    mirror_blue = [e for e in episodes if e.role == "mirror" and e.seat == "blue"]
    if mirror_blue:
        wins = sum(1.0 if e.outcome > 0 else 0.5 if e.outcome == 0 else 0.0 for e in mirror_blue)
        lo, hi = wilson_interval(wins, len(mirror_blue))
        out["env/win_rate_by_seat"] = wins / len(mirror_blue)
        out["env/win_rate_by_seat_ci95_lo"], out["env/win_rate_by_seat_ci95_hi"] = lo, hi
    scripted = [e for e in episodes if e.opponent.startswith("scripted:")]
    if scripted:
        out["env/win_rate_scripted"] = float(np.mean([e.outcome > 0 for e in scripted]))
        for opp in sorted({e.opponent for e in scripted}):
            games = [e for e in scripted if e.opponent == opp]
            out[f"env/win_rate_vs/{opp}"] = float(np.mean([e.outcome > 0 for e in games]))
            out[f"env/episodes_vs/{opp}"] = len(games)
    # every snapshot together, never one key per snapshot id (unbounded over a run).
    pool = [e for e in episodes if snapshot_of(e.opponent) is not None and (e.battle, e.ordinal) not in tainted]
    if pool:
        out["env/win_rate_pool"] = float(np.mean([e.outcome > 0 for e in pool]))
        out["env/episodes_pool"] = len(pool)
    return out


def progress_line(row: dict) -> str:
    def f(key, fmt):
        return format(row[key], fmt) if key in row else "-"

    win = "-"
    if "env/win_rate_scripted" in row:
        n = sum(v for k, v in row.items() if k.startswith("env/episodes_vs/"))
        win = f"{row['env/win_rate_scripted']:.2f} (n={n})"
    if "env/win_rate_pool" in row:
        win += f" | win vs pool {row['env/win_rate_pool']:.2f} (n={row['env/episodes_pool']})"
    lost = ""
    if row.get("health/rows_invalid"):
        lost = f" | lost {row['health/rows_invalid']} rows ({row['health/rollouts_lost']} rollouts)"
    return (
        f"it {row['run/iteration']:>4} | ts {row['run/timesteps']:>9,} | {f('throughput/collected_steps_per_second', ',.0f')} ts/s"
        f" | update {f('time/update', '.1f')} s | win vs scripted {win} | kl {f('ppo/kl', '.2g')}"
        f" | clip {f('ppo/clip_fraction', '.3f')} | entropy {f('ppo/entropy', '.3f')}{lost}"
    )


def main(argv=None) -> int:
    import argparse

    env = os.environ.get
    p = argparse.ArgumentParser(
        prog="python -m services.learner",
        description="The learner: central inference, GAE and PPO over rounds from the rollouts. "
        "Every flag also reads an environment variable (shown), which is how Compose configures it.",
    )
    p.add_argument("--config", default=env("ROYALEFLEET_CONFIG"),
                   help="config JSON (a profile plus overrides) [ROYALEFLEET_CONFIG]; default: the machine's profile")
    p.add_argument("--bind", default=env("ROYALEFLEET_LEARNER_BIND"),
                   help="address rollouts connect to [ROYALEFLEET_LEARNER_BIND] (default tcp://<services.host>:<learner_port>)")
    p.add_argument("--ladder", default=env("ROYALEFLEET_LADDER"), help="ladder address [ROYALEFLEET_LADDER]")
    p.add_argument("--checkpoint", default=env("ROYALEFLEET_CHECKPOINT"), help="checkpoint service address [ROYALEFLEET_CHECKPOINT]")
    p.add_argument("--runs-dir", default=env("ROYALEFLEET_RUNS_DIR"), help="runs folder [ROYALEFLEET_RUNS_DIR] (default: config runs_dir)")
    p.add_argument("--metrics-port", type=int, default=int(env("ROYALEFLEET_METRICS_PORT", "-1")),
                   help="port of /metrics, 0 = off [ROYALEFLEET_METRICS_PORT] (default: services.learner_metrics_port)")
    p.add_argument("--metrics-host", default=env("ROYALEFLEET_METRICS_HOST", "127.0.0.1"),
                   help="address /metrics listens on [ROYALEFLEET_METRICS_HOST] (default %(default)s)")
    p.add_argument("--iterations", type=int, default=int(env("ROYALEFLEET_ITERATIONS", "0")),
                   help="stop once the run has reached this iteration (a total over every resume and restart), "
                   "0 = run until stopped [ROYALEFLEET_ITERATIONS]")
    p.add_argument("--min-rollouts", type=int, default=int(env("ROYALEFLEET_MIN_ROLLOUTS", "1")),
                   help="rollouts the first iteration waits for (up to 120 s) [ROYALEFLEET_MIN_ROLLOUTS] (default %(default)s)")
    p.add_argument("--halt-port", type=int, default=int(env("ROYALEFLEET_HALT_PORT", "-1")),
                   help="port of the authenticated POST /halt endpoint (needs ROYALEFLEET_HALT_TOKEN; 0 = off) "
                   "[ROYALEFLEET_HALT_PORT] (default: services.learner_halt_port)")
    p.add_argument("--allow-identity-drift", action="store_true",
                   default=env("ROYALEFLEET_ALLOW_IDENTITY_DRIFT", "") not in ("", "0"),
                   help="resume a checkpoint whose run identity differs, recording the drift in drift.json "
                   "[ROYALEFLEET_ALLOW_IDENTITY_DRIFT=1]")
    p.add_argument("--clear-halt", action="store_true",
                   default=env("ROYALEFLEET_CLEAR_HALT", "") not in ("", "0"),
                   help="continue a run that was halted (an alarm or an operator wrote halted.json in its folder) "
                   "[ROYALEFLEET_CLEAR_HALT=1]")
    p.add_argument("--start-fresh", action="store_true",
                   default=env("ROYALEFLEET_START_FRESH", "") not in ("", "0"),
                   help="start the run over when it has checkpoints and none verifies (its metric rows are moved "
                   "to metrics.purged.jsonl); without it such a start is refused [ROYALEFLEET_START_FRESH=1]")
    a = p.parse_args(argv)
    # A test hook, not a user option: resume WITHOUT these components, to show that
    # verify-resume catches a resume that lost state (tests/test_verify_resume.py).
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


if __name__ == "__main__":
    sys.exit(main())
