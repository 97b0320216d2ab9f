"""The KL anchor (issue 27 item 4): beta x KL(pi || pi_ref) on choice rows added to the actor's
loss, pi_ref a clone snapshot loaded as a frozen pool seat is, beta adapted toward a KL budget.

Config (an extension section)::

    "imitation": {"reference": "snap:<id>", "beta": 0.1, "kl_budget": 0.05}

``kl_budget`` is a number or a schedule over env steps (shared/schedules.py). After each update
that moved the actor, beta doubles when the measured KL is above 1.5 x budget and halves when it
is below budget / 1.5 (the adaptive-KL rule of Schulman et al. 2017, section 4), within
[beta_min, beta_max]; an update that held the actor still (the warm start's hold) leaves beta
as it was. The direction, KL(pi || pi_ref), is argued in docs/design.md ("The KL anchor").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import msgspec

from services.learner.extensions.clone_snapshot import SNAPSHOT_PATTERN, load_clone
from shared.learner_extension import ActorLoss, ActorTerms, LearnerExtension, StartContext
from shared.schedules import Schedule, schedule_problems, value_at

if TYPE_CHECKING:
    import torch

Positive = Annotated[float, msgspec.Meta(gt=0.0)]
BAND = 1.5
"""beta moves when the measured KL leaves [budget / BAND, budget x BAND]."""


class ImitationSection(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """``imitation``: the anchor to a clone snapshot."""

    reference: Annotated[str, msgspec.Meta(pattern=SNAPSHOT_PATTERN)] = ""
    """``snap:<id>``: pi_ref, a clone in this run's snapshot store (verified by its probe rows)."""
    beta: Positive = 0.1
    """The coefficient of the first update."""
    kl_budget: Schedule = 0.05
    """Nats of KL(pi || pi_ref) per choice row beta steers toward; a number or a schedule."""
    adaptive: bool = True
    """False: beta stays at ``beta``."""
    beta_min: Positive = 1e-4
    """The smallest coefficient the adaptive beta moves to."""
    beta_max: Positive = 10.0
    """The largest coefficient the adaptive beta moves to (at least ``beta_min``)."""

    def __post_init__(self):
        problems = schedule_problems("kl_budget", self.kl_budget, low=1e-12)
        if self.beta_min > self.beta_max:
            problems.append(f"beta_min {self.beta_min} is above beta_max {self.beta_max}")
        if problems:
            raise ValueError("; ".join(problems))

    def learner_extension(self) -> LearnerExtension:
        return KlAnchor(self)


def kl_to_reference(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(C,) KL(pi || pi_ref) = sum over legal a of pi(a) (log pi(a) - log pi_ref(a)), in nats.
    ``log_probs``, ``ref_log_probs``: (C, A) float32 masked log-softmaxes; ``mask``: (C, A) bool.
    Finite whenever pi_ref is a softmax (every legal action has mass); its gradient flows
    through ``log_probs`` only."""
    terms = log_probs.exp() * (log_probs - ref_log_probs)
    return terms.masked_fill(~mask, 0.0).sum(dim=-1)


def adapt_beta(beta: float, kl: float, budget: float, beta_min: float, beta_max: float) -> float:
    """The next beta: x2 when ``kl`` > budget x 1.5, / 2 when ``kl`` < budget / 1.5, else the
    same; then bounded to [beta_min, beta_max]."""
    if kl > budget * BAND:
        beta *= 2.0
    elif kl < budget / BAND:
        beta /= 2.0
    return min(beta_max, max(beta_min, beta))


class KlAnchor(LearnerExtension):
    """The hooks of ``ImitationSection`` (module docstring)."""

    metric_keys = {k: ("", "") for k in ("imitation/kl", "imitation/beta", "imitation/beta_next",
                                          "imitation/kl_budget", "imitation/kl_budget_ratio",
                                          "imitation/beta_at_floor")}  # documented in shared/metric_schema.py
    # its alarms, anchor_not_binding and anchor_budget_left, are rows of shared/alarms.py's table

    def __init__(self, section: ImitationSection):
        self.section = section
        self.beta = float(section.beta)
        self.budget = value_at(section.kl_budget, 0)
        self.reference = None

    def fresh_start(self, ctx: StartContext) -> None:
        self._load(ctx)

    def resumed(self, ctx: StartContext) -> None:
        self._load(ctx)

    def _load(self, ctx: StartContext) -> None:
        clone = load_clone(ctx, self.section.reference, "imitation.reference")
        self.reference = clone.actor
        ctx.say(f"learner: KL anchor to snapshot {clone.id} (probe rows verify, largest difference "
                f"{clone.probe_diff:.2g} nats): beta {self.beta:g}, budget {self.budget:g} nats")

    def actor_lr_multiplier(self, iteration: int, env_steps: int) -> float:
        self.budget = value_at(self.section.kl_budget, env_steps)  # called once before each update
        return 1.0

    def actor_loss(self, terms: ActorTerms) -> ActorLoss:
        import torch

        from shared.nn.distribution import MaskedCategorical

        if self.reference is None:
            raise RuntimeError("KlAnchor.actor_loss before fresh_start/resumed loaded the reference")
        with torch.no_grad():
            ref = MaskedCategorical(self.reference(terms.obs), terms.mask, validate=False).log_probs
        kl = kl_to_reference(terms.log_probs, ref, terms.mask)
        return ActorLoss(self.beta * kl.sum() / terms.batch_rows, {"imitation/kl": kl.detach().double().sum()})

    def end_update(self, stats: dict[str, float]) -> dict[str, float]:
        s = self.section
        out = {"imitation/beta": self.beta, "imitation/kl_budget": self.budget}
        kl = stats.get("imitation/kl")
        if kl is not None:
            out["imitation/kl_budget_ratio"] = kl / self.budget
            if s.adaptive and not stats.get("ppo/actor_frozen"):
                self.beta = adapt_beta(self.beta, kl, self.budget, s.beta_min, s.beta_max)
        out["imitation/beta_next"] = self.beta
        out["imitation/beta_at_floor"] = 1.0 if self.beta <= s.beta_min else 0.0
        return out

    def state(self) -> dict:
        return {"beta": self.beta}

    def load_state(self, state: dict) -> None:
        self.beta = float(state["beta"])
