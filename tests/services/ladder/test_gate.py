"""services.ladder.gate: the three gate conditions, each failing on its own, skipped never
passed, and the verdicts (royalelearn-facts 6.4, lesson 14)."""

from __future__ import annotations

import math

import msgspec
import numpy as np
import pytest

from services.ladder.gate import (
    ConditionResult, GateDecision, Stratified, anchor_record, decide_gate, seed_scores, stratified_from_table,
    wilson_interval,
)
from services.ladder.rating import table_from_ratings
from shared.config import GateConfig
from shared.seeding import stream

CFG = GateConfig()
NOOP, RANDOM = "scripted:noop", "scripted:random_legal"


def seeds(n_seeds: int, total: float) -> np.ndarray:
    """n_seeds combined seed scores summing to ``total`` (whole seeds of 1.0, then one
    fraction, then 0s): a score of total / n_seeds."""
    out = np.zeros(n_seeds)
    whole = int(total)
    out[:whole] = 1.0
    if total - whole:
        out[whole] = total - whole
    return out


def rng(candidate="snap:v5"):
    return stream(11, "eval/bootstrap/{comparison}", comparison=candidate)


GOOD_CHAMPION = seeds(500, 290)  # 58 %: passes condition 1
GOOD_ANCHORS = {NOOP: seeds(100, 95), RANDOM: seeds(100, 90)}
RECORD = {NOOP: 0.95, RANDOM: 0.90}
TABLE = table_from_ratings({"champ": 300.0, "old1": 100.0, "old2": 250.0, "old3": 400.0})


def strat(scores_by_member):
    return stratified_from_table(scores_by_member, TABLE, "champ")


GOOD_POOL = {"old1": seeds(50, 39), "old2": seeds(50, 31), "old3": seeds(50, 20)}  # above the champion's fit


def decide(champion=GOOD_CHAMPION, anchors=GOOD_ANCHORS, record=RECORD, pool=GOOD_POOL, cfg=CFG):
    return decide_gate(champion, anchors, record, strat(pool) if pool is not None else None, cfg, rng(),
                       candidate="snap:v5", champion="champ")


def by_name(decision: GateDecision) -> dict[str, ConditionResult]:
    return {c.name: c for c in decision.conditions}


# ----------------------------------------------------------------------------- Wilson


def test_wilson_at_the_champion_bound():
    """n = 1,000: 55.2 % gives a lower bound of 0.5210 (passes 0.52), 55.0 % gives 0.5190
    (fails) -- royalelearn-facts 6.4."""
    assert wilson_interval(552, 1000)[0] == pytest.approx(0.52104, abs=5e-5)
    assert wilson_interval(550, 1000)[0] == pytest.approx(0.51904, abs=5e-5)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    with pytest.raises(ValueError, match="no games"):
        wilson_interval(0, 0)


@pytest.mark.parametrize("total, passes", [(276, True), (275, False)])
def test_condition_one_at_552_vs_550_percent(total, passes):
    """500 seeds = 1,000 battles: 276 seed points (55.2 %) pass, 275 (55.0 %) fail."""
    c = by_name(decide(champion=seeds(500, total)))["beats_champion"]
    assert c.n == 1000 and c.observed == pytest.approx(total / 500)
    assert c.passed is passes and not c.skipped
    assert c.reference == 0.52 and (c.bound >= 0.52) is passes


# ----------------------------------------------------------------------------- verdicts


def test_all_three_pass_admit_and_promote():
    d = decide()
    assert (d.verdict, d.admit, d.promote, d.cycle) == ("promote", True, True, False)
    assert all(c.passed and not c.skipped for c in d.conditions)
    assert [c.name for c in d.conditions] == [
        "beats_champion", f"no_anchor_regression:{NOOP}", f"no_anchor_regression:{RANDOM}", "no_pool_collapse"]


def test_condition_one_alone_fails_discard():
    d = decide(champion=seeds(500, 250))  # 50 %
    c = by_name(d)
    assert not c["beats_champion"].passed
    assert all(x.passed for n, x in c.items() if n != "beats_champion")
    assert (d.verdict, d.admit, d.promote, d.cycle) == ("discard", False, False, False)


def test_condition_two_alone_fails_discard():
    """vs noop 92.5 % against a record of 95 %: 2.5 pp below, tolerance 2 pp."""
    d = decide(anchors={NOOP: seeds(100, 92.5), RANDOM: GOOD_ANCHORS[RANDOM]})
    c = by_name(d)[f"no_anchor_regression:{NOOP}"]
    assert not c.passed and not c.skipped
    assert (c.observed, c.reference) == (0.925, 0.95) and c.bound == pytest.approx(0.93)
    assert by_name(d)["beats_champion"].passed and by_name(d)["no_pool_collapse"].passed
    assert (d.verdict, d.admit) == ("discard", False)


def test_anchor_tolerance_boundary_is_inclusive():
    """93.0 % against 95.0 % with 2 pp: exactly at the bound, passes."""
    d = decide(anchors={NOOP: seeds(100, 93), RANDOM: GOOD_ANCHORS[RANDOM]})
    assert by_name(d)[f"no_anchor_regression:{NOOP}"].passed


