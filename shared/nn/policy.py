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
    """Inference for ``model`` on ``device``. On CUDA the packed rows cross the bus as they are
    (pinned, non-blocking) and are expanded there (``shared.nn.rows.DeviceRows``); on the CPU
    they are expanded by the codec's numpy unpack, as they always were."""

    def __init__(self, model, codec: Codec, device: torch.device):
        self.model, self.codec, self.device = model, codec, torch.device(device)
        self.device_rows = None
        if self.device.type == "cuda":
            from shared.nn.rows import DeviceRows

            self.device_rows = DeviceRows(codec, self.device)

    def obs_batch(self, rows: np.ndarray) -> dict[str, torch.Tensor]:
        """(B, row_bytes) uint8 -> the model's obs dict on the device."""
        if self.device_rows is not None:
            return self.device_rows.expand(self.device_rows.upload(rows))
        u = self.codec.unpack(rows)
        # A copy into torch's own allocation (64-byte aligned), never a view of numpy's memory:
        # CPU kernels can round differently with the alignment of their input, and numpy's
        # alignment depends on the allocator's history, which a resumed process does not share.
        return {k: torch.tensor(v, device=self.device) for k, v in u.items()}

    def fetcher(self, rows: np.ndarray, index: np.ndarray):
        """The update's ``fetch``: ``cells`` (int indices into ``index``) -> the obs dict of rows
        ``rows[index[cells]]`` (``rows`` (M, row_bytes) uint8, the rectangle's rows flattened).

        CUDA: the N = len(index) rows are gathered once into pinned slabs and copied to the
        device (N x row_bytes bytes there, ``services/learner/vram.py`` counts them); each
        minibatch is then a gather and an expansion on the device, with no row crossing the bus
        again. CPU: each minibatch is gathered and unpacked by numpy (``obs_batch``)."""
        index = np.asarray(index, dtype=np.int64)
        if self.device_rows is None:
            return lambda cells: self.obs_batch(rows[index[cells]])
        on_device = self.device_rows.gather(rows, index)

        def fetch(cells):
            picked = on_device.index_select(0, torch.as_tensor(np.asarray(cells, dtype=np.int64), device=self.device))
            return self.device_rows.expand(picked)

        return fetch

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
