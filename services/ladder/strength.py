"""The standing strength measurement: a learner snapshot against each scripted anchor.

Every ``evaluation.strength.every_iterations`` iterations the learner writes its actor to the
snapshot store and sends ``MeasureStrength``. The ladder plans the snapshot's games here: for
each anchor of ``evaluation.strength.anchors``, seeds ``0 .. ceil(games_per_anchor / 2) - 1``
of the fixed evaluation seed set, both sides each, in jobs of at most ``evaluation.job_seeds``
seeds (condition ``strength:<anchor>``). Evaluators get them when the gate runner has none
(a gate decides the pool; strength only reports). Job ids come from the gate runner's counter,
so one id names one job in the result log whoever planned it.

The plan is kept in ``<run>/ladder/strength.json`` (atomic replace, each time it changes), the
games in the result log (fsynced before a report is acknowledged). A restarted ladder reads
both: a job whose whole games are in the log counts as played, the rest are handed out again
under their ids (a game is a pure function of job id, seed and side).

With ``evaluation.strength.search`` budgets, each snapshot is planned once more per budget N
as the player ``snap:<id>+search:N`` (the same games, the snapshot searching at its choice
decisions: docs/search.md), so the table shows what search adds beside it.

The first ``evaluation.replays_per_strength_snapshot`` games of each snapshot (its first job's,
against the first anchor) are recorded as a gate's are: trace and page in ``<run>/replays/``,
``kind`` ``strength`` in its index (``gate_runner.keep_replays``).

Only the newest waiting snapshot is kept: a strength request that arrives while another waits
with no game handed out replaces it (said), so a slow evaluator fleet measures the newest
actor instead of falling ever further behind. The learner never waits for any of it.

``measure`` turns the plan and the log into numbers: per snapshot, its score against each
anchor with the Wilson 95 % interval (``shared.stats.wilson_interval``), and its rating from
one Bradley-Terry-Davidson fit (``services.ladder.rating.fit_with``, the run's rater,
``scripted:noop`` pinned at 0) of the games of every fully measured strength snapshot, so
the anchors' ratings are estimated from every snapshot's games together.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from shared.config import RunConfig
from shared.durable import replace_file
from shared.evaluation import EVAL_ROLE, eval_seed_set, seeds_for_games, side_scores
from shared.messages import Ack, EpisodeRecord, EvalJob, EvalJobRequest, EvalReport, MeasureStrength, StrengthSummary
from shared.search.spec import SearchSpec, split_search, with_search
from shared.stats import wilson_interval

from services.ladder.gate_runner import JobSpec, ReportRefused, check_report, keep_replays, split_seeds
from services.ladder.rating import games_from_results, fit_with
from services.ladder.results import ResultLog, result_log_path
from shared.run_dir import STRENGTH, RunDir

STRENGTH_FILE = STRENGTH
CONDITION_PREFIX = "strength:"


class StrengthEntry(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One strength snapshot's plan: player ``snap:<id>`` of learner iteration ``iteration``."""

    snapshot: str
    iteration: int
    env_steps: int
    timesteps: int = 0
    requested_at: float
    """Epoch seconds when the learner asked (the report's wall-clock axis)."""
    anchors: list[str]
    games_per_anchor: int
    jobs: list[JobSpec]


class StrengthPlan(msgspec.Struct, forbid_unknown_fields=True):
    """``<run>/ladder/strength.json``: every strength snapshot planned, oldest first."""

    entries: list[StrengthEntry] = []


