"""The masked categorical: exact values on tiny rows, no NaN on no-op-only rows, illegal
actions never sampled, inverse-CDF sampling on caller-supplied uniforms."""

import math

import numpy as np
import pytest
import torch

from shared.nn.distribution import MaskedCategorical

LN2 = math.log(2.0)


def dist(logits, mask):
    return MaskedCategorical(torch.tensor(logits, dtype=torch.float32), torch.tensor(mask, dtype=torch.bool))


def test_entropy_of_two_equal_legal_logits_is_ln2():
    # logits [0, 0, 5] with the third masked: p = [1/2, 1/2, 0], H = -2 * 1/2 ln 1/2 = ln 2.
    d = dist([[0.0, 0.0, 5.0]], [[True, True, False]])
    assert d.entropy().item() == pytest.approx(LN2, rel=1e-7)
    # p(no-op) = 1/2 vs p(play) = 1/2: binary entropy is ln 2 as well.
    assert d.noop_entropy().item() == pytest.approx(LN2, rel=1e-7)
    assert d.probs[0, 2].item() == 0.0


def test_log_prob_renormalises_over_the_legal_set():
    # logits [1, 2, 3], action 1 illegal: log p0 = 1 - ln(e + e^3), log p2 = 3 - ln(e + e^3).
    d = dist([[1.0, 2.0, 3.0]], [[True, False, True]])
    lse = math.log(math.e + math.e**3)
    got = d.log_prob(torch.tensor([0])).item(), d.log_prob(torch.tensor([2])).item()
    assert got == pytest.approx((1 - lse, 3 - lse), abs=1e-6)


def test_noop_entropy_is_the_binary_entropy_of_noop_against_play():
    # no-op logit ln 9, one legal play at 0: p(no-op) = 9/10.
    # -(0.9 ln 0.9 + 0.1 ln 0.1) = 0.0948245 + 0.2302585 = 0.3250830
    d = dist([[math.log(9.0), 0.0, 4.0]], [[True, True, False]])
    assert d.noop_entropy().item() == pytest.approx(0.3250830, abs=1e-6)


@pytest.mark.parametrize("noop_logit", [0.0, -30.0, 1e35])  # 1e35: fill - logit overflows to -inf
def test_noop_only_row_has_log_prob_zero_entropy_zero_and_finite_gradient(noop_logit):
    logits = torch.tensor([[noop_logit, 3.0, -2.0, 50.0]], requires_grad=True)
    mask = torch.tensor([[True, False, False, False]])
    d = MaskedCategorical(logits, mask)
    log_prob, entropy, noop_entropy = d.log_prob(torch.tensor([0])), d.entropy(), d.noop_entropy()
    assert log_prob.item() == 0.0 and entropy.item() == 0.0 and noop_entropy.item() == 0.0
    (log_prob + entropy + noop_entropy).sum().backward()
    assert torch.isfinite(logits.grad).all()
    # log p(no-op) = 0 whatever the logits: the gradient is exactly zero, not merely finite.
    assert torch.equal(logits.grad, torch.zeros_like(logits))


def test_mode_ignores_a_larger_illegal_logit():
    d = dist([[0.0, 1.0, 9.0], [0.0, 1.0, 9.0]], [[True, True, False], [True, False, False]])
    assert d.mode().tolist() == [1, 0]


def test_n_legal_counts_the_mask():
    d = dist([[0.0] * 4, [0.0] * 4], [[True, True, False, True], [True, False, False, False]])
    assert d.n_legal().tolist() == [3, 1] and d.n_legal().dtype == torch.int64


def test_a_row_without_the_noop_is_refused():
    with pytest.raises(ValueError, match="no-op"):
        dist([[0.0, 0.0]], [[False, True]])


def _random_rows(rng, b, a, legal_p):
    mask = rng.random((b, a)) < legal_p
    mask[:, 0] = True
    # Illegal actions get the LARGEST logits, to tempt a sampler that ignores the mask.
    logits = rng.normal(size=(b, a)) * 2 + np.where(mask, 0.0, 20.0)
    return torch.tensor(logits, dtype=torch.float32), torch.tensor(mask)


def test_illegal_actions_are_never_sampled_including_at_both_ends_of_the_unit_interval():
    rng = np.random.default_rng(0)
    logits, mask = _random_rows(rng, 64, 2305, legal_p=0.05)
    d = MaskedCategorical(logits, mask)
    uniforms = [0.0, 1.0 - 2.0**-24, 2.0**-24, 0.5] + list(rng.random(150))
    for u in uniforms:
        actions = d.sample(torch.full((64,), u, dtype=torch.float32))
        assert actions.dtype == torch.int64
        assert mask[torch.arange(64), actions].all(), f"illegal action drawn at u={u}"


def test_sample_matches_brute_force_inverse_cdf():
    # action = smallest i with cdf[i] > u (a zero-width interval can never be the answer).
    rng = np.random.default_rng(1)
    logits, mask = _random_rows(rng, 16, 40, legal_p=0.4)
    d = MaskedCategorical(logits, mask)
    probs = d.probs.double().numpy()
    checked = 0
    for _ in range(200):
        u = rng.random(16)
        got = d.sample(torch.tensor(u, dtype=torch.float32)).numpy()
        for row in range(16):
            u32 = float(np.float32(u[row]))
            cdf = np.cumsum(probs[row])
            if np.min(np.abs(cdf - u32)) < 1e-6:  # float32 vs float64 round-off could decide it
                continue
            expected = int(np.argmax(cdf > u32)) if (cdf > u32).any() else int(np.flatnonzero(mask[row])[-1])
            assert got[row] == expected
            checked += 1
    assert checked > 3000


def test_uniform_at_or_above_the_total_clamps_to_the_last_legal_action():
    # u = 1.0 lies outside [0, 1); it stands in for round-off leaving the float32 total below u.
    d = dist([[0.0, 0.0, 0.0, 0.0]], [[True, True, True, False]])
    assert d.sample(torch.tensor([1.0])).tolist() == [2]


def test_a_rows_action_does_not_depend_on_the_rest_of_the_batch():
    rng = np.random.default_rng(2)
    logits, mask = _random_rows(rng, 8, 100, legal_p=0.3)
    u = torch.tensor(rng.random(8), dtype=torch.float32)
    batch = MaskedCategorical(logits, mask).sample(u)
    alone = [MaskedCategorical(logits[i : i + 1], mask[i : i + 1]).sample(u[i : i + 1]).item() for i in range(8)]
    assert batch.tolist() == alone


def test_sample_frequencies_follow_the_probabilities():
    # p = softmax([0, ln 3]) over two legal actions = [1/4, 3/4]; an even grid of uniforms hits
    # action 0 for u < 1/4 exactly: 2,500 of 10,000.
    d = dist([[0.0, math.log(3.0), 7.0]] * 10_000, [[True, True, False]] * 10_000)
    grid = (torch.arange(10_000, dtype=torch.float64) + 0.5) / 10_000
    actions = d.sample(grid)
    assert (actions == 0).sum().item() == 2500 and (actions == 2).sum().item() == 0
