"""One DQN update: minibatches from prioritized replay, the Double DQN target per head, the
masked ensemble loss, |TD| written back after each minibatch, the target copied every
``target_period`` optimizer steps; and the ``dqn/...`` row keys it measures.

Each minibatch is first a ``shared.batches.DqnBatch`` (the seam: CSR legality from the packed
rows' mask bits, ``discounts`` as the bootstrap coefficient), then densified to a
(minibatch, actions) mask for that minibatch only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from services.learner.dqn.network import sync_due, sync_target
from services.learner.dqn.replay import PrioritizedReplay, Sample
from services.learner.dqn.targets import double_dqn_target, ensemble_td_loss, priorities_from_td
from shared.batches import DqnBatch, PackedObs, dense_from_csr


def dqn_batch(sample: Sample, mask_offset: int, n_actions: int) -> DqnBatch:
    """The seam's ``DqnBatch`` of one replay minibatch. Legality is read off the packed rows'
    mask bits (a non-bootstrapping record's next row is all zero: an empty next slice)."""
    idx = np.arange(len(sample.index))
    ids, off = PackedObs(sample.obs, idx, mask_offset, n_actions).legal_csr()
    nids, noff = PackedObs(sample.next_obs, idx, mask_offset, n_actions).legal_csr()
    return DqnBatch(obs=sample.obs, next_obs=sample.next_obs, players=sample.players, actions=sample.actions,
                    rewards=sample.rewards, dones=sample.dones, can_bootstrap=sample.can_bootstrap,
                    discounts=sample.discounts, masks=sample.masks, legal_ids=ids, legal_offsets=off,
                    next_legal_ids=nids, next_legal_offsets=noff, n_actions=n_actions)


@dataclass
class DqnUpdateSpec:
    """The numbers of one update (from ``DqnConfig``)."""

    steps: int
    batch_size: int
    target_period: int
    max_grad_norm: float
    huber_delta: float = 1.0


def dqn_update(online: torch.nn.Module, target: torch.nn.Module, opt: torch.optim.Optimizer,
               replay: PrioritizedReplay, spec: DqnUpdateSpec, rng: np.random.Generator,
               to_obs: Callable[[np.ndarray], object], *, mask_offset: int, n_actions: int,
               steps_before: int, device) -> dict[str, float | None]:
    """``spec.steps`` optimizer steps. ``to_obs`` unpacks uint8 rows (B, row_bytes) into the
    network's input; ``steps_before`` is the optimizer steps of earlier updates (the target
    period counts across iterations). Returns ``dqn/...`` keys:

    ``td_error_abs`` mean |TD| over the (record, head) pairs the masks include; ``q_abs_mean``
    mean |Q(s, a)| over records and heads, ``q_abs_max`` its max; ``td_bias`` mean of Q(s, a) - y
    (positive: Q above its own n-step target); ``overestimation`` mean of Q(s, a) - G over the
    records that cannot bootstrap, whose target G is their realised n-step return (absent when
    none was drawn); ``head_disagreement`` mean over records of the std over heads of Q(s, a)
    (0 at one head); ``replay_age_mean`` mean insertions since a drawn record was stored;
    ``priority_spread`` max / min stored priority after the write-backs; ``is_weight_min``;
    ``loss``, ``grad_norm`` (mean, before clipping); ``target_syncs``; ``optimizer_steps``."""
    sums = dict(td=0.0, pairs=0.0, q_abs=0.0, q_n=0, bias=0.0, over=0.0, over_n=0, disagree=0.0, age=0.0, loss=0.0,
                grad=0.0, w_min=1.0)
    q_abs_max = 0.0
    syncs = 0
    for step in range(spec.steps):
        sample = replay.sample(spec.batch_size, rng)
        batch = dqn_batch(sample, mask_offset, n_actions)
        t = lambda a, dt: torch.as_tensor(np.ascontiguousarray(a), dtype=dt, device=device)  # noqa: E731
        next_legal = t(dense_from_csr(batch.next_legal_ids, batch.next_legal_offsets, n_actions), torch.bool)
        q = online(to_obs(batch.obs))
        with torch.no_grad():
            next_in = to_obs(batch.next_obs)
            y = double_dqn_target(t(batch.rewards, torch.float32), t(batch.discounts, torch.float32),
                                  t(batch.can_bootstrap, torch.bool), online(next_in), target(next_in), next_legal)
        masks = t(batch.masks, torch.float32)
        loss, td = ensemble_td_loss(q, t(batch.actions, torch.int64), y, masks, t(sample.weights, torch.float32),
                                    huber_delta=spec.huber_delta)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        sums["grad"] += float(torch.nn.utils.clip_grad_norm_(online.parameters(), spec.max_grad_norm))
        opt.step()
        replay.update_priorities(sample.index, priorities_from_td(td, masks).cpu().numpy())
        if sync_due(steps_before + step + 1, spec.target_period):
            sync_target(online, target)
            syncs += 1
        with torch.no_grad():
            q_sa = (y - td)  # Q(s, a) per head, from the same forward
            sums["td"] += float((td.abs() * masks).sum())
            sums["pairs"] += float(masks.sum())
            sums["q_abs"] += float(q_sa.abs().sum())
            sums["q_n"] += q_sa.numel()
            q_abs_max = max(q_abs_max, float(q_sa.abs().max()))
            sums["bias"] += float((q_sa - y).mean(dim=1).sum())
            ended = ~t(batch.can_bootstrap, torch.bool)
            if ended.any():
                g = t(batch.rewards, torch.float32)[ended]
                sums["over"] += float((q_sa[ended].mean(dim=1) - g).sum())
                sums["over_n"] += int(ended.sum())
            if q_sa.shape[1] > 1:
                sums["disagree"] += float(q_sa.std(dim=1, unbiased=False).sum())
            sums["age"] += float(sample.age.sum())
            sums["loss"] += float(loss)
            sums["w_min"] = min(sums["w_min"], float(sample.weights.min()))
    n = spec.steps * spec.batch_size
    out: dict[str, float | None] = {  # priority_spread: None on an empty replay
        "dqn/td_error_abs": sums["td"] / max(sums["pairs"], 1.0),
        "dqn/q_abs_mean": sums["q_abs"] / max(sums["q_n"], 1),
        "dqn/q_abs_max": q_abs_max,
        "dqn/td_bias": sums["bias"] / n,
        "dqn/head_disagreement": sums["disagree"] / n,
        "dqn/replay_age_mean": sums["age"] / n,
        "dqn/priority_spread": replay.priority_spread(),
        "dqn/is_weight_min": sums["w_min"],
        "dqn/loss": sums["loss"] / spec.steps,
        "dqn/grad_norm": sums["grad"] / spec.steps,
        "dqn/target_syncs": float(syncs),
        "dqn/optimizer_steps": float(spec.steps),
        "dqn/replay_size": float(len(replay)),
    }
    if sums["over_n"]:
        out["dqn/overestimation"] = sums["over"] / sums["over_n"]
    return out


def behaviour_stats(explored: np.ndarray, actions: np.ndarray, n_legal: np.ndarray, heads_used: np.ndarray,
                    eps: float, eps_floor: float) -> dict[str, float]:
    """The behaviour policy's row keys over one iteration's learner decisions (all (D,)):
    ``dqn/epsilon`` the schedule's value; ``dqn/at_epsilon_floor`` 1 once it has reached its floor;
    ``dqn/explore_frac`` share of choice rows (n_legal > 1) acted by the uniform draw;
    ``dqn/greedy_noop_frac`` share of the greedy choice rows that waited (action 0): near 1 on
    every row is a dead behaviour policy; ``dqn/heads_used`` distinct Thompson heads acted by."""
    choice = n_legal > 1
    out = {"dqn/epsilon": float(eps), "dqn/at_epsilon_floor": float(eps <= eps_floor),
           "dqn/heads_used": float(len(np.unique(heads_used)))}
    if choice.any():
        out["dqn/explore_frac"] = float(explored[choice].mean())
        greedy = choice & ~explored
        if greedy.any():
            out["dqn/greedy_noop_frac"] = float((actions[greedy] == 0).mean())
    return out
