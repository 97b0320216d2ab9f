"""services/learner/returns.py: the running statistics equal numpy's, the mean is never
subtracted, the clip fraction is exact, the discounted returns follow episodes across
iterations, and a state round trip reproduces the next scaling bit for bit."""

import json
import math

import numpy as np
import pytest

from services.learner.returns import ReturnScaler


def flags(shape, **cells):
    out = np.zeros(shape, bool)
    for t, r in cells.get("at", []):
        out[t, r] = True
    return out


def test_running_statistics_equal_numpy_over_1e5_samples_fed_in_chunks():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.5, size=100_000) ** 3  # skewed, far from zero mean
    scaler = ReturnScaler()
    for chunk in np.array_split(x, [1, 2, 17, 1000, 1001, 50_000, 77_777]):  # includes 1-sample chunks
        scaler.update(chunk)
    assert scaler.count == x.size
    assert scaler.mean == pytest.approx(x.mean(), rel=1e-12)
    assert scaler.var == pytest.approx(x.var(ddof=1), rel=1e-10)


def test_returns_fed_are_per_episode_discounted_sums_carried_across_iterations():
    scaler = ReturnScaler()
    seen = []
    scaler.update = lambda samples: seen.append(np.asarray(samples).tolist())  # record, time-major
    gamma = 0.5
    # slot 0: one episode 1, 2 | ends at t=1 | 4, 8 in flight. slot 1: invalid at t=1 breaks it.
    rewards = np.array([[1.0, 10.0], [2.0, 99.0], [4.0, 1.0], [8.0, 2.0]])
    terminated = flags((4, 2), at=[(1, 0)])
    valid = np.ones((4, 2), bool)
    valid[1, 1] = False
    scaler.scale(rewards, terminated, np.zeros((4, 2), bool), valid, gamma)
    # t0: [1, 10]; t1: [1*.5+2=2.5, -]; t2: [4 (new episode), 1 (restarted)]; t3: [2+8=10, .5+2=2.5]
    assert seen[0] == [1.0, 10.0, 2.5, 4.0, 1.0, 10.0, 2.5]
    # next iteration: slot 0's episode continues from 10, slot 1's from 2.5 (truncated at t0)
    truncated = flags((1, 2), at=[(0, 1)])
    scaler.scale(np.array([[1.0, 1.0]]), np.zeros((1, 2), bool), truncated, np.ones((1, 2), bool), gamma)
    assert seen[1] == [6.0, 2.25]
    scaler.scale(np.array([[1.0, 1.0]]), np.zeros((1, 2), bool), np.zeros((1, 2), bool), np.ones((1, 2), bool), gamma)
    assert seen[2] == [4.0, 1.0]  # slot 1 restarted after its truncation


def test_the_mean_is_never_subtracted():
    scaler = ReturnScaler(reward_clip=1e9)
    rewards = np.array([[1.0, 3.0], [2.0, 5.0]])
    done = np.ones((2, 2), bool)  # every step its own episode: returns = rewards
    out, stats = scaler.scale(rewards, done, np.zeros((2, 2), bool), np.ones((2, 2), bool), 0.99)
    std = np.std([1.0, 3.0, 2.0, 5.0], ddof=1)
    assert stats["ppo/reward_scale"] == pytest.approx(std, rel=1e-12)
    assert stats["ppo/return_std"] == pytest.approx(std, rel=1e-12)
    np.testing.assert_allclose(out, rewards / std, rtol=1e-6)  # all positive: nothing centred
    assert (out > 0).all()
    # and a zero-sum pair keeps its signs and its zero sum
    out, _ = scaler.scale(np.array([[1.0, -1.0]]), np.ones((1, 2), bool), np.zeros((1, 2), bool),
                          np.ones((1, 2), bool), 0.99)
    assert out[0, 0] > 0 > out[0, 1] and out[0, 0] == -out[0, 1]


