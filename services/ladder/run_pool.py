"""The ladder's view of its run's pool: admission, the resident set PFSP draws, the status the
learner puts in its metric row, and the ladder's pool gauges.

One ``RunPool`` per ladder, for the run the ladder was started with (``config.run_name``: plans
carry no run name, so a ladder plans for one run). It holds:

* the ``PoolState`` of ``<run>/ladder/pool.json``, reloaded whenever the file changed under it
  (the gate runner resolves candidates through its own PoolState of the same file);
* ``Standings``: the fit of the result log's eval games, refit only when new ones arrive;
* the resident set (services/ladder/resident.py), redrawn when the pool's version or members
  change.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

from services.ladder.pool import Candidate, PoolState, SubmitStatus, check_snapshot_id, member_id, pool_path
from services.ladder.rating import RatingTable
from services.ladder.resident import (
    RESIDENT_FILE, ResidentSet, draw_resident, load_resident, save_resident, seed_weights,
)
from services.ladder.results import check_run_name, result_log_path
from services.ladder.standings import Standings
from shared.messages import AdmitCandidate, LadderStatus, LadderStatusRequest


class PoolRefusal(ValueError):
    """A pool request the ladder will not serve (unknown run, bad id); the text names the fix."""


class PoolWriteError(RuntimeError):
    """pool.json could not be written; the text names the file."""


def _content(path: Path) -> bytes | None:
    """pool.json's bytes (a few KB), None when missing: compared whole, since a stat can look
    the same across two quick atomic saves (a reused inode within one timestamp tick)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


