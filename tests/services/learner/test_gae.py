"""GAE over the (T, R) rectangle: hand-computed boundary cases, and the vectorised estimator
against the per-cell reference on random rectangles."""

import math

import numpy as np
import pytest

from services.learner.gae import compute_gae, credit_horizon_seconds
from tests.services.learner.gae_reference import compute_gae_reference

# gamma = lam = 0.5 so that gamma * lam = 0.25 and every number below is exact in binary.
GAMMA, LAM = 0.5, 0.5


def hand_rectangle():
    """T = 5 rows, R = 2 slots.

    Slot 0: one episode TERMINATED at t=1, the next one TRUNCATED at t=3 (final V = 8), a third
    running past the end (bootstrap row V = 8).
    Slot 1: an episode truncated at t=2 (final V = 4) followed by a new episode whose first
    observation has V = 10 (the value the truncated episode must NOT bootstrap from); the
    round of t=4 was lost (invalid).
    final_values is NaN everywhere it must not be read.
    """
    nan = np.nan
    rewards = np.array([[1, 0], [3, 1], [0, 2], [1, 0], [0, 5]], dtype=np.float32)
    values = np.array([[1, 2], [2, 2], [3, 2], [4, 10], [2, 4], [8, 6]], dtype=np.float32)
    final_values = np.array([[nan, nan], [nan, nan], [nan, 4], [8, nan], [nan, nan]], dtype=np.float32)
    terminated = np.zeros((5, 2), dtype=bool)
    truncated = np.zeros((5, 2), dtype=bool)
    terminated[1, 0] = True
    truncated[3, 0] = True
    truncated[2, 1] = True
    valid = np.ones((5, 2), dtype=bool)
    valid[4, 1] = False
    return rewards, values, final_values, terminated, truncated, valid


# Slot 0, backwards (delta = r + 0.5 * next - V; A = delta + 0.25 * A[t+1] inside an episode):
#   t=4: running, next = V[5] = 8:      delta = 0 + 4 - 2 = 2;   last row, no carry  -> A = 2,     G = 4
#   t=3: truncated, next = final 8:     delta = 1 + 4 - 4 = 1;   ended               -> A = 1,     G = 5
#   t=2: running, next = V[3] = 4:      delta = 0 + 2 - 3 = -1;  -1 + 0.25 * 1       -> A = -0.75, G = 2.25
#   t=1: terminated, next = 0:          delta = 3 + 0 - 2 = 1;   ended               -> A = 1,     G = 3
#   t=0: running, next = V[1] = 2:      delta = 1 + 1 - 1 = 1;   1 + 0.25 * 1        -> A = 1.25,  G = 2.25
SLOT0_ADV = [1.25, 1.0, -0.75, 1.0, 2.0]
SLOT0_RET = [2.25, 3.0, 2.25, 5.0, 4.0]
# Slot 1:
#   t=4: invalid                                                                   -> A = 0,     G = 0
#   t=3: running, next = V[4] = 4:      delta = 0 + 2 - 10 = -8; row 4 invalid, no carry -> A = -8, G = 2
#   t=2: truncated, next = final 4:     delta = 2 + 2 - 2 = 2;   ended               -> A = 2,     G = 4
#        (wrong: from V[3] = 10, the next episode's value: delta = 2 + 5 - 2 = 5, and carrying
#         A[3] = -8 back would give 5 - 2 = 3)
#   t=1: running, next = V[2] = 2:      delta = 1 + 1 - 2 = 0;   0 + 0.25 * 2        -> A = 0.5,   G = 2.5
#   t=0: running, next = V[1] = 2:      delta = 0 + 1 - 2 = -1;  -1 + 0.25 * 0.5     -> A = -0.875, G = 1.125
SLOT1_ADV = [-0.875, 0.5, 2.0, -8.0, 0.0]
SLOT1_RET = [1.125, 2.5, 4.0, 2.0, 0.0]


@pytest.mark.parametrize("estimator", [compute_gae, compute_gae_reference])
def test_termination_and_truncation_inside_one_slot(estimator):
    adv, ret = estimator(*hand_rectangle(), GAMMA, LAM)
    np.testing.assert_allclose(adv[:, 0], SLOT0_ADV, atol=1e-6)
    np.testing.assert_allclose(ret[:, 0], SLOT0_RET, atol=1e-6)


@pytest.mark.parametrize("estimator", [compute_gae, compute_gae_reference])
def test_truncated_episode_bootstraps_from_its_final_observation_not_the_next_episode(estimator):
    adv, ret = estimator(*hand_rectangle(), GAMMA, LAM)
    np.testing.assert_allclose(adv[:, 1], SLOT1_ADV, atol=1e-6)
    np.testing.assert_allclose(ret[:, 1], SLOT1_RET, atol=1e-6)
    assert adv[2, 1] != 3.0  # the value a next-episode bootstrap with a carried recursion gives


