"""Typed batches at the seam between collection and a learner (seed 000's batch formats).

What the collection hands a learner is one named-field batch per algorithm: ``PpoBatch`` for
the PPO learner, ``DqnBatch`` for the DQN learner. A learner reads fields by name; nothing is
unpacked by position.

Where we differ from seed 000 (docs/design.md, "Typed batches"):

* Observations stay PACKED rows (``shared.codec``, uint8 ``(M, row_bytes)``) referenced by index
  (``PackedObs``): a learner unpacks them per minibatch, so a batch costs ``row_bytes`` a record,
  not a float32 observation. ``PackedObs.rows[PackedObs.index[i]]`` is record i's row.
* Legality travels inside each packed row as its mask bits (the codec carries them exactly);
  ``legal_csr`` derives seed 000's CSR (``legal_ids``, ``legal_offsets``, head frame) from those
  bits on demand. ``PpoBatch.legal_ids``/``legal_offsets`` are computed once, on first access,
  so the PPO path (which masks from the bits on the device) pays nothing for them.

Action ids are in the policy head's frame (``shared.nn.distribution``: 0 is the no-op).

A batch for a search learner (AlphaZero, TreeStrap) or a solver (DeepCFR) would join here as
another dataclass with its own validation; docs/design.md says what each needs from the fleet.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class PackedObs:
    """Records' observations by reference into packed rows.

    ``rows``: uint8 ``(M, row_bytes)`` packed rows (``shared.codec``); ``index``: int64
    ``(records,)`` row of each record; ``mask_offset``: byte where the mask bits start;
    ``n_actions``: A, the head frame's size (the mask holds ``ceil(A / 8)`` bytes, LSB first)."""

    rows: np.ndarray
    index: np.ndarray
    mask_offset: int
    n_actions: int

    def __post_init__(self):
        if self.rows.dtype != np.uint8 or self.rows.ndim != 2:
            raise ValueError(f"PackedObs.rows must be uint8 (M, row_bytes), got {self.rows.dtype} {self.rows.shape}")
        mask_bytes = self.rows.shape[1] - self.mask_offset
        if mask_bytes != (self.n_actions + 7) // 8:
            raise ValueError(f"PackedObs: {mask_bytes} mask bytes after mask_offset {self.mask_offset} do not hold "
                             f"n_actions {self.n_actions} bits (need {(self.n_actions + 7) // 8})")
        if len(self.index) and (self.index.min() < 0 or self.index.max() >= len(self.rows)):
            raise ValueError(f"PackedObs.index outside 0..{len(self.rows) - 1}")

    def __len__(self) -> int:
        return len(self.index)

    def packed(self) -> np.ndarray:
        """uint8 ``(records, row_bytes)``: a copy of the records' rows, in record order."""
        return self.rows[self.index]

    def mask_bits(self) -> np.ndarray:
        """bool ``(records, A)``: the dense legality mask of every record (head frame)."""
        return unpack_mask(self.rows[self.index, self.mask_offset:], self.n_actions)

    def legal_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """(``legal_ids`` int16 ``(nnz,)``, ``legal_offsets`` int64 ``(records + 1,)``)."""
        return csr_from_mask(self.mask_bits())


def unpack_mask(mask_bytes: np.ndarray, n_actions: int) -> np.ndarray:
    """bool ``(B, n_actions)`` from bit-packed masks ``(B, ceil(n_actions / 8))`` uint8, LSB first."""
    return np.unpackbits(mask_bytes, axis=1, bitorder="little")[:, :n_actions].astype(bool)


