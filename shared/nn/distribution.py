"""The masked categorical over the 2,305 actions (royalelearn-facts §4 "Masked distribution").

Logits are cast to float32 first (a bf16-autocast head's included), and illegal ones are
replaced by ``finfo`` of that dtype's ``min`` (seed 000: a fixed -1e9 overflows float16)
BEFORE the log-softmax, never by -inf: with -inf, a row where only the no-op is legal computes ``0 * -inf = NaN`` in the entropy and
in the gradient. With the finite fill an illegal action's probability is exactly 0, and a
no-op-only row has log-prob 0, entropy 0 and a finite (zero) gradient.

Sampling is inverse-CDF on caller-supplied uniforms, so the drawn action is a function of the
uniform and the logits only: independent of batch composition and of torch's global RNG.
"""

from __future__ import annotations

import torch

NOOP = 0
# The smallest normal float32: the floor under p(play) before its log (log 0 has no gradient).
_TINY = torch.finfo(torch.float32).tiny


class MaskedCategorical:
    """A categorical over the legal actions of each row.

    Args:
        logits: (B, A) raw logits; cast to float32 before masking.
        mask: (B, A) bool, True = legal. ``mask[:, 0]`` (the no-op) must be True on every row.
        validate: check the no-op bit (one device sync; RoyaleGym sets it unconditionally, so a
            False is a buffer or codec bug).
    """

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor, *, validate: bool = True):
        if logits.shape != mask.shape or logits.dim() != 2:
            raise ValueError(f"logits {tuple(logits.shape)} and mask {tuple(mask.shape)} must both be (B, A)")
        mask = mask.bool()
        if validate and mask.shape[0] and not bool(mask[:, NOOP].all()):
            raise ValueError("mask[:, 0] (the no-op) is False on some row; every row must allow the no-op")
        self.mask = mask
        logits = logits.float()
        fill = torch.finfo(logits.dtype).min  # of the dtype the softmax runs in
        masked = logits.masked_fill(~mask, fill)
        # The second fill pins illegal log-probs at a finite value even if (min - max_logit)
        # overflowed to -inf; its backward also zeroes their gradient.
        self.log_probs = torch.log_softmax(masked, dim=-1).masked_fill(~mask, fill)  # (B, A) float32
        self.probs = self.log_probs.exp()  # exactly 0 on illegal actions

    def sample(self, uniforms: torch.Tensor) -> torch.Tensor:
        """(B,) uniforms in [0, 1) -> (B,) int64 actions: the first action whose cumulative
        probability exceeds u. ``searchsorted(right=True)`` skips zero-width (illegal) intervals;
        a u at or above the float32 total (round-off near 1) is clamped to the row's last legal
        action."""
        u = torch.as_tensor(uniforms, device=self.probs.device, dtype=torch.float32).reshape(-1, 1)
        cdf = self.probs.cumsum(dim=-1)  # (B, A), non-decreasing
        actions = torch.searchsorted(cdf, u, right=True).squeeze(-1)  # in [0, A]
        n = self.mask.shape[-1]
        positions = torch.arange(n, device=self.mask.device)
        last_legal = torch.where(self.mask, positions, 0).amax(dim=-1)  # (B,)
        return torch.where(actions >= n, last_legal, actions)

    def mode(self) -> torch.Tensor:
        """(B,) int64: argmax over the legal actions."""
        return self.log_probs.argmax(dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """(B,) int64 actions -> (B,) float32 log-probabilities."""
        return self.log_probs.gather(-1, actions.long().reshape(-1, 1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        """(B,) float32, in nats, over the legal set (illegal terms are 0 * log 0 = 0)."""
        return -(self.probs * self.log_probs.masked_fill(~self.mask, 0.0)).sum(dim=-1)

    def noop_entropy(self) -> torch.Tensor:
        """(B,) float32: binary entropy of p(no-op) against p(play), in nats (max ln 2).
        The leading indicator of no-op collapse."""
        p_noop = self.probs[:, NOOP]
        p_play = self.probs[:, NOOP + 1 :].sum(dim=-1)  # a sum of small terms, not 1 - p_noop
        play_term = p_play * torch.log(p_play.clamp_min(_TINY))  # 0 (finite grad) when p_play = 0
        return -(p_noop * self.log_probs[:, NOOP] + play_term)

    def n_legal(self) -> torch.Tensor:
        """(B,) int64: legal actions per row."""
        return self.mask.sum(dim=-1)