class RunPool:
    """The pool side of one ladder (module docstring). ``config`` is the ladder's RunConfig.

    Raises PoolCorrupt (services/ladder/pool.py) at construction for an unreadable pool.json:
    the ladder refuses to start rather than plan with an empty pool."""

    def __init__(self, config, runs_dir: str | os.PathLike, say: Callable[[str], None] = print):
        self.config = config
        self.run_name = config.run_name
        self.runs_dir = Path(runs_dir)
        self.path = pool_path(runs_dir, self.run_name)
        self.resident_path = self.path.with_name(RESIDENT_FILE)
        self.say = say
        self.standings = Standings(result_log_path(runs_dir, self.run_name), config.ladder.rater)
        self._state: PoolState | None = None
        self._stat: bytes | None = None
        self._resident: ResidentSet | None = None
        state = self.state()
        self.say(f"ladder: pool {self.path}: " + (
            f"{len(state.members)} members, champion {state.champion}, {len(state.pending)} pending"
            if self._stat is not None else "does not exist yet (empty pool)"))

    # ----------------------------------------------------------------- state

    def state(self) -> PoolState:
        """The pool as on disk now (reloaded if pool.json changed since this process last read
        or wrote it). Raises PoolCorrupt for a file that does not read."""
        key = _content(self.path)
        if self._state is None or key != self._stat:
            self._state = PoolState.for_run(self.runs_dir, self.run_name, self.config.ladder)
            self._stat = key
        return self._state

    def save(self, state: PoolState) -> None:
        """``state.save()``, remembering what was written. Raises PoolWriteError naming the file."""
        try:
            state.save()
        except OSError as exc:
            self._state = None  # re-read the file next time: memory must not run ahead of disk
            raise PoolWriteError(f"pool state {self.path} not written: {exc}") from None
        self._stat = _content(self.path)

    def ratings(self) -> RatingTable | None:
        """The current fit of the run's eval games (None before any)."""
        return self.standings.table()

    def resident(self) -> ResidentSet:
        """The resident set for the pool as it stands, drawn (and stored) when the pool moved."""
        state = self.state()
        if self._resident is not None and self._resident.matches(state.version, state.members):
            return self._resident
        stored = load_resident(self.resident_path)
        if stored is not None and stored.matches(state.version, state.members):
            self._resident = stored
            return stored
        drawn = draw_resident(self.config.master_seed, state.version, state.members, state.own_archive,
                              self.ratings() if state.members else None, self.config.ladder.pool,
                              multipliers=seed_weights(state.seeds, self.config.ladder.pool))
        if drawn.ids:
            try:
                save_resident(self.resident_path, drawn)
            except OSError as exc:
                self.say(f"ladder: resident set not stored ({exc}); it stays in memory")
            self.say(f"ladder: {drawn.describe()}")
        self._resident = drawn
        return drawn

    # ----------------------------------------------------------------- requests

    def _check_run(self, run_name: str) -> None:
        problem = check_run_name(run_name)
        if problem:
            raise PoolRefusal(problem)
        if run_name != self.run_name:
            raise PoolRefusal(f"run_name {run_name!r}: this ladder keeps the pool of run {self.run_name!r} "
                              "(the run of the config it was started with); start a ladder with that run's config")

    def admit(self, req: AdmitCandidate) -> SubmitStatus:
        """File a candidate (``PoolState.submit``; a seed snapshot with ``req.seed``) and store
        the pool. Raises PoolRefusal for an unknown run, a bad id / counter or a seed the ladder's
        config does not list in ``ladder.pool.seed_snapshots``, PoolWriteError if pool.json
        cannot be written."""
        self._check_run(req.run_name)
        problem = check_snapshot_id(req.snapshot_id)
        if problem:
            raise PoolRefusal(problem)
        if req.env_steps < 0 or req.iteration < 0:
            raise PoolRefusal(f"env_steps {req.env_steps}, iteration {req.iteration}: both must be >= 0")
        if req.seed:
            configured = [s.sha256[:16] for s in self.config.ladder.pool.seed_snapshots]
            if req.snapshot_id not in configured:
                raise PoolRefusal(f"seed snapshot {req.snapshot_id}: not one of this ladder's "
                                  f"ladder.pool.seed_snapshots ({', '.join(configured) or 'none'}); start the "
                                  "ladder with the learner's config")
        state = self.state()
        c = Candidate(id=member_id(req.snapshot_id), env_steps=req.env_steps, iteration=req.iteration)
        status = state.submit(c, seed=req.seed)
        if status != "duplicate":
            self.save(state)
        what = {"admitted_free": "the run's first: admitted free, now champion",
                "pending": f"waits for a gate ({len(state.pending)} pending)",
                "duplicate": "already known to the pool; nothing changed",
                "admitted_seed": "a seed snapshot: admitted, never evicted, not champion"}[status]
        self.say(f"ladder: {'seed snapshot' if req.seed else 'candidate'} {c.id} at {c.env_steps:,} env steps (iteration {c.iteration}): {what}")
        return status

    def status(self, req: LadderStatusRequest) -> LadderStatus:
        """The pool, the gate counters and the fit (see LadderStatus). Raises PoolRefusal for an
        unknown run."""
        self._check_run(req.run_name)
        state = self.state()
        table = self.ratings()
        resident = self.resident() if state.members else None
        ratings, se = {}, {}
        if table is not None:
            for m in state.members[: self.config.ladder.pool.pool_working_size]:
                if m in table:
                    ratings[m], se[m] = table.ratings[m], table.se[m]
        champ_r = champ_se = None
        if table is not None and state.champion is not None and state.champion in table:
            champ_r, champ_se = table.ratings[state.champion], table.se[state.champion]
        return LadderStatus(
            request_id=req.request_id, pool_size=len(state.members), pending=len(state.pending),
            archive_size=len(state.archive), champion=state.champion, champion_env_steps=state.champion_env_steps,
            gates_run=state.gates_run, gates_passed=state.gates_passed,
            consecutive_gate_failures=state.consecutive_gate_failures,
            champion_rating=champ_r, champion_rating_se=champ_se,
            transitivity_residual=table.transitivity_residual if table is not None else None,
            pfsp_effective=resident.effective if resident is not None else None,
            resident=list(resident.ids) if resident is not None else [], ratings=ratings, rating_se=se,
        )

    # ----------------------------------------------------------------- metrics

    def sync_metrics(self, metrics) -> None:
        """Bring the ladder's pool gauges and counters up to date (services/ladder/service.py
        Metrics). Gauges of numbers that do not exist are NaN, never a stale value or 0."""
        state = self.state()
        table = self.ratings()
        games = self.standings.eval_games
        if metrics.seen_eval_games is None:
            metrics.seen_eval_games = games  # counted from this process's start, as a counter is
        if games > metrics.seen_eval_games:
            metrics.eval_games_recorded.inc(games - metrics.seen_eval_games)
        metrics.seen_eval_games = games
        metrics.pool_size.set(len(state.members))
        metrics.pool_pending.set(len(state.pending))
        if metrics.seen_champion != state.champion:
            # One series at a time: the old champion's label set goes on promotion.
            if metrics.seen_champion is not None:
                metrics.champion_info.remove(metrics.seen_champion)
            if state.champion is not None:
                metrics.champion_info.labels(state.champion).set(1)
            metrics.seen_champion = state.champion
        steps = state.champion_env_steps
        metrics.champion_env_steps.set(math.nan if steps is None else steps)
        if metrics.seen_gates is None:
            metrics.seen_gates = (state.gates_run, state.gates_passed)  # counters count from this process's start
        run0, passed0 = metrics.seen_gates
        if state.gates_run > run0:
            metrics.gates_run.inc(state.gates_run - run0)
        if state.gates_passed > passed0:
            metrics.gates_passed.inc(state.gates_passed - passed0)
        metrics.seen_gates = (max(run0, state.gates_run), max(passed0, state.gates_passed))
        metrics.consecutive_gate_failures.set(state.consecutive_gate_failures)
        champ = state.champion
        known = table is not None and champ is not None and champ in table
        metrics.champion_rating.set(table.ratings[champ] if known else math.nan)
        metrics.champion_rating_se.set(table.se[champ] if known else math.nan)
        residual = table.transitivity_residual if table is not None else None
        metrics.transitivity_residual.set(math.nan if residual is None else residual)
