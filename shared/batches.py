"""Typed batches at the seam between collection and a learner (seed 000's batch formats).

What the collection hands a learner is one named-field batch per algorithm: ``PpoBatch`` for
the PPO learner, ``DqnBatch`` for the DQN learner, ``AlphaZeroBatch`` for the search learner. A
learner reads fields by name; nothing is unpacked by position.

Where we differ from seed 000 (docs/design.md, "Typed batches"):

* Observations stay PACKED rows (``shared.codec``, uint8 ``(M, row_bytes)``) referenced by index
  (``PackedObs``): a learner unpacks them per minibatch, so a batch costs ``row_bytes`` a record,
  not a float32 observation. ``PackedObs.rows[PackedObs.index[i]]`` is record i's row.
* Legality travels inside each packed row as its mask bits (the codec carries them exactly);
  ``legal_csr`` derives seed 000's CSR (``legal_ids``, ``legal_offsets``, head frame) from those
  bits on demand. ``PpoBatch.legal_ids``/``legal_offsets`` are computed once, on first access,
  so the PPO path (which masks from the bits on the device) pays nothing for them.

Action ids are in the policy head's frame (``shared.nn.distribution``: 0 is the no-op).

* ``AlphaZeroBatch.policy_targets`` is sparse, aligned with ``legal_ids`` (nnz,), not seed 000's
  dense (records, actions): ~93 % of rows are value-only (empty legal slice) and A is 2,305, so
  a dense target would be ~9 KB a row of zeros. ``minibatch`` densifies the selected rows only.

A batch for TreeStrap or a solver (DeepCFR) would join here as another dataclass with its own
validation; docs/design.md says what each needs from the fleet.
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


TARGET_SUM_ATOL = 1e-4
"""How far a policy row's target may sum from 1 (float32 targets of up to 2,305 entries)."""


@dataclass(frozen=True)
class AzMinibatch:
    """Selected rows of an ``AlphaZeroBatch``, dense at (minibatch, actions) only.

    ``legal`` bool ``(m, A)``; ``policy_targets`` float32 ``(m, A)`` (0 off the legal set);
    ``value_targets`` float32 ``(m,)``; ``policy_weights`` float32 ``(m,)``."""

    legal: np.ndarray
    policy_targets: np.ndarray
    value_targets: np.ndarray
    policy_weights: np.ndarray


