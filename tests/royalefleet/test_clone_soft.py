"""A searching teacher's scores in a demonstration set, and the clone's soft targets from them:
the CSR arrays by hand, the pick rule's scores, the targets' probabilities, the loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from royalefleet.clone import masked_ce, soft_ce, soft_targets
from royalefleet.clone_data import CloneRows, search_choices
from services.rollout.demos import search_arrays
from shared.demos import SEARCH_ARRAYS, check_arrays, concat_shards, no_search


def _searches():
    # row 0: 4 candidates (own pick 10 first); row 1 not searched; row 2: 2 candidates
    return [(np.array([10, 0, 20, 30], np.int16), np.array([0.1, 0.0, 0.15, 0.5], np.float32),
             np.array([4, 2, 4, 1], np.int16), 0.1),
            None,
            (np.array([7, 0], np.int16), np.array([-0.2, 0.3], np.float32), np.array([2, 2], np.int16), 0.3)]


def test_search_arrays_are_csr_with_an_empty_row_for_a_decision_not_searched():
    a = search_arrays(_searches())
    assert set(a) == set(SEARCH_ARRAYS)
    assert a["search_offsets"].tolist() == [0, 4, 4, 6]
    assert a["search_actions"].tolist() == [10, 0, 20, 30, 7, 0]
    assert a["search_visits"].tolist() == [4, 2, 4, 1, 2, 2]
    assert a["search_keep"].tolist() == pytest.approx([0.1, 0.0, 0.3])
    # a shard of two rows without them joins with no candidates, the offsets rebased
    joined = concat_shards([_shard(3) | a, _shard(2)])
    assert joined["search_offsets"].tolist() == [0, 4, 4, 6, 6, 6]
    assert joined["search_keep"].tolist() == pytest.approx([0.1, 0.0, 0.3, 0.0, 0.0])
    assert "search_offsets" not in concat_shards([_shard(2), _shard(1)])


def _shard(n: int) -> dict[str, np.ndarray]:
    off = np.arange(n + 1, dtype=np.int32) * 2  # every row: the no-op and one play
    return {"observations": np.zeros((n, 3), np.uint8), "actions": np.zeros(n, np.int64),
            "action_legal": np.ones(n, bool), "legal_ids": np.tile(np.array([0, 5], np.int16), n),
            "legal_offsets": off, "returns": np.zeros(n, np.float32), "outcomes": np.zeros(n, np.int8),
            "battles": np.zeros(n, np.int64), "seats": np.zeros(n, np.int8), "decisions": np.arange(n, dtype=np.int32),
            "forced": np.zeros(n, bool)}


def test_a_shard_with_some_of_the_search_arrays_or_a_bad_offset_is_refused():
    check_arrays(_shard(3) | search_arrays(_searches()), 3)
    check_arrays(_shard(2) | no_search(2), 3)
    partial = _shard(3) | {"search_offsets": np.zeros(4, np.int32)}
    with pytest.raises(ValueError, match=r"and all or none of \['search_actions', 'search_keep', 'search_means', "):
        check_arrays(partial, 3)
    bad = _shard(3) | search_arrays(_searches())
    bad["search_offsets"] = np.array([0, 4, 3, 6], np.int32)
    with pytest.raises(ValueError, match="search_offsets must be"):
        check_arrays(bad, 3)


def test_search_choices_keep_the_survivors_scored_as_the_pick_rule_scores_them():
    arrays = search_arrays(_searches())
    acts, scores = search_choices(arrays, np.arange(3))
    # row 0: 0 and 30 were cut by halving (fewer playouts); own 10 gets 0.1 + keep 0.1 = 0.2
    # against 20's 0.15, so the pick rule plays 10, and so does the argmax of the scores
    assert acts.tolist() == [[10, 20], [-1, -1], [7, 0]]
    assert scores[0].tolist() == pytest.approx([0.2, 0.15])
    assert np.isneginf(scores[1]).all()
    # row 2: own 7 at -0.2 + 0.3 = 0.1 is beaten by the no-op's 0.3 by more than keep
    assert scores[2].tolist() == pytest.approx([0.1, 0.3])
    assert acts[2, np.argmax(scores[2])] == 0


def test_soft_targets_are_a_softmax_over_the_survivors_and_the_move_elsewhere():
    acts, scores = search_choices(search_arrays(_searches()), np.arange(3))
    rows = CloneRows(np.zeros((3, 1), np.uint8), np.array([10, 42, 0]), np.zeros(3, np.float32), np.zeros(3, np.int64),
                     np.ones(3, bool), 0, 0, [], search_actions=acts, search_scores=scores)
    cand, prob, weight = soft_targets(rows, 0.05)
    e = math.e  # (0.2 - 0.15) / 0.05 = 1 nat apart
    assert prob[0].tolist() == pytest.approx([e / (e + 1), 1 / (e + 1)])
    assert cand[1].tolist() == [42, 0] and prob[1].tolist() == [1.0, 0.0]  # not searched: its move
    assert prob[2].tolist() == pytest.approx([1 / (1 + e**4), e**4 / (1 + e**4)])  # 0.2 apart = 4 nats
    assert cand[2].tolist() == [7, 0]
    assert soft_targets(rows, 0.0) is None


def test_soft_ce_is_masked_ce_for_a_one_action_target_and_the_expected_ce_otherwise():
    logits = torch.zeros(3, 4)
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    forced = mask.sum(1) == 1
    one = soft_ce(logits, mask, torch.tensor([[0, 0], [1, 0], [3, 0]]), torch.tensor([[1.0, 0], [1, 0], [1, 0]]),
                  forced)
    assert one.item() == pytest.approx(masked_ce(logits, mask, torch.tensor([0, 1, 3]), forced).item())
    logits[2] = torch.tensor([0.0, math.log(3), 0.0, 0.0])  # row 2: pi = (1, 3, 1, 1) / 6
    two = soft_ce(logits, mask, torch.tensor([[0, 0], [1, 0], [1, 2]]), torch.tensor([[1.0, 0], [0.5, 0.5],
                                                                                       [0.25, 0.75]]), forced)
    # row 1: uniform over 2 legal -> ln 2 whatever the split; row 2: -(0.25 ln 1/2 + 0.75 ln 1/6)
    assert two.item() == pytest.approx((math.log(2) + 0.25 * math.log(2) + 0.75 * math.log(6)) / 2)


def test_margin_weights_grow_with_the_gap_between_the_two_best_scores():
    from royalefleet.clone import search_margins

    acts, scores = search_choices(search_arrays(_searches()), np.arange(3))
    assert search_margins(scores).tolist() == pytest.approx([0.05, 0.0, 0.2])  # 0.2-0.15; none; 0.3-0.1
    rows = CloneRows(np.zeros((3, 1), np.uint8), np.array([10, 42, 0]), np.zeros(3, np.float32), np.zeros(3, np.int64),
                     np.ones(3, bool), 0, 0, [], search_actions=acts, search_scores=scores)
    cand, prob, weight = soft_targets(rows, 0.0, margin_weight=10.0)
    assert weight.tolist() == pytest.approx([1.5, 1.0, 3.0])
    assert cand[:, 0].tolist() == [10, 42, 0] and prob[:, 0].tolist() == [1.0, 1.0, 1.0]  # the moves, weighted
    # the weighted loss: rows of CE 1 and 3 at weights 1 and 3 average to (1 + 9) / 4
    logits = torch.zeros(2, 4)
    mask = torch.ones(2, 4, dtype=torch.bool)
    target = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    ce = soft_ce(logits, mask, torch.tensor([[1, 0], [2, 0]]), target, torch.zeros(2, dtype=torch.bool),
                 torch.tensor([1.0, 3.0]))
    assert ce.item() == pytest.approx(math.log(4))  # equal CEs: the weights cannot move the mean
    logits[1, 2] = -math.log(math.e**2)  # row 1: pi(2) = e^-2 / (3 + e^-2)
    ce = soft_ce(logits, mask, torch.tensor([[1, 0], [2, 0]]), target, torch.zeros(2, dtype=torch.bool),
                 torch.tensor([1.0, 3.0]))
    row1 = -math.log(math.exp(-2) / (3 + math.exp(-2)))
    assert ce.item() == pytest.approx((math.log(4) + 3 * row1) / 4)
