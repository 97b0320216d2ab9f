"""The resident set: the few pool snapshots the learner's pool battles meet until the pool
changes (royalelearn-facts 6.2: at most ``max_resident_opponents`` resident, redrawn only when
the pool changes).

``draw_resident`` picks up to ``ladder.pool.max_resident_opponents`` distinct members without
replacement, with the PFSP weights of ``services.ladder.pfsp.pfsp_weights_for`` (``hard`` by
default: the learner's hardest opponents most, a uniform floor for the rest), from stream
``match/resident/pool_version/{version}``. The set keeps the PFSP weights of its members,
renormalised; each pool EPISODE then picks among them from its own stream
``match/battle/{b}/ordinal/{k}`` (``shared.matchmaking.assign``). So every assignment is a pure
function of (master seed, battle, ordinal, resident set), and the resident set a pure function
of (master seed, pool version, members, fit, stand-in).

The set is stored beside pool.json (``resident.json``) so that a restarted ladder keeps
planning with the set it drew, even though the fit may have moved since; it is a cache of a
draw, redrawn whenever the pool's version or members differ from the stored ones.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import msgspec
import numpy as np

from services.ladder.pfsp import learner_stand_in, pfsp_weights_for
from services.ladder.rating import RatingTable
from shared.seeding import stream
from shared.durable import replace_file
from shared.messages import SNAPSHOT_PREFIX
from shared.run_dir import RESIDENT

RESIDENT_FILE = RESIDENT


class ResidentSet(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One draw. ``ids`` in draw order with ``weights`` (float64, sum 1) the episode picks use;
    ``version`` and ``members`` are the pool it was drawn from; ``effective`` is PFSP's
    (every prediction came from the fit); ``stand_in`` the id that predicted the learner."""

    version: int
    members: list[str]
    ids: list[str]
    weights: list[float]
    effective: bool
    stand_in: str | None = None

    def matches(self, version: int, members: list[str]) -> bool:
        return self.version == version and self.members == list(members)

    def describe(self) -> str:
        picks = ", ".join(f"{i} ({w:.3f})" for i, w in zip(self.ids, self.weights))
        how = "PFSP on the fit" if self.effective else (
            "PFSP NOT effective: the fit lacks the stand-in or a member, taken as even (p = 0.5)")
        return f"resident set of pool version {self.version} ({len(self.members)} members): {picks}; {how}"


def draw_resident(master_seed: int, version: int, members: list[str], archive: list[str],
                  ratings: RatingTable | None, pool_cfg, multipliers: Mapping[str, float] | None = None) -> ResidentSet:
    """The resident set for one version of the pool (module docstring). ``archive`` is the
    run's own admitted ids in admission order, seed snapshots left out (``PoolState.own_archive``:
    the newest is the learner's stand-in, and a seed is not the learner); ``pool_cfg`` a
    ``shared.config.PoolConfig``; ``multipliers`` member id -> a seed snapshot's own weight
    (``seed_weights``), multiplied into its PFSP weight (royalelearn-facts 6.2). An empty pool
    gives an empty set (pool battles fall back to scripted opponents). Raises ValueError as
    ``pfsp_weights`` does for a bad config or multiplier."""
    if not members:
        return ResidentSet(version=version, members=[], ids=[], weights=[], effective=True)
    stand_in = learner_stand_in(archive)
    w, effective = pfsp_weights_for(members, ratings, stand_in, pool_cfg, multipliers=multipliers)
    k = min(pool_cfg.max_resident_opponents, len(members))
    rng = stream(master_seed, "match/resident/pool_version/{version}", version=version)
    picks = rng.choice(len(members), size=k, replace=False, p=w)
    sub = np.asarray(w)[picks]
    return ResidentSet(version=version, members=list(members), ids=[members[int(i)] for i in picks],
                       weights=[float(x) for x in sub / sub.sum()], effective=effective, stand_in=stand_in)


def seed_weights(seeds: list[str], pool_cfg) -> dict[str, float]:
    """Member id -> PFSP multiplier for the admitted seed snapshots ``seeds``
    (``PoolState.seeds``) that ``pool_cfg.seed_snapshots`` configures: ``snap:<sha256[:16]>`` ->
    its ``weight``. A seed the config no longer names keeps 1.0 (it is absent)."""
    configured = {SNAPSHOT_PREFIX + s.sha256[:16]: float(s.weight) for s in pool_cfg.seed_snapshots}
    return {m: configured[m] for m in seeds if m in configured}


def load_resident(path: str | os.PathLike) -> ResidentSet | None:
    """The stored draw, or None when there is none or it does not read (it is only a cache)."""
    try:
        return msgspec.json.decode(Path(path).read_bytes(), type=ResidentSet)
    except (OSError, msgspec.DecodeError):
        return None


def save_resident(path: str | os.PathLike, resident: ResidentSet) -> None:
    """Write atomically (temporary file, fsync, rename). Raises OSError if the disk refuses."""
    replace_file(path, msgspec.json.encode(resident) + b"\n")
