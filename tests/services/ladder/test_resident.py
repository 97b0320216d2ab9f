"""The resident set (services/ladder/resident.py) and PFSP-weighted pool assignments
(shared/matchmaking.py): weights, size bound, seeding, purity, the empty-pool fallback."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.ladder.pfsp import pfsp_weights
from services.ladder.rating import table_from_ratings
from services.ladder.resident import draw_resident, load_resident, save_resident
from shared.config import PoolConfig
from shared.matchmaking import assign, battle_roles, is_pool_fallback, plan_assignments
from shared.seeding import stream

V = [f"snap:{k:016x}" for k in range(8)]
SCRIPTED = ["scripted:noop", "scripted:random_legal"]


def test_the_resident_weights_are_the_pfsp_weights():
    """The reference doc example (royalelearn-facts 6.2): v0 0, v1 200, v2 400, v3 -200 Elo with
    the learner's stand-in at v0 (the newest admitted) -> 0.167, 0.320, 0.436, 0.077."""
    members, archive = V[:4], [V[1], V[2], V[3], V[0]]
    table = table_from_ratings({V[0]: 0.0, V[1]: 200.0, V[2]: 400.0, V[3]: -200.0})
    r = draw_resident(20260921, 5, members, archive, table, PoolConfig(max_resident_opponents=4))
    assert sorted(r.ids) == sorted(members) and r.effective and r.stand_in == V[0]
    w, effective = pfsp_weights(members, table, V[0], shape="hard", power=2.0, uniform_floor=0.2, floor_scale=0.01)
    assert effective
    assert dict(zip(r.ids, r.weights)) == pytest.approx(dict(zip(members, w)), abs=1e-12)
    assert [round(x, 3) for x in w] == [0.167, 0.320, 0.436, 0.077]


def test_a_member_missing_from_the_fit_makes_pfsp_not_effective():
    table = table_from_ratings({V[0]: 0.0, V[1]: 200.0})
    r = draw_resident(1, 3, V[:3], V[:3], table, PoolConfig())
    assert r.effective is False and r.stand_in == V[2]
    assert draw_resident(1, 3, V[:3], V[:3], None, PoolConfig()).effective is False  # no fit at all


def test_an_empty_pool_has_an_empty_resident_set():
    r = draw_resident(1, 0, [], [], None, PoolConfig())
    assert r.ids == [] and r.weights == []


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 8), k=st.integers(1, 5), version=st.integers(0, 10_000), seed=st.integers(0, 2**32))
def test_the_resident_set_holds_at_most_max_resident_distinct_members(n, k, version, seed):
    members = V[:n]
    table = table_from_ratings({m: 100.0 * i for i, m in enumerate(members)})
    cfg = PoolConfig(max_resident_opponents=k)
    r = draw_resident(seed, version, members, members, table, cfg)
    assert len(r.ids) == min(k, n) and len(set(r.ids)) == len(r.ids) and set(r.ids) <= set(members)
    assert sum(r.weights) == pytest.approx(1.0) and all(w > 0 for w in r.weights)
    assert r == draw_resident(seed, version, members, members, table, cfg)  # a pure function


def test_the_resident_draw_follows_the_pfsp_weights_and_its_stream():
    """Drawn from match/resident/pool_version/{version}: over many versions the first pick's
    frequencies match the PFSP weights; and the first pick is exactly rng.choice's."""
    members = V[:4]
    table = table_from_ratings({V[0]: 0.0, V[1]: 200.0, V[2]: 400.0, V[3]: -200.0})
    cfg = PoolConfig(max_resident_opponents=2)
    w, _ = pfsp_weights(members, table, V[0])
    counts = dict.fromkeys(members, 0)
    for version in range(4000):
        r = draw_resident(7, version, members, [V[0]], table, cfg)
        rng = stream(7, "match/resident/pool_version/{version}", version=version)
        assert r.ids == [members[int(i)] for i in rng.choice(4, size=2, replace=False, p=w)]
        counts[r.ids[0]] += 1
    assert np.array([counts[m] for m in members]) / 4000 == pytest.approx(w, abs=0.025)


