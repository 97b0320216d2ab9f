"""One PPO update over one iteration's trainable cells (clipped PPO, Schulman et al. 2017,
"Proximal Policy Optimization Algorithms"; dual clip from Ye et al. 2020, "Mastering Complex
Control in MOBA Games with Deep Reinforcement Learning").

Reads top to bottom like CleanRL's ``ppo.py``; the differences from it, each one line below:

* Advantages are standardised once per iteration over the CHOICE rows (rows with more than one
  legal action), before any batching.
* Dual clip: for A < 0 the objective is also bounded below by ``ppo.dual_clip_c * A``, so a
  rarely sampled action whose ratio explodes in the 2,305-way space cannot dominate a batch.
* Two entropy bonuses, each with its own coefficient: H over the legal set (``ent_coef``) and
  H2, the binary entropy of p(no-op) vs p(play) (``ent_coef_noop``, a warm-start guard against
  no-op collapse). Both coefficients are schedule values the caller evaluated once for the
  iteration; nothing here reads a schedule.
* Optional PPO2-style value clipping (``ppo.value_clipping``, off by default as in the
  reference): per row max((V - G)^2, (V_old + clip(V - V_old, +-clip_range) - G)^2).
* Forced rows (only the no-op legal; ~90 % of rows) have log-prob exactly 0 and ratio exactly 1
  under every parameter: their objective is the constant A and their actor gradient is zero, so
  they are never forwarded through the actor (saves ~90 % of actor compute). The critic trains
  on every row.
* An epoch is cut into ``max(1, N // batch_size)`` nearly equal batches (none dropped, no short
  remainder); one optimizer step per batch; each minibatch's loss is divided by the BATCH's row
  count, so the gradients accumulated over minibatches equal the full-batch gradient and
  ``minibatch_size`` is a memory knob only.
* Separate actor and critic (disjoint parameters): one summed loss, one backward, two Adams,
  and the grad-norm clip applied to each network on its own.
* Diagnostics (KL, clip fractions, entropies) are means over choice rows: averaged over the
  forced rows' structural zeros a healthy run reads as dead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import torch

from shared.alarms import RATIO_ATOL
from shared.config import PPOConfig
from shared.nn.distribution import NOOP, MaskedCategorical
from shared.nn.model import coarser

if TYPE_CHECKING:
    from shared.learner_extension import LearnerExtension

ADV_EPS = 1e-8
"""Added to the advantage std: a single choice row standardises to 0, not NaN."""


@dataclass
class UpdateData:
    """The N trainable cells of one iteration, flattened, in any fixed order.

    ``fetch(cells)`` takes sorted int64 indices into these N rows and returns the obs batch
    (``spatial``, ``vector``, ``mask`` tensors on the device, rows in the order of ``cells``).
    """

    actions: np.ndarray  # (N,) int64
    old_log_probs: np.ndarray  # (N,) float32, from the rollout-time forward
    advantages: np.ndarray  # (N,) float32, raw GAE
    returns: np.ndarray  # (N,) float32
    old_values: np.ndarray  # (N,) float32, the critic pass that GAE used
    n_legal: np.ndarray  # (N,) int32; choice row = n_legal > 1, forced row = 1
    fetch: Callable[[np.ndarray], dict]
    old_log_prob_precision: str | None = None
    """The precision (``shared.nn.model.PRECISIONS``) of the forwards that computed
    ``old_log_probs``; None: the same as the update's own. The ratio tolerance is the coarser
    of the two's."""

    @classmethod
    def from_batch(cls, batch, fetch: Callable[[np.ndarray], dict], *,
                   old_log_prob_precision: str | None = None) -> "UpdateData":
        """The update's view of a ``shared.batches.PpoBatch``, read by field name (no copy)."""
        return cls(actions=batch.actions, old_log_probs=batch.behavior_log_probs, advantages=batch.advantages,
                   returns=batch.returns, old_values=batch.values, n_legal=batch.n_legal, fetch=fetch,
                   old_log_prob_precision=old_log_prob_precision)


def make_optimizers(model, ppo: PPOConfig) -> tuple[torch.optim.Adam, torch.optim.Adam]:
    """One Adam per network, both at ``ppo.adam_eps`` (1e-8 by default; why: PPOConfig.adam_eps)."""
    opt_actor = torch.optim.Adam(model.actor.parameters(), lr=ppo.lr_actor, eps=ppo.adam_eps)
    opt_critic = torch.optim.Adam(model.critic.parameters(), lr=ppo.lr_critic, eps=ppo.adam_eps)
    return opt_actor, opt_critic


