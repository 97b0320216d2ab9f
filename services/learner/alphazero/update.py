"""One AlphaZero update over one iteration's ``AlphaZeroBatch`` (services/learner/alphazero/loss.py).

Loss of a batch B of n rows, P its policy rows (``policy_weights`` > 0):

    policy = (1 / max(|P|, 1)) sum_{i in P} w_i CE(pi_i, softmax_L(logits_i))
    value  = vf_coef (1 / n) sum_{i in B} (V(s_i) - z_i)^2

so ``az/policy_loss`` is a mean cross-entropy per searched row whatever the share of forced rows.
Like the PPO update (services/learner/ppo.py): the actor is forwarded on the policy rows only
(a value-only row has no policy gradient), an epoch is ``max(1, n // ppo.batch_size)`` nearly
equal batches of a permutation drawn from ``az/minibatch/iteration/{i}/epoch/{e}``, minibatches
of ``ppo.minibatch_size`` accumulate the batch's gradient, and each network's gradient norm is
clipped to ``ppo.max_grad_norm`` before its own Adam steps. The optimisation fields are the
``ppo`` section's (``AlphaZeroConfig``'s docstring).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from services.learner.alphazero.loss import policy_cross_entropy, target_entropy_and_kl, value_error
from services.learner.ppo import explained_variance
from shared.batches import AlphaZeroBatch


def az_update(model, opt_actor: torch.optim.Optimizer, opt_critic: torch.optim.Optimizer, batch: AlphaZeroBatch,
              fetch: Callable[[np.ndarray], dict], ppo, epoch_generator: Callable[[int], np.random.Generator],
              device) -> dict[str, float]:
    """Train ``model.actor`` on the batch's search targets and ``model.critic`` on its value
    targets for ``ppo.n_epochs``. ``fetch(cells)``: the obs dict (``spatial``, ``vector``,
    ``mask`` tensors on ``device``) of sorted record indices. Returns ``az/...`` metrics:
    ``az/policy_loss`` (mean per policy row of w CE over every forward, all epochs; absent
    without a policy row), ``az/value_loss`` (mean (V - z)^2 over every row forwarded),
    ``az/kl_target`` (KL(pi || p) of the first epoch's forwards, before their step),
    ``az/policy_rows``, ``az/optimizer_steps``, ``az/actor_optimizer_steps``, the grad norms
    (pre-clip means) and ``az/explained_variance`` of the first forwards' values. Raises
    ValueError for an empty batch."""
    n = len(batch)
    if n == 0:
        raise ValueError("az_update got no rows")
    policy_rows = batch.policy_weights > 0
    n_batches = max(1, n // ppo.batch_size)
    zero = lambda: torch.zeros((), dtype=torch.float64, device=device)  # noqa: E731
    ce_sum, sq_sum, kl_sum = zero(), zero(), zero()
    ce_rows = kl_rows = 0
    first_values = np.zeros(n, np.float32)
    norms_actor, norms_critic = [], []
    steps = actor_steps = 0
    for epoch in range(ppo.n_epochs):
        for part in np.array_split(epoch_generator(epoch).permutation(n), n_batches):
            opt_actor.zero_grad(set_to_none=True)
            opt_critic.zero_grad(set_to_none=True)
            n_rows, n_policy = len(part), int(policy_rows[part].sum())
            for start in range(0, n_rows, ppo.minibatch_size):
                cells = np.sort(part[start:start + ppo.minibatch_size])
                obs = fetch(cells)
                values = model.value(obs)
                z = torch.as_tensor(batch.value_targets[cells], dtype=torch.float32, device=device)
                sq = value_error(values, z)
                loss = ppo.vf_coef * sq.sum() / n_rows
                sq_sum += sq.detach().double().sum()
                if epoch == 0:
                    first_values[cells] = values.detach().float().cpu().numpy()
                local = np.flatnonzero(policy_rows[cells])
                if local.size:
                    mb = batch.minibatch(cells[local])
                    idx = torch.as_tensor(local, device=device)
                    logits = model.actor_logits({k: t[idx] for k, t in obs.items()})
                    legal = torch.as_tensor(mb.legal, device=device)
                    targets = torch.as_tensor(mb.policy_targets, device=device)
                    ce = policy_cross_entropy(logits, legal, targets, torch.as_tensor(mb.policy_weights, device=device))
                    loss = loss + ce.sum() / n_policy
                    ce_sum += ce.detach().double().sum()
                    ce_rows += local.size
                    if epoch == 0:
                        _, kl = target_entropy_and_kl(logits, legal, targets)
                        kl_sum += kl.double().sum()
                        kl_rows += local.size
                loss.backward()
            norms_critic.append(torch.nn.utils.clip_grad_norm_(model.critic.parameters(), ppo.max_grad_norm))
            opt_critic.step()
            steps += 1
            if n_policy:
                norms_actor.append(torch.nn.utils.clip_grad_norm_(model.actor.parameters(), ppo.max_grad_norm))
                opt_actor.step()
                actor_steps += 1
    out = {"az/value_loss": float(sq_sum) / (n * ppo.n_epochs), "az/policy_rows": float(policy_rows.sum()),
           "az/optimizer_steps": float(steps), "az/actor_optimizer_steps": float(actor_steps),
           "az/grad_norm_critic": float(torch.stack(norms_critic).double().mean())}
    if ce_rows:
        out["az/policy_loss"] = float(ce_sum) / ce_rows
        out["az/kl_target"] = float(kl_sum) / kl_rows
        out["az/grad_norm_actor"] = float(torch.stack(norms_actor).double().mean())
    ev = explained_variance(first_values, batch.value_targets)
    if ev is not None:
        out["az/explained_variance"] = ev
    return out
