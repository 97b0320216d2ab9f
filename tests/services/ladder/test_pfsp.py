"""services.ladder.pfsp: PFSP weights from the FITTED model with the newest admitted snapshot
standing in for the learner (royalelearn-facts 6.2, lesson 15)."""

from __future__ import annotations

import numpy as np
import pytest

from services.ladder.pfsp import draw_stratified, learner_stand_in, pfsp_weights, pfsp_weights_for, predicted_scores
from services.ladder.rating import Game, fit, table_from_ratings
from shared.config import PoolConfig
from shared.seeding import stream

DOC = table_from_ratings({"v0": 0.0, "v1": 200.0, "v2": 400.0, "v3": -200.0})
POOL = ["v0", "v1", "v2", "v3"]


def test_the_reference_doc_example():
    """ratings v0=0, v1=200, v2=400, v3=-200, learner at v0, hard / power 2 / floor 0.2:
    weights 0.167, 0.320, 0.436, 0.077 (ladder.md). Reproduced with v0 itself among the four
    candidates (p = 0.5 against itself) and the logistic prediction of a half_win table:
    p = 0.5, 0.240, 0.091, 0.760 -> (1-p)^2 = 0.25, 0.577, 0.826, 0.058 -> normalised, mixed
    0.8 / 0.2 with uniform; the 0.0025 floor binds nowhere."""
    w, effective = pfsp_weights(POOL, DOC, "v0", shape="hard", power=2.0, uniform_floor=0.2, floor_scale=0.01)
    assert effective
    assert np.round(w, 3).tolist() == [0.167, 0.320, 0.436, 0.077]
    assert w.sum() == pytest.approx(1.0, abs=1e-15)


def test_a_davidson_table_predicts_draws_as_half_and_shifts_the_example():
    """The same ratings under a Davidson fit with nu = 0.5: predictions move toward 0.5 (a draw
    is half a win), so the weights are 0.177, 0.309, 0.423, 0.091, not the doc's."""
    w, _ = pfsp_weights(POOL, table_from_ratings(DOC.ratings, nu=0.5), "v0")
    assert np.round(w, 3).tolist() == [0.177, 0.309, 0.423, 0.091]


def test_missing_stand_in_is_reported_not_silently_uniform():
    """Lesson 15: the id 'learner' is never in the fit. p = 0.5 everywhere -> uniform, and
    effective is False so the row can say so."""
    w, effective = pfsp_weights(POOL, DOC, "learner")
    assert not effective and np.allclose(w, 0.25)
    w, effective = pfsp_weights(POOL, None, None)
    assert not effective and np.allclose(w, 0.25)
    assert learner_stand_in([]) is None and learner_stand_in(["v0", "v3", "v1"]) == "v1"


def test_a_candidate_the_fit_lacks_gets_half_and_clears_effective():
    w, effective = pfsp_weights(["v1", "v9"], DOC, "v0")
    assert not effective
    p, known = predicted_scores(["v1", "v9"], DOC, "v0")
    assert p[1] == 0.5 and known.tolist() == [True, False]
    assert p[0] == pytest.approx(1 / (1 + 10 ** 0.5))
    # hard weights: (1 - 0.240)^2 = 0.577 vs 0.25, normalised and mixed.
    raw = np.array([(1 - p[0]) ** 2, 0.25])
    assert w == pytest.approx(0.8 * raw / raw.sum() + 0.1)


@pytest.mark.parametrize("shape, raw", [
    ("variance", lambda p: p * (1 - p)),
    ("linear", lambda p: 1 - p),
    ("uniform", lambda p: np.ones_like(p)),
    ("hard", lambda p: (1 - p) ** 3),
])
def test_each_shape(shape, raw):
    p, _ = predicted_scores(POOL, DOC, "v0")
    w, _ = pfsp_weights(POOL, DOC, "v0", shape=shape, power=3.0, uniform_floor=0.0, floor_scale=0.0)
    assert w == pytest.approx(raw(p) / raw(p).sum())


def test_variance_peaks_at_even_opponents():
    w, _ = pfsp_weights(POOL, DOC, "v0", shape="variance", uniform_floor=0.0, floor_scale=0.0)
    assert int(np.argmax(w)) == 0  # v0 against itself: p = 0.5


def test_floor_holds_every_weight_at_floor_scale_over_m():
    """An opponent 2,000 Elo below: (1-p)^2 ~ 1e-10. With no uniform mix the floor
    0.05 / 3 = 0.01667 binds; the two others already sum to ~1, so after renormalising the
    weak one holds 0.01667 / 1.01667 = 0.01639."""
    table = table_from_ratings({"me": 0.0, "weak": -2000.0, "a": 0.0, "b": 100.0})
    w, _ = pfsp_weights(["weak", "a", "b"], table, "me", uniform_floor=0.0, floor_scale=0.05)
    assert w[0] == pytest.approx((0.05 / 3) / (1 + 0.05 / 3), rel=1e-6)
    assert w.sum() == pytest.approx(1.0)


def test_all_zero_weights_fall_back_to_uniform():
    """Everyone 4,000 Elo below the learner: every (1-p)^2 underflows to ~0; the shape gives
    uniform rather than dividing by zero."""
    table = table_from_ratings({"me": 4000.0, "a": -4000.0, "b": -4000.0})
    w, effective = pfsp_weights(["a", "b"], table, "me", uniform_floor=0.0, floor_scale=0.0)
    assert effective and w.tolist() == [0.5, 0.5]


def test_multipliers_weight_seed_snapshots():
    w, _ = pfsp_weights(POOL, DOC, "v0", shape="uniform", multipliers={"v2": 3.0})
    assert w.tolist() == pytest.approx([1 / 6, 1 / 6, 3 / 6, 1 / 6])


def test_uses_the_fitted_model_and_the_pool_config():
    """From a real fit: the stand-in beats s_weak most of the time, so s_weak is drawn least."""
    games = [Game("s_new", "s_weak", 1.0)] * 40 + [Game("s_new", "s_weak", 0.0)] * 10
    games += [Game("s_new", "s_strong", 1.0)] * 20 + [Game("s_new", "s_strong", 0.0)] * 30
    table = fit(games)
    w, effective = pfsp_weights_for(["s_weak", "s_strong"], table, "s_new", PoolConfig())
    assert effective and w[1] > w[0]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="no candidates"):
        pfsp_weights([], DOC, "v0")
    with pytest.raises(ValueError, match="shape 'spiky'"):
        pfsp_weights(POOL, DOC, "v0", shape="spiky")
    with pytest.raises(ValueError, match="uniform_floor"):
        pfsp_weights(POOL, DOC, "v0", uniform_floor=1.5)


def test_stratified_draw_is_distinct_deterministic_and_seeded():
    members = [f"v{i}" for i in range(12)]
    table = table_from_ratings({m: 50.0 * i for i, m in enumerate(members)})
    rng = lambda: stream(7, "eval/stratified/{candidate}", candidate="v12")  # noqa: E731
    a, effective = draw_stratified(members, table, "v6", 8, rng())
    b, _ = draw_stratified(members, table, "v6", 8, rng())
    assert a == b and len(set(a)) == 8 and effective
    assert draw_stratified(members[:3], table, "v6", 8, rng())[0].__len__() == 3
    assert draw_stratified([], table, "v6", 8, rng()) == ([], True)