def standardize_advantages(advantages: np.ndarray, choice: np.ndarray) -> np.ndarray:
    """(A - mean) / (std + 1e-8), mean and population std over the choice rows. (N,) float32.

    Forced rows get 0: their objective is a constant whatever A is, and leaving their raw value
    in would put huge numbers in the array when the choice rows' std is ~0."""
    out = np.zeros(advantages.shape, dtype=np.float32)
    if choice.any():
        population = advantages[choice].astype(np.float64)
        out[choice] = (population - population.mean()) / (population.std() + ADV_EPS)
    return out


def clipped_objective(ratio: torch.Tensor, adv: torch.Tensor, clip: float, dual_clip: float) -> torch.Tensor:
    """Per-row PPO objective (to be MAXIMISED), with the dual clip for negative advantages:
    A >= 0: min(r A, clip(r, 1-e, 1+e) A);  A < 0: max(min(r A, clip(r, 1-e, 1+e) A), c A).
    ``dual_clip`` is c (``PPOConfig.dual_clip_c``, > 1)."""
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * adv)
    return torch.where(adv < 0, torch.maximum(surrogate, dual_clip * adv), surrogate)


def value_error(values: torch.Tensor, returns: torch.Tensor, old_values: torch.Tensor,
                clip: float | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-row squared value error as it enters the loss, and (clipping only) where the
    clipped branch binds.

    ``clip`` None: (V - G)^2. Otherwise PPO2's max((V - G)^2, (V_c - G)^2) with
    V_c = V_old + clamp(V - V_old, -clip, clip): a row whose V moved more than ``clip`` from
    the value GAE used, in the direction that lowers its error, gets no gradient."""
    unclipped = (values - returns).pow(2)
    if clip is None:
        return unclipped, None
    clipped = (old_values + (values - old_values).clamp(-clip, clip) - returns).pow(2)
    return torch.maximum(unclipped, clipped), clipped > unclipped


def adam_eps_floor_frac(opt: torch.optim.Optimizer) -> float | None:
    """Share of the parameter elements whose bias-corrected second moment sqrt(v_hat) is
    below the optimizer's eps: on those Adam's step is ~lr * m_hat / eps, plain SGD at lr/eps
    rather than a normalised step. None when the optimizer keeps no ``exp_avg_sq`` (not an
    Adam, or never stepped). (amsgrad's max_exp_avg_sq is not looked at.)"""
    below = total = 0
    for group in opt.param_groups:
        if "eps" not in group or "betas" not in group:
            return None
        beta2, eps = group["betas"][1], group["eps"]
        for p in group["params"]:
            state = opt.state.get(p)
            if not state or "exp_avg_sq" not in state:
                continue
            bias_correction2 = 1.0 - beta2 ** float(state["step"])
            v_hat = state["exp_avg_sq"].double() / bias_correction2
            below += int((v_hat.sqrt() < eps).sum())
            total += v_hat.numel()
    return below / total if total else None


def _distance(params: list[torch.Tensor], before: list[torch.Tensor]) -> float:
    """L2 norm of (after - before) over a whole network, in float64."""
    total = sum(float((p.detach().double() - b.double()).pow(2).sum()) for p, b in zip(params, before))
    return math.sqrt(total)


def explained_variance(predicted: np.ndarray, target: np.ndarray) -> float | None:
    """1 - Var(G - V) / Var(G); None when Var(G) == 0 (undefined, not 0 or 1)."""
    target = target.astype(np.float64)
    var_target = target.var()
    if target.size < 2 or var_target == 0.0:
        return None
    return float(1.0 - (target - predicted.astype(np.float64)).var() / var_target)


def _check_data(data: UpdateData) -> int:
    n = len(data.actions)
    if n == 0:
        raise ValueError("ppo_update got no trainable rows")
    for name in ("old_log_probs", "advantages", "returns", "old_values", "n_legal"):
        if len(getattr(data, name)) != n:
            raise ValueError(f"UpdateData.{name} has {len(getattr(data, name))} rows, actions has {n}")
    forced = data.n_legal <= 1
    bad = forced & ((data.actions != NOOP) | (data.old_log_probs != 0.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{int(bad.sum())} forced rows (n_legal 1) do not hold action 0 with log-prob 0.0; first: "
            f"row {i}, action {int(data.actions[i])}, log-prob {float(data.old_log_probs[i])}"
        )
    return n


def ppo_update(
    model,
    opt_actor: torch.optim.Optimizer,
    opt_critic: torch.optim.Optimizer,
    data: UpdateData,
    ppo: PPOConfig,
    epoch_generator: Callable[[int], np.random.Generator],
    device,
    *,
    ent_coef: float,
    ent_coef_noop: float,
    extensions: Sequence[LearnerExtension] = (),
    iteration: int = 0,
) -> dict[str, float]:
    """Train ``model.actor`` and ``model.critic`` on one iteration's rows for ``ppo.n_epochs``.

    Loss of a batch of n rows (C = its choice rows; every sum below is divided by n, all rows):
        policy  = -(1/n) sum_C clipped_objective(r, A, c)     r = exp(logp_new - logp_old), c = dual_clip_c
        entropy = -ent_coef (1/n) sum_C H(pi)                 H over the legal set
        noop    = -ent_coef_noop (1/n) sum_C H2(pi)           H2 = binary entropy of p(no-op) vs p(play)
        value   = vf_coef (1/n) sum_all (V - G)^2             or value_error's clipped form

    ``ent_coef`` and ``ent_coef_noop`` are REQUIRED: the caller evaluates the schedules once per
    iteration (``evaluate_schedules``) and passes the numbers, so the row reports what was used.
    A forced row's H and H2 are exactly 0 with zero gradient, so skipping them changes nothing.

    ``epoch_generator(e)`` gives epoch e's permutation stream
    (``ppo/minibatch/iteration/{i}/epoch/{e}``). Returns a flat dict of ``ppo/...`` metrics;
    actor metrics are absent (not 0) when there is no choice row.

    Metric units: ``ppo/value_loss`` is the mean per-row value error as it enters the loss
    (before ``vf_coef``; with value clipping the larger of the two branches) over every row
    forwarded, all epochs; ``ppo/value_clip_fraction`` (value clipping only) is the share of
    those rows where the clipped branch was the larger; ``ppo/policy_loss`` is the mean over
    optimizer steps of the policy term exactly as it enters the loss (so divided by all n
    rows); ``ppo/kl``/``ppo/clip_fraction`` are the LAST epoch's (per-epoch values in
    ``..._epoch{e}``), measured in each batch's forward, before its step; entropy, noop
    entropy and dual-clip fraction are means over every choice row forwarded, and so is
    ``ppo/entropy_normalised`` (H / ln max(n_legal, 2): 1 is uniform over the row's legal set
    whatever its size). ``ppo/explained_variance`` compares ``old_values`` (the critic pass GAE
    used) with the returns, as CleanRL does.

    ``ppo/ratio_max_abs_dev`` is max |r - 1| over the choice rows forwarded before the first
    optimizer step (the first minibatch of epoch 0 and the rest of its batch, which accumulate
    gradients under unchanged weights): anything but ~0 means the update's forward computes a
    different function from the rollout's.

    ``ppo/ratio_atol`` is the ratio tolerance of the precision the comparison ran in
    (``shared.alarms.RATIO_ATOL`` of the coarser of ``data.old_log_prob_precision`` and the
    precision the update's first actor forward ran in, ``model.last_precision["actor"]``):
    ``ratio_invariant`` halts when ``ppo/ratio_max_abs_dev`` exceeds a multiple of it. Both keys
    are present exactly when there is a choice row.

    ``extensions`` (shared/learner_extension.py): each one's ``actor_loss`` is added to the loss
    of every minibatch with choice rows (``iteration`` is passed on to it); its metric sums are
    reported as means over every choice row forwarded. None: the loss above, unchanged.

    ``ppo/update_magnitude_actor`` / ``_critic``: L2 norm of (theta_after - theta_before) over
    each network's parameters across the whole update. ``ppo/adam_eps_floor_frac_actor`` /
    ``_critic``: share of the network's parameter elements whose Adam sqrt(v_hat) is below eps
    after the update (absent for a non-Adam optimizer or one that has never stepped).
    """
    for name, coef in (("ent_coef", ent_coef), ("ent_coef_noop", ent_coef_noop)):
        if not (math.isfinite(coef) and coef >= 0.0):
            raise ValueError(f"ppo_update: {name} must be a finite number >= 0, got {coef!r}")
    n_rows = _check_data(data)
    choice = data.n_legal > 1
    n_batches = max(1, n_rows // ppo.batch_size)

    # Standardise once per iteration, over the rows the actor trains on.
    advantages = standardize_advantages(data.advantages, choice)
    rows = _RowTensors.on_device(data, advantages, device)
    actor_params = [p for p in model.actor.parameters()]
    critic_params = [p for p in model.critic.parameters()]
    actor_before = [p.detach().clone() for p in actor_params]
    critic_before = [p.detach().clone() for p in critic_params]

    steps = _UpdateSteps(model, opt_actor, opt_critic, data, rows, choice, ppo, device, ent_coef=ent_coef,
                         ent_coef_noop=ent_coef_noop, extensions=extensions, iteration=iteration)
    for epoch in range(ppo.n_epochs):
        permutation = epoch_generator(epoch).permutation(n_rows)
        for batch in np.array_split(permutation, n_batches):
            steps.train_batch(batch, epoch)
    metrics = steps.metrics()
    metrics["ppo/update_magnitude_actor"] = _distance(actor_params, actor_before)
    metrics["ppo/update_magnitude_critic"] = _distance(critic_params, critic_before)
    return _with_optional_metrics(metrics, steps, opt_actor, opt_critic)


@dataclass
class _RowTensors:
    """The update's per-row arrays on the device, indexed by row number (``UpdateData`` order)."""

    actions: torch.Tensor  # (N,) int64
    old_log_probs: torch.Tensor  # (N,) float32
    advantages: torch.Tensor  # (N,) float32, standardised (standardize_advantages)
    returns: torch.Tensor  # (N,) float32
    old_values: torch.Tensor  # (N,) float32
    log_n_legal: torch.Tensor  # (N,) float32, ln max(n_legal, 2): the entropy of a uniform legal choice

    @classmethod
    def on_device(cls, data: UpdateData, advantages: np.ndarray, device) -> "_RowTensors":
        def on_device(array, dtype):
            return torch.as_tensor(np.ascontiguousarray(array), dtype=dtype, device=device)

        return cls(actions=on_device(data.actions, torch.int64),
                   old_log_probs=on_device(data.old_log_probs, torch.float32),
                   advantages=on_device(advantages, torch.float32),
                   returns=on_device(data.returns, torch.float32),
                   old_values=on_device(data.old_values, torch.float32),
                   log_n_legal=on_device(np.log(np.maximum(data.n_legal, 2)), torch.float32))


class _UpdateSteps:
    """ppo_update's optimizer steps: each batch's minibatches forwarded (critic on every row,
    actor on the choice rows), their summed loss backpropagated, each network's gradient clipped
    and stepped; and the metric sums kept as it goes, as float64 device scalars read once at the
    end (``metrics``). The loss and every sum are ppo_update's docstring's, in the same order."""

    def __init__(self, model, opt_actor: torch.optim.Optimizer, opt_critic: torch.optim.Optimizer,
                 data: UpdateData, rows: _RowTensors, choice: np.ndarray, ppo: PPOConfig, device, *,
                 ent_coef: float, ent_coef_noop: float, extensions: Sequence[LearnerExtension], iteration: int):
        self.model, self.opt_actor, self.opt_critic, self.data, self.rows = model, opt_actor, opt_critic, data, rows
        self.choice, self.ppo, self.device = choice, ppo, device
        self.ent_coef, self.ent_coef_noop, self.extensions, self.iteration = ent_coef, ent_coef_noop, extensions, iteration
        self.value_clip = ppo.clip_range if ppo.value_clipping else None
        self.n_choice = int(choice.sum())
        zero = self.zero
        self.kl_sum = [zero() for _ in range(ppo.n_epochs)]
        self.clipped_sum = [zero() for _ in range(ppo.n_epochs)]
        self.choice_seen = [0] * ppo.n_epochs
        self.dual_sum, self.entropy_sum, self.noop_entropy_sum, self.sq_err_sum = zero(), zero(), zero(), zero()
        self.entropy_norm_sum, self.value_clipped_sum = zero(), zero()
        self.ratio_dev = zero()
        self.update_precision: str | None = None
        self.policy_losses: list[torch.Tensor] = []
        self.grad_norms_actor: list[torch.Tensor] = []
        self.grad_norms_critic: list[torch.Tensor] = []
        self.actor_steps = self.critic_steps = 0
        self.extension_sums: dict[str, torch.Tensor | float] = {}

    def zero(self) -> torch.Tensor:
        return torch.zeros((), dtype=torch.float64, device=self.device)

    def train_batch(self, batch: np.ndarray, epoch: int) -> None:
        """One optimizer step per network on ``batch`` (row numbers), the actor's only when the
        batch has a choice row."""
        ppo, model = self.ppo, self.model
        batch_rows = len(batch)  # every loss sum below is divided by this, never by a minibatch's size
        self.opt_actor.zero_grad(set_to_none=True)
        self.opt_critic.zero_grad(set_to_none=True)
        batch_policy_loss = self.zero()
        batch_has_choice = False

        for start in range(0, batch_rows, ppo.minibatch_size):
            cells = np.sort(batch[start : start + ppo.minibatch_size])
            loss, has_choice = self._minibatch_loss(cells, batch_rows, epoch, batch_policy_loss)
            batch_has_choice = batch_has_choice or has_choice
            loss.backward()  # accumulates: the batch's gradient is the sum over its minibatches

        # Clip each network's gradient norm on its own; the returned norm is pre-clip.
        self.grad_norms_critic.append(torch.nn.utils.clip_grad_norm_(model.critic.parameters(), ppo.max_grad_norm))
        self.opt_critic.step()
        self.critic_steps += 1
        if batch_has_choice:
            self.grad_norms_actor.append(torch.nn.utils.clip_grad_norm_(model.actor.parameters(), ppo.max_grad_norm))
            self.opt_actor.step()
            self.actor_steps += 1
            self.policy_losses.append(batch_policy_loss)

    def _minibatch_loss(self, cells: np.ndarray, batch_rows: int, epoch: int,
                        batch_policy_loss: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """The loss of the minibatch of sorted row numbers ``cells`` (divided by ``batch_rows``),
        and whether it has a choice row. Adds its policy term to ``batch_policy_loss`` in place."""
        ppo, model, t = self.ppo, self.model, self.rows
        obs = self.data.fetch(cells)
        idx = torch.as_tensor(cells, device=self.device)

        # Critic: every row, forced ones included.
        values = model.value(obs)
        sq_err, value_clipped = value_error(values, t.returns[idx], t.old_values[idx], self.value_clip)
        loss = ppo.vf_coef * sq_err.sum() / batch_rows
        self.sq_err_sum += sq_err.detach().sum()
        if value_clipped is not None:
            self.value_clipped_sum += value_clipped.sum()

        # Actor: choice rows only (a forced row's ratio is exactly 1 and its gradient 0).
        rows = np.flatnonzero(self.choice[cells])
        if not rows.size:
            return loss, False
        rows_t = torch.as_tensor(rows, device=self.device)
        actor_obs = {key: tensor[rows_t] for key, tensor in obs.items()}
        chosen = idx[rows_t]
        logits = model.actor_logits(actor_obs)
        dist = MaskedCategorical(logits, actor_obs["mask"])
        if self.update_precision is None:
            self.update_precision = getattr(model, "last_precision", {}).get("actor", "fp32")
        log_ratio = dist.log_prob(t.actions[chosen]) - t.old_log_probs[chosen]
        ratio = log_ratio.exp()
        adv = t.advantages[chosen]
        objective = clipped_objective(ratio, adv, ppo.clip_range, ppo.dual_clip_c)
        entropy = dist.entropy()
        noop_entropy = dist.noop_entropy()
        policy_loss = -objective.sum() / batch_rows
        entropy_loss = -(self.ent_coef * entropy.sum() + self.ent_coef_noop * noop_entropy.sum()) / batch_rows
        loss = loss + policy_loss + entropy_loss
        if self.extensions:
            extra = _extension_loss(self.extensions, actor_obs, logits, dist, batch_rows, self.iteration, epoch,
                                    self.extension_sums)
            if extra is not None:
                loss = loss + extra

        with torch.no_grad():
            surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - ppo.clip_range, 1 + ppo.clip_range) * adv)
            self.kl_sum[epoch] += ((ratio - 1.0) - log_ratio).sum()  # Schulman's k3, >= 0
            self.clipped_sum[epoch] += ((ratio - 1.0).abs() > ppo.clip_range).sum()
            self.dual_sum += ((adv < 0) & (surrogate < ppo.dual_clip_c * adv)).sum()
            self.entropy_sum += entropy.sum()
            self.entropy_norm_sum += (entropy / t.log_n_legal[chosen]).sum()
            self.noop_entropy_sum += noop_entropy.sum()
            batch_policy_loss += policy_loss.detach()
            self.choice_seen[epoch] += rows.size
            if self.actor_steps == 0:  # weights still those the rollout sampled with
                self.ratio_dev = torch.maximum(self.ratio_dev, (ratio - 1.0).abs().max().double())
        return loss, True

    def metrics(self) -> dict[str, float]:
        """The metrics every update reports (ppo_update's docstring), before the update magnitudes."""
        n_rows, n_epochs, n_choice = len(self.data.actions), self.ppo.n_epochs, self.n_choice
        return {
            "ppo/value_loss": float(self.sq_err_sum) / (n_rows * n_epochs),
            "ppo/grad_norm_critic": float(torch.stack(self.grad_norms_critic).double().mean()),
            "ppo/forced_frac": 1.0 - n_choice / n_rows,
            "ppo/choice_rows": float(n_choice),
            "ppo/optimizer_steps": float(self.critic_steps),
            "ppo/actor_optimizer_steps": float(self.actor_steps),
        }


def _with_optional_metrics(metrics: dict[str, float], steps: _UpdateSteps, opt_actor: torch.optim.Optimizer,
                           opt_critic: torch.optim.Optimizer) -> dict[str, float]:
    """``metrics`` with the keys present only sometimes (ppo_update's docstring) added, in the
    order ppo_update has always reported them: value clipping's, Adam's eps floor, the explained
    variance, and the actor's (only when there is a choice row)."""
    ppo, data, choice, n_choice = steps.ppo, steps.data, steps.choice, steps.n_choice
    n_rows = len(data.actions)
    if steps.value_clip is not None:
        metrics["ppo/value_clip_fraction"] = float(steps.value_clipped_sum) / (n_rows * ppo.n_epochs)
    for name, opt in (("actor", opt_actor), ("critic", opt_critic)):
        frac = adam_eps_floor_frac(opt)
        if frac is not None:
            metrics[f"ppo/adam_eps_floor_frac_{name}"] = frac
    ev = explained_variance(data.old_values, data.returns)
    if ev is not None:
        metrics["ppo/explained_variance"] = ev
    if n_choice:
        choice_seen = steps.choice_seen
        for epoch in range(ppo.n_epochs):
            metrics[f"ppo/kl_epoch{epoch}"] = float(steps.kl_sum[epoch]) / choice_seen[epoch]
            metrics[f"ppo/clip_fraction_epoch{epoch}"] = float(steps.clipped_sum[epoch]) / choice_seen[epoch]
        last = ppo.n_epochs - 1
        forwarded = sum(choice_seen)
        actor_precision = steps.update_precision or "fp32"  # set by every actor forward; n_choice > 0 means one ran
        metrics.update({
            "ppo/kl": metrics[f"ppo/kl_epoch{last}"],
            "ppo/clip_fraction": metrics[f"ppo/clip_fraction_epoch{last}"],
            "ppo/dual_clip_fraction": float(steps.dual_sum) / forwarded,
            "ppo/entropy": float(steps.entropy_sum) / forwarded,
            "ppo/entropy_normalised": float(steps.entropy_norm_sum) / forwarded,
            "ppo/noop_entropy": float(steps.noop_entropy_sum) / forwarded,
            "ppo/policy_loss": float(torch.stack(steps.policy_losses).mean()),
            "ppo/grad_norm_actor": float(torch.stack(steps.grad_norms_actor).double().mean()),
            "ppo/ratio_max_abs_dev": float(steps.ratio_dev),
            "ppo/ratio_atol": RATIO_ATOL[coarser(actor_precision, data.old_log_prob_precision or actor_precision)],
        })
        metrics.update({key: float(total) / forwarded for key, total in steps.extension_sums.items()})
        ev_choice = explained_variance(data.old_values[choice], data.returns[choice])
        if ev_choice is not None:
            metrics["ppo/explained_variance_choice"] = ev_choice
    return metrics


def _extension_loss(extensions, actor_obs, logits, dist, batch_rows: int, iteration: int, epoch: int, sums: dict):
    """The extensions' actor-loss terms for one minibatch's choice rows (None when none adds one)."""
    from services.learner.extension_hooks import actor_terms
    from shared.learner_extension import ActorTerms

    terms = ActorTerms(obs=actor_obs, logits=logits, log_probs=dist.log_probs, mask=dist.mask, batch_rows=batch_rows,
                       iteration=iteration, epoch=epoch)
    return actor_terms(extensions, terms, sums)
