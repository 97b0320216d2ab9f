"""The boundary between the learner and its algorithms (docs/design.md, "The algorithm boundary").

The learner service (``service.py``) runs the fleet, the rounds, the row and the checkpoint the
same for every algorithm; what differs is declared here, once, and each algorithm implements
it in its own folder (``ppo/``, ``dqn/``, ``alphazero/``), registered by its
``learner.algorithm`` name in ``registry.py``:

* how it acts in a round: ``behaviour`` (what central inference answers the rounds with),
  ``round_hooks`` (extra arrays in a Step, what the next round reports back, the questions a
  rollout asks in the middle of a step: ``round_hooks.RoundHooks``) and ``rollout_search``
  (what a registered rollout is told to search, in its Welcome);
* ``train(collected, context) -> TrainResult``: values, targets and the update over one
  collected rectangle, given only the ``TrainContext`` (model, optimisers, policy, return
  scaler, device, stop flag);
* ``row_keys``: its keys of the metric row, placed at the row's declared anchors (``RowKeys``);
* ``components``: its checkpoint components (``checkpointing.Component``), beside the generic
  ones (weights, optimisers, counters, battle states).

Importing this module builds nothing and imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from services.learner.advantages import Advantages
    from services.learner.checkpoint_types import Component
    from services.learner.collected import Collected
    from services.learner.frame_history import FrameHistory, NoFrameHistory
    from services.learner.lr_backoff import LrBackoff
    from services.learner.returns import ReturnScaler
    from services.learner.round_hooks import RoundHooks
    from shared.config import RunConfig
    from shared.learner_extension import LearnerExtension
    from shared.nn.model import ActorCritic
    from shared.nn.policy import Policy
    from shared.preflight import Preflight
    from shared.search.spec import RolloutSearch

from shared.service_main import Say


@dataclass
class UpdateResult:
    """What an algorithm's update did."""

    n_train: int
    """Rows trained on: the trainable cells, or 0 when the NaN guard tripped (no update ran)."""
    stats: dict = field(default_factory=dict)
    """The update's own row keys (``ppo/``, ``dqn/``, ``az/``); empty when nothing was trained."""
    seconds: float = 0.0


@dataclass(frozen=True)
class AlgorithmParts:
    """What a registered algorithm is built from (``registry.build_algorithm``), before any
    socket is bound: the config, the preflight, the actor-critic and its device, the live
    actor's inference."""

    cfg: RunConfig
    pf: Preflight
    model: ActorCritic
    device: torch.device
    policy: Policy
    say: Say


@dataclass(frozen=True)
class TrainContext:
    """What an algorithm's ``train`` may use: built by the service for each update."""

    cfg: RunConfig
    model: ActorCritic
    opt_actor: torch.optim.Optimizer
    opt_critic: torch.optim.Optimizer
    policy: Policy
    """The live actor's inference (its ``fetcher`` packs the update's rows)."""
    return_scaler: ReturnScaler
    lr_backoff: LrBackoff
    frame_history: FrameHistory | NoFrameHistory
    extensions: tuple[LearnerExtension, ...]
    n_actions: int
    device: torch.device
    env_steps: int
    """The run's env steps before this iteration's (the extensions' LR schedule reads them)."""
    stopping: Callable[[], bool]
    """True once a stop is requested: the update abandons itself at its next minibatch
    (raising ``stops.StopRequested``)."""


@dataclass
class TrainResult:
    """``train``'s answer: the value pass's advantages (the row's health and choice keys read
    them; an algorithm without a value pass gives zeros with the trainable cells) and the
    update's result."""

    advantages: Advantages
    update: UpdateResult
    row: dict = field(default_factory=dict)
    """Row keys the training found that its ``row_keys`` places (AlphaZero's search counts,
    DQN's behaviour), read before anything else moves them."""


@dataclass(frozen=True)
class RowKeys:
    """An algorithm's keys of the metric row, each group placed at its anchor in the row the
    service assembles (``row.assemble_row``), so a row's key order is a fact of the row, never
    of which algorithm was added first."""

    after_schedule: dict = field(default_factory=dict)
    """After the run's counters and times (PPO: the scheduled entropy coefficients)."""
    after_choice: dict = field(default_factory=dict)
    """After the play and choice keys (PPO: the return scale and the learning rates)."""
    after_update: dict = field(default_factory=dict)
    """After the precision keys: the update's own keys."""
    after_frozen: dict = field(default_factory=dict)
    """After the frozen seats' keys (PPO: the policy lag)."""
    end: dict = field(default_factory=dict)
    """Last, before the publishing keys (AlphaZero: the search; DQN: the behaviour)."""


class Algorithm(Protocol):
    """One learner algorithm (module docstring). Implementations: ``ppo.learner.PpoAlgorithm``,
    ``dqn.learner.DqnAlgorithm``, ``alphazero.learner.AlphaZeroAlgorithm``."""

    @property
    def name(self) -> str:
        """Its ``learner.algorithm`` value."""
        ...

    @property
    def extension_hooks(self) -> frozenset[str]:
        """The ``shared.learner_extension.LearnerExtension`` hooks it honours
        (``extension_hooks.HOOKS``): an extension section that overrides another is refused
        at start, naming the hook."""
        ...

    @property
    def round_hooks(self) -> RoundHooks | None:
        """Its part in the rounds (``round_hooks.RoundHooks``), None when it only answers rows."""
        ...

    @property
    def components(self) -> tuple[Component, ...]:
        """Its checkpoint components, saved after the generic ones' state files
        (``checkpointing.components_of``)."""
        ...

    def rollout_search(self) -> RolloutSearch | None:
        """What a registered rollout is told to search (``Welcome.search``); None: nothing."""
        ...

    def behaviour(self, iteration: int, policy: Policy, reward_divisor: float) -> Any:
        """What central inference answers ``iteration``'s rounds with (``policy``: the live
        actor; ``reward_divisor``: the return scaler's, for the search's leaves). An object
        with ``act(rows, n_legal, uniforms, *, history=None)`` and ``model``."""
        ...

    def train(self, collected: Collected, context: TrainContext) -> TrainResult:
        """Steps 3-5 over ``collected``. Raises StopRequested when ``context.stopping()``
        turns true mid-update (the weights are then mid-update: nothing captures them)."""
        ...

    def row_keys(self, collected: Collected, result: TrainResult, context: TrainContext) -> RowKeys:
        """Its keys of the iteration's metric row (every one in ``shared/metric_schema.py``)."""
        ...
