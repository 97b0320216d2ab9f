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

    def _spec(self):
        """The observation layout of the model (an ActorCritic, or a snapshot's ActorOnly)."""
        spec = getattr(self.model, "spec", None)
        return spec if spec is not None else getattr(getattr(self.model, "actor", None), "spec", None)

    @property
    def action_grid(self) -> tuple[int, int, int]:
        """(hand slots, height, width): the pointer head's grid, action ``1 + slot * height *
        width + y * width + x`` (``shared.demos.head_action``)."""
        spec = self._spec()
        return int(spec.hand_slots), int(spec.height), int(spec.width)

    @property
    def frame_stack(self) -> int:
        """k of the model's input (``ObsSpec.frame_stack``; 1 for a model without a spec)."""
        return int(getattr(self._spec(), "frame_stack", 1))

    def _expand(self, rows: np.ndarray) -> dict[str, torch.Tensor]:
        if self.device_rows is not None:
            return self.device_rows.expand(self.device_rows.upload(rows))
        u = self.codec.unpack(rows)
        # A copy into torch's own allocation (64-byte aligned), never a view of numpy's memory:
        # CPU kernels can round differently with the alignment of their input, and numpy's
        # alignment depends on the allocator's history, which a resumed process does not share.
        return {k: torch.tensor(v, device=self.device) for k, v in u.items()}

    def obs_batch(self, rows: np.ndarray, history=None) -> dict[str, torch.Tensor]:
        """(B, row_bytes) uint8 -> the model's obs dict on the device. With frame stacking
        (``spec.frame_stack`` k > 1) ``history`` is the rows' ``shared.nn.frame_stack.History``
        and becomes ``obs["history"]``; None there is no history at all (every frame ``FILL``).
        Raises ValueError for a history of another shape."""
        obs = self._expand(rows)
        k = self.frame_stack
        if k > 1:
            obs["history"] = self.history_tensor(history, len(rows), k)
        return obs

    def history_tensor(self, history, b: int, k: int) -> torch.Tensor:
        """(B, (k-1) (C + hand_slots), H, W) float32 on the device for a ``History`` of B rows."""
        from shared.nn.frame_stack import empty_history, history_planes

        if history is None:
            history = empty_history(b, k, self.codec.row_bytes)
        if history.rows.shape != (b, k - 1, self.codec.row_bytes) or history.valid.shape != (b, k - 1):
            raise ValueError(f"history of shape {history.rows.shape} / {history.valid.shape} for {b} rows; expected "
                             f"({b}, {k - 1}, {self.codec.row_bytes}) / ({b}, {k - 1})")
        expanded = self._expand(np.ascontiguousarray(history.rows.reshape(b * (k - 1), -1)))
        valid = torch.as_tensor(np.ascontiguousarray(history.valid), device=self.device)
        return history_planes(expanded, valid, self._spec())

    def fetcher(self, rows: np.ndarray, index: np.ndarray, history=None):
        """The update's ``fetch``: ``cells`` (int indices into ``index``) -> the obs dict of rows
        ``rows[index[cells]]`` (``rows`` (M, row_bytes) uint8, the rectangle's rows flattened).

        CUDA: the N = len(index) rows are gathered once into pinned slabs and copied to the
        device (N x row_bytes bytes there, ``services/learner/vram.py`` counts them); each
        minibatch is then a gather and an expansion on the device, with no row crossing the bus
        again. CPU: each minibatch is gathered and unpacked by numpy (``obs_batch``).

        ``history`` (frame stacking): ``cells -> History`` of those rows
        (services/learner/frame_history.py), expanded per minibatch as inference expands it."""
        index = np.asarray(index, dtype=np.int64)
        if self.frame_stack > 1:
            base = self._fetcher(rows, index)
            k = self.frame_stack

            def fetch_stacked(cells):
                obs = base(cells)
                h = None if history is None else history(np.asarray(cells))
                obs["history"] = self.history_tensor(h, len(obs["mask"]), k)
                return obs

            return fetch_stacked
        return self._fetcher(rows, index)

    def _fetcher(self, rows: np.ndarray, index: np.ndarray):
        if self.device_rows is None:
            return lambda cells: self.obs_batch(rows[index[cells]])
        on_device = self.device_rows.gather(rows, index)

        def fetch(cells):
            picked = on_device.index_select(0, torch.as_tensor(np.asarray(cells, dtype=np.int64), device=self.device))
            return self.device_rows.expand(picked)

        return fetch

    @torch.no_grad()
    def act(self, rows: np.ndarray, n_legal: np.ndarray, uniforms: np.ndarray, history=None):
        """Actions (B,) int64 and their log-probs (B,) float32 under the current actor.
        ``history``: the rows' ``History`` under frame stacking (``obs_batch``)."""
        actions = np.zeros(len(rows), np.int64)
        log_probs = np.zeros(len(rows), np.float32)
        choice = np.flatnonzero(n_legal > 1)
        if len(choice):
            obs = self.obs_batch(rows[choice], None if history is None else history.take(choice))
            dist = MaskedCategorical(self.model.actor_logits(obs), obs["mask"])
            a = dist.sample(torch.from_numpy(uniforms[choice]).to(self.device))
            actions[choice] = a.cpu().numpy()
            log_probs[choice] = dist.log_prob(a).float().cpu().numpy()
        return actions, log_probs

    @torch.no_grad()
    def legal_log_probs(self, rows: np.ndarray, history=None) -> np.ndarray:
        """(B, A) float64 log-probabilities of every action under the current actor, -inf on
        the illegal ones (``MaskedCategorical``'s finite fill turned back into -inf, so a caller
        can tell illegal by ``isfinite``). For a search's candidate priors
        (``shared.search.lookahead.gumbel_top_k``). ``history``: as ``act``."""
        obs = self.obs_batch(rows, history)
        dist = MaskedCategorical(self.model.actor_logits(obs), obs["mask"])
        out = dist.log_probs.double().cpu().numpy()
        out[~dist.mask.cpu().numpy()] = -np.inf
        return out

    @torch.no_grad()
    def values(self, rows: np.ndarray, chunk: int = 1024, history=None) -> np.ndarray:
        """V(s) (B,) float32 for packed rows, in chunks to bound memory. ``history``: the rows'
        ``History`` under frame stacking."""
        out = np.zeros(len(rows), np.float32)
        for lo in range(0, len(rows), chunk):
            part = None if history is None else history.take(slice(lo, lo + chunk))
            out[lo : lo + chunk] = self.model.value(self.obs_batch(rows[lo : lo + chunk], part)).float().cpu().numpy()
        return out
