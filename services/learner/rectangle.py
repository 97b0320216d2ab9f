"""One iteration's experience: a rectangle of T cycles x R slots, assembled by (cycle, slot).

Rows 0..T-1 are the collected cycles; row T is the bootstrap row (the observation after the
last step, whose value closes GAE). A round for cycle ``t`` fills row ``t``'s observation half
and row ``t - 1``'s step half (shared.messages.Round says which array is which). Nothing is
placed by arrival order: the learner computes each round's slots from the slot map.

Packed observation rows are kept as they arrived (``shared.codec``) and unpacked per
minibatch, so the rectangle costs ``(T + 1) * R * row_bytes`` bytes plus a few scalar columns.
"""

from __future__ import annotations

import numpy as np

from shared.codec import POPCOUNT, legal_counts  # noqa: F401 - POPCOUNT: re-exported
from shared.messages import GROUP_LEARNER


class Rectangle:
    @classmethod
    def for_codec(cls, cycles: int, n_slots: int, codec) -> Rectangle:
        """A rectangle of ``codec``'s rows (a ``shared.codec.Codec``), whose legal counts it
        asks the codec for."""
        return cls(cycles, n_slots, codec.row_bytes, codec.omask)

    def __init__(self, cycles: int, n_slots: int, row_bytes: int, mask_offset: int):
        """``row_bytes`` and ``mask_offset``: the codec's ``row_bytes`` and ``omask`` (where the
        mask bits start: ``shared.codec.legal_counts`` counts from there)."""
        T, R = cycles, n_slots
        self.T, self.R, self.row_bytes, self.mask_offset = T, R, row_bytes, mask_offset
        self.rows = np.zeros((T + 1, R, row_bytes), np.uint8)
        self.obs_valid = np.zeros((T + 1, R), bool)
        self.group = np.full((T + 1, R), -1, np.int8)
        self.tick = np.zeros((T + 1, R), np.int32)
        self.n_legal = np.zeros((T + 1, R), np.int32)
        self.actions = np.zeros((T, R), np.int64)
        self.log_probs = np.zeros((T, R), np.float32)
        self.acted = np.zeros((T, R), bool)
        self.policy_lag = np.zeros((T, R), np.int8)
        """Updates between the actor that inferred a learner cell and the one that trains on it:
        0, or 1 for a cell inferred by the behaviour snapshot during the previous update
        (``rollout.overlap``, services/learner/overlap.py)."""
        self.reward = np.zeros((T, R), np.float32)
        self.terminated = np.zeros((T, R), bool)
        self.truncated = np.zeros((T, R), bool)
        self.deploy_status = np.full((T, R), -1, np.int8)
        self.step_valid = np.zeros((T, R), bool)
        self.final_rows: dict[tuple[int, int], np.ndarray] = {}
        self.writes = 0
        """Observation cells written: (T + 1) * R exactly on a rectangle no rollout left."""

    def store_obs(self, t: int, slots: np.ndarray, group: np.ndarray, tick: np.ndarray,
                  rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Row ``t``'s observation half for ``slots``. ``rows`` (uint8 (n_held, row_bytes)) holds
        the packed rows of every slot whose group is >= 0, in slot order (shared.messages.Round):
        the learner's are stored; the frozen seats' are returned, never stored (not trained).

        Returns (learner global slots, frozen global slots, frozen rows (n_frozen, row_bytes)).
        Raises ValueError when ``rows`` does not hold one row per held slot."""
        held = group >= 0
        if rows.shape != (int(held.sum()), self.row_bytes):
            raise ValueError(f"round carries rows of shape {rows.shape}, expected ({int(held.sum())}, {self.row_bytes}) "
                             "(one per learner or frozen slot)")
        is_learner = group[held] == GROUP_LEARNER
        learner = slots[group == GROUP_LEARNER]
        frozen = slots[held & (group != GROUP_LEARNER)]
        self.group[t, slots] = group
        self.tick[t, slots] = tick
        self.obs_valid[t, slots] = True
        self.writes += len(slots)
        if not len(frozen):  # the usual round: every row is the learner's, no copy
            learner_rows, frozen_rows = rows, rows[:0]
        else:
            learner_rows, frozen_rows = rows[is_learner], rows[~is_learner]
        if len(learner):
            self.rows[t, learner] = learner_rows
            self.n_legal[t, learner] = self.legal_counts(learner_rows)
        return learner, frozen, frozen_rows

    def legal_counts(self, rows: np.ndarray) -> np.ndarray:
        """(B,) int32: legal actions (the no-op included) of packed rows (``shared.codec.legal_counts``)."""
        return legal_counts(rows, self.mask_offset)

    def store_step(self, t: int, slots: np.ndarray, reward, terminated, truncated, deploy_status,
                   final_slots: np.ndarray, final_rows: np.ndarray) -> None:
        """Row ``t``'s step half: what the action taken at row ``t`` led to."""
        self.reward[t, slots] = reward
        self.terminated[t, slots] = terminated.astype(bool)
        self.truncated[t, slots] = truncated.astype(bool)
        self.deploy_status[t, slots] = deploy_status
        self.step_valid[t, slots] = True
        for local, row in zip(final_slots, final_rows):
            self.final_rows[(t, int(slots[local]))] = row

    def learner_cells(self) -> np.ndarray:
        """(T+1, R) bool: cells whose observation the learner holds (value needed)."""
        return self.obs_valid & (self.group == GROUP_LEARNER)

    def trainable(self) -> np.ndarray:
        """(T, R) bool: learner cells whose whole transition arrived."""
        return self.learner_cells()[:-1] & self.step_valid & self.acted
