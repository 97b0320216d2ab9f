"""Expert iteration's targets on a hand-built search: the margin target on the fixed scale and
the root value, after AlphaZero's book accepted the search."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.learner.alphazero.book import _Pending
from services.learner.expert_iteration.targets import ExpitBook
from shared.search.targets import gumbel_move_index


def book(**kw) -> ExpitBook:
    return ExpitBook(c_scale=0.1, candidates=3, master_seed=1, target_c_scale=0.3, keep=0.3, value_scale=2000.0, **kw)


def report(b: ExpitBook, q: list[float]):
    """One search at (cycle 4, slot 6): legal {0, 1, 2, 3} under a uniform prior, candidates
    (2, 0, 3) (2 the prior's own pick), scores ``q``; the move by the rollout's rule."""
    lp = np.log(np.full(4, 0.25))
    cand, keys = np.array([2, 0, 3]), np.array([3.0, 0.0, -1.0], np.float32)
    b.pending[(4, 6)] = _Pending(lp, cand, keys)
    move = int(cand[gumbel_move_index(keys, np.asarray(q), c_scale=0.1)])
    return b.complete(4, np.array([6]), np.array([[2, 0, 3]]), np.array([q]), np.array([move])), move


def test_a_candidate_that_beats_the_own_pick_by_more_than_keep_takes_the_mass_and_gives_the_root_value():
    b = book()
    out, move = report(b, [0.0, 3000.0, -100.0])  # board differences in tower HP
    assert move == 0 and [(s, m) for s, m, _ in out] == [(6, 0)]
    s = [0.0, math.tanh(1.5), math.tanh(-0.05)]  # the fixed scale: tanh(q / 2000)
    boost = 51 * 0.3 * (s[1] - s[0] - 0.3)  # 9.2588 nats for action 0, nothing for the others
    t = b.targets[(4, 6)]
    assert t.ids.tolist() == [0, 1, 2, 3]
    assert t.probs[0] == pytest.approx(math.exp(boost) / (math.exp(boost) + 3), rel=1e-6)  # 0.99971
    assert t.probs[1:].tolist() == pytest.approx([1 / (math.exp(boost) + 3)] * 3, rel=1e-6)
    assert b.searched[(4, 6)].root == pytest.approx(math.tanh(1.5), abs=1e-12)  # the move's score
    assert b.searched[(4, 6)].move == 0 and b.searched[(4, 6)].prior.tolist() == pytest.approx([math.log(0.25)] * 4)


def test_a_difference_within_keep_leaves_the_prior_as_it_was():
    b = book()
    report(b, [0.0, 400.0, -100.0])  # tanh(0.2) = 0.197 < keep 0.3 above the own pick
    assert b.targets[(4, 6)].probs.tolist() == pytest.approx([0.25] * 4)


def test_critic_scores_are_taken_on_their_own_scale():
    b = book(critic_scores=True)
    report(b, [0.1, 0.9, -0.2])
    boost = 51 * 0.3 * (0.9 - 0.1 - 0.3)
    assert b.targets[(4, 6)].probs[0] == pytest.approx(math.exp(boost) / (math.exp(boost) + 3), rel=1e-6)
    assert b.searched[(4, 6)].root == pytest.approx(0.9)


def test_a_search_the_book_refuses_gets_no_target_and_no_root():
    b = book()
    b.pending[(4, 6)] = _Pending(np.log(np.full(4, 0.25)), np.array([2, 0, 3]), np.array([3.0, 0.0, -1.0]))
    b.complete(4, np.array([6]), np.array([[2, 0, 3]]), np.array([[0.0, 3000.0, -100.0]]), np.array([3]))  # not the rule's move
    assert b.refused == 1 and not b.targets and not b.searched