def test_outputs_are_float32_and_finite_though_unread_final_values_are_nan():
    adv, ret = compute_gae(*hand_rectangle(), GAMMA, LAM)
    assert adv.dtype == np.float32 and ret.dtype == np.float32
    assert np.isfinite(adv).all() and np.isfinite(ret).all()


def test_invalid_cell_is_zero_and_breaks_the_recursion_even_mid_episode():
    # One slot, no episode end; the action/step of row 1 never arrived (its reward 7 is junk),
    # but its observation did (row 0's step result carried it), so row 0 still bootstraps from V[1].
    rewards = np.array([[1.0], [7.0], [1.0]], dtype=np.float32)
    values = np.array([[0.0], [5.0], [0.0], [0.0]], dtype=np.float32)
    no = np.zeros((3, 1), dtype=bool)
    valid = np.array([[True], [False], [True]])
    # t=2: delta = 1 + 0.9 * 0 - 0 = 1                          -> A = 1,   G = 1
    # t=1: invalid                                               -> A = 0,   G = 0
    # t=0: delta = 1 + 0.9 * 5 - 0 = 5.5; row 1 invalid, no carry -> A = 5.5, G = 5.5
    for estimator in (compute_gae, compute_gae_reference):
        adv, ret = estimator(rewards, values, np.zeros((3, 1), np.float32), no, no, valid, 0.9, 0.9)
        np.testing.assert_allclose(adv[:, 0], [5.5, 0.0, 1.0], atol=1e-6)
        np.testing.assert_allclose(ret[:, 0], [5.5, 0.0, 1.0], atol=1e-6)


def test_lambda_one_gamma_one_gives_monte_carlo_returns():
    # No episode end: A_t = sum_{k>=t} r_k + V_T - V_t, so G_t = sum_{k>=t} r_k + V_T.
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(6, 3)).astype(np.float32)
    values = rng.normal(size=(7, 3)).astype(np.float32)
    no = np.zeros((6, 3), dtype=bool)
    _, ret = compute_gae(rewards, values, np.zeros((6, 3), np.float32), no, no, ~no, 1.0, 1.0)
    expected = np.cumsum(rewards[::-1].astype(np.float64), axis=0)[::-1] + values[6]
    np.testing.assert_allclose(ret, expected, atol=1e-5)


def test_lambda_zero_gives_one_step_td():
    # A_t = r_t + gamma V_{t+1} - V_t.
    rewards = np.array([[1.0], [2.0]], dtype=np.float32)
    values = np.array([[0.5], [1.0], [3.0]], dtype=np.float32)
    no = np.zeros((2, 1), dtype=bool)
    adv, _ = compute_gae(rewards, values, np.zeros((2, 1), np.float32), no, no, ~no, 0.5, 0.0)
    # t=0: 1 + 0.5 * 1 - 0.5 = 1;  t=1: 2 + 0.5 * 3 - 1 = 2.5
    np.testing.assert_allclose(adv[:, 0], [1.0, 2.5], atol=1e-7)


def test_vectorised_equals_reference_on_random_rectangles():
    rng = np.random.default_rng(1234)
    for _ in range(300):
        t, r = int(rng.integers(1, 13)), int(rng.integers(1, 6))
        rewards = rng.normal(size=(t, r)).astype(np.float32)
        values = rng.normal(size=(t + 1, r)).astype(np.float32) * 3
        final_values = rng.normal(size=(t, r)).astype(np.float32)
        terminated = rng.random((t, r)) < 0.15
        truncated = (rng.random((t, r)) < 0.15) & ~terminated
        valid = rng.random((t, r)) < 0.9
        gamma, lam = float(rng.uniform(0.8, 1.0)), float(rng.uniform(0.0, 1.0))
        args = (rewards, values, final_values, terminated, truncated, valid, gamma, lam)
        adv, ret = compute_gae(*args)
        adv_ref, ret_ref = compute_gae_reference(*args)
        np.testing.assert_allclose(adv, adv_ref, atol=1e-6, rtol=0)
        np.testing.assert_allclose(ret, ret_ref, atol=1e-6, rtol=0)


def test_shape_mismatch_is_refused_with_the_array_named():
    rewards, values, final_values, terminated, truncated, valid = hand_rectangle()
    with pytest.raises(ValueError, match="values"):
        compute_gae(rewards, values[:5], final_values, terminated, truncated, valid, GAMMA, LAM)


def test_credit_horizon_seconds():
    # 0.5 / (1 - 0.997 * 0.99) = 0.5 / 0.01297 = 38.55 s (the reference's sample prints 38.55)
    assert credit_horizon_seconds(0.997, 0.99, 500) == pytest.approx(38.5505, abs=1e-3)
    # 0.5 / (1 - 0.999 * 0.99) = 0.5 / 0.01099 = 45.50 s
    assert credit_horizon_seconds(0.999, 0.99, 500) == pytest.approx(45.4959, abs=1e-3)
    assert credit_horizon_seconds(1.0, 1.0, 500) == math.inf
