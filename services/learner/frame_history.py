"""The learner's frame history (``obs.frame_stack = k > 1``): which stored rows are each cell's
previous k - 1 decisions, for central inference and for the PPO update alike.

Nothing is stored twice. A cell's history is a list of SOURCE CYCLES of the same slot: cycle
``s >= 0`` is the rectangle's row (s, r); ``s < 0`` is the carry, the k - 1 rows of the seat's
history that the learner kept from the previous iteration (``carry_rows[r, -s - 1]``). The rule,
applied as each round is filed (``file``):

* cycle 0: the carry of the seat's (battle id, seat), if it is of the same episode (same
  ordinal, same tick, a tick that is not 0); else nothing;
* cycle t > 0: nothing if the cell is an episode's first decision (its tick is 0: the reset) or
  the slot's row t - 1 did not arrive; else ``[t - 1] + history(t - 1)[: k - 2]``.

So the history resets at every episode start, crosses the iteration boundary, and crosses a
resume (the carry is a checkpoint component, ``frame_history/carry.msgpack``): a battle whose
exact state the checkpoint restored continues its episode and its history. A missing frame
reads as zeros (shared/nn/frame_stack.py, ``FILL``). Inference at cycle t reads only what was
filed up to t, and the update reads the same source table afterwards, so both see the same
stacked input.

A frozen seat's rows are written into the rectangle too (they are never trained: its cells are
not the learner's), so the snapshot that plays it sees its history the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
import numpy as np

from shared.nn.frame_stack import History

if TYPE_CHECKING:
    from services.learner.rectangle import Rectangle

CARRY_FILE = "frame_history/carry.msgpack"
FILES = (CARRY_FILE,)


class CarryEntry(msgspec.Struct, array_like=True):
    """One seat's history at the boundary: of battle ``battle``'s seat ``seat`` (0 blue, 1 red)
    at episode ``ordinal`` and the boundary's tick; ``rows`` is (k - 1) packed rows, newest
    first, ``valid`` which of them exist."""

    battle: int
    seat: int
    ordinal: int
    tick: int
    rows: bytes
    valid: list[bool]


class FrameHistory:
    """The history source table of one iteration and the carry between iterations."""

    def __init__(self, k: int, row_bytes: int):
        if k < 2:
            raise ValueError(f"FrameHistory is for obs.frame_stack >= 2, got {k}")
        self.k, self.row_bytes = k, row_bytes
        self.carry: dict[tuple[int, int], CarryEntry] = {}
        self.rect: Rectangle = None  # type: ignore[assignment]  # begin() sets it before any other call

    # ------------------------------------------------------------------ one iteration

    def begin(self, rect, battle_ids: np.ndarray) -> None:
        """A new rectangle; ``battle_ids`` (R // 2,) the battle of each slot pair."""
        T, R, km1 = rect.T, rect.R, self.k - 1
        self.rect = rect
        self.battle_of_slot = np.repeat(np.asarray(battle_ids, np.int64), 2)
        self.source = np.zeros((T + 1, R, km1), np.int64)
        self.valid = np.zeros((T + 1, R, km1), bool)
        self.carry_rows = np.zeros((R, km1, self.row_bytes), np.uint8)
        self.ordinal = np.full((T + 1, R), -1, np.int64)

    def file(self, t: int, slots: np.ndarray, group: np.ndarray, ordinals: np.ndarray, frozen_slots: np.ndarray,
             frozen_rows: np.ndarray) -> None:
        """Row ``t`` of ``slots`` has been stored (``Rectangle.store_obs``): keep the frozen
        seats' rows in the rectangle and decide each held slot's history."""
        rect, km1 = self.rect, self.k - 1
        if len(frozen_slots):
            rect.rows[t, frozen_slots] = frozen_rows
        held = slots[group >= 0]
        self.ordinal[t, slots] = ordinals
        self.valid[t, held] = False
        start = rect.tick[t, held] == 0
        if t == 0:
            self.source[0, held] = -(np.arange(km1) + 1)
            for r, is_start in zip(held, start):
                entry = self.carry.get((int(self.battle_of_slot[r]), int(r % 2)))
                if is_start or entry is None or entry.ordinal != self.ordinal[0, r] or entry.tick != rect.tick[0, r]:
                    continue
                self.carry_rows[r] = np.frombuffer(entry.rows, np.uint8).reshape(km1, self.row_bytes)
                self.valid[0, r] = entry.valid
            return
        cont = held[~start & rect.obs_valid[t - 1, held] & (rect.group[t - 1, held] == rect.group[t, held])]
        self.source[t, cont, 0] = t - 1
        self.valid[t, cont, 0] = True
        self.source[t, cont, 1:] = self.source[t - 1, cont, :-1]
        self.valid[t, cont, 1:] = self.valid[t - 1, cont, :-1]

    def end(self) -> None:
        """The boundary: the carry becomes the history of every seat's row T (the next
        iteration's cycle 0), for the slots whose row T arrived."""
        rect, T = self.rect, self.rect.T
        carry = {}
        held = np.flatnonzero(rect.obs_valid[T] & (rect.group[T] >= 0))
        h = self.history(np.full(len(held), T), held)
        for i, r in enumerate(held):
            key = (int(self.battle_of_slot[r]), int(r % 2))
            carry[key] = CarryEntry(battle=key[0], seat=key[1], ordinal=int(self.ordinal[T, r]),
                                    tick=int(rect.tick[T, r]), rows=h.rows[i].tobytes(), valid=h.valid[i].tolist())
        self.carry = carry

    # ------------------------------------------------------------------ reading

    def history(self, t_idx: np.ndarray, r_idx: np.ndarray) -> History:
        """The ``History`` of cells (t_idx[i], r_idx[i]): (n, k - 1, row_bytes) rows gathered
        from the rectangle and the carry, zeros where a frame is missing."""
        t_idx, r_idx = np.asarray(t_idx, np.int64), np.asarray(r_idx, np.int64)
        src = self.source[t_idx, r_idx]  # (n, k - 1)
        valid = self.valid[t_idx, r_idx].copy()
        rows = np.zeros((len(t_idx), self.k - 1, self.row_bytes), np.uint8)
        rr = np.broadcast_to(r_idx[:, None], src.shape)
        own = valid & (src >= 0)
        rows[own] = self.rect.rows[src[own], rr[own]]
        carried = valid & (src < 0)
        rows[carried] = self.carry_rows[rr[carried], -src[carried] - 1]
        return History(rows, valid)

    def at(self, t: int, slots: np.ndarray) -> History:
        """The history of row ``t`` of ``slots`` (inference)."""
        return self.history(np.full(len(slots), t), slots)

    def after(self, t_idx: np.ndarray, r_idx: np.ndarray) -> History:
        """The history of the observation AFTER cells (t, r) (a truncated episode's final
        observation): row t itself, then row t's own history."""
        h = self.history(t_idx, r_idx)
        rows = np.concatenate([self.rect.rows[t_idx, r_idx][:, None], h.rows[:, :-1]], axis=1)
        valid = np.concatenate([np.ones((len(t_idx), 1), bool), h.valid[:, :-1]], axis=1)
        return History(rows, valid)

    # ------------------------------------------------------------------ the checkpoint

    def files(self) -> dict[str, bytes]:
        entries = [self.carry[k] for k in sorted(self.carry)]
        return {CARRY_FILE: msgspec.msgpack.encode({"k": self.k, "row_bytes": self.row_bytes, "entries": entries})}

    def load(self, files: dict[str, bytes]) -> None:
        """Raises ValueError for a carry of another frame stack or row size (the identity's
        frame_stack and codec table already refuse such a resume; this says which file)."""
        doc = msgspec.msgpack.decode(files[CARRY_FILE])
        if doc["k"] != self.k or doc["row_bytes"] != self.row_bytes:
            raise ValueError(f"{CARRY_FILE}: a carry of frame_stack {doc['k']} and {doc['row_bytes']} B rows; this run "
                             f"stacks {self.k} frames of {self.row_bytes} B")
        entries = msgspec.convert(doc["entries"], list[CarryEntry])
        self.carry = {(e.battle, e.seat): e for e in entries}


class NoFrameHistory:
    """frame_stack 1: nothing to keep, and an empty carry file so every checkpoint has it."""

    def files(self) -> dict[str, bytes]:
        return {CARRY_FILE: msgspec.msgpack.encode({"k": 1, "row_bytes": 0, "entries": []})}

    def load(self, files: dict[str, bytes]) -> None:
        pass


def make_frame_history(k: int, row_bytes: int):
    """FrameHistory for k > 1, else NoFrameHistory (which keeps nothing)."""
    return FrameHistory(k, row_bytes) if k > 1 else NoFrameHistory()


def of_cells(fh, t_idx: np.ndarray, r_idx: np.ndarray) -> History | None:
    """The history of cells (t_idx, r_idx), or None without frame stacking."""
    return fh.history(t_idx, r_idx) if isinstance(fh, FrameHistory) else None


def after_cells(fh, t_idx: np.ndarray, r_idx: np.ndarray) -> History | None:
    """The history of the observation after cells (t, r), or None without frame stacking."""
    return fh.after(t_idx, r_idx) if isinstance(fh, FrameHistory) else None
