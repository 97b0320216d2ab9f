"""The learner's start-up wiring: what ``Learner.__init__`` builds from the config, in order,
before a socket is bound where a refusal must leave nothing behind (docs/iteration.md).

* ``build_model``: the device and the determinism tier, the preflight (codec table, engine
  build), the run identity and run id, the actor-critic with its optimizers (on CUDA the
  update's memory checked first), the inference policy, the DQN stages when asked, the return
  scaler and the LR backoff;
* ``connect``: ``/metrics`` and the alarms, the rollouts' ROUTER socket, the ladder and
  checkpoint clients (behind a lock under ``rollout.overlap``), the pool client, the fleet, the
  frozen pool actors and the authenticated halt endpoint;
* ``build_collector``: the collector that files and answers rounds (Hello limits, wire codec,
  batched inference, frame history, user code, battle states) and the idle meter.

Each sets its parts as the learner's attributes, the names the stage modules read.
"""

from __future__ import annotations

import os

from services.learner.admission import HelloLimits
from services.learner.battle_states import BattleStateBook
from services.learner.determinism import apply_determinism
from services.learner.fleet import Fleet
from services.learner.fleet_idle import IdleMeter
from services.learner.frame_history import make_frame_history
from services.learner.frozen import FrozenActors, checkpoint_fetcher
from services.learner.pool_client import PoolClient
from shared import transport
from shared.identity import action_digest_of, compute_identity, describe_device, run_id
from shared.messages import Decoder, FromCheckpoint, FromLadder, ToLearner
from shared.seeding import stream
from shared.writer_token import checkpoint_token


def build_model(learner, runs_dir: str) -> None:
    """Device, run folder, preflight, identity, model, optimizers, policy (module docstring).
    Raises DeterminismError (a tier the device cannot honour) and DeviceMemoryError (the update
    does not fit the GPU), both before anything is bound."""
    import torch

    from services.learner.lr_backoff import LrBackoff
    from services.learner.ppo import make_optimizers
    from services.learner.returns import ReturnScaler
    from shared.codec import describe_table, table_digest
    from shared.nn.model import ActorCritic
    from shared.nn.policy import Policy
    from shared.preflight import run_preflight

    cfg, say = learner.cfg, learner.say
    device = cfg.net.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    apply_determinism(cfg, device)
    learner.device = torch.device(device)
    learner.run_dir = os.path.join(runs_dir, cfg.run_name)
    os.makedirs(learner.run_dir, exist_ok=True)

    pf = learner.pf = run_preflight(cfg.env, cfg.master_seed, frame_stack=cfg.obs.frame_stack)
    say(f"learner: {describe_table(pf.table)}; {pf.codec.row_bytes} B a row (preflight {pf.seconds:.1f} s); "
        f"wire codec {cfg.services.wire_codec} served to rollouts that speak it")
    say(f"learner: engine {pf.engine.describe()}")
    learner.codec_digest = table_digest(pf.table)
    learner.identity = compute_identity(
        cfg, engine=pf.engine, obs_digest=pf.spec.digest(), action_digest=action_digest_of(pf.spec),
        codec_table_digest=learner.codec_digest, device_kind=describe_device(device),
        torch_version=str(torch.__version__))
    learner.run_id = run_id(learner.identity)
    learner.resumed_with_drift = False
    seed = int(stream(cfg.master_seed, "torch/init").integers(2**62))
    learner.model = ActorCritic(pf.spec, cfg.net, seed=seed).to(learner.device)
    learner.opt_actor, learner.opt_critic = make_optimizers(learner.model, cfg.ppo)
    if learner.device.type == "cuda":  # before any socket is bound: a refusal leaves nothing behind
        from services.learner.vram import check_update_fits

        check_update_fits(learner.model, learner.opt_actor, learner.opt_critic, pf.spec, cfg.ppo,
                          pf.codec.row_bytes, learner.device, say)
    counts = learner.model.parameter_count()
    say(f"learner: actor {counts['actor']:,} parameters, critic {counts['critic']:,}; device {learner.device}, "
        f"{cfg.determinism.torch_threads} threads, tier {cfg.determinism.tier}")
    learner.policy = Policy(learner.model, pf.codec, learner.device)
    learner.dqn = None  # the DQN learner's stages and state (services/learner/dqn/learner.py)
    if cfg.learner.algorithm == "dqn":
        from services.learner.dqn.learner import DqnLearner

        learner.dqn = DqnLearner(learner)
    learner.return_scaler = ReturnScaler(cfg.advantage.reward_clip)
    learner.lr_backoff = LrBackoff(cfg.ppo.lr_backoff)


