"""A ``Learner`` for unit tests of the stage modules, without a socket: its declared
``LearnerParts`` built by ``startup.build_model`` (the real model, preflight and identity of
the tiny profile) and, where ``startup.connect`` would bind or connect, stand-ins that answer
in process (``FakeCheckpoint``, ``FakeLadder``; the collector's ``send`` and ``poll`` are
replaced by the test)."""

from __future__ import annotations

import dataclasses
import os

from services.learner import startup
from services.learner.alarms import AlarmMonitor
from services.learner.battle_states import BattleStateBook
from services.learner.rounds import Collector
from services.learner.curves import TensorBoardCurves
from services.learner.fleet import Fleet
from services.learner.fleet import IdleMeter
from services.learner.frame_history import make_frame_history
from services.learner.frozen import FrozenActors
from services.learner.metrics import LearnerMetrics
from services.learner.parts import IterationState, LearnerParts, RunOptions
from services.learner.pool_client import PoolClient
from services.learner.service import Learner
from shared import transport
from shared.config import RunConfig, dump_config, load_config
from shared.messages import Saved
from shared.nn.snapshot import actor_builder
from shared.run_dir import RunDir


class FakeCheckpoint:
    """The checkpoint service's client: every save is taken (``saved``: iteration -> file
    names), or refused with a timeout when ``down``."""

    def __init__(self):
        self.saved: dict[int, list[str]] = {}
        self.down = False
        self._id = 0

    def next_id(self) -> int:
        self._id += 1
        return self._id

    def request(self, req, arrays=None, timeout_s=None):
        if self.down:
            raise transport.ServiceTimeout("checkpoint service down (test)")
        self.saved[req.iteration] = list(req.names)
        return Saved(request_id=req.request_id, path=f"checkpoints/{req.iteration:08d}", bytes_written=1), {}

    def close(self) -> None:
        pass


class FakeSocket:
    """The rollouts' ROUTER socket where nothing is sent on it (the collector's ``send`` and
    ``poll`` are the test's): only closed."""

    closed = False

    def close(self, linger=None) -> None:
        self.closed = True


class FakeLadder(FakeCheckpoint):
    """A ladder that never answers (its status keys stay out of the row)."""

    def request(self, req, arrays=None, timeout_s=None):
        raise transport.ServiceTimeout("no ladder in this test")


_MODELS: dict[bytes, dict] = {}


def _model(cfg: RunConfig, runs_dir: str) -> dict:
    """``startup.build_model``'s parts, built once a config (the preflight builds a battle);
    the run folder is ``runs_dir``'s."""
    key = dump_config(cfg)
    if key not in _MODELS:
        _MODELS[key] = startup.build_model(cfg, runs_dir, lambda text: None)
    run_dir = os.path.join(runs_dir, cfg.run_name)
    os.makedirs(run_dir, exist_ok=True)
    return _MODELS[key] | {"run_dir": run_dir}


def tiny_config(**overrides) -> RunConfig:
    """The tiny profile in the throughput tier (run_exact refuses a process whose BLAS threads
    were not pinned before numpy loaded, as a test process's are not)."""
    return load_config({"profile": "tiny", "run_name": "unit", "determinism": {"tier": "throughput"}, **overrides})


def build_learner(runs_dir: str, cfg: RunConfig | None = None, *, say=None, options: RunOptions | None = None,
                  **replace) -> Learner:
    """A Learner over ``runs_dir`` whose parts are real but for the sockets; ``replace`` swaps
    parts (``dataclasses.replace``). Said lines go to ``say`` (default: dropped)."""
    cfg = cfg or tiny_config()
    say = say or (lambda text: None)
    model = _model(cfg, runs_dir)
    pf, run_dir = model["pf"], model["run_dir"]
    metrics = LearnerMetrics(None)
    ladder, ckpt = FakeLadder(), FakeCheckpoint()
    fleet = Fleet()
    collector = Collector(None, None, fleet, lambda codec: startup.welcome(cfg, pf, None, codec), pf.engine, say,
                          round_hooks=model["algorithm"].round_hooks)
    ident = model["identity"]
    parts = LearnerParts(
        cfg=cfg, say=say, **model, metrics=metrics,
        alarms=AlarmMonitor(cfg.alarms, metrics.registry, run_dir=run_dir, say=say), sock=FakeSocket(), ladder=ladder,
        ckpt=ckpt, ckpt_token="t", pool=PoolClient(cfg, ladder, ckpt, "t", run_dir, metrics.ladder_unanswered_plans, say),
        fleet=fleet,
        frozen=FrozenActors(2, lambda sid: (_ for _ in ()).throw(KeyError(sid)), actor_builder(pf.spec, cfg.net),
                            {"arch_digest": ident.arch_digest, "obs_digest": ident.obs_digest,
                             "codec_table_digest": ident.codec_table_digest}, pf.codec, model["device"], say),
        halt_endpoint=None, collector=collector, frame_history=make_frame_history(1, pf.codec.row_bytes),
        idle_meter=IdleMeter(), battle_states=BattleStateBook(pf.engine, say),
        metrics_path=str(RunDir(run_dir).metrics), curves=TensorBoardCurves(run_dir, say))
    learner = Learner.__new__(Learner)  # __init__ would bind; the parts above stand in for startup.connect's
    learner.parts = dataclasses.replace(parts, **replace)
    learner.state = IterationState()
    learner.options = options or RunOptions()
    return learner
