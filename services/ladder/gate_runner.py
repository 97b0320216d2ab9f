"""The gate runner: plans the promotion gate's games, hands them to evaluators, decides.

Driven by the ladder's serve loop (``tick``) and its two evaluator requests (``request_job``,
``report``). One runner per ladder, for the run the ladder was started with. Work, in order:

1. A champion with no anchor record (the run's first snapshot, admitted free) plays each anchor
   ``anchor_games`` times; its mean scores become its record (``PoolState.set_anchor_record``),
   which condition 2 of every later gate compares against (royalelearn-facts 6.4, lesson 14).
2. The oldest pending candidate's gate (``services.ladder.gate``), in three phases, each decided
   as soon as it is complete, so a settled outcome stops early (facts 6.4 "Early stop"):

   * phase ``champion``: candidate vs champion on seeds ``0 .. champion_games / 2 - 1``, both
     sides each; condition 1 failed -> discard;
   * phase ``anchors``: candidate vs each anchor on seeds ``0 .. anchor_games / 2 - 1`` (the
     seeds of the champion's record); a regression -> discard;
   * phase ``stratified``: ``stratified_snapshots`` pool members (not the champion) drawn with
     variance weights relative to the champion (``pfsp.draw_stratified``, stream
     ``eval/stratified/{candidate}``), ``stratified_games`` each; skipped when there are none.

   The decision (``gate.decide_gate``, bootstrap stream ``eval/bootstrap/{candidate}``) is
   written to ``<run>/ladder/gates/<candidate>.json`` (``GateRecord``: everything a re-run needs,
   ``royalefleet gate``), then applied with ``PoolState.resolve``.

Jobs are at most ``evaluation.job_seeds`` seeds (2 games each). A job not reported within
``evaluation.job_deadline_s`` is handed out again under the same id; the first report of a job
is written to the result log (fsynced) and any later one is acknowledged with count 0. Job ids
continue after the largest eval ``iteration`` already in the log, so a restarted ladder never
reuses one.

A gate survives a ladder restart. Its plan (every job planned so far, the phase, the champion's
record) is journalled to ``<run>/ladder/gate_in_flight.json`` each time jobs are planned, and
removed once the decision is applied. The next ladder resumes it: jobs whose games are in the
result log (the log is fsynced before a report is acknowledged) count as played, the rest are
handed out again under the same ids (a game is a pure function of job id, seed and side), so
the decision and its record are those of a gate that was never interrupted. A journal that no
longer fits (the candidate resolved, another champion, a changed gate config or seed set, or
an earlier phase's game missing from the log) is said and dropped, and the gate planned anew.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import msgspec
import numpy as np

from shared.config import GateConfig, RunConfig
from shared.durable import fsync_dir, replace_file
from shared.log_guard import printable
from shared.evaluation import ANCHORS, EVAL_ROLE, eval_seed_set, seed_set_hash, seeds_for_games, side_scores
from shared.messages import Ack, EpisodeRecord, EvalJob, EvalJobRequest, EvalReport, NoJob
from shared.seeding import stream

from services.ladder.gate import (
    ConditionResult, GateDecision, Stratified, anchor_record, decide_gate, stratified_from_table,
)
from services.ladder.pfsp import draw_stratified
from services.ladder.pool import PoolState, current_ratings
from services.ladder.results import RecordRefused, ResultLine, ResultLog, check_records, record_key, result_log_path
from shared.run_dir import GATE_IN_FLIGHT, GATES, RunDir

GATES_DIR = GATES
IN_FLIGHT_FILE = GATE_IN_FLIGHT
PHASES = ("champion", "anchors", "stratified")
SETTLED_REASON = "not played: the verdict was settled by an earlier condition (royalelearn-facts 6.4 early stop)"


class ReportRefused(ValueError):
    """An EvalReport the ladder will not write; the text names the bad value."""


class JobSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One evaluation job as planned: ``a`` vs ``b`` on the seed indices ``seeds``, both sides
    each. ``condition`` is what it counts for: ``champion``, ``anchor:<id>``, ``stratified:<id>``
    or ``record:<anchor>`` (a champion's anchor record)."""

    job_id: int
    a: str
    b: str
    seeds: list[int]
    condition: str


