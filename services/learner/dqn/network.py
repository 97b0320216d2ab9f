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
    """``forward(x) -> (B, K, A)`` Q values. ``trunk`` maps an observation batch to features
    (B, F); each of the K heads is a linear map F -> A, or with ``dueling`` a value stream
    F -> 1 and an advantage stream F -> A combined as Q = V + A - mean_a A."""

    def __init__(self, trunk: nn.Module, features: int, n_actions: int, heads: int, *, dueling: bool = False):
        super().__init__()
        if heads < 1:
            raise ValueError(f"dqn.heads must be >= 1, got {heads}")
        self.trunk, self.heads, self.n_actions, self.dueling = trunk, heads, n_actions, dueling
        self.advantage = nn.Linear(features, heads * n_actions)
        self.value = nn.Linear(features, heads) if dueling else None

    def forward(self, obs) -> torch.Tensor:
        f = self.trunk(obs)
        a = self.advantage(f).view(-1, self.heads, self.n_actions)
        if self.value is None:
            return a
        return self.value(f).unsqueeze(-1) + a - a.mean(dim=-1, keepdim=True)


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
