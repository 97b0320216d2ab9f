"""Each promoted generation's strength, unsearched and searched (issue 37; docs/ladder.md,
"Strength of each generation").

A generation is a champion of the ladder's chain (``PoolState.champions``): generation 0 the
run's first snapshot (admitted free: under expert iteration it stands in for the network the
run started from), generation k the k-th champion a gate promoted, which is the prior the
expert-iteration learner switches to (``expit/generation`` k while it sees every promotion).
When ``evaluation.strength.generations`` is active (``GenerationStrengthConfig.active``: by
default only under an algorithm declared with generations: expert iteration's, TreeStrap's)
and the chain holds a champion not planned yet, the ladder plans, with c = ``snap:<id>`` and s the config's ``search``:

* ``unsearched/<anchor>``: c against each of ``anchors``, ``games`` games;
* ``searched/<anchor>``: c + s against each of ``searched_anchors``, ``searched_games`` games
  (the search simulates that anchor exactly: an opponent model);
* ``searched_sim_<bot>/<anchor>`` and ``searched_sim_<bot>/previous``: c + s with
  ``opp=<bot>`` (``sim_as``: the simulations' other seat is played by ``<bot>``, not by the
  opponent in the battle) against the same anchors and against the previous generation's
  champion (a pool snapshot, played unsearched; generation 0 has none). Strength that is not an
  opponent model.

Seeds ``0 .. ceil(games / 2) - 1`` of the fixed evaluation seed set, both sides each, in jobs of
at most ``evaluation.job_seeds`` seeds (``JobSpec.condition`` ``generation:<condition>``), job
ids from the gate runner's counter (one id space with the gates' and the standing strength
measurement's jobs). Evaluators get them after any gate job and before the standing strength
measurement's; nothing is superseded (a generation is rare and each is kept). No game is recorded
as a replay.

The plan is ``<run>/ladder/generation_strength.json`` (atomic replace); the games are in the
result log. A restarted ladder reads both and ``sync`` plans what the chain holds and the plan
lacks, so a promotion the ladder crashed after is still measured. ``measure`` scores each
condition whose jobs are all in the log (Wilson 95 %, ``shared.stats.wilson_interval``): never
a partial score.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from shared.config import RunConfig
from shared.durable import replace_file
from shared.evaluation import seeds_for_games, side_scores
from shared.messages import Ack, EpisodeRecord, EvalJob, EvalJobRequest, EvalReport, GenerationStrength
from shared.run_dir import RunDir
from shared.search.spec import split_search, with_search
from shared.stats import wilson_interval

from services.ladder.gate_runner import JobSpec, ReportRefused, check_report, split_seeds
from services.ladder.strength import fully_played, played_by_job

PLAN_FILE = "generation_strength.json"
CONDITION_PREFIX = "generation:"
PREVIOUS = "previous"
"""The label of the previous generation's champion as an opponent (its id changes each generation)."""


