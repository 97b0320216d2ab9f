"""Seed 000's AlphaZeroBatch invariants over many random batches (shared/batches.py,
services/learner/alphazero/loss.py): CSR slices gathered per minibatch equal seed 000's dense
recipe; value-only rows (empty slice, weight 0) contribute exactly 0 to the policy loss and its
gradient; illegal actions get probability 0 under ``finfo(dtype).min`` masking in float32 and
float16 with no NaN; a minibatch allocates (minibatch, actions), never the buffer's dense mask;
every broken invariant is refused naming the field."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from services.learner.alphazero.loss import masked_logits, policy_cross_entropy
from shared.batches import AlphaZeroBatch, PackedObs, dense_from_csr


def _obs(n: int, n_actions: int) -> PackedObs:
    mask_bytes = (n_actions + 7) // 8
    return PackedObs(np.zeros((max(n, 1), 4 + mask_bytes), np.uint8), np.zeros(n, np.int64), 4, n_actions)


def make_batch(seed: int, n: int, n_actions: int, p_policy: float) -> AlphaZeroBatch:
    """A valid batch: each row is a policy row (1..A legal ids, Dirichlet targets, weight in
    (0, 2]) with probability ``p_policy``, else value-only (empty slice, weight 0)."""
    rng = np.random.default_rng(seed)
    ids, offsets, targets, weights = [], [0], [], np.zeros(n, np.float32)
    for i in range(n):
        if rng.random() < p_policy:
            k = int(rng.integers(1, n_actions + 1))
            row = np.sort(rng.choice(n_actions, k, replace=False))
            t = rng.dirichlet(np.full(k, 0.5)).astype(np.float32)
            t /= t.sum(dtype=np.float32)
            ids.append(row)
            targets.append(t)
            weights[i] = np.float32(rng.uniform(0.1, 2.0))
        offsets.append(offsets[-1] + (len(ids[-1]) if weights[i] > 0 else 0))
    cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
    return AlphaZeroBatch(obs=_obs(n, n_actions), players=np.arange(n, dtype=np.int32),
                          policy_targets=cat(targets, np.float32), value_targets=rng.normal(size=n).astype(np.float32),
                          policy_weights=weights, legal_ids=cat(ids, np.int16),
                          legal_offsets=np.asarray(offsets, np.int64), n_actions=n_actions)


batches = st.builds(make_batch, st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(1, 50),
                    st.sampled_from([0.0, 0.07, 0.5, 1.0]))


@settings(max_examples=200, deadline=None)
@given(batch=batches, pick=st.integers(0, 2**32 - 1))
def test_minibatch_is_the_dense_recipe_of_the_selected_rows(batch, pick):
    rows = np.random.default_rng(pick).integers(0, len(batch), size=int(np.random.default_rng(pick).integers(1, 17)))
    mb = batch.minibatch(rows)
    dense = dense_from_csr(batch.legal_ids, batch.legal_offsets, batch.n_actions)  # seed 000's recipe, whole batch
    assert mb.legal.shape == mb.policy_targets.shape == (len(rows), batch.n_actions)
    np.testing.assert_array_equal(mb.legal, dense[rows])
    full_targets = np.zeros(dense.shape, np.float32)
    r = np.repeat(np.arange(len(batch)), np.diff(batch.legal_offsets))
    full_targets[r, batch.legal_ids.astype(np.int64)] = batch.policy_targets
    np.testing.assert_array_equal(mb.policy_targets, full_targets[rows])
    assert not mb.policy_targets[~mb.legal].any()
    np.testing.assert_array_equal(mb.policy_weights, batch.policy_weights[rows])
    np.testing.assert_array_equal(mb.value_targets, batch.value_targets[rows])
    empty = ~mb.legal.any(axis=1)
    assert (mb.policy_weights[empty] == 0).all()
    np.testing.assert_allclose(mb.policy_targets[~empty].sum(axis=1), 1.0, atol=1e-4)


@settings(max_examples=150, deadline=None)
@given(batch=batches, dtype=st.sampled_from([torch.float32, torch.float16]), seed=st.integers(0, 2**31 - 1))
def test_masked_loss_zero_off_the_legal_set_and_value_only_rows_inert(batch, dtype, seed):
    rows = np.arange(len(batch))
    mb = batch.minibatch(rows)
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(mb.legal.shape, generator=g) * 30).to(dtype).requires_grad_(True)
    legal = torch.from_numpy(mb.legal)
    masked = masked_logits(logits, legal)
    assert (masked[~legal] == torch.finfo(dtype).min).all()
    probs = torch.softmax(masked.float(), dim=-1)
    has_legal = legal.any(dim=1)
    assert (probs[has_legal][~legal[has_legal]] == 0).all()  # illegal: exactly 0 where any action is legal
    loss = policy_cross_entropy(logits.float(), legal, torch.from_numpy(mb.policy_targets),
                                torch.from_numpy(mb.policy_weights))
    assert torch.isfinite(loss).all()
    assert (loss[~has_legal] == 0).all()
    loss.sum().backward()
    grad = logits.grad.float()
    assert torch.isfinite(grad).all()
    assert (grad[~has_legal] == 0).all()  # value-only rows: no policy gradient at all
    assert (grad[~legal] == 0).all()  # and no gradient into an illegal logit
    # cross-entropy >= entropy of the target (Gibbs), row by row, for the policy rows
    t = torch.from_numpy(mb.policy_targets).double()
    ent = -(t * torch.where(t > 0, t.log(), torch.zeros_like(t))).sum(-1)
    w = torch.from_numpy(mb.policy_weights).double()
    assert (loss.double()[has_legal] >= (w * ent)[has_legal] - 1e-3).all()


def test_cross_entropy_by_hand():
    # logits [1, 2, 0] with legal {0, 1}: p = softmax([1, 2]) = [e/(e+e^2), e^2/(e+e^2)] = [0.26894, 0.73106]
    # target [0.5, 0.5] weight 2: loss = -2 (0.5 ln 0.26894 + 0.5 ln 0.73106) = -(-1.31326 - 0.31326) = 1.62652
    logits = torch.tensor([[1.0, 2.0, 0.0]])
    legal = torch.tensor([[True, True, False]])
    loss = policy_cross_entropy(logits, legal, torch.tensor([[0.5, 0.5, 0.0]]), torch.tensor([2.0]))
    assert loss.item() == pytest.approx(1.626523, abs=1e-5)


def test_a_minibatch_allocates_only_minibatch_by_actions():
    n, n_actions, m = 20_000, 2305, 8
    batch = make_batch(7, n, n_actions, 0.07)  # ~7 % policy rows, as a rollout ships them
    dense_bytes = n * n_actions  # a dense bool mask of the whole buffer: 46 MB
    tracemalloc.start()
    mb = batch.minibatch(np.arange(0, n, n // m))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert mb.legal.shape == (m, n_actions)
    assert peak < 6 * m * n_actions + 200_000 < dense_bytes / 20


@pytest.mark.parametrize("field,value,message", [
    ("policy_weights", lambda b: np.where(np.diff(b.legal_offsets) == 0, 1.0, b.policy_weights).astype(np.float32),
     "on an empty legal slice"),
    ("legal_ids", lambda b: b.legal_ids[::-1].copy(), "not strictly ascending"),
    ("policy_targets", lambda b: (b.policy_targets * 2).astype(np.float32), "sum to"),
    ("policy_targets", lambda b: -b.policy_targets, "must be finite and >= 0"),
    ("legal_offsets", lambda b: b.legal_offsets[:-1], "legal_offsets must be"),
    ("value_targets", lambda b: np.full(len(b), np.nan, np.float32), "value_targets[0]"),
    ("legal_ids", lambda b: np.full(len(b.legal_ids), 99, np.int16), "leave 0.."),
])
def test_broken_invariants_are_refused_by_name(field, value, message):
    batch = make_batch(3, 30, 12, 0.5)
    assert np.diff(batch.legal_offsets).min() == 0 and np.diff(batch.legal_offsets).max() > 2
    fields = {k: getattr(batch, k) for k in batch.__dataclass_fields__}
    fields[field] = value(batch)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace(".", r"\.")):
        AlphaZeroBatch(**fields)
