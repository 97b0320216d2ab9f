"""An iteration's searched rows as a replay part: (cycle, slot) order, only trainable searched
cells, the value target the root value or the realized return."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from services.learner.alphazero.book import SearchTarget
from services.learner.expert_iteration.learner import searched_part
from services.learner.expert_iteration.targets import ExpitBook, Searched


def setup():
    T, R, W = 3, 4, 2
    rows = np.arange(T * R * W, dtype=np.uint8).reshape(T, R, W)  # cell (t, r) holds bytes 8t + 2r, 8t + 2r + 1
    trainable = np.ones((T, R), bool)
    trainable[1, 3] = False  # searched but not trainable (its episode's cell is invalid): left out
    returns = np.arange(T * R, dtype=np.float64).reshape(T, R) / 10  # return of (t, r): (4t + r) / 10
    book = ExpitBook(c_scale=0.1, candidates=2, master_seed=0)
    # filed out of order, as rounds arrive
    for (t, r), n, root in (((2, 0), 3, 0.5), ((0, 2), 2, -0.25), ((1, 3), 2, 9.0), ((0, 1), 1, 0.75)):
        book.targets[(t, r)] = SearchTarget(np.arange(n, dtype=np.int16), np.full(n, 1 / n, np.float32), 0.0, 0.0, False)
        book.searched[(t, r)] = Searched(root, np.zeros(n, np.float32), 0)
    c = SimpleNamespace(rect=SimpleNamespace(rows=rows))
    return c, SimpleNamespace(trainable=trainable, returns=returns), book


def test_the_part_holds_the_trainable_searched_cells_in_cycle_slot_order_with_the_root_value():
    c, adv, book = setup()
    p = searched_part(7, c, adv, book, root=True)
    assert p.iteration == 7 and len(p) == 3
    assert p.rows.tolist() == [[2, 3], [4, 5], [16, 17]]  # (0, 1), (0, 2), (2, 0)
    assert p.values.tolist() == [0.75, -0.25, 0.5]
    assert p.legal_offsets.tolist() == [0, 1, 3, 6] and p.legal_ids.tolist() == [0, 0, 1, 0, 1, 2]
    assert p.probs.tolist() == [1.0, 0.5, 0.5] + [np.float32(1 / 3)] * 3


def test_under_the_return_target_the_value_is_the_cells_realized_return():
    c, adv, book = setup()
    p = searched_part(7, c, adv, book, root=False)
    assert p.values.tolist() == [np.float32(0.1), np.float32(0.2), np.float32(0.8)]


def test_an_iteration_without_a_searched_cell_gives_an_empty_part():
    c, adv, book = setup()
    book.targets.clear()
    p = searched_part(7, c, adv, book, root=True)
    assert len(p) == 0 and p.legal_offsets.tolist() == [0] and p.values.shape == (0,)