@dataclass(frozen=True)
class AlphaZeroBatch:
    """Search targets of one iteration (seed 000's ``AlphaZeroBatch``).

    ``obs``: ``PackedObs`` (the codec's packed rows by reference); ``players`` int32
    ``(records,)``: the perspective's global slot; ``legal_ids`` int16 ``(nnz,)`` and
    ``legal_offsets`` int64 ``(records + 1,)``: CSR of each row's POLICY set, head frame,
    ascending within a row; ``policy_targets`` float32 ``(nnz,)``: the search's improved policy
    over that set, aligned with ``legal_ids`` (each non-empty row sums to 1); ``value_targets``
    float32 ``(records,)``: the realized return-to-go; ``policy_weights`` float32 ``(records,)``:
    how much the row's policy loss counts; ``n_actions``: A.

    Value-only rows (a forced decision, only the no-op legal, or a perspective that did not
    move) have an EMPTY legal slice and ``policy_weights`` 0; every row trains the value.

    Raises ValueError naming the field and the first bad row for: a length that is not the
    record count, offsets that do not start at 0, decrease, or end at ``len(legal_ids)``; an
    id outside 0..A-1 or not strictly ascending within its row; a negative or non-finite
    target or weight; a non-empty row whose targets do not sum to 1 (``TARGET_SUM_ATOL``); a
    positive weight on an empty slice; a non-finite value target."""

    obs: PackedObs
    players: np.ndarray
    policy_targets: np.ndarray
    value_targets: np.ndarray
    policy_weights: np.ndarray
    legal_ids: np.ndarray
    legal_offsets: np.ndarray
    n_actions: int

    def __post_init__(self):
        n = len(self.value_targets)
        _check_rows("AlphaZeroBatch", {"obs": self.obs, "players": self.players, "policy_weights": self.policy_weights}, n)
        off, ids, tg = self.legal_offsets, self.legal_ids, self.policy_targets
        if len(off) != n + 1 or off[0] != 0 or off[-1] != len(ids) or (np.diff(off) < 0).any():
            raise ValueError(f"AlphaZeroBatch.legal_offsets must be {n + 1} non-decreasing entries from 0 to "
                             f"len(legal_ids) = {len(ids)}; got {len(off)} entries "
                             f"[{off[0] if len(off) else '-'} .. {off[-1] if len(off) else '-'}]")
        if len(tg) != len(ids):
            raise ValueError(f"AlphaZeroBatch.policy_targets has {len(tg)} entries, legal_ids {len(ids)}: "
                             "they are aligned (one target per legal id)")
        row_of = np.repeat(np.arange(n), np.diff(off))
        if len(ids) and (ids.min() < 0 or ids.max() >= self.n_actions):
            i = int(row_of[np.flatnonzero((ids < 0) | (ids >= self.n_actions))[0]])
            raise ValueError(f"AlphaZeroBatch.legal_ids of row {i} leave 0..{self.n_actions - 1}")
        rising = np.diff(ids.astype(np.int64)) > 0
        same_row = row_of[1:] == row_of[:-1]
        if (same_row & ~rising).any():
            i = int(row_of[1:][np.flatnonzero(same_row & ~rising)[0]])
            raise ValueError(f"AlphaZeroBatch.legal_ids of row {i} are not strictly ascending")
        for name, arr in (("policy_targets", tg), ("policy_weights", self.policy_weights)):
            bad = ~np.isfinite(arr) | (arr < 0)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(f"AlphaZeroBatch.{name}[{i}] is {float(arr[i])}: must be finite and >= 0")
        counts = np.diff(off)
        sums = np.add.reduceat(tg.astype(np.float64), off[:-1][counts > 0]) if len(tg) else np.zeros(0)
        off_one = np.abs(sums - 1.0) > TARGET_SUM_ATOL
        if off_one.any():
            i = int(np.flatnonzero(counts > 0)[np.flatnonzero(off_one)[0]])
            raise ValueError(f"AlphaZeroBatch.policy_targets of row {i} sum to {float(sums[off_one][0])}, not 1")
        weighted_empty = (counts == 0) & (self.policy_weights > 0)
        if weighted_empty.any():
            i = int(np.flatnonzero(weighted_empty)[0])
            raise ValueError(f"AlphaZeroBatch.policy_weights[{i}] is {float(self.policy_weights[i])} on an empty legal "
                             "slice: a value-only row must weigh 0")
        if not np.isfinite(self.value_targets).all():
            i = int(np.flatnonzero(~np.isfinite(self.value_targets))[0])
            raise ValueError(f"AlphaZeroBatch.value_targets[{i}] is {float(self.value_targets[i])}: must be finite")

    def __len__(self) -> int:
        return len(self.value_targets)

    @property
    def policy_rows(self) -> np.ndarray:
        """bool ``(records,)``: rows with a non-empty legal slice (the rest are value-only)."""
        return np.diff(self.legal_offsets) > 0

    def minibatch(self, rows: np.ndarray) -> AzMinibatch:
        """The records ``rows`` (int64 ``(m,)``, any order, repeats allowed), with their CSR
        slices gathered and densified: the only dense arrays are ``(m, A)``."""
        rows = np.asarray(rows, np.int64)
        starts, ends = self.legal_offsets[rows], self.legal_offsets[rows + 1]
        counts = ends - starts
        local = np.repeat(np.arange(len(rows)), counts)
        # every selected row's CSR positions, in row order: start of its slice + 0..count-1
        pos = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        legal = np.zeros((len(rows), self.n_actions), bool)
        targets = np.zeros((len(rows), self.n_actions), np.float32)
        cols = self.legal_ids[pos].astype(np.int64)
        legal[local, cols] = True
        targets[local, cols] = self.policy_targets[pos]
        return AzMinibatch(legal=legal, policy_targets=targets, value_targets=self.value_targets[rows].astype(np.float32),
                           policy_weights=self.policy_weights[rows].astype(np.float32))