def test_no_scaling_before_two_returns():
    scaler = ReturnScaler(reward_clip=2.0)
    out, stats = scaler.scale(np.array([[5.0]]), np.ones((1, 1), bool), np.zeros((1, 1), bool), np.ones((1, 1), bool), 0.9)
    assert stats["ppo/reward_scale"] == 1.0 and "ppo/return_std" not in stats
    assert out.tolist() == [[2.0]] and stats["ppo/reward_clip_frac"] == 1.0  # clipped, unscaled


def test_clip_fraction_exact_on_a_hand_built_case():
    # Every step its own episode, so the returns are the rewards. Valid rewards
    # [3, -3, 1, -1, 0, 0]: mean 0, sum of squares 20, var 20 / 5 = 4, std exactly 2.
    rewards = np.array([[3.0, -3.0, 1.0, 100.0], [-1.0, 0.0, 0.0, 7.0]])
    valid = np.array([[True, True, True, False], [True, True, True, False]])  # 100 and 7 are not learner cells
    scaler = ReturnScaler(reward_clip=0.5)
    out, stats = scaler.scale(rewards, np.ones((2, 4), bool), np.zeros((2, 4), bool), valid, 0.9)
    assert stats["ppo/reward_scale"] == 2.0 and stats["ppo/return_std"] == 2.0
    # scaled [1.5, -1.5, 0.5 | -0.5, 0, 0]: the two 1.5s are clipped; +-0.5 sit ON the bound and
    # are untouched -> 2 of 6 valid cells (the invalid 100 would have been a third)
    assert stats["ppo/reward_clip_frac"] == 2 / 6
    assert out.tolist() == [[0.5, -0.5, 0.5, 0.0], [-0.5, 0.0, 0.0, 0.0]]  # invalid cells are 0
    assert out.dtype == np.float32


def test_state_round_trip_reproduces_the_next_scaling_bit_for_bit():
    rng = np.random.default_rng(1)
    T, R = 16, 6

    def iteration():
        rewards = rng.normal(size=(T, R)) * 0.1
        rewards[rng.random((T, R)) < 0.05] += rng.choice([-1.0, 1.0])
        terminated = rng.random((T, R)) < 0.05
        truncated = rng.random((T, R)) < 0.02
        valid = rng.random((T, R)) < 0.95
        return rewards, terminated, truncated, valid

    a = ReturnScaler(reward_clip=3.0)
    for _ in range(3):
        a.scale(*iteration(), 0.997)
    assert np.any(a.running != 0)  # episodes in flight are part of the state
    b = ReturnScaler(reward_clip=3.0)
    b.load_state(json.loads(json.dumps(a.state())))
    for _ in range(2):
        batch = iteration()
        out_a, stats_a = a.scale(*batch, 0.998)
        out_b, stats_b = b.scale(*batch, 0.998)
        assert out_a.tobytes() == out_b.tobytes()
        assert stats_a == stats_b
    assert a.state() == b.state()


def test_a_fleet_resize_restarts_the_in_flight_returns_and_bad_input_is_refused():
    scaler = ReturnScaler()
    ones = lambda t, r: np.ones((t, r), bool)  # noqa: E731
    zeros = lambda t, r: np.zeros((t, r), bool)  # noqa: E731
    scaler.scale(np.ones((2, 4)), zeros(2, 4), zeros(2, 4), ones(2, 4), 0.9)
    scaler.scale(np.ones((2, 6)), zeros(2, 6), zeros(2, 6), ones(2, 6), 0.9)
    assert scaler.running.shape == (6,) and scaler.running.tolist() == pytest.approx([1.9] * 6)
    with pytest.raises(ValueError, match="non-finite"):
        scaler.scale(np.full((1, 6), math.nan), zeros(1, 6), zeros(1, 6), ones(1, 6), 0.9)
    with pytest.raises(ValueError, match="valid must be"):
        scaler.scale(np.ones((1, 6)), zeros(1, 6), zeros(1, 6), ones(1, 5), 0.9)
