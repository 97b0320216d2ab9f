"""One TreeStrap update over a ``batch.TreeStrapBatch`` (docs/treestrap.md, "The update").

Per batch B of n rows, P its policy rows, M = sum of the batch's masks over P x heads:

    proposal = (1 / max(|P|, 1)) sum_{i in P} CE(thompson_i, softmax_L(actor logits_i))
    heads    = ensemble_coef (1 / max(M, 1)) sum_{i in P} sum_h mask_ih CE(pi_i, softmax_S(score_ih))
    value    = vf_coef (1 / n) sum_{i in B} (V(s_i) - z_i)^2

with S the row's set in ``batch.heads_target`` (its legal set, or its searched candidates) and pi_i
the search's target there (seed 000: an action loss per record/head pair, multiplied by the masks, reduced over the included
pairs; ``alphazero.loss.policy_cross_entropy`` per pair). The heads read the actor's tile
features from the same forward (``heads.tile_features``), so the trunk learns from both. As
``alphazero.update.az_update``: an epoch is ``max(1, n // ppo.batch_size)`` nearly equal batches of
a permutation drawn from ``epoch_generator(e)``, minibatches of ``ppo.minibatch_size`` accumulate
the gradient, and the actor, the heads and the critic are each clipped to ``ppo.max_grad_norm``
before their own Adam steps.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from services.learner.alphazero.loss import policy_cross_entropy, value_error
from services.learner.treestrap.batch import TreeStrapBatch
from services.learner.treestrap.heads import tile_features
from shared.nn.model import precision


def head_cross_entropy(scores: torch.Tensor, legal: torch.Tensor, targets: torch.Tensor,
                       masks: torch.Tensor) -> torch.Tensor:
    """(m, K) per record/head masked cross-entropy ``mask_ih * CE(targets_i, softmax_L(scores_ih))``:
    ``scores`` (m, K, A), ``legal`` (m, A) bool, ``targets`` (m, A), ``masks`` (m, K)."""
    m, k, a = scores.shape
    ce = policy_cross_entropy(scores.reshape(m * k, a), legal.repeat_interleave(k, 0),
                              targets.repeat_interleave(k, 0), masks.reshape(m * k))
    return ce.reshape(m, k)


def treestrap_update(model, heads, opts: tuple[torch.optim.Optimizer, torch.optim.Optimizer, torch.optim.Optimizer],
                     batch: TreeStrapBatch, fetch: Callable[[np.ndarray], dict], ppo, ensemble_coef: float,
                     epoch_generator: Callable[[int], np.random.Generator], device) -> dict[str, float]:
    """Train ``model.actor`` (toward the Thompson targets), ``heads`` (toward the search targets
    under their masks) and ``model.critic`` (value targets) for ``ppo.n_epochs``; ``opts`` the
    (actor, critic, heads) optimizers; ``fetch(cells)`` the obs dict of sorted record indices.
    Returns ``treestrap/`` metrics: ``proposal_loss`` (mean CE per policy row over every forward),
    ``head_loss`` (mean CE per included record/head pair), ``value_loss``, ``included_frac``
    (included pairs / (policy rows x heads)), ``optimizer_steps`` and the mean pre-clip gradient
    norms. Raises ValueError for an empty batch."""
    n = len(batch)
    if n == 0:
        raise ValueError("treestrap_update got no rows")
    opt_actor, opt_critic, opt_heads = opts
    search, proposal, heads_target = batch.search, batch.proposal, batch.heads_target
    assert heads_target is not None  # TreeStrapBatch fills it
    policy_rows = search.policy_weights > 0
    n_batches = max(1, n // ppo.batch_size)
    sums = {"ce": 0.0, "head": 0.0, "pairs": 0.0, "sq": 0.0}
    rows_seen = 0
    norms: dict[str, list[float]] = {"actor": [], "critic": [], "heads": []}
    steps = 0
    autocast = model.net_config.autocast
    for epoch in range(ppo.n_epochs):
        for part in np.array_split(epoch_generator(epoch).permutation(n), n_batches):
            for opt in opts:
                opt.zero_grad(set_to_none=True)
            n_rows, n_policy = len(part), int(policy_rows[part].sum())
            n_pairs = float(batch.masks[part][policy_rows[part]].sum())
            for start in range(0, n_rows, ppo.minibatch_size):
                cells = np.sort(part[start:start + ppo.minibatch_size])
                obs = fetch(cells)
                sq = value_error(model.value(obs), torch.as_tensor(search.value_targets[cells], dtype=torch.float32,
                                                                   device=device))
                loss = ppo.vf_coef * sq.sum() / n_rows
                sums["sq"] += float(sq.detach().double().sum())
                local = np.flatnonzero(policy_rows[cells])
                if local.size:
                    rows = cells[local]
                    mb, mp, mh = search.minibatch(rows), proposal.minibatch(rows), heads_target.minibatch(rows)
                    idx = torch.as_tensor(local, device=device)
                    with tile_features(model.actor) as seen:
                        logits = model.actor_logits({k: t[idx] for k, t in obs.items()})
                    legal = torch.as_tensor(mb.legal, device=device)
                    with precision(device.type, autocast):
                        scores = heads(seen[-1], legal)
                    ce = policy_cross_entropy(logits, legal, torch.as_tensor(mp.policy_targets, device=device),
                                              torch.as_tensor(mp.policy_weights, device=device))
                    masks = torch.as_tensor(batch.masks[rows], device=device)
                    hce = head_cross_entropy(scores, torch.as_tensor(mh.legal, device=device),
                                             torch.as_tensor(mh.policy_targets, device=device), masks)
                    loss = loss + ce.sum() / n_policy + ensemble_coef * hce.sum() / max(n_pairs, 1.0)
                    sums["ce"] += float(ce.detach().double().sum())
                    sums["head"] += float(hce.detach().double().sum())
                    sums["pairs"] += float(masks.sum())
                    rows_seen += local.size
                loss.backward()
            for name, net, opt in (("critic", model.critic, opt_critic), ("actor", model.actor, opt_actor),
                                   ("heads", heads, opt_heads)):
                if name != "critic" and not n_policy:
                    continue
                norms[name].append(float(torch.nn.utils.clip_grad_norm_(net.parameters(), ppo.max_grad_norm)))
                opt.step()
            steps += 1
    out = {"treestrap/value_loss": sums["sq"] / (n * ppo.n_epochs), "treestrap/optimizer_steps": float(steps),
           "treestrap/grad_norm_critic": float(np.mean(norms["critic"]))}
    if rows_seen:
        out["treestrap/proposal_loss"] = sums["ce"] / rows_seen
        out["treestrap/head_loss"] = sums["head"] / max(sums["pairs"], 1.0)
        out["treestrap/included_frac"] = sums["pairs"] / (rows_seen * batch.heads)
        out["treestrap/grad_norm_actor"] = float(np.mean(norms["actor"]))
        out["treestrap/grad_norm_heads"] = float(np.mean(norms["heads"]))
    return out