class GenerationEntry(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One generation's plan: champion ``champion`` (``snap:<id>``), index ``generation`` of the
    champion chain; ``previous`` the chain's member before it (None for generation 0)."""

    generation: int
    champion: str
    previous: str | None
    env_steps: int | None
    requested_at: float
    """Epoch seconds when the ladder planned it."""
    jobs: list[JobSpec]


class GenerationPlan(msgspec.Struct, forbid_unknown_fields=True):
    """``<run>/ladder/generation_strength.json``: every generation planned, oldest first."""

    entries: list[GenerationEntry] = []


def plan_path(runs_dir: str | os.PathLike, run_name: str) -> Path:
    """``<runs_dir>/<run_name>/ladder/generation_strength.json``."""
    return RunDir.of(runs_dir, run_name).strength.with_name(PLAN_FILE)


def read_plan(path: str | os.PathLike) -> GenerationPlan:
    """The plan at ``path`` (empty when there is none). Raises ValueError naming the file for
    one that does not decode."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return GenerationPlan()
    try:
        return msgspec.json.decode(data, type=GenerationPlan)
    except msgspec.DecodeError as exc:
        raise ValueError(f"{path}: not a generation strength plan ({exc})") from None


def pairings(cfg, champion: str, previous: str | None) -> list[tuple[str, str, str, int]]:
    """(condition, player, opponent, games) of one generation, in play order (module docstring).
    ``cfg`` is ``evaluation.strength.generations`` (its ``search`` already checked by the config).
    Raises ValueError when ``search`` names its own simulated opponents and ``sim_as`` is set."""
    spec = split_search(champion + cfg.search)[1]
    searched = with_search(champion, spec)
    out = [(f"unsearched/{a}", champion, a, cfg.games) for a in cfg.anchors]
    out += [(f"searched/{a}", searched, a, cfg.searched_games) for a in cfg.searched_anchors]
    if cfg.sim_as:
        if spec is None or spec.opponents:
            raise ValueError(f"evaluation.strength.generations.search {cfg.search!r} names its own simulated "
                             "opponents (opp=); leave them out, or set sim_as \"\"")
        free = with_search(champion, dataclasses.replace(spec, opponents=(cfg.sim_as,)))
        kind = f"searched_sim_{cfg.sim_as}"
        out += [(f"{kind}/{a}", free, a, cfg.searched_games) for a in cfg.searched_anchors]
        if previous is not None:
            out.append((f"{kind}/{PREVIOUS}", free, previous, cfg.searched_games))
    return out


def measure(plan: GenerationPlan, records: list[EpisodeRecord] | dict[int, list[EpisodeRecord]]
            ) -> list[GenerationStrength]:
    """Every generation of ``plan`` with at least one condition whose jobs are all in the result
    log's ``records`` (a list, or already grouped by job id), oldest first; each with the
    conditions so played (a condition with a job missing is left out: never a partial score)."""
    by_job = records if isinstance(records, dict) else played_by_job(records)
    out = []
    for e in plan.entries:
        g = GenerationStrength(generation=e.generation, champion=e.champion, env_steps=e.env_steps)
        conditions: dict[str, list[JobSpec]] = {}
        for j in e.jobs:
            conditions.setdefault(j.condition[len(CONDITION_PREFIX):], []).append(j)
        for cond, jobs in conditions.items():
            if not all(fully_played(j, by_job.get(j.job_id)) for j in jobs):
                continue
            total = sum(float(side_scores(by_job[j.job_id], j.a, j.b, j.seeds).sum()) for j in jobs)
            n = sum(2 * len(j.seeds) for j in jobs)
            g.games[cond], g.score[cond] = n, total / n
            g.score_lo[cond], g.score_hi[cond] = wilson_interval(total, n)
        if g.score:
            out.append(g)
    return out


class GenerationStrengthRunner:
    """The ladder's generation strength jobs (module docstring). ``next_job_id`` allocates a job
    id from the gate runner's counter; ``clock`` is monotonic seconds, ``wall`` epoch seconds.
    Raises ValueError for a plan file that does not decode (the ladder refuses to start)."""

    def __init__(self, config: RunConfig, runs_dir: str | os.PathLike, *, next_job_id: Callable[[], int],
                 records: Callable[[], list[EpisodeRecord]], say: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time):
        self.config, self.say, self.clock, self.wall = config, say, clock, wall
        self.cfg = config.evaluation.strength.generations
        self.active = self.cfg.active(config.learner.algorithm)
        self.run_name, self.next_job_id = config.run_name, next_job_id
        self.path = plan_path(runs_dir, self.run_name)
        self.plan = read_plan(self.path)
        owned = {j.job_id for e in self.plan.entries for j in e.jobs}
        self.by_job = {k: v for k, v in played_by_job(records() if owned else []).items() if k in owned}
        self.played = {j for j in owned if fully_played(self._spec(j), self.by_job.get(j))}
        self.issued: dict[int, float] = {}
        self.measured: list[GenerationStrength] = measure(self.plan, self.by_job)

    @property
    def max_job_id(self) -> int:
        """The largest job id planned here (-1 for none)."""
        return max((j.job_id for e in self.plan.entries for j in e.jobs), default=-1)

    def _spec(self, job_id: int) -> JobSpec:
        return next(j for e in self.plan.entries for j in e.jobs if j.job_id == job_id)

    def owns(self, job_id: int) -> bool:
        return any(j.job_id == job_id for e in self.plan.entries for j in e.jobs)

    def pending(self) -> int:
        """Generations with a game still to play."""
        return sum(1 for e in self.plan.entries if any(j.job_id not in self.played for j in e.jobs))

    def sync(self, champions: list[str], env_steps: Callable[[str], int | None]) -> int:
        """Plan every generation of the champion chain ``champions`` (oldest first) not planned
        yet; returns how many were planned (0 when off). ``env_steps(member)`` is the decisions
        its snapshot was taken at. Raises OSError if the plan cannot be saved (nothing planned)."""
        if not self.active or len(champions) <= len(self.plan.entries):
            return 0
        entries = list(self.plan.entries)
        seeds_of = {n: list(range(seeds_for_games(n))) for n in (self.cfg.games, self.cfg.searched_games)}
        for k in range(len(entries), len(champions)):
            champion, previous = champions[k], champions[k - 1] if k else None
            jobs = [JobSpec(job_id=self.next_job_id(), a=player, b=opponent, seeds=chunk,
                            condition=CONDITION_PREFIX + cond)
                    for cond, player, opponent, games in pairings(self.cfg, champion, previous)
                    for chunk in split_seeds(seeds_of[games], self.config.evaluation.job_seeds)]
            entries.append(GenerationEntry(generation=k, champion=champion, previous=previous,
                                           env_steps=env_steps(champion), requested_at=self.wall(), jobs=jobs))
            self.say(f"ladder: strength of generation {k} ({champion}): {len(jobs)} jobs, unsearched against "
                     f"{', '.join(self.cfg.anchors)} ({self.cfg.games} games each), searched {self.cfg.search} "
                     f"({self.cfg.searched_games} games a pairing)")
        plan = GenerationPlan(entries)
        replace_file(self.path, msgspec.json.encode(plan) + b"\n")
        planned = len(entries) - len(self.plan.entries)
        self.plan = plan
        return planned

    def request_job(self, req: EvalJobRequest) -> EvalJob | None:
        """The oldest generation job not handed out (or handed out more than the job deadline
        ago); None when there is none, or when the measurement is off now (a plan an earlier
        start made is kept, not played)."""
        if not self.active:
            return None
        ev, now = self.config.evaluation, self.clock()
        for e in self.plan.entries:
            for j in e.jobs:
                if j.job_id in self.played or now - self.issued.get(j.job_id, -float("inf")) < ev.job_deadline_s:
                    continue
                self.issued[j.job_id] = now
                return EvalJob(request_id=req.request_id, job_id=j.job_id, run_name=self.run_name, a=j.a, b=j.b,
                               seeds=list(j.seeds), deadline_s=ev.job_deadline_s, record_games=0)
        return None

    def report(self, rep: EvalReport, append: Callable[[list[EpisodeRecord]], int]) -> Ack:
        """Write a generation job's records with ``append`` (the result log's) and acknowledge;
        a condition whose last job this was is measured and said. Raises ReportRefused for
        records that are not exactly the job's games, OSError if the log cannot be written."""
        if rep.run_name != self.run_name:
            raise ReportRefused(f"run_name {rep.run_name!r}: this ladder measures run {self.run_name!r}")
        spec = self._spec(rep.job_id)
        if spec.job_id in self.played:
            return Ack(request_id=rep.request_id, count=0)
        check_report(spec, rep.records)
        written = append(list(rep.records))
        self.by_job[spec.job_id] = list(rep.records)
        self.played.add(spec.job_id)
        self.issued.pop(spec.job_id, None)
        before = {(g.generation, c) for g in self.measured for c in g.score}
        self.measured = measure(self.plan, self.by_job)
        for g in self.measured:
            for c in g.score:
                if (g.generation, c) not in before:
                    self.say(f"ladder: generation {g.generation} ({g.champion}) {c}: {g.score[c]:.3f} "
                             f"[{g.score_lo[c]:.3f}, {g.score_hi[c]:.3f}] over {g.games[c]} games")
        return Ack(request_id=rep.request_id, count=written)


def generation_strength_of_run(cfg) -> tuple[list[GenerationStrength], int]:
    """(measured generations, generations pending) of run ``cfg`` from its plan and result log,
    as the ladder measures them. Raises ValueError for a plan that does not decode."""
    from services.ladder.results import ResultLog

    plan = read_plan(plan_path(cfg.runs_dir, cfg.run_name))
    if not plan.entries:
        return [], 0
    by_job = played_by_job(ResultLog.for_run(cfg.runs_dir, cfg.run_name).read().records)
    pending = sum(1 for e in plan.entries if not all(fully_played(j, by_job.get(j.job_id)) for j in e.jobs))
    return measure(plan, by_job), pending
