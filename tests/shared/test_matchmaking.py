"""shared.matchmaking: role counts (seed 004, role_counts), battle roles, per-episode draws."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.matchmaking import ROLES, assign, battle_roles, is_pool_fallback, plan_assignments, role_counts
from shared.messages import Assignment

SHIPPED = (0.5, 0.35, 0.15)
SCRIPTED = ("scripted:noop", "scripted:random_legal")
SEED = 20260921


# ----------------------------------------------------------------- role_counts


@pytest.mark.parametrize(
    "mix, n, expected",
    [
        (SHIPPED, 1, (1, 0, 0)),  # a half rounds UP: Python's round(0.5) == 0 would leave no mirror
        (SHIPPED, 96, (48, 34, 14)),  # the laptop profile (royalelearn-facts 6.2)
        (SHIPPED, 16, (8, 6, 2)),  # the cpu profile: pool 8 * 0.7 = 5.6 -> 6
        ((1, 0, 0), 1, (1, 0, 0)),
        ((1, 0, 0), 97, (97, 0, 0)),  # all-mirror keeps every battle
        ((0.9, 0.05, 0.05), 3, (3, 0, 0)),  # quotas of 0.15 battle round to zero
        ((0.3, 0.7, 0.0), 5, (2, 3, 0)),  # 1.5 exactly (as written) rounds up, whatever the float says
        ((0.0, 1.0, 1.0), 1, (0, 1, 0)),  # second stage: pool's 0.5 rounds up, scripted takes the rest
        ((0.0, 1.0, 1.0), 3, (0, 2, 1)),
        ((0.0, 0.0, 1.0), 5, (0, 0, 5)),
        ((2.0, 1.4, 0.6), 96, (48, 34, 14)),  # normalised by the sum
        (SHIPPED, 0, (0, 0, 0)),
    ],
)
def test_role_counts_examples(mix, n, expected):
    assert role_counts(mix, n) == expected


@pytest.mark.parametrize(
    "mix, named",
    [
        ((0.5, -0.1, 0.6), "pool share -0.1"),
        ((0.5, float("nan"), 0.5), "pool share nan"),
        ((float("inf"), 0.0, 0.0), "mirror share inf"),
        ((0.0, 0.0, 0.0), "all zero"),
        ((0.5, 0.5), "got 2"),
        (("a", 1, 1), "three numbers"),
    ],
)
def test_role_counts_refuses_bad_mix_by_name(mix, named):
    with pytest.raises(ValueError, match=named):
        role_counts(mix, 10)


@pytest.mark.parametrize("n", [-1, 2.0, True])
def test_role_counts_refuses_bad_n(n):
    with pytest.raises(ValueError, match="n_battles"):
        role_counts(SHIPPED, n)


share = st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=10.0, allow_nan=False, allow_infinity=False))


@settings(max_examples=400, deadline=None)
@given(mix=st.tuples(share, share, share).filter(lambda m: sum(m) > 0), n=st.integers(0, 5000))
def test_role_counts_sum_and_within_one_of_exact_share(mix, n):
    counts = role_counts(mix, n)
    assert sum(counts) == n
    assert all(c >= 0 for c in counts)
    total = sum(mix)
    for count, m in zip(counts, mix):
        assert abs(count - n * m / total) <= 1 + 1e-9, (counts, mix, n)
        if m == 0:
            assert count == 0


@settings(max_examples=100, deadline=None)
@given(parts=st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(0, 50)).filter(lambda p: sum(p) > 0))
def test_role_counts_exact_when_shares_are_whole(parts):
    # Mix given as whole battle counts: the count IS the mix, no rounding at all.
    assert role_counts(tuple(float(p) for p in parts), sum(parts)) == parts


# ----------------------------------------------------------------- battle_roles


@pytest.mark.parametrize("n", [1, 3, 16, 96, 1000])
def test_battle_roles_has_exactly_role_counts(n):
    roles = battle_roles(SEED, n, SHIPPED)
    assert len(roles) == n
    tally = Counter(roles)
    assert tuple(tally[r] for r in ROLES) == role_counts(SHIPPED, n)


def test_battle_roles_is_seeded_and_spreads_mirrors():
    roles = battle_roles(SEED, 96, SHIPPED)
    assert roles == battle_roles(SEED, 96, SHIPPED)
    assert roles != battle_roles(SEED + 1, 96, SHIPPED)
    # Not packed into the first 48 indices: each half of a 96-battle iteration (two 48-battle
    # rollouts, say) gets mirror battles.
    assert 0 < roles[:48].count("mirror") < 48


# ----------------------------------------------------------------- assign


def test_assign_mirror():
    assert assign(SEED, 3, 7, "mirror", SCRIPTED) == Assignment(3, 7, "mirror", "learner", -1)


def test_assign_is_a_pure_function():
    for role in ROLES:
        for ordinal in range(20):
            a = assign(SEED, 5, ordinal, role, SCRIPTED, ("snap:v0", "snap:v1", "snap:v2"))
            b = assign(SEED, 5, ordinal, role, list(SCRIPTED), ["snap:v0", "snap:v1", "snap:v2"])
            assert a == b
            assert (a.battle, a.ordinal, a.role) == (5, ordinal, role)
    # numpy integers are accepted and give the same assignment (plain ints in the struct)
    assert assign(SEED, np.int64(5), np.int32(3), "scripted", SCRIPTED) == assign(SEED, 5, 3, "scripted", SCRIPTED)


def test_assign_draws_both_opponents_and_seats_uniformly():
    n = 2000
    drawn = [assign(SEED, 11, k, "scripted", SCRIPTED) for k in range(n)]
    seats = Counter(a.learner_seat for a in drawn)
    opponents = Counter(a.opponent for a in drawn)
    assert set(seats) == {0, 1} and set(opponents) == set(SCRIPTED)
    # Binomial(2000, 1/2) has sd 22.4: +-100 is 4.5 sd, and the seed is fixed anyway.
    assert abs(seats[0] - n / 2) < 100
    assert abs(opponents["scripted:noop"] - n / 2) < 100
    # seat and opponent are not the same bit
    both = Counter((a.learner_seat, a.opponent) for a in drawn)
    assert len(both) == 4
    # different master seeds and battles give different sequences
    assert [a.learner_seat for a in drawn[:64]] != [assign(SEED + 1, 11, k, "scripted", SCRIPTED).learner_seat
                                                    for k in range(64)]


def test_assign_pool_falls_back_to_scripted_while_pool_is_empty():
    for k in range(50):
        pool = assign(SEED, 2, k, "pool", SCRIPTED)
        scripted = assign(SEED, 2, k, "scripted", SCRIPTED)
        assert pool.role == "pool" and is_pool_fallback(pool)
        assert (pool.opponent, pool.learner_seat) == (scripted.opponent, scripted.learner_seat)
        assert not is_pool_fallback(scripted)


def test_assign_pool_draws_members_and_keeps_the_seat():
    members = ("snap:v0", "snap:v1", "snap:v2")
    drawn = [assign(SEED, 4, k, "pool", SCRIPTED, members) for k in range(600)]
    tally = Counter(a.opponent for a in drawn)
    assert set(tally) == set(members)
    assert all(abs(c - 200) < 60 for c in tally.values())  # sd 11.5
    assert not any(is_pool_fallback(a) for a in drawn)
    # the seat is drawn before the opponent: filling the pool does not move an episode's side
    assert [a.learner_seat for a in drawn] == [assign(SEED, 4, k, "pool", SCRIPTED).learner_seat for k in range(600)]


@pytest.mark.parametrize(
    "args, named",
    [
        ((1, 0, "champion", SCRIPTED), "role 'champion'"),
        ((1, -1, "scripted", SCRIPTED), "ordinal -1"),
        ((-2, 0, "scripted", SCRIPTED), "battle -2"),
        ((1, 0, "scripted", ()), "scripted_opponents is empty"),
        ((1, 0, "pool", ()), "scripted_opponents is empty"),
    ],
)
def test_assign_refusals(args, named):
    with pytest.raises(ValueError, match=named):
        assign(SEED, *args)


# ----------------------------------------------------------------- plan_assignments


def test_plan_assignments_battle_major_roles_by_position_streams_by_id():
    # Ids are stable per rollout, so after a loss they need not be 0..n-1: roles follow the
    # position in the iteration's list (exact role_counts), the episode draws follow the id.
    battles = [100 + 3 * i for i in range(96)]
    nexts = [i % 7 for i in range(96)]
    lookahead = 5
    plan = plan_assignments(SEED, 96, battles, nexts, lookahead, SHIPPED, SCRIPTED)
    roles = battle_roles(SEED, 96, SHIPPED)
    expected = [assign(SEED, b, k, roles[i], SCRIPTED) for i, (b, first) in enumerate(zip(battles, nexts))
                for k in range(first, first + lookahead)]
    assert plan == expected
    assert len(plan) == len(battles) * lookahead
    assert [(a.battle, a.ordinal) for a in plan[:6]] == [(100, 0), (100, 1), (100, 2), (100, 3), (100, 4), (103, 1)]
    firsts = plan[::lookahead]
    assert sum(a.role == "mirror" for a in firsts) == 48 and sum(a.role == "scripted" for a in firsts) == 14


def test_plan_assignments_overlapping_requests_agree():
    # The learner re-asks for ordinals it already holds: the answer must not change.
    ids = list(range(16))
    first = plan_assignments(SEED, 16, ids, [0] * 16, 10, SHIPPED, SCRIPTED)
    later = plan_assignments(SEED, 16, ids, [6] * 16, 4, SHIPPED, SCRIPTED)
    assert [a for a in first if a.battle == 3][6:] == [a for a in later if a.battle == 3]


@pytest.mark.parametrize(
    "battles, nexts, lookahead, named",
    [
        ([0, 1], [0], 2, "2 battles but 1 next_ordinals"),
        (list(range(16)), [0] * 16, 0, "lookahead 0"),
        (list(range(15)), [0] * 15, 1, "15 battles listed for an iteration of 16"),
        ([0] * 16, [0] * 16, 1, "distinct"),
        (list(range(16)), [-1] + [0] * 15, 1, "ordinal -1"),
    ],
)
def test_plan_assignments_refusals(battles, nexts, lookahead, named):
    with pytest.raises(ValueError, match=named):
        plan_assignments(SEED, 16, battles, nexts, lookahead, SHIPPED, SCRIPTED)


def test_plan_assignments_learner_rows_are_a_fixed_count():
    # seed 004, geometry: learner rows = n_battles + mirror battles, whatever the master seed
    for seed in range(5):
        plan = plan_assignments(seed, 96, list(range(96)), [0] * 96, 1, SHIPPED, SCRIPTED)
        rows = sum(2 if a.learner_seat == -1 else 1 for a in plan)
        assert rows == 96 + 48
        assert math.isclose(rows / 192, 0.75)