def connect(learner, *, bind: str, ladder: str, checkpoint: str, metrics_port: int | None, metrics_host: str,
            halt_port: int) -> None:
    """``/metrics``, the alarms, the sockets and clients, the pool client, the fleet, the frozen
    actors and the halt endpoint (module docstring). ``halt_port`` 0 (or no
    ``ROYALEFLEET_HALT_TOKEN``): no halt endpoint."""
    from services.learner.alarms import AlarmMonitor
    from services.learner.metrics import LearnerMetrics
    from shared.nn.snapshot import actor_builder

    cfg, say, pf = learner.cfg, learner.say, learner.pf
    max_bytes = cfg.services.max_message_mb << 20
    learner.metrics = LearnerMetrics(metrics_port, metrics_host, expected_rollouts=learner.min_rollouts)
    learner.alarms = AlarmMonitor(cfg.alarms, learner.metrics.registry, run_dir=learner.run_dir, say=say)
    learner.sock = transport.bind_router(bind, max_bytes=max_bytes, curve=transport.curve_server_keys())
    learner.ladder = transport.Client(ladder, Decoder(FromLadder), name="ladder",
                                      timeout_s=cfg.services.request_timeout_s, curve=transport.curve_client_keys())
    learner.ckpt_token = checkpoint_token()  # shared/writer_token.py: only this run's learner writes
    learner.ckpt = transport.Client(checkpoint, Decoder(FromCheckpoint), name="checkpoint service",
                                    max_bytes=max_bytes, timeout_s=cfg.services.request_timeout_s,
                                    curve=transport.curve_client_keys())
    if cfg.rollout.overlap:  # the collection thread and the main thread share these clients
        from services.learner.overlap import LockedClient

        learner.ladder, learner.ckpt = LockedClient(learner.ladder), LockedClient(learner.ckpt)
    learner.pool = PoolClient(cfg, learner.ladder, learner.ckpt, learner.ckpt_token, learner.run_dir,
                              learner.metrics.ladder_unanswered_plans, say)
    learner.fleet = Fleet()
    # the pool snapshots that hold GROUP_FROZEN seats (services/learner/frozen.py).
    ident = learner.identity
    learner.frozen = FrozenActors(
        cfg.ladder.pool.max_resident_opponents + 2,
        checkpoint_fetcher(learner.ckpt, cfg.run_name, cfg.services.request_timeout_s),
        actor_builder(pf.spec, cfg.net),
        {"arch_digest": ident.arch_digest, "obs_digest": ident.obs_digest,
         "codec_table_digest": ident.codec_table_digest},
        pf.codec, learner.device, say)
    learner.halt_endpoint = None
    token = os.environ.get("ROYALEFLEET_HALT_TOKEN", "")
    if token and halt_port:
        from services.learner.halt import HaltEndpoint

        learner.halt_endpoint = HaltEndpoint(metrics_host, halt_port, token, learner.request_halt,
                                             learner.metrics.halt_requests)
        say(f"learner: halt endpoint on http://{metrics_host}:{learner.halt_endpoint.port}/halt (bearer token)")


def build_collector(learner) -> None:
    """The collector, the frame history, the idle meter and the battle-state book (module
    docstring)."""
    from services.learner.collect import Collector
    from shared.codec import RowDecompressor

    cfg, pf = learner.cfg, learner.pf
    c = learner.collector = Collector(
        learner.sock, Decoder(ToLearner), learner.fleet, learner.welcome, pf.engine, learner.say,
        learner.metrics.refused, HelloLimits.at_start(cfg, pf.codec.row_bytes), wire_codec=cfg.services.wire_codec,
        decompressor=RowDecompressor(pf.codec.row_bytes, cfg.services.max_message_mb << 20))
    c.configure_batching(cfg.determinism.tier, cfg.rollout.inference_max_batch_rows, cfg.rollout.inference_max_wait_ms)
    learner.frame_history = make_frame_history(cfg.obs.frame_stack, pf.codec.row_bytes)  # obs.frame_stack
    c.frame_history = learner.frame_history if cfg.obs.frame_stack > 1 else None
    learner.idle_meter = IdleMeter()  # throughput/rollout_idle_frac
    c.user_code = learner.identity.user_code  # a Hello with other user code is refused
    learner.battle_states = BattleStateBook(pf.engine, learner.say)  # exact battles in the checkpoint
    c.on_states = learner.battle_states.on_message
