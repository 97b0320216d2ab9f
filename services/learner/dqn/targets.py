"""The DQN target and loss, per ensemble head (seed 000's ``DqnBatch`` contract).

* ``masked_argmax``: argmax over each row's legal set, illegal entries filled with
  ``torch.finfo(dtype).min`` (a fixed -1e9 overflows float16).
* ``double_dqn_target`` (van Hasselt et al. 2016): the next action is CHOSEN by the online
  network and EVALUATED by the target network, per head:
      y[b, h] = rewards[b] + discounts[b] * Q_target[b, h, argmax_{a in next legal} Q_online[b, h, a]]
  where the record can bootstrap, and y = rewards where it cannot. ``discounts`` is the
  engine's gamma^k (0 where it cannot bootstrap); no caller-side gamma appears. The rule is a
  ``torch.where`` on ``can_bootstrap``, never ``(1 - done) * max(...)``: a row with an empty
  next legal set has every entry at finfo.min, and 0 x -inf is NaN.
* ``ensemble_td_loss``: one TD error per (record, head), Huber, multiplied by the bootstrap
  mask and the importance weight, reduced over the included pairs: a record outside head h's
  bootstrap sample contributes nothing to head h's loss or gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def masked_fill_illegal(q: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """``q`` (..., A) with entries where ``legal`` (broadcastable bool) is false set to finfo.min."""
    return q.masked_fill(~legal, torch.finfo(q.dtype).min)


def masked_argmax(q: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """int64 (...,): argmax of ``q`` (..., A) over ``legal``; ties go to the lowest id.
    A row with no legal entry returns 0 (callers mask such rows out by ``can_bootstrap``)."""
    return masked_fill_illegal(q, legal).argmax(dim=-1)


def double_dqn_target(rewards: torch.Tensor, discounts: torch.Tensor, can_bootstrap: torch.Tensor,
                      q_online_next: torch.Tensor, q_target_next: torch.Tensor,
                      next_legal: torch.Tensor) -> torch.Tensor:
    """(B, K) TD targets. ``rewards``/``discounts`` (B,) float, ``can_bootstrap`` (B,) bool,
    ``q_online_next``/``q_target_next`` (B, K, A), ``next_legal`` (B, A) bool. No gradient."""
    with torch.no_grad():
        chosen = masked_argmax(q_online_next, next_legal[:, None, :])  # (B, K)
        q_next = q_target_next.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)  # (B, K)
        r = rewards[:, None].to(q_next.dtype)
        boot = r + discounts[:, None].to(q_next.dtype) * q_next
        return torch.where(can_bootstrap[:, None], boot, r.expand_as(boot))


def ensemble_td_loss(q: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor, masks: torch.Tensor,
                     weights: torch.Tensor, *, huber_delta: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, td). ``q`` (B, K, A) online Q of the records' observations, ``actions`` (B,)
    int64, ``targets`` (B, K), ``masks`` (B, K) float32 bootstrap membership, ``weights`` (B,)
    importance weights. ``td`` (B, K) = targets - Q(s, a), detached.

    loss = sum_{b,h} masks[b,h] weights[b] huber(td[b,h]) / max(1, sum_{b,h} masks[b,h])."""
    q_sa = q.gather(-1, actions[:, None, None].expand(-1, q.shape[1], 1)).squeeze(-1)  # (B, K)
    per_pair = F.huber_loss(q_sa, targets, reduction="none", delta=huber_delta)
    included = masks * weights[:, None]
    loss = (per_pair * included).sum() / masks.sum().clamp(min=1.0)
    return loss, (targets - q_sa).detach()


def priorities_from_td(td: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """(B,) |TD| per record for the replay: the mean |td| over the heads the record trains,
    or over every head for a record no head trains (it must still get a priority)."""
    a = td.abs()
    n = masks.sum(dim=1)
    masked_mean = (a * masks).sum(dim=1) / n.clamp(min=1.0)
    return torch.where(n > 0, masked_mean, a.mean(dim=1))
