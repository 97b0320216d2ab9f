"""The ensemble's Thompson choice and its steadiness keys, by hand-worked numbers."""

from __future__ import annotations

import numpy as np
import pytest

from services.learner.treestrap.ensemble import ensemble_keys, thompson_choice, thompson_probs

NINF = -np.inf
# 2 rows, 4 heads, 3 candidates (row 1 has two: its third is padding)
SCORES = np.array([
    [[1.0, 2.0, 0.0], [3.0, 2.0, 0.0], [0.0, 2.5, 2.4], [0.0, 1.0, 5.0]],   # argmaxes 1, 0, 1, 2
    [[1.0, 0.0, NINF], [1.0, 0.5, NINF], [0.0, 2.0, NINF], [2.0, 2.0, NINF]],  # argmaxes 0, 0, 1, 0 (tie: lower)
])


def test_a_drawn_heads_argmax_among_the_candidates_with_ties_to_the_search_order():
    choice = thompson_choice(SCORES, np.array([[0, 1, 2, 3], [0, 1, 2, 3]]))
    assert choice.tolist() == [[1, 0, 1, 2], [0, 0, 1, 0]]
    np.testing.assert_array_equal(thompson_probs(choice, 3), [[0.25, 0.5, 0.25], [0.75, 0.25, 0.0]])
    assert thompson_probs(thompson_choice(SCORES, np.array([[3], [2]])), 3).tolist() == [[0, 0, 1], [0, 1, 0]]


def test_steadiness_keys_by_hand():
    # row 0: argmaxes 1,0,1,2: equal ordered pairs off the diagonal 2 (heads 0 and 2) of 12 -> disagreement 10/12;
    # row 1: 0,0,1,0: equal pairs 6 of 12 -> 6/12. Mean 2/3.
    # halves: row 0 heads {0,1} mean [2, 2, 0] -> 0, heads {2,3} mean [0, 1.75, 3.7] -> 2: disagree;
    # row 1 heads {0,1} mean [1, .25] -> 0, heads {2,3} [1, 2] -> 1: disagree. Stability 0.
    # whole mean: row 0 [1, 1.875, 1.85] -> 1, row 1 [1, 1.125] -> 1; search tops 1 and 0 -> agreement 0.5
    keys = ensemble_keys(SCORES, np.array([1, 0]))
    assert keys == pytest.approx({"head_disagreement": 2 / 3, "target_stability": 0.0, "search_agreement": 0.5})


def test_identical_heads_never_disagree_and_their_halves_agree():
    rng = np.random.default_rng(0)
    one = rng.normal(size=(50, 1, 5))
    keys = ensemble_keys(np.repeat(one, 6, axis=1), np.argmax(one[:, 0], axis=1))
    assert keys == {"head_disagreement": 0.0, "target_stability": 1.0, "search_agreement": 1.0}


def test_refusals_name_the_problem():
    with pytest.raises(ValueError, match="rows, heads, candidates"):
        ensemble_keys(np.zeros((2, 3)), np.zeros(2))
    with pytest.raises(ValueError, match="at least one finite"):
        ensemble_keys(np.full((1, 2, 2), NINF), np.zeros(1))
    with pytest.raises(ValueError, match="outside 0..3"):
        thompson_choice(SCORES, np.array([[4], [0]]))
    assert ensemble_keys(np.zeros((0, 3, 2)), np.zeros(0)) == {}
