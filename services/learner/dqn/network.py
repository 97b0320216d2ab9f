"""K Q heads over one shared trunk, optionally dueling (Wang et al. 2016), and the target
network's periodic copy.

The callback contract with the fleet is Q rows (B, A) per head; how they are produced stays
inside this module (seed 000: dueling never touches the seam).
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class QEnsemble(nn.Module):
    """``forward(x, legal=None) -> (B, K, A)`` Q values. ``trunk`` maps an observation batch to
    features (B, F); each of the K heads is a linear map F -> A, or with ``dueling`` a value
    stream F -> 1 and an advantage stream F -> A combined by ``dueling_combine`` over ``legal``
    ((B, A) bool; None: every action legal). The learner service's network is
    ``services.learner.dqn.pointer_q.PointerQ``; this one serves the tests' small cases."""

    def __init__(self, trunk: nn.Module, features: int, n_actions: int, heads: int, *, dueling: bool = False):
        super().__init__()
        if heads < 1:
            raise ValueError(f"dqn.heads must be >= 1, got {heads}")
        self.trunk, self.heads, self.n_actions, self.dueling = trunk, heads, n_actions, dueling
        self.advantage = nn.Linear(features, heads * n_actions)
        self.value = nn.Linear(features, heads) if dueling else None

    def forward(self, obs, legal: torch.Tensor | None = None) -> torch.Tensor:
        f = self.trunk(obs)
        a = self.advantage(f).view(-1, self.heads, self.n_actions)
        if self.value is None:
            return a
        if legal is None:
            legal = torch.ones(a.shape[0], self.n_actions, dtype=torch.bool, device=a.device)
        return dueling_combine(self.value(f), a, legal)


def dueling_combine(value: torch.Tensor, advantage: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """Q = V + A - mean over the LEGAL set of A, per head (Wang et al. 2016's mean form, with the
    mean taken over the actions the row may take: an illegal action's advantage is no estimate
    of anything and must not shift the legal ones).

    ``value`` (B, K), ``advantage`` (B, K, A), ``legal`` (B, A) bool -> (B, K, A) in
    ``advantage``'s dtype, illegal entries at ``torch.finfo(dtype).min`` (never -1e9: it
    overflows float16; never -inf: a mean over heads of -inf and a legal entry stays finite,
    but finfo.min keeps every reader's masked argmax well defined). A row with no legal action
    (a non-bootstrapping next row) is all finfo.min, with no NaN (its count is clamped to 1)."""
    legal3 = legal[:, None, :].expand_as(advantage)
    count = legal.sum(dim=-1).clamp(min=1).to(advantage.dtype)[:, None, None]  # (B, 1, 1)
    mean = torch.where(legal3, advantage, torch.zeros((), dtype=advantage.dtype, device=advantage.device)
                       ).sum(dim=-1, keepdim=True) / count
    q = value.to(advantage.dtype).unsqueeze(-1) + advantage - mean
    return q.masked_fill(~legal3, torch.finfo(advantage.dtype).min)


def make_target(online: nn.Module) -> nn.Module:
    """A frozen copy of ``online`` (no gradients)."""
    target = copy.deepcopy(online)
    for p in target.parameters():
        p.requires_grad_(False)
    return target


def sync_due(update_step: int, period: int) -> bool:
    """Whether the target is copied after optimizer step ``update_step`` (1-based):
    every ``dqn.target_update_period`` steps. Raises ValueError for a period < 1."""
    if period < 1:
        raise ValueError(f"dqn.target_update_period must be >= 1, got {period}")
    return update_step % period == 0


def sync_target(online: nn.Module, target: nn.Module) -> None:
    target.load_state_dict(online.state_dict())
