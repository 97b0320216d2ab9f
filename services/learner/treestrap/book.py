"""TreeStrap's book: expert iteration's (``expert_iteration.targets.ExpitBook``: the search's
candidates checked, the fixed-scale margin target, the root value) keeping each accepted search's
candidates, which the Thompson proposal chooses among (``candidates`` by (cycle, slot), int64 (k',)
with k' <= ``alphazero.candidates``, the search's order: the first is the prior's own pick)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from services.learner.expert_iteration.targets import ExpitBook


@dataclass
class TreeBook(ExpitBook):
    """``ExpitBook`` with the accepted searches' candidates (module docstring)."""

    candidates_of: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)

    def begin(self, reward_divisor: float = 1.0) -> None:
        super().begin(reward_divisor)
        self.candidates_of.clear()

    def complete(self, cycle: int, slots: np.ndarray, candidates: np.ndarray, q: np.ndarray,
                 moves: np.ndarray) -> list[tuple[int, int, float]]:
        """``ExpitBook.complete``, each accepted search's candidates kept."""
        held = {int(s): self.pending.get((cycle, int(s))) for s in np.asarray(slots).tolist()}
        out = super().complete(cycle, slots, candidates, q, moves)
        for slot, _, _ in out:
            p = held[slot]
            assert p is not None  # accepted: it was pending
            self.candidates_of[(cycle, slot)] = np.asarray(p.candidates, np.int64)
        return out

    def candidate_table(self, cells: list[tuple[int, int]], k: int) -> np.ndarray:
        """int16 (len(cells), k): each cell's candidates, -1 padded."""
        out = np.full((len(cells), k), -1, np.int16)
        for i, cell in enumerate(cells):
            c = self.candidates_of[cell]
            out[i, :len(c)] = c
        return out