class GateRecord(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``<run>/ladder/gates/<candidate>.json``: one gate, whole (royalelearn-facts 6.4 "Decision
    record"). ``decision`` holds the verdict and every ConditionResult; the rest is what a
    re-run needs to recompute them exactly (``royalefleet gate``): the jobs (ids name the action
    streams), the seed set, the champion's anchor record and the fitted predictions used."""

    candidate: str
    champion: str
    decision: GateDecision
    eval_seed_set_hash: str
    eval_seed_count: int
    master_seed: int
    wall_seconds: float
    """From planning the gate's first job to writing this record."""
    decided_at: str
    """UTC ISO-8601."""
    settled_after: str
    """The phase after which the verdict was decided (``champion``, ``anchors``, ``stratified``)."""
    gate: GateConfig
    champion_anchor_record: dict[str, float]
    stratified_members: list[str]
    champion_predicted: dict[str, float]
    jobs: list[JobSpec]


class GateInFlight(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``<run>/ladder/gate_in_flight.json``: the plan of the gate (or anchor record) in flight, so
    a restarted ladder resumes it instead of planning it anew (module docstring). Game results
    are not in it: they are in the result log, under the jobs' ids."""

    kind: str
    """``gate`` (a candidate's) or ``record`` (a champion's anchor record)."""
    candidate: str
    champion: str
    started: float
    """Epoch seconds when the first job was planned (the record's ``wall_seconds`` counts from it)."""
    phase: str
    record: dict[str, float]
    members: list[str]
    jobs: list[JobSpec]
    gate: GateConfig
    job_seeds: int
    eval_seed_set_hash: str


def in_flight_path(runs_dir: str | os.PathLike, run_name: str) -> Path:
    """``<runs_dir>/<run_name>/ladder/gate_in_flight.json``."""
    return RunDir.of(runs_dir, run_name).gate_in_flight


def gates_dir(runs_dir: str | os.PathLike, run_name: str) -> Path:
    """``<runs_dir>/<run_name>/ladder/gates``."""
    return RunDir.of(runs_dir, run_name).gates


def gate_record_path(runs_dir: str | os.PathLike, run_name: str, candidate: str) -> Path:
    """``<runs_dir>/<run_name>/ladder/gates/<candidate>.json`` (``snap:`` written ``snap_``, a
    colon being no portable file name character)."""
    return RunDir.of(runs_dir, run_name).gate_record(candidate)


def write_gate_record(path: Path, rec: GateRecord) -> None:
    """Atomically: temporary file, fsync, rename (``shared.durable.replace_file``)."""
    replace_file(path, msgspec.json.format(msgspec.json.encode(rec), indent=2) + b"\n")


def read_gate_record(path: str | os.PathLike) -> GateRecord:
    """Raises OSError for a missing file, ValueError naming the file for one that does not decode."""
    try:
        return msgspec.json.decode(Path(path).read_bytes(), type=GateRecord)
    except msgspec.DecodeError as exc:
        raise ValueError(f"{path}: not a gate decision record ({exc})") from None


def split_seeds(seeds: list[int], job_seeds: int) -> list[list[int]]:
    """Consecutive chunks of at most ``job_seeds`` seeds."""
    return [seeds[i:i + job_seeds] for i in range(0, len(seeds), job_seeds)]


def scores_by_condition(jobs: list[JobSpec], records_by_job: dict[int, list[EpisodeRecord]]) -> dict[str, np.ndarray]:
    """condition -> (S, 2) side scores of the job's ``a`` against its ``b``, seeds in job order.
    Raises ValueError naming a missing game."""
    out: dict[str, list[np.ndarray]] = {}
    for j in jobs:
        out.setdefault(j.condition, []).append(side_scores(records_by_job[j.job_id], j.a, j.b, j.seeds))
    return {c: np.concatenate(parts) for c, parts in out.items()}


def decide_from_scores(scores: dict[str, np.ndarray], *, candidate: str, champion: str,
                       champion_anchor_record: dict[str, float], champion_predicted: dict[str, float],
                       stratified_members: list[str], gate_cfg: GateConfig, master_seed: int,
                       settled_after: str) -> GateDecision:
    """``decide_gate`` on the scores of one gate's conditions (``scores_by_condition``): the one
    path from games to verdict, used by the runner and by ``royalefleet gate``. Conditions not
    played because an earlier phase settled the verdict keep decide_gate's numbers and say so."""
    champ = scores.get("champion", np.zeros((0, 2)))
    anchors = {c.split(":", 1)[1]: s for c, s in scores.items() if c.startswith("anchor:")}
    strat = None
    if stratified_members:
        strat = Stratified(scores={m: scores.get(f"stratified:{m}", np.zeros(0)) for m in stratified_members},
                           champion_predicted=dict(champion_predicted))
    rng = stream(master_seed, "eval/bootstrap/{comparison}", comparison=candidate)
    decision = decide_gate(champ, anchors, champion_anchor_record, strat, gate_cfg, rng,
                           candidate=candidate, champion=champion)
    played = PHASES[: PHASES.index(settled_after) + 1]

    def phase_of(c: ConditionResult) -> str:
        return ("champion" if c.name == "beats_champion" else
                "anchors" if c.name.startswith("no_anchor_regression") else "stratified")

    conditions = [msgspec.structs.replace(c, reason=SETTLED_REASON) if c.skipped and phase_of(c) not in played
                  else c for c in decision.conditions]
    return msgspec.structs.replace(decision, conditions=conditions)


@dataclass
class _Job:
    spec: JobSpec
    issued_at: float | None = None
    worker: str = ""
    records: list[EpisodeRecord] | None = None


@dataclass
class _Audition:
    """One piece of work in flight: a candidate's gate (``kind`` gate) or a champion's anchor
    record (``kind`` record, ``candidate`` = that champion)."""

    kind: str
    candidate: str
    champion: str
    started: float
    phase: str = "champion"
    jobs: list[_Job] = field(default_factory=list)
    record: dict[str, float] = field(default_factory=dict)
    members: list[str] = field(default_factory=list)
    predicted: dict[str, float] = field(default_factory=dict)

    def phase_jobs(self) -> list[_Job]:
        return [j for j in self.jobs if self._phase_of(j.spec.condition) == self.phase]

    def _phase_of(self, condition: str) -> str:
        if condition == "champion":
            return "champion"
        if condition.startswith(("anchor:", "record:")):
            return "anchors"
        return "stratified"


class GateJournal:
    """The file ``<run>/ladder/gate_in_flight.json`` (module docstring): read at start, written
    each time jobs are planned, removed once the decision is applied. ``error`` is why the last
    write failed (None when it did not); the runner hands out no job until a write succeeds."""

    def __init__(self, path: Path, say: Callable[[str], None]):
        self.path, self.say = path, say
        self.error: str | None = None

    def read(self) -> GateInFlight | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return msgspec.json.decode(data, type=GateInFlight)
        except msgspec.DecodeError as exc:
            # A plan, not a result: the gate is planned anew, and the file kept aside as evidence.
            aside = self.path.with_name(self.path.name + ".unreadable")
            os.replace(self.path, aside)
            self.say(f"ladder: {self.path} does not decode ({exc}); moved to {aside.name}, the gate in "
                     "flight is planned anew")
            return None

    def write(self, plan: GateInFlight) -> bool:
        """Atomically replace the file with ``plan``; False (said once per failing spell) if the disk refuses."""
        try:
            replace_file(self.path, msgspec.json.encode(plan) + b"\n")
        except OSError as exc:
            if self.error is None:
                self.say(f"ladder: cannot save the gate's plan to {self.path} ({exc}); no job is handed "
                         "out until it is saved")
            self.error = str(exc)
            return False
        if self.error is not None:
            self.say(f"ladder: the gate's plan is saved to {self.path} again; jobs are handed out")
        self.error = None
        return True

    def drop(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return
        fsync_dir(self.path.parent)


def journal_misfit(j: GateInFlight, pool: PoolState, config: RunConfig, seed_hash: str) -> str:
    """Why the journal ``j`` cannot be resumed against ``pool``, ``config`` and the evaluation seed
    set of hash ``seed_hash``; "" when it can."""
    if j.gate != config.ladder.gate or j.job_seeds != config.evaluation.job_seeds:
        return "the gate config (ladder.gate, evaluation.job_seeds) changed since it was planned"
    if j.eval_seed_set_hash != seed_hash:
        return "the evaluation seed set changed since it was planned"
    if pool.champion != j.champion:
        return f"the champion is now {pool.champion}, not {j.champion}"
    if j.kind == "record":
        if j.candidate != j.champion or j.champion in pool.anchor_record:
            return f"champion {j.champion} has its anchor record already"
        return ""
    if j.candidate not in [c.id for c in pool.pending]:
        return f"candidate {j.candidate} is no longer pending (decided)"
    if pool.anchor_record.get(j.champion) != j.record:
        return f"champion {j.champion}'s anchor record changed"
    return ""


def last_logged_bound(runs_dir: Path, run_name: str) -> float | None:
    """Condition 1's lower bound in the newest gate record of the run that reads, or None."""
    folder = gates_dir(runs_dir, run_name)
    if not folder.is_dir():
        return None
    files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    for path in reversed(files):
        try:
            c1 = read_gate_record(path).decision.conditions[0]
        except (OSError, ValueError, IndexError):
            continue
        return c1.bound
    return None


def keep_replays(spec: JobSpec, rep: EvalReport, wanted: int, *, config: RunConfig, runs_dir: Path,
                 seed_set: np.ndarray, iteration: int, say: Callable[[str], None]) -> None:
    """Write the report's traces to ``<run>/replays/`` with their pages and index entries
    (shared/replays.py). Only the first ``wanted`` games of the job (``GateRunner.record_games``,
    the games it asked for) are kept; a trace that does not decode or draw, or a disk that
    refuses, is said and skipped: the records are already in the result log, and a game not
    kept costs nothing else. ``seed_set`` maps a seed index to its env seed; ``iteration`` is
    player a's (-1 when the pool does not know it)."""
    from royalegym.replay import Trace

    from shared.replays import ReplayEntry, add_entries, now_utc, replays_dir, trace_result, write_game

    order = [(s, side) for s in spec.seeds for side in (0, 1)][:wanted]
    folder = replays_dir(runs_dir, config.run_name)
    kind = "strength" if spec.condition.startswith(("record:", "strength:")) else "gate"
    entries = []
    for g in rep.replays:
        if (g.seed, g.side) not in order:
            say(f"ladder: job {spec.job_id}: a trace of seed {g.seed} side {g.side} was not asked for; "
                "not kept")
            continue
        stem = f"job{spec.job_id}-seed{g.seed}-side{g.side}"
        blue, red = (spec.a, spec.b) if g.side == 0 else (spec.b, spec.a)
        try:
            trace = msgspec.msgpack.decode(g.trace, type=Trace)
            winner, crowns, ticks = trace_result(trace)
            title = f"{blue} (blue) vs {red} (red), job {spec.job_id}, seed {g.seed}"
            write_game(folder, stem, trace, title=title)
        except (msgspec.DecodeError, ValueError, OSError) as exc:  # RenderError is a ValueError
            say(f"ladder: job {spec.job_id}: the recorded game {stem} is not kept: {exc}")
            continue
        entries.append(ReplayEntry(
            id=stem, kind=kind, blue=blue, red=red, a=spec.a, b=spec.b, job=spec.job_id, seed_index=g.seed,
            side=g.side, env_seed=int(seed_set[g.seed]), iteration=iteration, winner=winner, crowns=crowns,
            ticks=ticks, decisions=len(trace.steps), trace=f"replays/{stem}.msgpack",
            html=f"replays/{stem}.html", written=now_utc()))
    if entries:
        try:
            add_entries(folder, entries, config.evaluation.replays_keep)
        except (OSError, ValueError) as exc:
            say(f"ladder: the replay index {folder}/index.json is not updated: {exc}")
            return
        say(f"ladder: recorded {len(entries)} game(s) of job {spec.job_id} in {folder} "
            f"(newest: {entries[-1].html})")


class GateRunner:
    """The gate runner of one ladder (module docstring). ``clock`` (monotonic seconds) and
    ``wall`` (epoch seconds) are injectable for tests."""

    def __init__(self, config: RunConfig, runs_dir: str | os.PathLike, *, say: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time):
        self.config, self.runs_dir, self.say = config, Path(runs_dir), say
        self.run_name = config.run_name
        self.clock, self.wall = clock, wall
        self.seed_set = eval_seed_set(config.master_seed, config.ladder.pool.eval_seed_count)
        self.seed_hash = seed_set_hash(self.seed_set)
        self.log = ResultLog.for_run(self.runs_dir, self.run_name)
        self.journal_file = GateJournal(in_flight_path(self.runs_dir, self.run_name), say)
        self.journal = self.journal_file.read()
        planned = [j.job_id for j in self.journal.jobs] if self.journal else []
        self.next_job_id = 1 + max([r.iteration for r in self.log.read().records if r.role == EVAL_ROLE] + planned,
                                   default=-1)
        self.current: _Audition | None = None
        self.stuck: set[str] = set()
        self.last_lower_bound: float | None = last_logged_bound(self.runs_dir, self.run_name)
        self.decisions: list[GateRecord] = []

    # ----------------------------------------------------------------- planning

    def _pool(self) -> PoolState:
        return PoolState.for_run(self.runs_dir, self.run_name, self.config.ladder)

    def _add_jobs(self, a: str, b: str, games: int, condition: str) -> None:
        seeds = list(range(seeds_for_games(games)))
        for chunk in split_seeds(seeds, self.config.evaluation.job_seeds):
            self.current.jobs.append(_Job(JobSpec(job_id=self.next_job_id, a=a, b=b, seeds=chunk,
                                                  condition=condition)))
            self.next_job_id += 1

    def _start(self, pool: PoolState) -> None:
        gate = self.config.ladder.gate
        champion = pool.champion
        if champion is None:
            return
        if champion not in pool.anchor_record and champion not in self.stuck:
            self.current = _Audition("record", champion, champion, self.wall(), phase="anchors")
            for anchor in ANCHORS:
                self._add_jobs(champion, anchor, gate.anchor_games, f"record:{anchor}")
            self.say(f"ladder: champion {champion} has no anchor record; planned {len(self.current.jobs)} jobs "
                     f"against {', '.join(ANCHORS)}")
            self._write_journal()
            return
        waiting = [c for c in pool.pending if c.id not in self.stuck]
        if not waiting or champion not in pool.anchor_record:
            return
        cand = waiting[0].id
        self.current = _Audition("gate", cand, champion, self.wall(), record=dict(pool.anchor_record[champion]))
        self._add_jobs(cand, champion, gate.champion_games, "champion")
        self.say(f"ladder: gate of {cand} against champion {champion}: {len(self.current.jobs)} jobs "
                 f"({gate.champion_games} battles)")
        self._write_journal()

    def _next_phase(self, pool: PoolState) -> bool:
        """Plan the current gate's next phase; False when there is none."""
        a, gate = self.current, self.config.ladder.gate
        if a.phase == "champion":
            a.phase = "anchors"
            for anchor in ANCHORS:
                self._add_jobs(a.candidate, anchor, gate.anchor_games, f"anchor:{anchor}")
            return True
        if a.phase == "anchors" and gate.stratified_snapshots > 0:
            others = [m for m in pool.members if m not in (a.champion, a.candidate)]
            ratings = current_ratings(self.runs_dir, self.run_name, self.config.ladder.rater)
            rng = stream(self.config.master_seed, "eval/stratified/{candidate}", candidate=a.candidate)
            drawn, _ = draw_stratified(others, ratings, a.champion, gate.stratified_snapshots, rng,
                                       uniform_floor=self.config.ladder.pool.pfsp_uniform_floor,
                                       floor_scale=self.config.ladder.pool.weight_floor_scale)
            if not drawn:
                return False
            a.phase, a.members = "stratified", drawn
            for m in drawn:
                self._add_jobs(a.candidate, m, gate.stratified_games, f"stratified:{m}")
            return True
        return False

    # ----------------------------------------------------------------- evaluator requests

    def request_job(self, req: EvalJobRequest) -> EvalJob | NoJob:
        """The next job not yet handed out (or handed out longer than the deadline ago), or
        NoJob with the retry interval."""
        ev = self.config.evaluation
        self.tick()
        if self.journal_file.error is not None and self.current is not None and not self._write_journal():
            # A job handed out now could be logged under a plan a restarted ladder cannot see.
            return NoJob(request_id=req.request_id, retry_after_s=ev.no_job_retry_s,
                         reason=f"the gate's plan cannot be saved to {self.journal_file.path}: "
                         f"{self.journal_file.error}")
        if self.current is not None:
            now = self.clock()
            for j in self.current.phase_jobs():
                if j.records is None and (j.issued_at is None or now - j.issued_at >= ev.job_deadline_s):
                    if j.issued_at is not None:
                        self.say(f"ladder: job {j.spec.job_id} not reported by {printable(j.worker, 80)} within "
                                 f"{ev.job_deadline_s:.0f} s; handing it to {printable(req.worker, 80)}")
                    j.issued_at, j.worker = now, req.worker
                    s = j.spec
                    return EvalJob(request_id=req.request_id, job_id=s.job_id, run_name=self.run_name, a=s.a,
                                   b=s.b, seeds=list(s.seeds), deadline_s=ev.job_deadline_s,
                                   record_games=self.record_games(s))
            reason = "every job of the current phase is handed out"
        else:
            reason = "no gate pending"
        return NoJob(request_id=req.request_id, retry_after_s=ev.no_job_retry_s, reason=reason)

    def report(self, rep: EvalReport) -> Ack:
        """Write a job's records to the result log (fsynced) and acknowledge. Raises
        ReportRefused for an unknown job or records that are not exactly its games; OSError
        if the log cannot be written."""
        if rep.run_name != self.run_name:
            raise ReportRefused(f"run_name {rep.run_name!r}: this ladder gates run {self.run_name!r}")
        if self.current is None and self.journal is not None:
            self.tick()  # an evaluator's report of a journalled job may come before any request
        job = None
        if self.current is not None:
            job = next((j for j in self.current.jobs if j.spec.job_id == rep.job_id), None)
        if job is None:
            if rep.job_id < self.next_job_id:  # a late report of a job already decided or replanned
                return Ack(request_id=rep.request_id, count=0)
            raise ReportRefused(f"job {rep.job_id}: no such evaluation job was handed out")
        if job.records is not None:
            return Ack(request_id=rep.request_id, count=0)
        check_report(job.spec, rep.records)
        written = self.log.append(rep.records)
        job.records = list(rep.records)
        if rep.replays:
            self._keep_replays(job.spec, rep)
        self.tick()
        return Ack(request_id=rep.request_id, count=written)

    # ----------------------------------------------------------------- recorded games

    def record_games(self, spec: JobSpec) -> int:
        """How many of ``spec``'s games the evaluator records (``EvalJob.record_games``): of a
        champion's anchor record (a strength job) the first ``evaluation.replays_per_strength_job``
        of each job; of a gate the first ``evaluation.replays_per_gate`` games of the gate, which
        are those of its first candidate-vs-champion jobs; none of any other job."""
        ev = self.config.evaluation
        games = 2 * len(spec.seeds)
        if spec.condition.startswith("record:"):
            return min(games, ev.replays_per_strength_job)
        if spec.condition != "champion" or self.current is None:
            return 0
        before = sum(2 * len(j.spec.seeds) for j in self.current.jobs
                     if j.spec.condition == "champion" and j.spec.job_id < spec.job_id)
        return max(0, min(games, ev.replays_per_gate - before))

    def _keep_replays(self, spec: JobSpec, rep: EvalReport) -> None:
        wanted = self.record_games(spec) if self.current is not None else 0
        iteration = -1
        try:
            pool = self._pool()
            cand = pool.admitted.get(spec.a) or next((c for c in pool.pending if c.id == spec.a), None)
            iteration = cand.iteration if cand is not None else -1
        except (OSError, ValueError):
            pass
        keep_replays(spec, rep, wanted, config=self.config, runs_dir=self.runs_dir, seed_set=self.seed_set,
                     iteration=iteration, say=self.say)

    # ----------------------------------------------------------------- progress

    def tick(self) -> None:
        """Start work when idle; move a complete phase on, deciding when the verdict is known."""
        if self.current is None:
            pool = self._pool()
            if self.journal is not None:
                self._resume(pool)
            if self.current is None:
                self._start(pool)
                return
        a = self.current
        if any(j.records is None for j in a.phase_jobs()):
            return
        pool = self._pool()
        if a.kind == "record":
            self._finish_record(pool)
            return
        scores = scores_by_condition([j.spec for j in a.jobs if j.records is not None],
                                     {j.spec.job_id: j.records for j in a.jobs if j.records is not None})
        if a.phase != "stratified":
            early = decide_from_scores(
                scores, candidate=a.candidate, champion=a.champion, champion_anchor_record=a.record,
                champion_predicted={}, stratified_members=[], gate_cfg=self.config.ladder.gate,
                master_seed=self.config.master_seed, settled_after=a.phase)
            if early.verdict == "discard":
                self._finish_gate(pool, scores)
                return
            if self._next_phase(pool):
                self._write_journal()
                return
            a.phase = "stratified"  # nothing to draw: condition 3 is skipped for an empty pool
        self._finish_gate(pool, scores)

    def _finish_record(self, pool: PoolState) -> None:
        a = self.current
        scores = scores_by_condition([j.spec for j in a.jobs], {j.spec.job_id: j.records for j in a.jobs})
        record = anchor_record({c.split(":", 1)[1]: s for c, s in scores.items()})
        pool.set_anchor_record(a.candidate, record)
        pool.save()
        self.say(f"ladder: anchor record of champion {a.candidate}: "
                 + ", ".join(f"{k} {v:.4f}" for k, v in sorted(record.items())))
        self.current = None
        self._drop_journal()

    def _finish_gate(self, pool: PoolState, scores: dict[str, np.ndarray]) -> None:
        a, gate = self.current, self.config.ladder.gate
        if a.phase == "stratified":
            ratings = current_ratings(self.runs_dir, self.run_name, self.config.ladder.rater)
            strat = stratified_from_table({m: np.zeros(0) for m in a.members}, ratings, a.champion)
            a.predicted = dict(strat.champion_predicted)
        decision = decide_from_scores(
            scores, candidate=a.candidate, champion=a.champion, champion_anchor_record=a.record,
            champion_predicted=a.predicted, stratified_members=a.members, gate_cfg=gate,
            master_seed=self.config.master_seed, settled_after=a.phase)
        rec = GateRecord(
            candidate=a.candidate, champion=a.champion, decision=decision, eval_seed_set_hash=self.seed_hash,
            eval_seed_count=len(self.seed_set), master_seed=self.config.master_seed,
            wall_seconds=max(0.0, self.wall() - a.started),
            decided_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"), settled_after=a.phase,
            gate=gate, champion_anchor_record=dict(a.record), stratified_members=list(a.members),
            champion_predicted=dict(a.predicted), jobs=[j.spec for j in a.jobs if j.records is not None],
        )
        write_gate_record(gate_record_path(self.runs_dir, self.run_name, a.candidate), rec)
        self.decisions.append(rec)
        c1 = decision.conditions[0]
        if c1.bound is not None:
            self.last_lower_bound = c1.bound
        self.say(f"ladder: gate of {a.candidate} vs {a.champion}: {decision.verdict} "
                 f"(after {a.phase}; " + "; ".join(c.reason for c in decision.conditions if not c.skipped) + ")")
        if decision.verdict == "incomplete":
            self.say(f"ladder: the gate of {a.candidate} could not decide (a condition had no numbers); it stays "
                     "pending and is not gated again by this ladder")
            self.stuck.add(a.candidate)
        else:
            pool.resolve(a.candidate, decision)
            anchors = {c.split(":", 1)[1]: s for c, s in scores.items() if c.startswith("anchor:")}
            if decision.admit and set(anchors) == set(ANCHORS):
                pool.set_anchor_record(a.candidate, anchor_record(anchors))
            pool.save()
        self.current = None
        self._drop_journal()

    # ----------------------------------------------------------------- the journal

    def _write_journal(self) -> bool:
        """Journal the current plan; False (said once, ``journal_file.error`` set, and retried
        before the next job is handed out) if the disk refuses."""
        a = self.current
        self.journal = GateInFlight(
            kind=a.kind, candidate=a.candidate, champion=a.champion, started=a.started, phase=a.phase,
            record=dict(a.record), members=list(a.members), jobs=[j.spec for j in a.jobs],
            gate=self.config.ladder.gate, job_seeds=self.config.evaluation.job_seeds,
            eval_seed_set_hash=self.seed_hash)
        return self.journal_file.write(self.journal)

    def _drop_journal(self) -> None:
        self.journal = None
        self.journal_file.drop()

    def _resume(self, pool: PoolState) -> None:
        """Take up the journalled gate (module docstring), or drop the journal saying why."""
        j, self.journal = self.journal, None
        why = journal_misfit(j, pool, self.config, self.seed_hash)
        if not why:
            batches = job_batches(self.log.read().lines)
            a = _Audition(j.kind, j.candidate, j.champion, j.started, phase=j.phase, record=dict(j.record),
                          members=list(j.members))
            for spec in j.jobs:
                records, problem = _whole_batch(spec, batches.get(spec.job_id, {}).values())
                if problem:
                    self.say(f"ladder: job {spec.job_id}'s games in the result log are not whole ({problem}); "
                             "it is played again")
                a.jobs.append(_Job(spec, records=records))
            in_phase = {job.spec.job_id for job in a.phase_jobs()}
            missing = [job.spec.job_id for job in a.jobs if job.records is None and job.spec.job_id not in in_phase]
            if missing:
                why = f"jobs {missing} of an earlier phase have no games in the result log"
            else:
                self.current, self.journal = a, j
                done = sum(job.records is not None for job in a.jobs)
                self.say(f"ladder: resumed the {_what(j)} in phase {a.phase}: {done} of {len(a.jobs)} jobs already "
                         "played (in the result log); the rest are handed out under their ids")
                return
        self.say(f"ladder: not resuming the {_what(j)} in flight: {why}")
        self._drop_journal()


def job_batches(lines: list[ResultLine]) -> dict[int, dict[tuple[str, int], list[EpisodeRecord]]]:
    """The eval records of the result log's ``lines`` as job id -> its batches, in log order: a
    batch is one append (one report: one wall time), so a batch cut short by a crash is not the
    job's games and a later whole batch is. Two appends in one millisecond share a wall time;
    a record key (``record_key``: seed, side, seat) that repeats within a wall time starts the
    next batch, since one report holds each game once."""
    batches: dict[int, dict[tuple[str, int], list[EpisodeRecord]]] = {}
    parts: dict[tuple[int, str], tuple[int, set]] = {}
    for line in lines:
        rec = line.record
        if rec.role != EVAL_ROLE:
            continue
        part, keys = parts.get((rec.iteration, line.wall), (0, set()))
        if record_key(rec) in keys:
            part, keys = part + 1, set()
        keys.add(record_key(rec))
        parts[(rec.iteration, line.wall)] = (part, keys)
        batches.setdefault(rec.iteration, {}).setdefault((line.wall, part), []).append(rec)
    return batches


def _whole_batch(spec: JobSpec, batches) -> tuple[list[EpisodeRecord] | None, str | None]:
    """The first logged batch that is exactly the job's games (``check_report``), and None; or
    None and why the first batch is not (None, None when nothing is logged)."""
    problem = None
    for records in batches:
        try:
            check_report(spec, records)
        except ReportRefused as exc:
            problem = problem or str(exc)
            continue
        return records, None
    return None, problem


def _what(j: GateInFlight) -> str:
    return f"gate of {j.candidate} vs {j.champion}" if j.kind == "gate" else f"anchor record of champion {j.champion}"


def check_report(spec: JobSpec, records: list[EpisodeRecord]) -> None:
    """Raise ReportRefused unless ``records`` are exactly the job's games: for every seed and
    side, one blue and one red eval record with the job's id, the right players in the right
    seats, and outcomes that agree."""
    want = 4 * len(spec.seeds)
    try:
        check_records(records)  # finite and in range: what the result log can hold
    except RecordRefused as exc:
        raise ReportRefused(f"job {spec.job_id}: {exc}") from None
    if len(records) != want:
        raise ReportRefused(f"job {spec.job_id}: {len(records)} records, expected {want} "
                            f"(2 seats x 2 sides x {len(spec.seeds)} seeds)")
    seen: dict[tuple[int, int, str], EpisodeRecord] = {}
    for i, r in enumerate(records):
        where = f"job {spec.job_id} records[{i}]"
        if r.role != EVAL_ROLE or r.iteration != spec.job_id:
            raise ReportRefused(f"{where}: role {r.role!r} iteration {r.iteration}; expected 'eval' and {spec.job_id}")
        if r.battle not in spec.seeds or r.ordinal not in (0, 1):
            raise ReportRefused(f"{where}: seed {r.battle} side {r.ordinal} is not a game of the job "
                                f"(seeds {spec.seeds}, sides 0 and 1)")
        blue, red = (spec.a, spec.b) if r.ordinal == 0 else (spec.b, spec.a)
        expected = (blue, red) if r.seat == "blue" else (red, blue)
        if (r.player, r.opponent) != expected:
            raise ReportRefused(f"{where}: {r.player} vs {r.opponent} in the {r.seat} seat; the job seats "
                                f"{blue} blue and {red} red on side {r.ordinal}")
        if r.outcome not in (-1, 0, 1):
            raise ReportRefused(f"{where}: outcome {r.outcome}; expected -1, 0 or 1")
        key = (r.battle, r.ordinal, r.seat)
        if key in seen:
            raise ReportRefused(f"{where}: seed {r.battle} side {r.ordinal} {r.seat} seat reported twice")
        seen[key] = r
    for s in spec.seeds:
        for side in (0, 1):
            if seen[(s, side, "blue")].outcome != -seen[(s, side, "red")].outcome:
                raise ReportRefused(f"job {spec.job_id}: seed {s} side {side}: the two seats' outcomes disagree")