def test_condition_three_alone_fails_admit_cycle():
    """Against old1/old2/old3 the champion is predicted 0.760 / 0.571 / 0.360 (mean 0.564);
    the candidate scores 0.5 / 0.4 / 0.2 (mean 0.367), far more than one SE (~0.04) below."""
    pool = {"old1": seeds(50, 25), "old2": seeds(50, 20), "old3": seeds(50, 10)}
    d = decide(pool=pool)
    c = by_name(d)["no_pool_collapse"]
    assert not c.passed and not c.skipped and c.n == 300
    assert c.reference == pytest.approx(np.mean([TABLE.predict("champ", o) for o in pool]))
    assert c.observed == pytest.approx((0.5 + 0.4 + 0.2) / 3)
    assert (d.verdict, d.admit, d.promote, d.cycle) == ("admit_cycle", True, False, True)


def test_condition_three_bound_is_one_bootstrap_se():
    """The bootstrap SE of the mean of per-member means matches the analytic
    sqrt(sum var_o / n_o) / M to ~3 %, and the bound is reference - SE."""
    pool = {"old1": seeds(50, 30), "old2": seeds(50, 27.5), "old3": seeds(50, 22.25)}
    c = by_name(decide(pool=pool))["no_pool_collapse"]
    analytic = math.sqrt(sum(np.var(v) / len(v) for v in pool.values())) / 3
    assert c.reference - c.bound == pytest.approx(analytic, rel=0.03)
    # Same stream, same numbers.
    assert by_name(decide(pool=pool))["no_pool_collapse"] == c


# ----------------------------------------------------------------------------- skipped, never passed


def test_empty_pool_skips_condition_three_and_rests_on_one_and_two():
    d = decide(pool={})
    c = by_name(d)["no_pool_collapse"]
    assert c.skipped and not c.passed and "nothing besides the champion" in c.reason
    assert (d.verdict, d.promote) == ("promote", True)
    assert by_name(decide(pool=None))["no_pool_collapse"].skipped
    off = decide(pool={"old1": seeds(50, 0)}, cfg=GateConfig(stratified_snapshots=0))
    assert "stratified_snapshots is 0" in by_name(off)["no_pool_collapse"].reason and off.verdict == "promote"


def test_missing_anchor_record_is_skipped_not_passed():
    """Lesson 14: a free-admitted champion with no anchor record once compared against 0.5."""
    d = decide(record=None)
    for a in (NOOP, RANDOM):
        c = by_name(d)[f"no_anchor_regression:{a}"]
        assert c.skipped and not c.passed and "no recorded score" in c.reason
    assert (d.verdict, d.admit, d.promote) == ("incomplete", False, False)
    d = decide(record={NOOP: 0.95})
    assert by_name(d)[f"no_anchor_regression:{RANDOM}"].skipped and d.verdict == "incomplete"


def test_no_games_is_skipped_not_passed():
    d = decide(champion=[])
    c = by_name(d)["beats_champion"]
    assert c.skipped and not c.passed and c.n == 0 and c.observed is None
    assert d.verdict == "incomplete" and not d.admit
    d = decide(anchors={NOOP: [], RANDOM: GOOD_ANCHORS[RANDOM]})
    assert by_name(d)[f"no_anchor_regression:{NOOP}"].skipped and d.verdict == "incomplete"
    d = decide(anchors={}, record={})
    assert by_name(d)["no_anchor_regression"].skipped and d.verdict == "incomplete"


def test_a_sampled_member_without_games_or_prediction_is_skipped():
    d = decide(pool={"old1": seeds(50, 39), "old2": []})
    c = by_name(d)["no_pool_collapse"]
    assert c.skipped and "no games against old2" in c.reason and d.verdict == "incomplete"
    d = decide(pool={"old1": seeds(50, 39), "unrated": seeds(50, 30)})
    c = by_name(d)["no_pool_collapse"]
    assert c.skipped and "no fitted prediction of the champion against unrated" in c.reason
    assert d.verdict == "incomplete"


def test_a_settled_failure_discards_even_when_later_conditions_were_not_played():
    """Early stop: condition 1 failed after 1,000 battles; nothing else was played."""
    d = decide(champion=seeds(500, 200), anchors={}, record=RECORD, pool={"old1": []})
    assert d.verdict == "discard" and not d.admit


# ----------------------------------------------------------------------------- paired rho, record


def test_paired_rho_present_only_when_defined():
    assert decide().paired_rho is None  # combined scores: the sides are unknown
    assert b"paired_rho" not in msgspec.json.encode(decide())
    r = np.random.default_rng(3)
    strength = r.random(500) < 0.55
    sides = np.stack([np.where(strength, 1.0, r.choice([0.0, 0.5, 1.0], 500)),
                      np.where(strength, 1.0, r.choice([0.0, 0.5, 1.0], 500))], axis=1)
    d = decide(champion=sides)
    assert d.paired_rho is not None and 0.2 < d.paired_rho < 0.8
    assert by_name(d)["beats_champion"].n == 1000
    const = np.ones((500, 2))
    assert decide(champion=const).paired_rho is None  # a side that never varies


def test_seed_scores_validation_and_anchor_record():
    with pytest.raises(ValueError, match="seed scores must be"):
        seed_scores([0.3], "x")
    with pytest.raises(ValueError, match="side scores must be"):
        seed_scores([[0.25, 1.0]], "x")
    with pytest.raises(ValueError, match="expected shape"):
        seed_scores(np.zeros((2, 3)), "x")
    assert anchor_record({NOOP: seeds(100, 95), RANDOM: []}) == {NOOP: 0.95}


def test_decision_round_trips_through_json():
    d = decide(pool={"old1": seeds(50, 25), "old2": seeds(50, 20)})
    assert msgspec.json.decode(msgspec.json.encode(d), type=GateDecision) == d
    assert isinstance(Stratified().scores, dict)
