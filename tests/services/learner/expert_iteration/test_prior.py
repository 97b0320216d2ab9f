"""The prior metrics on a hand-built batch: every number worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.learner.expert_iteration.prior import prior_metrics


def test_prior_metrics_of_two_hand_built_rows():
    # row 0: legal {a, b}, target all on a, prior uniform; row 1: legal {a, b, c}, target (0.2, 0.8, 0),
    # prior (0.7, 0.2, 0.1)
    offsets = np.array([0, 2, 5])
    target = np.array([1.0, 0.0, 0.2, 0.8, 0.0])
    log_prior = np.log([0.5, 0.5, 0.7, 0.2, 0.1])
    got = prior_metrics(offsets, target, log_prior)
    h0, h1 = math.log(2), -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1))
    kl0, kl1 = math.log(2), 0.2 * math.log(0.2 / 0.7) + 0.8 * math.log(0.8 / 0.2)
    assert got["entropy"] == pytest.approx((h0 + h1) / 2, abs=1e-12)  # 0.747483
    assert got["top1"] == 0.5  # row 0 agrees (a, the prior's tie broken to the first), row 1 does not (b vs a)
    assert got["kl_target"] == pytest.approx((kl0 + kl1) / 2, abs=1e-12)  # 0.775815
    assert got["kl_target"] == pytest.approx(0.775815, abs=1e-6)


def test_a_prior_equal_to_its_target_has_no_kl_and_full_agreement():
    rng = np.random.default_rng(3)
    for _ in range(50):
        sizes = rng.integers(1, 9, size=6)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        p = np.concatenate([rng.dirichlet(np.ones(n)) for n in sizes])
        got = prior_metrics(offsets, p, np.log(p))
        assert got["kl_target"] == pytest.approx(0.0, abs=1e-12) and got["top1"] == 1.0


def test_prior_metrics_refuse_arrays_that_disagree():
    with pytest.raises(ValueError, match="must agree"):
        prior_metrics(np.array([0, 3]), np.ones(3) / 3, np.zeros(2))
    assert prior_metrics(np.array([0]), np.zeros(0), np.zeros(0)) == {}
