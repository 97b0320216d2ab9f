"""Central inference: packed rows in, actions and values out.

Rows whose mask leaves only the no-op (forced rows: about nine in ten, since a policy that
plays whenever it can spends elixir the moment it arrives) are not forwarded at all: their
action is the no-op and its log-probability is exactly 0. The others are sampled by inverse
CDF on caller-supplied uniforms, so an action depends on its slot's uniform alone, never on
which other rows happened to share the batch.
"""

from __future__ import annotations

import numpy as np
import torch

from shared.nn.distribution import MaskedCategorical
from shared.codec import Codec


class Policy:
    def __init__(self, model, codec: Codec, device: torch.device):
        self.model, self.codec, self.device = model, codec, device

    def obs_batch(self, rows: np.ndarray) -> dict[str, torch.Tensor]:
        """(B, row_bytes) uint8 -> the model's obs dict on the device."""
        u = self.codec.unpack(rows)
        # A copy into torch's own allocation (64-byte aligned), never a view of numpy's memory:
        # CPU kernels can round differently with the alignment of their input, and numpy's
        # alignment depends on the allocator's history, which a resumed process does not share.
        return {k: torch.tensor(v, device=self.device) for k, v in u.items()}

    @torch.no_grad()
    def act(self, rows: np.ndarray, n_legal: np.ndarray, uniforms: np.ndarray):
        """Actions (B,) int64 and their log-probs (B,) float32 under the current actor."""
        actions = np.zeros(len(rows), np.int64)
        log_probs = np.zeros(len(rows), np.float32)
        choice = np.flatnonzero(n_legal > 1)
        if len(choice):
            obs = self.obs_batch(rows[choice])
            dist = MaskedCategorical(self.model.actor_logits(obs), obs["mask"])
            a = dist.sample(torch.from_numpy(uniforms[choice]).to(self.device))
            actions[choice] = a.cpu().numpy()
            log_probs[choice] = dist.log_prob(a).float().cpu().numpy()
        return actions, log_probs

    @torch.no_grad()
    def values(self, rows: np.ndarray, chunk: int = 1024) -> np.ndarray:
        """V(s) (B,) float32 for packed rows, in chunks to bound memory."""
        out = np.zeros(len(rows), np.float32)
        for lo in range(0, len(rows), chunk):
            out[lo : lo + chunk] = self.model.value(self.obs_batch(rows[lo : lo + chunk])).float().cpu().numpy()
        return out
