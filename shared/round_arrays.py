"""The arrays a ``shared.messages.Round`` carries, as one typed struct both sides use: the
rollout builds one per shard and step (``services.rollout.battles.StepResult`` is one), the
learner reads a received round's frames through it (``RoundArrays.of``). Which timestep each
array describes: ``shared.messages.Round``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

OBSERVATION_HALF = ("group", "tick", "ordinal", "rows")
"""The round's own cycle: int8, int32, int32 per slot, uint8 (n_held, row_bytes)."""
STEP_HALF = ("reward", "terminated", "truncated", "deploy_status")
"""The step that arrived (float32, uint8, uint8, int8 per slot); zeros at cycle 0."""
FINALS = ("final_slots", "final_rows")
"""int16 (k,), uint8 (k, row_bytes): the last observation of each truncated learner slot."""
SEARCH = ("search_slots", "search_candidates", "search_q", "search_moves")
"""The search of the step that arrived (``Welcome.search``; services/rollout/search.py): int16
(s,) local slots searched, int16 (s, k) their candidates (-1 pads), float32 (s, k) the
candidates' scores, int16 (s,) the move each played. Absent from a round without search."""
NAMES = OBSERVATION_HALF + STEP_HALF + FINALS + SEARCH


@dataclass(kw_only=True)
class RoundArrays:
    group: np.ndarray
    tick: np.ndarray
    ordinal: np.ndarray
    rows: np.ndarray
    final_slots: np.ndarray
    final_rows: np.ndarray
    reward: np.ndarray | None = None
    terminated: np.ndarray | None = None
    truncated: np.ndarray | None = None
    deploy_status: np.ndarray | None = None
    """The step half is None only in a held cycle-T round re-filed as cycle 0 (its step was
    filed in the iteration before)."""
    search_slots: np.ndarray | None = None
    search_candidates: np.ndarray | None = None
    search_q: np.ndarray | None = None
    search_moves: np.ndarray | None = None
    """``SEARCH``: all four or none; part of the step half."""

    def arrays(self) -> dict[str, np.ndarray]:
        """name -> array, in ``NAMES`` order, the step half left out when it is None: the frames
        a Round is sent with (``shared.transport.send``)."""
        return {n: getattr(self, n) for n in NAMES if getattr(self, n) is not None}

    @classmethod
    def of(cls, arrays: Mapping[str, np.ndarray], *, step: bool = True) -> RoundArrays:
        """The struct of a received round's (decompressed) frames; ``step=False`` takes no step
        half. Raises KeyError naming the first array missing."""
        wanted = OBSERVATION_HALF + FINALS + (STEP_HALF if step else ())
        found = [n for n in SEARCH if n in arrays] if step else []
        if found and len(found) != len(SEARCH):
            raise KeyError(f"a searched round carries {found} of the search arrays {list(SEARCH)}")
        return cls(**{n: arrays[n] for n in wanted + tuple(found)})

    def observation_half(self) -> RoundArrays:
        """This round as a cycle-0 round: its observation half, no step half (no search), no final rows."""
        return RoundArrays(group=self.group, tick=self.tick, ordinal=self.ordinal, rows=self.rows,
                           final_slots=self.final_slots[:0], final_rows=self.final_rows[:0])
