"""The frozen pool of one run: who PFSP may draw, who is champion, who waits for a gate
(royalelearn-facts 6.3 and 6.4; seed 004, EvictionPolicy / GateDecision).

Stored at ``<runs_dir>/<run_name>/ladder/pool.json`` (``pool_path``), written atomically
(temporary file, fsync, rename, fsync of the folder): a crash leaves the old state or the new
one, never a mix. The file is the only record of who the champion is, so a file that does not
read is REFUSED (``PoolCorrupt``, naming the file and what to do), never reset to an empty pool:
an empty pool would admit the next candidate free and crown it.

Ids: a member is ``snap:<snapshot_id>`` (``member_id``), the checkpoint service's content id
(16 lowercase hex, services/checkpoint/snapshots.py).

Life of a candidate:

* ``submit`` -- the run's first candidate enters the pool free and becomes champion
  (``admitted_free``; its anchor record is still to be played); every later one is
  ``pending`` until a gate decides it; an id seen before is a ``duplicate`` and changes nothing.
  A SEED snapshot (``submit(..., seed=True)``, one of ``ladder.pool.seed_snapshots``) is
  admitted straight into members and archive (``admitted_seed``), flagged in ``seeds``, and
  never crowned by admission: the run's own first snapshot is still the first champion.
* ``resolve`` -- the gate's verdict: ``promote`` admits and crowns, ``admit_cycle`` admits with
  the cycle flag, ``discard`` drops it for good (its games stay in the result log). Every
  resolve counts a gate run; only a promotion counts as passed and resets
  ``consecutive_gate_failures`` (the gate_starved alarm reads it: the learner stopped beating
  its champion).
* Eviction (``services.ladder.eviction.select_for_eviction``) trims ``members`` -- the PFSP
  sampler -- back to ``pool_working_size`` after an admission. It never touches ``archive``,
  the champion chain, the run's first snapshot or a seed snapshot.

``version`` counts changes of ``members``: the ladder redraws its resident set when it moves.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import msgspec

from services.ladder.eviction import PoolMember, select_for_eviction
from services.ladder.gate import GateDecision
from services.ladder.rating import RatingTable
from services.ladder.results import check_run_name, result_log_path
from services.ladder.standings import Standings
from shared.durable import replace_file
from shared.messages import SNAPSHOT_PREFIX
from shared.run_dir import POOL, RESULTS, RunDir

POOL_FILE = POOL
POOL_FORMAT = 1
SNAPSHOT_ID = re.compile(r"[0-9a-f]{16}")
"""A snapshot's content id: the first 16 hex of the sha256 of its actor.safetensors."""
DEFAULT_WORKING_SIZE = 48
"""``ladder.pool.pool_working_size``'s default, for a PoolState loaded without a config."""

SubmitStatus = Literal["admitted_free", "pending", "duplicate", "admitted_seed"]


class PoolCorrupt(ValueError):
    """pool.json exists but is not a pool state this build can read."""


