"""Which pool members the SAMPLER stops drawing (royalelearn-facts 6.3; seed 004,
EvictionPolicy / HallOfFameEviction).

Eviction bounds sampling cost, it does not forget: the archive, the snapshots and the result
log are never touched, and an evicted member keeps its rating and its games.

Never evicted: anchors (every ``scripted:`` id), seed snapshots, v0 and every member of the
champion chain -- the caller passes those as ``protected`` (anchors are protected whatever it
passes). Among the rest, the policy keeps a stratified spread over the fitted rating range:
it repeatedly removes the member whose removal leaves the smallest hole in the ratings of the
members still sampled (protected ones included), so clusters thin out and the extremes stay.
A ``cycle``-flagged member (admitted without promotion: worth playing, not the best) counts
its hole ``CYCLE_KEEP_FACTOR`` times larger, so it is kept over an unflagged neighbour.
Members the fit does not hold are evicted first, oldest first (pool order): they have no
place in the range and PFSP cannot weight them.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

import msgspec

from services.ladder.rating import RatingTable

CYCLE_KEEP_FACTOR = 2.0
"""How much more a cycle-flagged member's removal is taken to cost than an unflagged one's."""
ANCHOR_PREFIX = "scripted:"


class PoolMember(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One member of the sampled pool. ``cycle``: admitted by a gate that failed only the
    pool-wide condition (``GateDecision.cycle``)."""

    id: str
    cycle: bool = False


def _members(pool: Sequence[PoolMember | str]) -> list[PoolMember]:
    out = [m if isinstance(m, PoolMember) else PoolMember(id=m) for m in pool]
    ids = [m.id for m in out]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"pool lists {', '.join(dup)} more than once")
    return out


def _rating_map(ratings: RatingTable | Mapping[str, float] | None) -> Mapping[str, float]:
    if ratings is None:
        return {}
    return ratings.ratings if isinstance(ratings, RatingTable) else ratings


def select_for_eviction(pool: Sequence[PoolMember | str], ratings: RatingTable | Mapping[str, float] | None,
                        max_sampled: int, protected: Collection[str] = ()) -> list[str]:
    """Ids to remove FROM THE SAMPLER so at most ``max_sampled`` members remain, in the order
    they were chosen. Fewer when the protected members alone exceed ``max_sampled`` (then
    every unprotected member goes and the sampler stays over size: protection wins).

    ``pool`` is the sampled pool in admission order (ids or PoolMember); ``ratings`` a fit or
    an id -> Elo mapping. A pure function of its arguments; ties broken by id.
    Raises ValueError for a negative max_sampled or a duplicate id.
    """
    if max_sampled < 0:
        raise ValueError(f"max_sampled {max_sampled}: expected >= 0")
    members = _members(pool)
    excess = len(members) - max_sampled
    if excess <= 0:
        return []
    guard = set(protected)
    is_protected = {m.id: m.id in guard or m.id.startswith(ANCHOR_PREFIX) for m in members}
    r = _rating_map(ratings)
    out: list[str] = []

    # 1. Unrated, unprotected members, oldest first.
    for m in members:
        if len(out) == excess:
            return out
        if not is_protected[m.id] and m.id not in r:
            out.append(m.id)

    # 2. Thin the rated ones: remove the cheapest hole until the excess is gone.
    kept = sorted(((float(r[m.id]), m.id, m) for m in members if m.id in r), key=lambda t: (t[0], t[1]))
    while len(out) < excess:
        best = None
        for k, (rating, mid, m) in enumerate(kept):
            if is_protected[mid]:
                continue
            lo = kept[k - 1][0] if k > 0 else None
            hi = kept[k + 1][0] if k + 1 < len(kept) else None
            if lo is not None and hi is not None:
                end, hole = 0, hi - lo  # interior: the gap its removal leaves
            else:
                # An extreme: removing it shrinks the range. Only when no interior member is
                # left, and then the one nearest its neighbour.
                end, hole = 1, (rating - lo if lo is not None else hi - rating if hi is not None else math.inf)
            cost = (end, hole * (CYCLE_KEEP_FACTOR if m.cycle else 1.0), mid)
            if best is None or cost < best[0]:
                best = (cost, k)
        if best is None:  # everything left is protected
            break
        out.append(kept.pop(best[1])[1])
    return out
