"""The learner's state, declared: what a ``Learner`` holds, in three typed objects.

* ``LearnerParts`` (frozen): everything ``startup.build_parts`` builds once from the config,
  in that one place: the device, the preflight, the identity, the model and its optimizers,
  the sockets and clients, the fleet, the collector. A part never changes identity during a
  run; its own state (weights, counters inside a client) may.
* ``IterationState`` (mutable): the counters a checkpoint holds and what the loop tracks
  between iterations (the last snapshot, the saves, an overlapped collection, a halt).
* ``RunOptions`` (frozen): how this process was asked to run (the command line's totals and
  switches).

A stage function takes the narrow arguments it uses, or these objects (``parts, state`` and,
where it needs them, ``options``); only ``service.py`` holds the ``Learner`` whose they are.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: importing this module builds nothing and imports no torch
    import torch
    import zmq

    from services.learner.alarms import AlarmMonitor
    from services.learner.battle_states import BattleStateBook
    from services.learner.checkpoint_types import Snapshot
    from services.learner.rounds import Collector
    from services.learner.curves import TensorBoardCurves
    from services.learner.algorithm import Algorithm
    from services.learner.fleet import Fleet
    from services.learner.fleet import IdleMeter
    from services.learner.frame_history import FrameHistory, NoFrameHistory
    from services.learner.frozen import FrozenActors
    from services.learner.halt import HaltEndpoint
    from services.learner.lr_backoff import LrBackoff
    from services.learner.metrics import LearnerMetrics
    from services.learner.overlap import InlineCollection, LockedClient, OverlappedCollection
    from services.learner.pool_client import PoolClient
    from services.learner.returns import ReturnScaler
    from shared import transport
    from shared.config import RunConfig
    from shared.identity import RunIdentity
    from shared.nn.model import ActorCritic
    from shared.nn.policy import Policy
    from shared.learner_extension import LearnerExtension
    from shared.preflight import Preflight
    from services.learner.viser_status import ViserStatus

from services.learner.overlap import INLINE  # noqa: E402 - imports nothing of the learner's parts
from shared.service_main import Say  # noqa: E402 - where the learner's lines go: one Say for every service


@dataclass(frozen=True)
class LearnerParts:
    """What the learner is made of, built once by ``startup.build_parts`` (its docstring says
    in which order and why)."""

    cfg: RunConfig
    say: Say
    # ---- the model (startup.build_model)
    device: torch.device
    run_dir: str
    """``<runs_dir>/<run_name>``, created at start."""
    pf: Preflight
    """The preflight: observation spec, engine build, codec table and codec."""
    codec_digest: str
    identity: RunIdentity
    run_id: str
    model: ActorCritic
    opt_actor: torch.optim.Optimizer
    opt_critic: torch.optim.Optimizer
    policy: Policy
    """The live actor's inference (the collection's default behaviour)."""
    algorithm: Algorithm
    """The algorithm of ``learner.algorithm`` (services/learner/registry.py): its behaviour in
    the rounds, its update, its row keys and checkpoint components."""
    return_scaler: ReturnScaler
    lr_backoff: LrBackoff
    # ---- the links (startup.connect)
    metrics: LearnerMetrics
    alarms: AlarmMonitor
    sock: zmq.Socket
    """The ROUTER socket the rollouts connect to."""
    ladder: transport.Client | LockedClient
    ckpt: transport.Client | LockedClient
    ckpt_token: str
    pool: PoolClient
    fleet: Fleet
    frozen: FrozenActors
    halt_endpoint: HaltEndpoint | None
    # ---- the collection (startup.build_collector)
    collector: Collector
    frame_history: FrameHistory | NoFrameHistory
    """The frame stack's history (``obs.frame_stack``; a no-op at 1)."""
    idle_meter: IdleMeter
    battle_states: BattleStateBook
    # ---- the run folder's writers
    metrics_path: str
    curves: TensorBoardCurves
    # ---- the extensions (startup.build_model; services/learner/extension_hooks.py)
    extensions: tuple[LearnerExtension, ...] = ()
    """One object per extension section with learner hooks (shared/learner_extension.py)."""
    viser_status: ViserStatus | None = None
    """RoyaleViser's status channel (``RunOptions.viser``; services/learner/viser_status.py), None when off."""


@dataclass
class IterationState:
    """The learner's mutable state between iterations."""

    iteration: int = 0
    """The last iteration trained (its row published)."""
    timesteps: int = 0
    """Learner rows trained, a total of the run."""
    env_steps: int = 0
    episodes: int = 0
    saved_iteration: int = -1
    """The newest iteration with a checkpoint written (-1: none)."""
    failed_saves: int = 0
    """Checkpoint saves failed in a row (``checkpointing.save_checkpoint``); ``checkpoint.max_failed_saves`` halts."""
    snapshot: Snapshot | None = None
    """The in-memory checkpoint of the state the last row describes."""
    collection: InlineCollection | OverlappedCollection = INLINE
    """Who owns the rollouts' socket for the next collection: the main thread (``INLINE``), or
    the thread collecting it while this iteration trains (``rollout.overlap``)."""
    untrained_rows: int = 0
    """Rows overlapped collections inferred that nothing trained (``overlap.count_untrained``)."""
    halt_reason: str | None = None
    """An operator's halt (``/halt``), once asked."""
    closed: bool = False
    first_iteration: bool = True
    """Before the first boundary (it waits for ``min_rollouts``)."""
    resumed_with_drift: bool = False
    boundary_ordinals: dict[int, int] | None = None
    """While a row's checkpoint is captured: the episode ordinals of its boundary (an overlapped
    collection has moved ``fleet.ordinal`` on)."""


@dataclass(frozen=True)
class RunOptions:
    """How this learner process was asked to run (``main.Settings``: the command line's flags)."""

    iterations_limit: int = 0
    """``--iterations``: the run's total (0 = until stopped)."""
    min_rollouts: int = 1
    allow_identity_drift: bool = False
    clear_halt: bool = False
    start_fresh: bool = False
    perturb_resume: tuple[str, ...] = ()
    """A test hook: checkpoint components a resume does not load."""
    viser: str = ""
    """``--viser``: RoyaleViser's stream address HOST:PORT; the status line goes to PORT + 1 ("": off)."""
    t_start: float = field(default_factory=time.monotonic)
    """``time.monotonic()`` at start (``run/wall_seconds`` runs from it)."""