class AnchorScore(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    anchor: str
    games: int
    score: float
    lo: float
    hi: float


class SnapshotStrength(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One measured snapshot: scores per anchor (Wilson 95 %) and the BTD rating (Elo)."""

    snapshot: str
    iteration: int
    env_steps: int
    timesteps: int
    requested_at: float
    anchors: list[AnchorScore]
    rating: float
    rating_se: float


def plan_path(runs_dir: str | os.PathLike, run_name: str) -> Path:
    """``<runs_dir>/<run_name>/ladder/strength.json``."""
    return RunDir.of(runs_dir, run_name).strength


def read_plan(path: str | os.PathLike) -> StrengthPlan:
    """The plan at ``path`` (empty when there is none). Raises ValueError naming the file for
    one that does not decode."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return StrengthPlan()
    try:
        return msgspec.json.decode(data, type=StrengthPlan)
    except msgspec.DecodeError as exc:
        raise ValueError(f"{path}: not a strength plan ({exc})") from None


def played_by_job(records: list[EpisodeRecord]) -> dict[int, list[EpisodeRecord]]:
    """The evaluation episodes of the result log's ``records``, grouped by job id."""
    by_job: dict[int, list[EpisodeRecord]] = {}
    for r in records:
        if r.role == EVAL_ROLE:
            by_job.setdefault(r.iteration, []).append(r)
    return by_job


def fully_played(spec: JobSpec, records: list[EpisodeRecord] | None) -> bool:
    """Whether ``records`` (one job's episodes) hold the whole of ``spec``'s games, as its
    report would be checked (``check_report``)."""
    if not records:
        return False
    try:
        check_report(spec, records[: 4 * len(spec.seeds)])
    except ReportRefused:
        return False
    return True


def measure(plan: StrengthPlan, records: list[EpisodeRecord] | dict[int, list[EpisodeRecord]],
            rater) -> list[SnapshotStrength]:
    """Every fully played strength snapshot of ``plan``, oldest first, measured from the result
    log's ``records`` (a list, or already grouped by job id) (module docstring). A snapshot with
    a job not wholly in the log is left out: never a partial score. ``rater`` is
    ``ladder.rater`` (its anchor is the pinned one)."""
    by_job = records if isinstance(records, dict) else played_by_job(records)
    done = [e for e in plan.entries if all(fully_played(j, by_job.get(j.job_id)) for j in e.jobs)]
    games = [r for e in done for j in e.jobs for r in by_job[j.job_id][: 4 * len(j.seeds)]]
    table = fit_with(games_from_results(games), rater) if done else None
    out = []
    for e in done:
        scores = []
        for anchor in e.anchors:
            jobs = [j for j in e.jobs if j.condition == CONDITION_PREFIX + anchor]
            total = sum(float(side_scores(by_job[j.job_id], e.snapshot, anchor, j.seeds).sum()) for j in jobs)
            n = sum(2 * len(j.seeds) for j in jobs)
            lo, hi = wilson_interval(total, n)
            scores.append(AnchorScore(anchor=anchor, games=n, score=total / n, lo=lo, hi=hi))
        out.append(SnapshotStrength(snapshot=e.snapshot, iteration=e.iteration, env_steps=e.env_steps,
                                    timesteps=e.timesteps, requested_at=e.requested_at, anchors=scores,
                                    rating=float(table.ratings[e.snapshot]), rating_se=float(table.se[e.snapshot])))
    return out


def summary_of(measured: list[SnapshotStrength], pending: int) -> StrengthSummary | None:
    """The newest measured snapshot (unsearched: a searched entry of ``evaluation.strength.search``
    is a line of the table, not the run's strength) as the ladder status carries it; None before
    the first."""
    plain = [m for m in measured if split_search(m.snapshot)[1] is None]
    if not plain:
        return None
    m = plain[-1]
    return StrengthSummary(
        snapshot=m.snapshot, iteration=m.iteration, env_steps=m.env_steps,
        games={a.anchor: a.games for a in m.anchors}, score={a.anchor: a.score for a in m.anchors},
        score_lo={a.anchor: a.lo for a in m.anchors}, score_hi={a.anchor: a.hi for a in m.anchors},
        rating=m.rating, rating_se=m.rating_se, measured=len(measured), pending=pending)


class StrengthRunner:
    """The ladder's strength jobs (module docstring). ``next_job_id`` allocates a job id from the
    gate runner's counter (one id space); ``clock`` is monotonic seconds, ``wall`` epoch seconds."""

    def __init__(self, config: RunConfig, runs_dir: str | os.PathLike, *, next_job_id: Callable[[], int],
                 say: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time):
        self.config, self.runs_dir, self.say = config, Path(runs_dir), say
        self.run_name = config.run_name
        self.next_job_id, self.clock, self.wall = next_job_id, clock, wall
        self.path = plan_path(self.runs_dir, self.run_name)
        self.log = ResultLog.for_run(self.runs_dir, self.run_name)
        self.plan = read_plan(self.path)
        owned = {j.job_id for e in self.plan.entries for j in e.jobs}
        self.by_job = {k: v for k, v in played_by_job(self.log.read().records).items() if k in owned}
        """Strength jobs' records (read once from the log, then added as reported)."""
        self.played: set[int] = {j.job_id for e in self.plan.entries for j in e.jobs
                                 if fully_played(j, self.by_job.get(j.job_id))}
        self.issued: dict[int, tuple[float, str]] = {}
        self.summary: StrengthSummary | None = None
        self.seed_set = eval_seed_set(config.master_seed, config.ladder.pool.eval_seed_count)
        self._refresh()

    @property
    def max_job_id(self) -> int:
        """The largest job id planned here (-1 for none): the gate runner's counter starts past it."""
        return max((j.job_id for e in self.plan.entries for j in e.jobs), default=-1)

    def owns(self, job_id: int) -> bool:
        return any(j.job_id == job_id for e in self.plan.entries for j in e.jobs)

    def waiting(self) -> list[StrengthEntry]:
        return [e for e in self.plan.entries if any(j.job_id not in self.played for j in e.jobs)]

    def submit(self, msg: MeasureStrength) -> Ack:
        """Plan a strength snapshot's jobs; Ack(count = jobs planned, 0 when already planned).
        Raises ReportRefused (a bad request) for another run or a bad snapshot id; OSError if
        the plan cannot be saved (then nothing is planned)."""
        if msg.run_name != self.run_name:
            raise ReportRefused(f"run_name {msg.run_name!r}: this ladder measures run {self.run_name!r}")
        sid = msg.snapshot_id
        if len(sid) != 16 or any(c not in "0123456789abcdef" for c in sid):
            raise ReportRefused(f"snapshot_id {sid!r}: expected the checkpoint service's 16 lowercase hex id")
        player = "snap:" + sid
        if any(e.snapshot == player for e in self.plan.entries):
            return Ack(request_id=msg.request_id, count=0)
        st = self.config.evaluation.strength
        entries = list(self.plan.entries)
        for e in self.waiting():
            if not any(j.job_id in self.played or j.job_id in self.issued for j in e.jobs):
                entries.remove(e)
                self.say(f"ladder: strength snapshot {e.snapshot} (iteration {e.iteration}) not measured: superseded "
                         f"by iteration {msg.iteration} before any of its games was handed out")
        seeds = list(range(seeds_for_games(st.games_per_anchor)))
        planned = 0
        # the snapshot itself, then the same games searched at each budget (evaluation.strength.search)
        for measured in [player] + [with_search(player, SearchSpec(n)) for n in st.search]:
            jobs = [JobSpec(job_id=self.next_job_id(), a=measured, b=anchor, seeds=chunk,
                            condition=CONDITION_PREFIX + anchor)
                    for anchor in st.anchors for chunk in split_seeds(seeds, self.config.evaluation.job_seeds)]
            entries.append(StrengthEntry(snapshot=measured, iteration=msg.iteration, env_steps=msg.env_steps,
                                         timesteps=msg.timesteps, requested_at=self.wall(), anchors=list(st.anchors),
                                         games_per_anchor=st.games_per_anchor, jobs=jobs))
            planned += len(jobs)
        plan = StrengthPlan(entries)
        replace_file(self.path, msgspec.json.encode(plan) + b"\n")
        self.plan = plan
        searched = f"; searched too with {', '.join(f'+search:{n}' for n in st.search)}" if st.search else ""
        self.say(f"ladder: strength of {player} (iteration {msg.iteration}): {planned} jobs against "
                 f"{', '.join(st.anchors)} ({st.games_per_anchor} games each){searched}")
        return Ack(request_id=msg.request_id, count=planned)

    def request_job(self, req: EvalJobRequest) -> EvalJob | None:
        """The oldest strength job not yet handed out (or handed out more than the job deadline
        ago); None when there is none."""
        ev = self.config.evaluation
        now = self.clock()
        for e in self.waiting():
            for j in e.jobs:
                if j.job_id in self.played:
                    continue
                issued = self.issued.get(j.job_id)
                if issued is None or now - issued[0] >= ev.job_deadline_s:
                    self.issued[j.job_id] = (now, req.worker)
                    return EvalJob(request_id=req.request_id, job_id=j.job_id, run_name=self.run_name, a=j.a, b=j.b,
                                   seeds=list(j.seeds), deadline_s=ev.job_deadline_s,
                                   record_games=self.record_games(e, j))
        return None

    def record_games(self, entry: StrengthEntry, spec: JobSpec) -> int:
        """How many of ``spec``'s games the evaluator records: the snapshot's first
        ``evaluation.replays_per_strength_snapshot`` games, in job order."""
        before = sum(2 * len(j.seeds) for j in entry.jobs if j.job_id < spec.job_id)
        wanted = self.config.evaluation.replays_per_strength_snapshot - before
        return max(0, min(2 * len(spec.seeds), wanted))

    def report(self, rep: EvalReport) -> Ack:
        """Write a strength job's records to the result log and acknowledge; a snapshot whose
        last job this was is measured and said. Raises ReportRefused for records that are not
        exactly the job's games, OSError if the log cannot be written."""
        if rep.run_name != self.run_name:
            raise ReportRefused(f"run_name {rep.run_name!r}: this ladder measures run {self.run_name!r}")
        entry, spec = next((e, j) for e in self.plan.entries for j in e.jobs if j.job_id == rep.job_id)
        if spec.job_id in self.played:
            return Ack(request_id=rep.request_id, count=0)
        check_report(spec, rep.records)
        written = self.log.append(rep.records)
        if rep.replays:  # after the records: a game not kept costs nothing else
            keep_replays(spec, rep, self.record_games(entry, spec), config=self.config, runs_dir=self.runs_dir,
                         seed_set=self.seed_set, iteration=entry.iteration, say=self.say)
        self.by_job[spec.job_id] = list(rep.records)
        self.played.add(spec.job_id)
        self.issued.pop(spec.job_id, None)
        before = self.summary
        self._refresh()
        s = self.summary
        if s is not None and (before is None or before.snapshot != s.snapshot):
            self.say(f"ladder: strength of {s.snapshot} (iteration {s.iteration}): rating {s.rating:.0f} +- "
                     f"{s.rating_se:.0f} Elo; " + ", ".join(f"{a} {s.score[a]:.2f} [{s.score_lo[a]:.2f}, "
                                                            f"{s.score_hi[a]:.2f}]" for a in s.score))
        return Ack(request_id=rep.request_id, count=written)

    def _refresh(self) -> None:
        if not self.plan.entries:
            return
        measured = measure(self.plan, self.by_job, self.config.ladder.rater)
        self.summary = summary_of(measured, pending=len(self.waiting()))