class Candidate(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A snapshot offered to the pool: member id ``snap:<snapshot_id>``, taken at ``env_steps``
    decisions in iteration ``iteration``."""

    id: str
    env_steps: int
    iteration: int


class _Stored(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """pool.json, field for field (PoolState documents each)."""

    format_version: int
    version: int
    members: list[str]
    archive: list[str]
    champion: str | None
    champions: list[str]
    cycle: list[str]
    discarded: list[str]
    pending: list[Candidate]
    admitted: dict[str, Candidate]
    gates_run: int
    gates_passed: int
    consecutive_gate_failures: int
    anchor_record: dict[str, dict[str, float]]
    seeds: list[str] = []  # absent from files written before seed snapshots: none


def check_snapshot_id(snapshot_id: str) -> str | None:
    """Why ``snapshot_id`` is not a snapshot content id (None when it is)."""
    if not isinstance(snapshot_id, str) or not SNAPSHOT_ID.fullmatch(snapshot_id):
        return (f"snapshot_id {snapshot_id!r} is not a snapshot content id: expected 16 lowercase hex "
                "characters, as SnapshotSaved.snapshot_id gives")
    return None


def member_id(snapshot_id: str) -> str:
    """``snap:<snapshot_id>``. Raises ValueError naming a bad id."""
    problem = check_snapshot_id(snapshot_id)
    if problem:
        raise ValueError(problem)
    return SNAPSHOT_PREFIX + snapshot_id


def pool_path(runs_dir: str | os.PathLike, run_name: str) -> Path:
    """``<runs_dir>/<run_name>/ladder/pool.json``. Raises ValueError for an unusable run_name."""
    return RunDir.of(runs_dir, run_name).pool


def current_ratings(runs_dir: str | os.PathLike, run_name: str, rater) -> RatingTable | None:
    """The fit of the run's result log as it stands: ``rating.fit_with`` over the log's eval
    games (``extract_games(kinds=("eval",))``) with ``rater`` (a ``shared.config.RaterConfig``),
    or None while the log holds no evaluation game. The ladder's PFSP, status and metrics use
    the same table (kept current incrementally by ``services.ladder.standings.Standings``).
    Raises ValueError for an unusable run_name, OSError for an unreadable log."""
    return Standings(result_log_path(runs_dir, run_name), rater).table()


class PoolState:
    """One run's pool (module docstring for the rules). Attributes:

    * ``members`` -- the PFSP sampler, ids in admission order (at most ``working_size`` unless
      protected members alone exceed it);
    * ``archive`` -- every id ever admitted, in admission order; never shrinks;
    * ``champion`` -- the current champion's id, None before the first admission;
    * ``champions`` -- the champion chain, oldest first (never evicted);
    * ``cycle`` -- members admitted by ``admit_cycle`` (eviction keeps them longer);
    * ``discarded`` -- candidates a gate discarded (never retried: a resubmission is a duplicate);
    * ``pending`` -- candidates waiting for a gate, oldest first;
    * ``admitted`` -- id -> the Candidate as submitted, for every archived id (env steps);
    * ``gates_run``, ``gates_passed``, ``consecutive_gate_failures`` -- the gate's counters;
    * ``anchor_record`` -- champion id -> {anchor id -> recorded mean score};
    * ``seeds`` -- the seed snapshots (``ladder.pool.seed_snapshots``) admitted, in admission
      order: members for good, never champion by admission;
    * ``version`` -- bumped whenever ``members`` changes.

    ``working_size`` (``ladder.pool.pool_working_size``) and ``rater`` (``ladder.rater``, for
    the fit eviction keeps a spread over) are settings, not state: pass them to ``load``.
    """

    def __init__(self, path: str | os.PathLike, *, working_size: int = DEFAULT_WORKING_SIZE, rater=None):
        if working_size < 1:
            raise ValueError(f"working_size {working_size}: expected >= 1 (ladder.pool.pool_working_size)")
        self.path = Path(path)
        self.working_size = working_size
        self.rater = rater
        self.version = 0
        self.members: list[str] = []
        self.archive: list[str] = []
        self.champion: str | None = None
        self.champions: list[str] = []
        self.cycle: list[str] = []
        self.discarded: list[str] = []
        self.pending: list[Candidate] = []
        self.admitted: dict[str, Candidate] = {}
        self.gates_run = 0
        self.gates_passed = 0
        self.consecutive_gate_failures = 0
        self.anchor_record: dict[str, dict[str, float]] = {}
        self.seeds: list[str] = []

    # ----------------------------------------------------------------- files

    @classmethod
    def for_run(cls, runs_dir: str | os.PathLike, run_name: str, ladder_cfg=None) -> PoolState:
        """``load(pool_path(runs_dir, run_name))`` with the working size and rater of a
        ``shared.config.LadderConfig`` (None: the defaults)."""
        if ladder_cfg is None:
            return cls.load(pool_path(runs_dir, run_name))
        return cls.load(pool_path(runs_dir, run_name), working_size=ladder_cfg.pool.pool_working_size,
                        rater=ladder_cfg.rater)

    @classmethod
    def load(cls, path: str | os.PathLike, *, working_size: int = DEFAULT_WORKING_SIZE, rater=None) -> PoolState:
        """The state stored at ``path``; a missing file is an empty pool.

        Raises PoolCorrupt naming the file, what is wrong and the fix for a file that does not
        decode or contradicts itself; OSError for one that cannot be read."""
        state = cls(path, working_size=working_size, rater=rater)
        try:
            raw = state.path.read_bytes()
        except FileNotFoundError:
            return state
        try:
            stored = msgspec.json.decode(raw, type=_Stored)
            if stored.format_version != POOL_FORMAT:
                raise ValueError(f"format_version {stored.format_version}; this build reads {POOL_FORMAT}")
            _check(stored)
        except (msgspec.DecodeError, ValueError) as exc:
            raise PoolCorrupt(
                f"{state.path}: not a readable pool state ({exc}). It is the only record of the pool "
                "and its champion, so it is not reset: restore it from a backup (a checkpoint's copy "
                "or the last good file), or fix it by hand. Moving it aside starts an EMPTY pool, "
                "whose next candidate enters free and becomes champion."
            ) from None
        for name in _Stored.__struct_fields__:
            if name != "format_version":
                setattr(state, name, getattr(stored, name))
        return state

    def _stored(self) -> _Stored:
        return _Stored(
            format_version=POOL_FORMAT, version=self.version, members=list(self.members), archive=list(self.archive),
            champion=self.champion, champions=list(self.champions), cycle=list(self.cycle),
            discarded=list(self.discarded), pending=list(self.pending), admitted=dict(self.admitted),
            gates_run=self.gates_run, gates_passed=self.gates_passed,
            consecutive_gate_failures=self.consecutive_gate_failures,
            anchor_record={k: dict(v) for k, v in self.anchor_record.items()}, seeds=list(self.seeds),
        )

    def save(self) -> None:
        """Write atomically: a temporary file beside it, fsync, rename over, fsync the folder.
        Raises OSError if the disk refuses (the old file is then untouched)."""
        stored = self._stored()
        _check(stored)
        replace_file(self.path, msgspec.json.format(msgspec.json.encode(stored), indent=1) + b"\n")

    # ----------------------------------------------------------------- reads

    @property
    def champion_env_steps(self) -> int | None:
        """Env steps (decisions) at which the champion's snapshot was taken; None without one."""
        c = self.admitted.get(self.champion) if self.champion else None
        return c.env_steps if c is not None else None

    @property
    def own_archive(self) -> list[str]:
        """The archive without the seed snapshots: the run's own snapshots, in admission order
        (the newest is PFSP's stand-in for the live learner, ``pfsp.learner_stand_in``)."""
        seeds = set(self.seeds)
        return [m for m in self.archive if m not in seeds]

    @property
    def first(self) -> str | None:
        """The run's first admitted own snapshot (v0, its first champion): never evicted."""
        own = self.own_archive
        return own[0] if own else None

    def protected(self) -> set[str]:
        """Members eviction never removes: the champion chain, v0 and the seed snapshots."""
        first = self.first
        return (set(self.champions) | set(self.seeds) | ({first} if first else set())
                | ({self.champion} if self.champion else set()))

    def known(self, candidate_id: str) -> bool:
        return (candidate_id in self.admitted or candidate_id in self.discarded
                or any(c.id == candidate_id for c in self.pending))

    # ----------------------------------------------------------------- changes

    def submit(self, c: Candidate, *, seed: bool = False) -> SubmitStatus:
        """File a candidate: ``admitted_free`` (the run's first: member, archive and champion),
        ``pending`` (waits for a gate) or ``duplicate`` (an id already admitted, pending or
        discarded; nothing changes). With ``seed``: ``admitted_seed`` (member, archive and
        ``seeds``; never champion) or ``duplicate``. Does not save. Raises ValueError for an id
        that is not ``snap:<16 hex>`` or negative env_steps / iteration."""
        if not c.id.startswith(SNAPSHOT_PREFIX):
            raise ValueError(f"candidate id {c.id!r}: expected {SNAPSHOT_PREFIX}<snapshot_id>")
        member_id(c.id[len(SNAPSHOT_PREFIX):])
        if c.env_steps < 0 or c.iteration < 0:
            raise ValueError(f"candidate {c.id}: env_steps {c.env_steps} and iteration {c.iteration} must be >= 0")
        if self.known(c.id):
            return "duplicate"
        if seed:
            self._admit(c)
            self.seeds.append(c.id)
            return "admitted_seed"
        if self.champion is None:
            self._admit(c)
            self._crown(c.id)
            return "admitted_free"
        self.pending.append(c)
        return "pending"

    def resolve(self, candidate_id: str, decision: GateDecision, *, ratings: RatingTable | None = None) -> None:
        """Apply a gate's decision to a pending candidate (module docstring for the counters),
        then evict from the sampler if it exceeds ``working_size``. ``ratings`` is the fit
        eviction spreads over; None reads the run's result log beside pool.json (only when an
        eviction is due). Does not save.

        Raises ValueError, changing nothing, for a candidate that is not pending, a decision
        about another candidate, or an ``incomplete`` decision (nothing is decided yet: play
        the missing games and decide again)."""
        pending = [c for c in self.pending if c.id == candidate_id]
        if not pending:
            raise ValueError(f"candidate {candidate_id!r} is not pending (pending: "
                             f"{', '.join(c.id for c in self.pending) or 'none'}); nothing to resolve")
        if decision.candidate != candidate_id:
            raise ValueError(f"the decision is about {decision.candidate!r}, not {candidate_id!r}")
        if decision.verdict == "incomplete" or not (decision.admit or decision.verdict == "discard"):
            raise ValueError(f"candidate {candidate_id}: verdict {decision.verdict!r} decides nothing; "
                             "play the missing games and decide again")
        c = pending[0]
        self.pending.remove(c)
        self.gates_run += 1
        if decision.admit:
            self._admit(c, cycle=decision.cycle)
        else:
            self.discarded.append(c.id)
        if decision.promote:
            self._crown(c.id)
            self.gates_passed += 1
            self.consecutive_gate_failures = 0
        else:
            self.consecutive_gate_failures += 1
        if len(self.members) > self.working_size:
            self.evict(ratings)

    def evict(self, ratings: RatingTable | None = None) -> list[str]:
        """Remove members from the sampler (never from the archive) until at most
        ``working_size`` remain, or only protected ones are left. Returns the evicted ids."""
        if len(self.members) <= self.working_size:
            return []
        if ratings is None and self.rater is not None:
            ratings = Standings(self.path.parent / RESULTS, self.rater).table()
        pool = [PoolMember(id=m, cycle=m in self.cycle) for m in self.members]
        gone = select_for_eviction(pool, ratings, self.working_size, self.protected())
        if gone:
            drop = set(gone)
            self.members = [m for m in self.members if m not in drop]
            self.version += 1
        return gone

    def set_anchor_record(self, member: str, scores: Mapping[str, float]) -> None:
        """Record ``member``'s mean score against each anchor (``gate.anchor_record``); later
        gates compare a candidate with the champion's record. Replaces that member's record.
        Raises ValueError for a member never admitted or a score outside 0..1."""
        if member not in self.admitted:
            raise ValueError(f"{member!r} was never admitted to the pool; only a member has an anchor record")
        for anchor, score in scores.items():
            if not isinstance(score, (int, float)) or not math.isfinite(score) or not 0.0 <= score <= 1.0:
                raise ValueError(f"anchor record of {member} vs {anchor}: score {score!r} must be in 0..1")
        self.anchor_record[member] = {a: float(s) for a, s in scores.items()}

    def _admit(self, c: Candidate, cycle: bool = False) -> None:
        self.members.append(c.id)
        self.archive.append(c.id)
        self.admitted[c.id] = c
        if cycle:
            self.cycle.append(c.id)
        self.version += 1

    def _crown(self, cid: str) -> None:
        self.champion = cid
        self.champions.append(cid)


def _check(s: _Stored) -> None:
    """Raise ValueError naming the first contradiction in a stored pool."""
    for name in ("members", "archive", "champions", "cycle", "discarded", "seeds"):
        ids = getattr(s, name)
        if len(set(ids)) != len(ids):
            raise ValueError(f"{name} lists an id twice")
    archived = set(s.archive)
    if set(s.admitted) != archived:
        raise ValueError("admitted and archive name different ids")
    for name in ("members", "champions", "cycle", "seeds"):
        stray = [m for m in getattr(s, name) if m not in archived]
        if stray:
            raise ValueError(f"{name} names {stray[0]!r}, which the archive does not hold")
    if s.champion is not None and (not s.champions or s.champions[-1] != s.champion):
        raise ValueError(f"champion {s.champion!r} is not the last of the champion chain")
    seeds = set(s.seeds)
    own = [m for m in s.archive if m not in seeds]
    if s.champion is None and own:
        raise ValueError("the archive holds members but there is no champion")
    if own and own[0] not in s.members:
        raise ValueError(f"the run's first snapshot {own[0]!r} is missing from members (it is never evicted)")
    lost = [m for m in s.seeds if m not in s.members]
    if lost:
        raise ValueError(f"the seed snapshot {lost[0]!r} is missing from members (it is never evicted)")
    if s.champion is not None and s.champion in seeds:
        raise ValueError(f"champion {s.champion!r} is a seed snapshot; admission never crowns a seed")
    if s.champion is not None and s.champion not in s.members:
        raise ValueError(f"champion {s.champion!r} is missing from members (it is never evicted)")
    if any(c.id in archived or c.id in s.discarded for c in s.pending):
        raise ValueError("a pending candidate is already admitted or discarded")
    if min(s.gates_run, s.gates_passed, s.consecutive_gate_failures, s.version) < 0 or s.gates_passed > s.gates_run:
        raise ValueError(f"counters gates_run {s.gates_run}, gates_passed {s.gates_passed}, "
                         f"consecutive_gate_failures {s.consecutive_gate_failures}, version {s.version} are inconsistent")
