"""Plan candidates: the few moves a scripted rung would make with each card, instead of random tiles.

A scripted teacher's search draws, after its own pick and the no-op, candidates from the legal
set at random (``services/evaluator/searched.py``): its overrules then land on one tile of ~400,
a different one each time, which a network cannot tell apart from noise (docs/learning.md,
"Distilling the search": 76 % of the ``keep=0.1`` teacher's overrules were its card on some other
tile, spread over 32 rows and 18 columns). ``cand=plans`` draws instead, for every hand slot that
has a legal cell, the three placements RoyaleGym's rungs would make with it: ``defend``'s anchor
(its own half, nearest a quarter up the centre line), and ``push``'s furthest-forward cell down
the right and down the left lane. The search then chooses which card and which plan, and a clone
learns a handful of repeatable moves.

Torch-free; reads only the mask planes, as the rungs do.
"""

from __future__ import annotations

import numpy as np


def slot_plans(planes: np.ndarray) -> list[int]:
    """Head-frame action ids of the plan moves of ``planes`` ((slots, H, W) legality in the acting
    seat's own frame, RoyaleGym's ``mask_planes``): for each slot in order with a legal cell, the
    anchor (own half y < H/2, nearest (H/4, centre) by 4 dy^2 + (2x - (W-1))^2, then lowest y, x;
    left out when the slot has no own-half cell), the forward-right cell (max y, then max x) and
    the forward-left cell (max y, then min x), each once. The id is
    ``1 + slot * H * W + y * W + x`` (``shared.demos.head_action``)."""
    planes = np.asarray(planes)
    n_slots, ny, nx = planes.shape
    out: list[int] = []
    for slot in range(n_slots):
        cells = np.argwhere(planes[slot] > 0)
        if not cells.size:
            continue
        ys, xs = cells[:, 0], cells[:, 1]
        picks = []
        own = ys < ny // 2
        if own.any():
            d = 4 * (ys[own] - ny // 4) ** 2 + (2 * xs[own] - (nx - 1)) ** 2
            i = np.lexsort((xs[own], ys[own], d))[0]
            picks.append((ys[own][i], xs[own][i]))
        right = np.lexsort((xs, ys))[-1]
        left = np.lexsort((-xs, ys))[-1]
        picks += [(ys[right], xs[right]), (ys[left], xs[left])]
        for y, x in picks:
            a = int(1 + slot * ny * nx + y * nx + x)
            if a not in out:
                out.append(a)
    return out


def plan_candidates(own: int, planes: np.ndarray, legal: np.ndarray, k: int, rng: np.random.Generator) -> list[int]:
    """``k`` distinct candidates (fewer when fewer are legal): ``own`` (the base's pick), the no-op
    when legal, the plan moves (``slot_plans``) in slot order, then random legal plays from ``rng``
    to fill. Every id is in ``legal`` ((n,) int, the legal ids)."""
    legal_set = set(int(a) for a in legal)
    order = [int(own)] + ([0] if 0 in legal_set else []) + [a for a in slot_plans(planes) if a in legal_set]
    out: list[int] = []
    for a in order:
        if a not in out:
            out.append(a)
    if len(out) < k:
        rest = np.asarray([a for a in legal if int(a) not in out], np.int64)
        out += [int(a) for a in rng.permutation(rest)[: k - len(out)]]
    return out[:k]
