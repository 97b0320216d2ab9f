"""TreeStrap's book keeps an accepted search's candidates (in the search's order) beside expert
iteration's target, and nothing for a search the book refuses."""

from __future__ import annotations

import numpy as np

from services.learner.alphazero.book import _Pending
from services.learner.treestrap.book import TreeBook
from shared.search.targets import gumbel_move_index

KEYS = np.array([3.0, 0.0, -1.0], np.float32)


def book() -> TreeBook:
    return TreeBook(c_scale=0.1, candidates=4, master_seed=1, target_c_scale=0.3, keep=0.3, value_scale=2000.0)


def test_an_accepted_search_keeps_its_candidates_and_a_refused_one_none():
    b = book()
    for slot in (6, 7):
        b.pending[(4, slot)] = _Pending(np.log(np.full(4, 0.25)), np.array([2, 0, 3]), KEYS)
    q = np.array([[0.0, 3000.0, -100.0], [0.0, 3000.0, -100.0]])
    good = int(np.array([2, 0, 3])[gumbel_move_index(KEYS, q[0], c_scale=0.1)])
    out = b.complete(4, np.array([6, 7]), np.array([[2, 0, 3], [2, 1, 3]]), q, np.array([good, good]))
    assert [s for s, _, _ in out] == [6]  # slot 7 reported other candidates than were sent: refused
    assert list(b.candidates_of) == [(4, 6)] and b.candidates_of[(4, 6)].tolist() == [2, 0, 3]
    assert b.candidate_table([(4, 6)], 4).tolist() == [[2, 0, 3, -1]]
    b.begin()
    assert b.candidates_of == {} and b.targets == {}
