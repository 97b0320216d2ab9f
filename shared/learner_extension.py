"""What an extension section may do inside the PPO learner: the hooks of ``LearnerExtension``.

An extension section (shared/extensions.py: an entry point of the group
``royalefleet.extensions`` naming a msgspec ``Struct``) reaches into the learner when its
``Struct`` class defines::

    def learner_extension(self) -> LearnerExtension: ...

The learner (``services/learner/extension_hooks.py``) builds one object per such section of the
run's config, in the sections' sorted order, once at start, and calls its hooks:

* ``fresh_start(ctx)`` once, on a run with no checkpoint, before the first iteration, with the
  freshly initialised model: set starting weights here (``ctx.model.actor`` / ``.critic``).
  ``resumed(ctx)`` instead when the run resumes a checkpoint (whose weights are the run's).
* ``actor_lr_multiplier(iteration, env_steps)`` before each update: the actor's learning rate
  is multiplied by the product of every extension's value for that update (0 holds the actor's
  weights still; Adam's moments still see the gradients). ``iteration`` is the one being trained
  (1 for the first), ``env_steps`` the run's total before it.
* ``actor_loss(terms)`` for each minibatch that has choice rows: a scalar added to the loss
  that is minimised, and per-key SUMS over the minibatch's choice rows; the row carries each
  key as its mean over every choice row forwarded in the update (all epochs).
* ``end_update(stats)`` after the update, given the update's ``ppo/...`` stats with the
  extension's own means: the metric values for the row (and the place to adapt a coefficient).
* ``state()`` / ``load_state(state)``: JSON-able state a checkpoint keeps (``update_state``).
* ``metric_keys``: the row keys it writes, each (unit, meaning); keys of a user's package start
  with ``ext/`` and are exported on ``/metrics`` as ``royalefleet_learner_ext{key="..."}``.
* ``alarms``: ``shared.alarms.Alarm`` rows evaluated on every metric row after the table's
  (thresholds as numbers; a missing key means not evaluated).

With no extension section the learner calls nothing here and trains exactly as without this
module (the same run ids, the same metric rows). The warm start (``warm_start``) and the KL
anchor (``imitation``) are built on these hooks (``services/learner/extensions/``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

if TYPE_CHECKING:  # annotations only: importing this module imports no torch
    import torch

    from shared.alarms import Alarm
    from shared.config import RunConfig


@dataclass(frozen=True)
class StartContext:
    """What ``fresh_start`` and ``resumed`` are given."""

    cfg: RunConfig
    model: Any
    """The learner's ``shared.nn.model.ActorCritic`` (``.actor``, ``.critic``), on ``device``."""
    device: Any
    run_dir: str
    """``<runs_dir>/<run_name>``: the run's folder (its snapshot store is ``snapshots/``)."""
    spec: Any
    """The observation spec (``shared.nn.snapshot.actor_builder(spec, cfg.net)`` builds an actor)."""
    codec: Any
    """The row codec (``codec.unpack(rows)`` -> arrays of a packed observation batch)."""
    identity: Any
    """The run's ``shared.identity.RunIdentity`` (``arch_digest``, ``obs_digest``, ...)."""
    say: Callable[[str], object]


@dataclass(frozen=True)
class ActorTerms:
    """One minibatch's choice rows (C of them, A actions), as the PPO actor loss sees them."""

    obs: dict[str, torch.Tensor]
    """The rows' observation batch on the device (``spatial``, ``vector``, ``mask``)."""
    logits: torch.Tensor
    """(C, A) float32: the actor's logits, before masking."""
    log_probs: torch.Tensor
    """(C, A) float32: log pi(a | s), the softmax over the legal actions; illegal entries hold
    float32's minimum (finite, zero gradient): never exponentiate-and-sum them without ``mask``."""
    mask: torch.Tensor
    """(C, A) bool: the legal actions (the no-op always)."""
    batch_rows: int
    """Rows of the optimizer batch, forced rows included: PPO divides every sum by it, so a
    term written as ``coef * per_row.sum() / batch_rows`` weighs each row as PPO's terms do."""
    iteration: int
    epoch: int


class ActorLoss(NamedTuple):
    """An extension's actor-loss term for one minibatch."""

    loss: torch.Tensor
    """Scalar, added to the loss the update minimises (so its gradient reaches the actor)."""
    sums: dict[str, float]
    """Per metric key, the SUM over the minibatch's C choice rows (floats or 0-d tensors)."""


class LearnerExtension:
    """The hooks; each default does nothing, so a subclass overrides what it needs (module docstring)."""

    metric_keys: dict[str, tuple[str, str]] = {}
    alarms: tuple[Alarm, ...] = ()

    def fresh_start(self, ctx: StartContext) -> None:
        """A run without a checkpoint, before its first iteration: ``ctx.model`` is the fresh model."""

    def resumed(self, ctx: StartContext) -> None:
        """A run that resumed a checkpoint: the model holds the checkpoint's weights."""

    def actor_lr_multiplier(self, iteration: int, env_steps: int) -> float:
        """The actor's learning-rate multiplier for ``iteration``'s update (finite, >= 0)."""
        return 1.0

    def actor_loss(self, terms: ActorTerms) -> ActorLoss | None:
        """An extra actor-loss term for this minibatch, or None."""
        return None

    def end_update(self, stats: dict[str, float]) -> dict[str, float]:
        """Row values after an update that trained (``stats``: the update's metrics)."""
        return {}

    def state(self) -> dict:
        """JSON-able state kept in the checkpoint."""
        return {}

    def load_state(self, state: dict) -> None:
        """The state ``state()`` returned, from a checkpoint."""


class ExtensionRefused(Exception):
    """A hook's refusal to start (a snapshot that does not verify, say): the learner exits with
    the text, which names what was refused and the fix."""