def test_the_resident_file_round_trips(tmp_path):
    r = draw_resident(3, 2, V[:3], V[:3], None, PoolConfig())
    assert load_resident(tmp_path / "resident.json") is None
    save_resident(tmp_path / "resident.json", r)
    assert load_resident(tmp_path / "resident.json") == r
    (tmp_path / "resident.json").write_text("{not json")
    assert load_resident(tmp_path / "resident.json") is None  # a cache: redrawn, never trusted


# ----------------------------------------------------------------------------- assignments


def test_pool_episodes_pick_from_the_resident_set_by_weight_and_by_hand():
    """Each pool episode: seat first, then u = rng.random() against the cumulative weights, both
    from match/battle/{b}/ordinal/{k}."""
    ids, weights = (V[2], V[5]), (0.8, 0.2)
    for battle in range(3):
        for ordinal in range(200):
            a = assign(11, battle, ordinal, "pool", SCRIPTED, ids, weights)
            rng = stream(11, "match/battle/{battle}/ordinal/{ordinal}", battle=battle, ordinal=ordinal)
            seat = int(rng.integers(2))
            expected = ids[0] if rng.random() < 0.8 else ids[1]
            assert (a.role, a.opponent, a.learner_seat) == ("pool", expected, seat)


def test_a_zero_weight_member_is_never_drawn_and_the_seat_does_not_depend_on_weights():
    for ordinal in range(300):
        a = assign(5, 4, ordinal, "pool", SCRIPTED, (V[0], V[1]), (0.0, 1.0))
        b = assign(5, 4, ordinal, "pool", SCRIPTED, (V[0], V[1]), None)
        assert a.opponent == V[1] and a.learner_seat == b.learner_seat


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 12), first=st.integers(0, 1000), look=st.integers(1, 5),
       k=st.integers(1, 3), raw=st.lists(st.floats(0.01, 1.0), min_size=3, max_size=3))
def test_assignments_are_a_pure_function_of_seed_battle_ordinal_and_the_resident_set(seed, n, first, look, k, raw):
    ids, weights = tuple(V[:k]), tuple(raw[:k])
    mix = (0.2, 0.6, 0.2)
    battles, nexts = list(range(n)), [first] * n
    plan = plan_assignments(seed, n, battles, nexts, look, mix, SCRIPTED, pool_members=ids, pool_weights=weights)
    assert plan == plan_assignments(seed, n, battles, nexts, look, mix, SCRIPTED, pool_members=ids,
                                    pool_weights=weights)
    roles = battle_roles(seed, n, mix)
    for a in plan:
        assert a == assign(seed, a.battle, a.ordinal, roles[a.battle], SCRIPTED, ids, weights)
        if a.role == "pool":
            assert a.opponent in ids and not is_pool_fallback(a)
    # A later request overlapping this one agrees on every shared episode.
    later = plan_assignments(seed, n, battles, [first + 1] * n, look, mix, SCRIPTED, pool_members=ids,
                             pool_weights=weights)
    shared = {(a.battle, a.ordinal): a for a in plan}
    assert all(shared[(a.battle, a.ordinal)] == a for a in later if (a.battle, a.ordinal) in shared)


def test_an_empty_pool_still_falls_back_to_scripted():
    plan = plan_assignments(3, 10, list(range(10)), [0] * 10, 4, (0.0, 1.0, 0.0), SCRIPTED, pool_members=(),
                            pool_weights=None)
    assert all(a.role == "pool" and is_pool_fallback(a) and a.opponent in SCRIPTED for a in plan)


@pytest.mark.parametrize("weights, named", [
    ((1.0,), "1 weights for 2 pool members; one each"),
    ((1.0, -0.5), "expected finite numbers >= 0, not all 0"),
    ((0.0, 0.0), "expected finite numbers >= 0, not all 0"),
    ((1.0, float("nan")), "expected finite numbers >= 0, not all 0"),
])
def test_bad_pool_weights_are_refused_by_name(weights, named):
    with pytest.raises(ValueError, match=named):
        plan_assignments(3, 2, [0, 1], [0, 0], 1, (1.0, 0.0, 0.0), SCRIPTED, pool_members=V[:2], pool_weights=weights)