def csr_from_mask(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seed 000's CSR of a dense bool mask ``(B, A)``: row i's legal ids are
    ``ids[offsets[i]:offsets[i + 1]]``, ascending. ids int16 (A <= 32767), offsets int64."""
    if mask.shape[1] > np.iinfo(np.int16).max:
        raise ValueError(f"csr_from_mask: {mask.shape[1]} actions do not fit int16 ids")
    rows, ids = np.nonzero(mask)
    offsets = np.zeros(mask.shape[0] + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=mask.shape[0]), out=offsets[1:])
    return ids.astype(np.int16), offsets


def dense_from_csr(ids: np.ndarray, offsets: np.ndarray, n_actions: int) -> np.ndarray:
    """bool ``(records, n_actions)`` from CSR (seed 000's recipe); the inverse of ``csr_from_mask``."""
    counts = np.diff(offsets)
    rows = np.repeat(np.arange(len(counts)), counts)
    out = np.zeros((len(counts), n_actions), bool)
    out[rows, ids.astype(np.int64)] = True
    return out


def _check_rows(name: str, arrays: dict[str, np.ndarray], n: int) -> None:
    for field, array in arrays.items():
        if len(array) != n:
            raise ValueError(f"{name}.{field} has {len(array)} records, {name}.actions has {n}")


@dataclass(frozen=True)
class PpoBatch:
    """The trainable records of one PPO iteration (seed 000's ``PpoBatch``).

    ``obs``: ``PackedObs``; ``players`` int32 (records,): the acting seat's global slot;
    ``actions`` int64: sampled ids, head frame; ``behavior_log_probs`` float32: log-prob of the
    sampled action under the collection-time masked softmax; ``advantages`` float32: raw GAE(lam)
    (the update standardises them, never the data); ``returns`` float32: advantages + values;
    ``values`` float32: the critic pass GAE used; ``n_legal`` int32: popcount of each record's
    mask (1: a forced row, only the no-op legal); ``policy_lag`` int8: 0, or 1 for a record
    inferred by the behaviour snapshot during the previous update (``rollout.overlap``);
    ``telemetry``: collection measurements."""

    obs: PackedObs
    players: np.ndarray
    actions: np.ndarray
    behavior_log_probs: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray
    values: np.ndarray
    n_legal: np.ndarray
    policy_lag: np.ndarray
    telemetry: dict

    def __post_init__(self):
        _check_rows("PpoBatch", {"obs": self.obs, "players": self.players, "behavior_log_probs": self.behavior_log_probs,
                                 "advantages": self.advantages, "returns": self.returns, "values": self.values,
                                 "n_legal": self.n_legal, "policy_lag": self.policy_lag}, len(self.actions))

    def __len__(self) -> int:
        return len(self.actions)

    @cached_property
    def _csr(self) -> tuple[np.ndarray, np.ndarray]:
        return self.obs.legal_csr()

    @property
    def legal_ids(self) -> np.ndarray:
        """int16 (nnz,): legal ids of every record, CSR (from the mask bits, on first access)."""
        return self._csr[0]

    @property
    def legal_offsets(self) -> np.ndarray:
        """int64 (records + 1,): CSR offsets into ``legal_ids``."""
        return self._csr[1]


@dataclass(frozen=True)
class DqnBatch:
    """A minibatch of n-step transitions (seed 000's ``DqnBatch``).

    ``obs``/``next_obs``: uint8 ``(records, row_bytes)`` packed rows, the window's first
    decision and the observation after its last; ``players`` int32; ``actions`` int64 (head
    frame); ``rewards`` float32: sum_{j<k} gamma^j r_j over the window's k decisions;
    ``dones`` bool: the episode ended inside the window (terminated OR truncated; not the
    bootstrap rule); ``can_bootstrap`` bool: the TD target includes a next-state value;
    ``discounts`` float32: gamma^k, and exactly 0 where ``can_bootstrap`` is false: the target's
    only bootstrap coefficient, never a caller-side gamma; ``masks`` float32 ``(records, heads)``:
    bootstrap membership of each record in each ensemble head; ``legal_ids``/``legal_offsets``
    and ``next_legal_ids``/``next_legal_offsets``: CSR of the current and next legal sets;
    ``n_actions``: A. Raises ValueError when ``can_bootstrap`` disagrees with the next slices
    (true exactly when the next slice is non-empty) or a discount is non-zero where it cannot
    bootstrap."""

    obs: np.ndarray
    next_obs: np.ndarray
    players: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    can_bootstrap: np.ndarray
    discounts: np.ndarray
    masks: np.ndarray
    legal_ids: np.ndarray
    legal_offsets: np.ndarray
    next_legal_ids: np.ndarray
    next_legal_offsets: np.ndarray
    n_actions: int

    def __post_init__(self):
        n = len(self.actions)
        _check_rows("DqnBatch", {"obs": self.obs, "next_obs": self.next_obs, "players": self.players,
                                 "rewards": self.rewards, "dones": self.dones, "can_bootstrap": self.can_bootstrap,
                                 "discounts": self.discounts, "masks": self.masks}, n)
        for name in ("legal_offsets", "next_legal_offsets"):
            if len(getattr(self, name)) != n + 1:
                raise ValueError(f"DqnBatch.{name} has {len(getattr(self, name))} entries, expected records + 1 = {n + 1}")
        if self.masks.ndim != 2 or self.masks.dtype != np.float32:
            raise ValueError(f"DqnBatch.masks must be float32 (records, heads), got {self.masks.dtype} {self.masks.shape}")
        nonempty = np.diff(self.next_legal_offsets) > 0
        if not np.array_equal(nonempty, self.can_bootstrap.astype(bool)):
            i = int(np.flatnonzero(nonempty != self.can_bootstrap)[0])
            raise ValueError(f"DqnBatch.can_bootstrap[{i}] is {bool(self.can_bootstrap[i])} but the next legal slice "
                             f"has {int(np.diff(self.next_legal_offsets)[i])} ids: it must be true exactly when non-empty")
        bad = ~self.can_bootstrap.astype(bool) & (self.discounts != 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"DqnBatch.discounts[{i}] is {float(self.discounts[i])} where can_bootstrap is false: must be 0")

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def heads(self) -> int:
        return self.masks.shape[1]
