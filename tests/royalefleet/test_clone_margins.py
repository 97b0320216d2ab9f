"""royalefleet.clone_margins: held-out agreement split by the search's margin, worked by hand."""

import numpy as np
import pytest

from royalefleet.clone_margins import agreement_by_margin, describe_by_margin

NEG = -np.inf


def test_bands_count_overrules_agreement_and_the_base_move():
    # (survivors, own pick first; scores on the pick rule's scale) -> margins 0.02, 0.5, 0.15, 0.5, unsearched
    acts = np.array([[5, 7], [5, 9], [3, 4], [8, 2], [-1, -1]])
    scores = np.array([[0.30, 0.28], [0.1, 0.6], [0.45, 0.30], [0.9, 0.4], [NEG, NEG]], np.float32)
    teacher = np.array([5, 9, 3, 8, 6])
    picks = np.array([5, 5, 4, 8, 6])
    bands = agreement_by_margin(picks, teacher, acts, scores)
    assert [(b["low"], b["high"], b["choices"]) for b in bands] == [(0.0, 0.05, 1), (0.1, 0.2, 1), (0.4, None, 2)]
    first, mid, clear = bands
    assert (first["overruled"], first["agreement"], first["base_move"]) == (0.0, 1.0, 1.0)
    assert (mid["overruled"], mid["agreement"], mid["base_move"]) == (0.0, 0.0, 0.0)
    # margin >= 0.4: row 1 overruled (9 over own 5) and the clone played the base move; row 3 kept and copied
    assert (clear["overruled"], clear["agreement"], clear["base_move"]) == (0.5, 0.5, 1.0)
    lines = describe_by_margin(bands, "the last epoch")
    assert lines[0].endswith("as the last epoch plays them:")
    assert lines[-1] == ("  margin    > 0.40:      2 choices, the search overruled its base player on 0.50; "
                         "the clone agrees on 0.500, plays the base player's move on 1.000")


def test_a_tie_broken_by_keep_sits_with_the_close_calls():
    # two survivors with equal means, the own pick raised by keep 0.1 (float32, as search_choices gives it)
    scores = np.array([[np.float32(0.3) + np.float32(0.1), 0.3], [0.9, 0.4]], np.float32)
    bands = agreement_by_margin(np.array([1, 2]), np.array([1, 2]), np.array([[1, 4], [2, 5]]), scores)
    assert [(b["low"], b["high"], b["choices"]) for b in bands] == [(0.05, 0.1, 1), (0.4, None, 1)]


def test_unsearched_rows_give_no_band_and_lengths_must_match():
    acts = np.full((3, 2), -1)
    scores = np.full((3, 2), NEG, np.float32)
    assert agreement_by_margin(np.zeros(3, np.int64), np.zeros(3, np.int64), acts, scores) == []
    assert describe_by_margin([]) == []
    with pytest.raises(ValueError, match=r"picks \(2\), actions \(3\)"):
        agreement_by_margin(np.zeros(2, np.int64), np.zeros(3, np.int64), acts, scores)
