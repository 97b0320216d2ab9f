"""TreeStrap's batch: candidates placed in the legal CSR, the Thompson target as the proposal's
policy target, the search's top-1 among the candidates, and the batch's refusals."""

from __future__ import annotations

import numpy as np
import pytest

from services.learner.treestrap.batch import TreeStrapBatch, candidate_positions, proposal_batch, search_top
from shared.batches import AlphaZeroBatch, PackedObs

# row 0 legal {0, 3, 7}, row 1 legal {0, 2}
IDS = np.array([0, 3, 7, 0, 2], np.int16)
OFF = np.array([0, 3, 5], np.int64)
SEARCH = AlphaZeroBatch(obs=PackedObs(np.zeros((2, 2), np.uint8), np.arange(2), 1, 8), players=np.zeros(2, np.int32),
                        policy_targets=np.array([0.2, 0.5, 0.3, 0.9, 0.1], np.float32),
                        value_targets=np.array([0.5, -1.0], np.float32), policy_weights=np.ones(2, np.float32),
                        legal_ids=IDS, legal_offsets=OFF, n_actions=8)
CANDS = np.array([[3, 7, 0], [2, 0, -1]])


def test_candidates_map_to_their_csr_positions_and_the_search_top():
    pos = candidate_positions(IDS, OFF, CANDS)
    assert pos.tolist() == [[1, 2, 0], [4, 3, -1]]
    assert search_top(SEARCH, pos).tolist() == [0, 1]  # row 0: action 3 (0.5); row 1: action 0 (0.9)
    with pytest.raises(ValueError, match=r"row 1: candidates \[5\]"):
        candidate_positions(IDS, OFF, np.array([[3, -1, -1], [5, -1, -1]]))


def test_the_proposal_batch_puts_the_thompson_shares_on_the_candidates():
    pos = candidate_positions(IDS, OFF, CANDS)
    p = proposal_batch(SEARCH, pos, np.array([[0.25, 0.75, 0.0], [0.0, 1.0, 0.0]]))
    assert p.policy_targets.tolist() == [0.0, 0.25, 0.75, 1.0, 0.0]
    assert p.value_targets is SEARCH.value_targets and p.legal_ids is SEARCH.legal_ids
    b = TreeStrapBatch(SEARCH, p, np.array([[1, 0], [1, 1]]))
    assert b.heads == 2 and len(b) == 2 and b.masks.dtype == np.float32


def test_the_batch_refuses_masks_that_are_not_bootstrap_membership():
    p = proposal_batch(SEARCH, candidate_positions(IDS, OFF, CANDS), np.array([[1.0, 0, 0], [1.0, 0, 0]]))
    with pytest.raises(ValueError, match=r"masks has shape \(2,\), expected \(2, heads >= 1\)"):
        TreeStrapBatch(SEARCH, p, np.ones(2))
    with pytest.raises(ValueError, match="must hold 0 or 1"):
        TreeStrapBatch(SEARCH, p, np.full((2, 3), 0.5))


def test_the_heads_target_over_the_candidates_is_the_search_target_renormalised_there():
    from services.learner.treestrap.batch import candidate_batch

    h = candidate_batch(SEARCH, CANDS, candidate_positions(IDS, OFF, CANDS))
    # row 0: candidates {0, 3, 7} hold the whole target; row 1: {0, 2} too
    assert h.legal_ids.tolist() == [0, 3, 7, 0, 2] and h.legal_offsets.tolist() == [0, 3, 5]
    np.testing.assert_allclose(h.policy_targets, [0.2, 0.5, 0.3, 0.9, 0.1], rtol=1e-6)
    narrow = np.array([[7, 3, -1], [2, -1, -1]])  # row 0: {3, 7}: 0.5, 0.3 -> 0.625, 0.375; row 1: {2} -> 1
    h = candidate_batch(SEARCH, narrow, candidate_positions(IDS, OFF, narrow))
    assert h.legal_ids.tolist() == [3, 7, 2] and h.legal_offsets.tolist() == [0, 2, 3]
    np.testing.assert_allclose(h.policy_targets, [0.625, 0.375, 1.0], rtol=1e-6)
