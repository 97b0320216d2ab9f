"""The learner's start-up wiring: ``build_parts`` builds every part of ``parts.LearnerParts``
from the config, in order, before a socket is bound where a refusal must leave nothing behind
(docs/iteration.md).

* ``build_model``: the device and the determinism tier, the preflight (codec table, engine
  build), the run identity and run id, the actor-critic with its optimizers (on CUDA the
  update's memory checked first), the inference policy, the algorithm of ``learner.algorithm``
  (``registry.build_algorithm``), the return scaler and the LR backoff;
* ``connect``: ``/metrics`` and the alarms, the rollouts' ROUTER socket, the ladder and
  checkpoint clients (behind a lock under ``rollout.overlap``), the pool client, the fleet, the
  frozen pool actors and the authenticated halt endpoint;
* ``build_collector``: the collector that files and answers rounds (Hello limits, wire codec,
  batched inference, frame history, user code, battle states) and the idle meter.

Each returns its parts as a dict of ``LearnerParts`` field names; ``build_parts`` makes the
one frozen object of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import Any

from services.learner.admission import HelloLimits
from services.learner.battle_states import BattleStateBook
from services.learner.determinism import apply_determinism
from services.learner import extension_hooks
from services.learner.extension_hooks import build_extensions
from services.learner.fleet import Fleet
from services.learner.fleet import IdleMeter
from services.learner.frame_history import make_frame_history
from services.learner.frozen import FrozenActors, checkpoint_fetcher
from services.learner.pool_client import PoolClient
from shared import transport
from shared.identity import action_digest_of, compute_identity, describe_device, run_id
from services.learner.parts import LearnerParts, RunOptions, Say
from services.learner.registry import build_algorithm
from shared.config import RunConfig
from shared.messages import Decoder, FromCheckpoint, FromLadder, ToLearner, Welcome
from shared.preflight import Preflight
from shared.search.spec import RolloutSearch
from shared.run_dir import RunDir
from shared.seeding import stream
from shared.writer_token import Stamped, checkpoint_token, ladder_token


def build_parts(cfg: RunConfig, options: RunOptions, *, runs_dir: str, bind: str, ladder: str, checkpoint: str,
                metrics_port: int | None, metrics_host: str, halt_port: int, on_halt: Callable[[str], None],
                say: Say) -> LearnerParts:
    """Every part of the learner, in order (module docstring). ``on_halt``: what the halt
    endpoint calls with the operator's reason. Raises DeterminismError and DeviceMemoryError
    (``build_model``) before anything is bound."""
    from services.learner.curves import TensorBoardCurves
    from services.learner.viser_status import open_status

    model = build_model(cfg, runs_dir, say)  # refusals (tier, GPU memory) come before any bind
    links = connect(cfg, model, options, bind=bind, ladder=ladder, checkpoint=checkpoint, metrics_port=metrics_port,
                    metrics_host=metrics_host, halt_port=halt_port, on_halt=on_halt, say=say)
    collection = build_collector(cfg, model, links, say)
    run_dir = model["run_dir"]
    return LearnerParts(cfg=cfg, say=say, **model, **links, **collection, metrics_path=str(RunDir(run_dir).metrics),
                        curves=TensorBoardCurves(run_dir, say), viser_status=open_status(options.viser, cfg.run_name, say))


def build_model(cfg: RunConfig, runs_dir: str, say: Say) -> dict[str, Any]:
    """Device, run folder, preflight, identity, model, optimizers, policy (module docstring).
    Raises DeterminismError (a tier the device cannot honour) and DeviceMemoryError (the update
    does not fit the GPU), both before anything is bound."""
    import torch

    from services.learner.algorithm import AlgorithmParts
    from services.learner.lr_backoff import LrBackoff
    from services.learner.ppo.update import make_optimizers
    from services.learner.returns import ReturnScaler
    from shared.codec import describe_table, table_digest
    from shared.nn.model import ActorCritic
    from shared.nn.policy import Policy
    from shared.preflight import run_preflight

    name = cfg.net.device
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    apply_determinism(cfg, name)
    device = torch.device(name)
    run_dir = os.path.join(runs_dir, cfg.run_name)
    os.makedirs(run_dir, exist_ok=True)

    pf = run_preflight(cfg.env, cfg.master_seed, frame_stack=cfg.obs.frame_stack)
    say(f"learner: {describe_table(pf.table)}; {pf.codec.row_bytes} B a row (preflight {pf.seconds:.1f} s); "
        f"wire codec {cfg.services.wire_codec} served to rollouts that speak it")
    say(f"learner: engine {pf.engine.describe()}")
    codec_digest = table_digest(pf.table)
    identity = compute_identity(
        cfg, engine=pf.engine, obs_digest=pf.spec.digest(), action_digest=action_digest_of(pf.spec),
        codec_table_digest=codec_digest, device_kind=describe_device(name), torch_version=str(torch.__version__))
    seed = int(stream(cfg.master_seed, "torch/init").integers(2**62))
    model = ActorCritic(pf.spec, cfg.net, seed=seed).to(device)
    opt_actor, opt_critic = make_optimizers(model, cfg.ppo)
    if device.type == "cuda":  # before any socket is bound: a refusal leaves nothing behind
        from services.learner.vram import check_update_fits

        check_update_fits(model, opt_actor, opt_critic, pf.spec, cfg.ppo, pf.codec.row_bytes, device, say)
    counts = model.parameter_count()
    say(f"learner: actor {counts['actor']:,} parameters, critic {counts['critic']:,}; device {device}, "
        f"{cfg.determinism.torch_threads} threads, tier {cfg.determinism.tier}")
    policy = Policy(model, pf.codec, device)
    algorithm = build_algorithm(AlgorithmParts(cfg, pf, model, device, policy, say))  # services/learner/registry.py
    extensions = build_extensions(cfg.extensions)  # shared/learner_extension.py: the sections' learner hooks
    unhonoured = extension_hooks.unhonoured(extensions, algorithm.extension_hooks)
    if unhonoured:
        raise SystemExit(f"learner: the extension sections {sorted(cfg.extensions)} hook into the PPO update "
                         f"({', '.join(unhonoured)}), which learner.algorithm {cfg.learner.algorithm} does not run: "
                         "remove them or train with ppo")
    return dict(device=device, run_dir=run_dir, pf=pf, codec_digest=codec_digest, identity=identity,
                run_id=run_id(identity), model=model, opt_actor=opt_actor, opt_critic=opt_critic, policy=policy,
                algorithm=algorithm, return_scaler=ReturnScaler(cfg.advantage.reward_clip),
                lr_backoff=LrBackoff(cfg.ppo.lr_backoff), extensions=extensions)


def connect(cfg: RunConfig, model: dict[str, Any], options: RunOptions, *, bind: str, ladder: str, checkpoint: str,
            metrics_port: int | None, metrics_host: str, halt_port: int, on_halt: Callable[[str], None],
            say: Say) -> dict[str, Any]:
    """``/metrics``, the alarms, the sockets and clients, the pool client, the fleet, the frozen
    actors and the halt endpoint (module docstring); ``model``: ``build_model``'s parts.
    ``halt_port`` 0 (or no ``ROYALEFLEET_HALT_TOKEN``): no halt endpoint."""
    from services.learner.alarms import AlarmMonitor
    from services.learner.metrics import LearnerMetrics
    from shared.nn.snapshot import actor_builder

    pf, run_dir = model["pf"], model["run_dir"]
    max_bytes = cfg.services.max_message_mb << 20
    metrics = LearnerMetrics(metrics_port, metrics_host, expected_rollouts=options.min_rollouts)
    alarms = AlarmMonitor(cfg.alarms, metrics.registry, run_dir=run_dir, say=say,
                          extra=tuple(a for ext in model["extensions"] for a in ext.alarms))
    sock = transport.bind_router(bind, max_bytes=max_bytes, curve=transport.curve_server_keys())
    # Its reports, candidates and strength snapshots carry the learner's ladder token (shared/writer_token.py).
    ladder_client: Any = Stamped(transport.Client(ladder, Decoder(FromLadder), name="ladder", max_bytes=max_bytes,
                                                  timeout_s=cfg.services.request_timeout_s,
                                                  curve=transport.curve_client_keys()), ladder_token("learner"))
    ckpt_token = checkpoint_token()  # shared/writer_token.py: only this run's learner writes
    ckpt: Any = transport.Client(checkpoint, Decoder(FromCheckpoint), name="checkpoint service",
                                 max_bytes=max_bytes, timeout_s=cfg.services.request_timeout_s,
                                 curve=transport.curve_client_keys())
    if cfg.rollout.overlap:  # the collection thread and the main thread share these clients
        from services.learner.overlap import LockedClient

        ladder_client, ckpt = LockedClient(ladder_client), LockedClient(ckpt)
    pool = PoolClient(cfg, ladder_client, ckpt, ckpt_token, run_dir, metrics.ladder_unanswered_plans, say)
    # the pool snapshots that hold GROUP_FROZEN seats (services/learner/frozen.py).
    ident = model["identity"]
    frozen = FrozenActors(
        cfg.ladder.pool.max_resident_opponents + 2,
        checkpoint_fetcher(ckpt, cfg.run_name, cfg.services.request_timeout_s),
        actor_builder(pf.spec, cfg.net),
        {"arch_digest": ident.arch_digest, "obs_digest": ident.obs_digest,
         "codec_table_digest": ident.codec_table_digest},
        pf.codec, model["device"], say)
    halt_endpoint = None
    token = os.environ.get("ROYALEFLEET_HALT_TOKEN", "")
    if token and halt_port:
        from services.learner.halt import HaltEndpoint, token_problem
        from shared.service_main import StartRefused

        if token_problem(token):
            raise StartRefused(f"learner: {token_problem(token)}")
        halt_endpoint = HaltEndpoint(metrics_host, halt_port, token, on_halt, metrics.halt_requests)
        say(f"learner: halt endpoint on http://{metrics_host}:{halt_endpoint.port}/halt (bearer token)")
    return dict(metrics=metrics, alarms=alarms, sock=sock, ladder=ladder_client, ckpt=ckpt, ckpt_token=ckpt_token,
                pool=pool, fleet=Fleet(), frozen=frozen, halt_endpoint=halt_endpoint)


def welcome(cfg: RunConfig, pf: Preflight, search: RolloutSearch | None, wire_codec: int) -> Welcome:
    """What a registered rollout is told (the collector sends it); ``search``: what it
    searches (``Algorithm.rollout_search``)."""
    return Welcome(env=cfg.env, master_seed=cfg.master_seed, codec=pf.table, engine=pf.engine,
                   random_legal_noop_prob=cfg.ladder.random_legal_noop_prob, rollout=cfg.rollout,
                   wire_codec=wire_codec, search=search)


def build_collector(cfg: RunConfig, model: dict[str, Any], links: dict[str, Any], say: Say) -> dict[str, Any]:
    """The collector, the frame history, the idle meter and the battle-state book (module
    docstring); ``model`` and ``links``: ``build_model``'s and ``connect``'s parts."""
    from services.learner.rounds import Batching, Collector
    from shared.codec import RowDecompressor

    pf, algorithm = model["pf"], model["algorithm"]
    frame_history = make_frame_history(cfg.obs.frame_stack, pf.codec.row_bytes)  # obs.frame_stack
    battle_states = BattleStateBook(pf.engine, say)  # exact battles in the checkpoint
    c = Collector(
        links["sock"], Decoder(ToLearner), links["fleet"], partial(welcome, cfg, pf, algorithm.rollout_search()),
        pf.engine, say, links["metrics"].refused, HelloLimits.at_start(cfg, pf.codec.row_bytes),
        wire_codec=cfg.services.wire_codec,
        decompressor=RowDecompressor(pf.codec.row_bytes, cfg.services.max_message_mb << 20),
        batching=Batching.of(cfg.determinism.tier, cfg.rollout.inference_max_batch_rows,
                             cfg.rollout.inference_max_wait_ms),
        frame_history=frame_history if cfg.obs.frame_stack > 1 else None,
        user_code=model["identity"].user_code,  # a Hello with other user code is refused
        round_hooks=algorithm.round_hooks,  # the algorithm's part in the rounds (AlphaZero's search)
        on_states=battle_states.on_message)
    return dict(collector=c, frame_history=frame_history, idle_meter=IdleMeter(),  # throughput/rollout_idle_frac
                battle_states=battle_states)
