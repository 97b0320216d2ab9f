"""Frame stacking (``obs.frame_stack = k``): the trunk's input carries the previous k - 1
decisions of the same seat, in the same episode, next to the current one.

What is stacked, per previous decision j = 1 .. k - 1 (j = 1 the decision just before), in that
order: its spatial planes (C, static ones included) and its per-slot mask planes (hand_slots),
so the board input is ``k * (C + hand_slots) + 2 + E`` channels (``shared.nn.model``). The
vector and the flat mask are the CURRENT decision's only.

Where the history comes from: the packed rows already kept (the learner's rectangle and the k - 1
rows per seat it carries across an iteration boundary, services/learner/frame_history.py), never
a second copy of each row per frame. A history is handed around as ``History(rows, valid)``:
``rows`` (B, k - 1, row_bytes) uint8, ``valid`` (B, k - 1) bool.

The fill for missing history is ZEROS (``FILL``): a frame before the episode's first decision
(every frame at the first decision, k - 1 - d of them at decision d < k - 1), or one the learner
does not hold (a lost rollout's cell), is all-zero planes. The episode's start is where the
history resets: nothing of the previous episode of the same battle is ever seen.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

FILL = 0.0
"""The value of every plane of a missing history frame."""


class History(NamedTuple):
    """The previous k - 1 decisions of B seats: ``rows`` (B, k - 1, row_bytes) uint8 packed
    rows (index j - 1 is decision t - j), ``valid`` (B, k - 1) bool (False: the frame is
    missing and reads as ``FILL``)."""

    rows: np.ndarray
    valid: np.ndarray

    def take(self, index) -> "History":
        return History(self.rows[index], self.valid[index])


def empty_history(n: int, k: int, row_bytes: int) -> History:
    """B = n seats with no history at all (an episode's first decision)."""
    return History(np.zeros((n, k - 1, row_bytes), np.uint8), np.zeros((n, k - 1), bool))


def history_channels(spec) -> int:
    """(k - 1) * (C + hand_slots): the board input channels the history adds."""
    return (spec.frame_stack - 1) * (len(spec.plane_names) + spec.hand_slots)


def history_planes(expanded: dict[str, torch.Tensor], valid: torch.Tensor, spec) -> torch.Tensor:
    """The history's board planes.

    ``expanded`` is the codec's expansion of the B * (k - 1) history rows (row-major over
    (seat, j)): ``spatial`` (B (k-1), C, H, W) float32 and ``mask`` (B (k-1), A) bool;
    ``valid`` (B, k - 1) bool on the same device. Returns (B, (k-1) (C + hand_slots), H, W)
    float32: per frame j its spatial planes then its mask planes, a missing frame all ``FILL``.
    """
    from shared.nn.model import mask_planes

    b, km1 = valid.shape
    h, w = spec.height, spec.width
    frames = torch.cat([expanded["spatial"], mask_planes(expanded["mask"], spec).to(torch.float32)], dim=1)
    frames = frames.reshape(b, km1, -1, h, w)
    frames = torch.where(valid[:, :, None, None, None], frames, torch.full_like(frames, FILL))
    return frames.reshape(b, -1, h, w)


class SeatHistory:
    """The last k - 1 packed rows of ONE seat in one episode: for a player that acts seat by
    seat (an evaluation game, a replay). ``push`` after each decision's row; ``reset`` at the
    episode's start. ``history()`` is the ``History`` (B = 1) of the next decision."""

    def __init__(self, k: int, row_bytes: int):
        self.k, self.row_bytes = k, row_bytes
        self._rows: list[np.ndarray] = []

    def reset(self) -> None:
        self._rows.clear()

    def history(self) -> History:
        h = empty_history(1, self.k, self.row_bytes)
        for j, row in enumerate(reversed(self._rows)):  # newest first: j = 0 is decision t - 1
            h.rows[0, j] = row
            h.valid[0, j] = True
        return h

    def push(self, row: np.ndarray) -> None:
        self._rows.append(np.array(row, dtype=np.uint8, copy=True))
        del self._rows[: max(0, len(self._rows) - (self.k - 1))]
