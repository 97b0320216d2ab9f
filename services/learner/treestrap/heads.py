"""The ensemble: K score heads over the actor's own trunk (docs/treestrap.md, "The heads").

Each head scores every action of the actor's head frame, ``[no-op, slot 0 tiles (y, x C order),
slot 1 tiles, ..., buttons]`` (``shared.nn.model.PointerActor``), from the actor's tile features
(B, C, H, W), the output of its ``tile_conv -> tile_norm -> ReLU``, the trunk the proposal (the
actor's pointer head) reads too:

* tiles: a 1x1 convolution C -> K x hand_slots, head h's slot s plane at (y, x) scoring action
  ``1 + s*H*W + y*W + x``;
* no-op: ``Linear(2C, K)`` over the pooled tiles ``[mean, max]``;
* buttons (``spec.n_buttons`` > 0): ``Linear(2C + n_buttons, K x n_buttons)`` over the pooled
  tiles and the buttons' readiness bits (the mask's last ``n_buttons``), as the actor's button head.

Scores are raw logits, float32 (B, K, A); the loss masks them to the legal set
(``services.learner.alphazero.loss.masked_logits``). The heads' weights are drawn orthogonal with
gain 1 (distinct heads start apart: the ensemble's spread at the start is its prior, Osband et al.
2016) and zero biases from ``torch.Generator().manual_seed(seed)``, so they are a pure function of
the run's seed (``treestrap/heads/init``).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn


class ScoreHeads(nn.Module):
    """``forward(tiles, mask) -> (B, K, A)`` float32 scores (module docstring). Raises ValueError
    for ``heads`` < 1."""

    def __init__(self, spec, channels: int, heads: int, seed: int):
        super().__init__()
        if heads < 1:
            raise ValueError(f"treestrap.heads must be >= 1, got {heads}")
        self.spec, self.heads = spec, heads
        self.n_grid, self.n_buttons = spec.n_grid_actions, spec.n_buttons
        self.tile = nn.Conv2d(channels, heads * spec.hand_slots, kernel_size=1)
        self.noop = nn.Linear(2 * channels, heads)
        self.button = nn.Linear(2 * channels + spec.n_buttons, heads * spec.n_buttons) if spec.n_buttons else None
        gen = torch.Generator(device="cpu").manual_seed(int(seed))
        with torch.no_grad():
            for m in (self.tile, self.noop, self.button):
                if m is not None:
                    nn.init.orthogonal_(m.weight, gain=1.0, generator=gen)
                    nn.init.zeros_(m.bias)

    def forward(self, tiles: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, k = tiles.shape[0], self.heads
        grid = self.tile(tiles).reshape(b, k, -1)  # (B, K, P*H*W): slot-major, then (y, x) C order
        pooled = torch.cat([tiles.mean(dim=(2, 3)), tiles.amax(dim=(2, 3))], dim=1)
        parts = [self.noop(pooled)[:, :, None], grid]
        if self.button is not None:
            ready = mask[:, self.n_grid:].to(pooled.dtype)
            parts.append(self.button(torch.cat([pooled, ready], dim=1)).reshape(b, k, self.n_buttons))
        return torch.cat(parts, dim=2).float()


@contextmanager
def tile_features(actor):
    """Within the block, every forward of ``actor`` (a ``PointerActor``) leaves its tile features
    (B, C, H, W), ``relu(tile_norm(tile_conv(trunk(obs))))``, in the yielded list (one entry per
    forward, in order): the heads read the very features the proposal's forward computed, with
    their graph, so one backward trains the shared trunk through both."""
    seen: list[torch.Tensor] = []
    handle = actor.tile_norm.register_forward_hook(lambda _m, _i, out: seen.append(F.relu(out)))
    try:
        yield seen
    finally:
        handle.remove()
