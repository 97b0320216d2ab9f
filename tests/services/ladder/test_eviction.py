"""services.ladder.eviction: which members the SAMPLER stops drawing -- never the protected,
a stratified spread over the rating range, cycle-flagged members preferred
(royalelearn-facts 6.3)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.ladder.eviction import PoolMember, select_for_eviction
from services.ladder.rating import table_from_ratings


def test_nothing_goes_while_the_pool_fits():
    assert select_for_eviction(["v0", "v1"], {"v0": 0, "v1": 10}, 2) == []
    assert select_for_eviction([], None, 0) == []


def test_thins_a_cluster_and_keeps_the_extremes():
    """Ratings 0, 100, ..., 900 plus a cluster at 401..404: evicting 4 of 14 takes the
    cluster (the smallest holes), leaving the even 0..900 ladder."""
    ratings = {f"v{i}": 100.0 * i for i in range(10)} | {f"c{k}": 400.0 + k for k in range(1, 5)}
    pool = list(ratings)
    gone = select_for_eviction(pool, ratings, 10)
    assert sorted(gone) == ["c1", "c2", "c3", "c4"]
    kept = sorted(ratings[p] for p in pool if p not in gone)
    assert kept == [100.0 * i for i in range(10)]


def test_keeps_a_spread_when_halving_an_even_ladder():
    """21 members at 0, 10, ..., 200 down to 6: the kept ones still span 0..200 and no hole
    is wider than 60 (an even spread of 6 would be 40)."""
    ratings = {f"v{i:02d}": 10.0 * i for i in range(21)}
    gone = set(select_for_eviction(list(ratings), ratings, 6))
    kept = sorted(r for p, r in ratings.items() if p not in gone)
    assert len(kept) == 6 and kept[0] == 0.0 and kept[-1] == 200.0
    assert max(np.diff(kept)) <= 60.0


def test_never_evicts_protected_members_or_anchors():
    """v0, the champion chain (v3, v7) and a seed snapshot are protected by the caller;
    scripted: ids always are. They sit in the tightest cluster and still stay."""
    ratings = {"scripted:noop": 0.0, "v0": 1.0, "v3": 2.0, "v7": 3.0, "seed:a": 4.0,
               "v1": 100.0, "v2": 300.0, "v4": 500.0, "v5": 700.0}
    protected = {"v0", "v3", "v7", "seed:a"}
    gone = select_for_eviction(list(ratings), ratings, 6, protected)
    assert len(gone) == 3 and not set(gone) & (protected | {"scripted:noop"})


def test_protected_overflow_evicts_every_unprotected_member_and_stops():
    ratings = {f"v{i}": float(i) for i in range(6)}
    gone = select_for_eviction(list(ratings), ratings, 2, protected={"v0", "v1", "v2", "v3"})
    assert sorted(gone) == ["v4", "v5"]


def test_prefers_keeping_cycle_flagged_members():
    """Evenly spaced, one to go: without flags the tie goes by id (b); flag b and c goes."""
    ratings = {"a": 0.0, "b": 100.0, "c": 200.0, "d": 300.0}
    assert select_for_eviction(list(ratings), ratings, 3) == ["b"]
    pool = [PoolMember("a"), PoolMember("b", cycle=True), PoolMember("c"), PoolMember("d")]
    assert select_for_eviction(pool, ratings, 3) == ["c"]
    # A flag is a preference, not immunity: a near-duplicate still goes before a lone member.
    ratings2 = {"a": 0.0, "b": 100.0, "b2": 101.0, "c": 200.0}
    pool2 = [PoolMember("a"), PoolMember("b", cycle=True), PoolMember("b2", cycle=True), PoolMember("c")]
    assert select_for_eviction(pool2, ratings2, 3)[0] in ("b", "b2")


def test_unrated_members_go_first_oldest_first():
    table = table_from_ratings({"v1": 100.0, "v2": 200.0, "v3": 300.0})
    pool = ["x_old", "v1", "v2", "x_new", "v3"]
    assert select_for_eviction(pool, table, 4) == ["x_old"]
    assert select_for_eviction(pool, table, 3) == ["x_old", "x_new"]


def test_refuses_duplicates_and_negative_sizes():
    with pytest.raises(ValueError, match="v1 more than once"):
        select_for_eviction(["v1", "v1", "v2"], {}, 1)
    with pytest.raises(ValueError, match="max_sampled -1"):
        select_for_eviction(["v1"], {}, -1)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-800, 800), min_size=1, max_size=25), st.integers(0, 25),
       st.sets(st.integers(0, 24)), st.randoms(use_true_random=False))
def test_invariants(ratings_list, max_sampled, protect_idx, rnd):
    """Only unprotected members go, none twice, exactly enough when possible, and the answer
    does not depend on the pool's order when every member is rated."""
    ratings = {f"v{i}": float(r) for i, r in enumerate(ratings_list)}
    pool = list(ratings)
    protected = {f"v{i}" for i in protect_idx}
    gone = select_for_eviction(pool, ratings, max_sampled, protected)
    assert len(set(gone)) == len(gone) and not set(gone) & protected
    unprotected = [p for p in pool if p not in protected]
    assert len(gone) == min(max(len(pool) - max_sampled, 0), len(unprotected))
    shuffled = pool[:]
    rnd.shuffle(shuffled)
    assert select_for_eviction(shuffled, ratings, max_sampled, protected) == gone
