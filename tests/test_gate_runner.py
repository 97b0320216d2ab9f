"""The gate runner driven by synthetic evaluator reports (no battles): planning, deadlines,
early stops, and decision records whose numbers equal decide_gate's on the same scores."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from services.ladder.gate import GateDecision, Stratified, decide_gate
from services.ladder.gate_runner import (
    SETTLED_REASON, GateRunner, JobSpec, ReportRefused, gate_record_path, read_gate_record,
)
from services.ladder.pool import Candidate, PoolState, current_ratings
from services.ladder.results import ResultLog
from shared.config import load_config
from shared.evaluation import eval_seed_set, seed_set_hash, side_scores
from shared.messages import EpisodeRecord, EvalJobRequest, EvalReport, NoJob
from shared.seeding import stream

CHAMP, CAND = "snap:" + "0" * 15 + "1", "snap:" + "0" * 15 + "2"
M1, M2 = "snap:" + "0" * 15 + "3", "snap:" + "0" * 15 + "4"
NOOP, RAND = "scripted:noop", "scripted:random_legal"


def config(**gate):
    return load_config({"profile": "tiny", "run_name": "t", "ladder": {
        "pool": {"eval_seed_count": 8},
        "gate": {"champion_games": 8, "anchor_games": 4, "stratified_snapshots": 2, "stratified_games": 4,
                 "bootstrap_resamples": 200} | gate},
        "evaluation": {"job_seeds": 2, "job_deadline_s": 100.0, "no_job_retry_s": 3.0}})


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def records_for(job, outcome_of) -> list[EpisodeRecord]:
    """The job's games with a's outcome from ``outcome_of(a, b, seed, side)``."""
    out = []
    for s in job.seeds:
        for side in (0, 1):
            o = outcome_of(job.a, job.b, s, side)
            blue, red = (job.a, job.b) if side == 0 else (job.b, job.a)
            ob = o if side == 0 else -o
            for seat, p, q, oc in (("blue", blue, red, ob), ("red", red, blue, -ob)):
                out.append(EpisodeRecord(battle=s, ordinal=side, seat=seat, role="eval", player=p, opponent=q,
                                         outcome=oc, truncated=False, episode_steps=600, episode_ticks=6000,
                                         own_crowns=0, enemy_crowns=0, own_tower_hp_frac=1.0,
                                         enemy_tower_hp_frac=1.0, elixir_leak_steps=0, elixir_count_exact=True,
                                         cards_played=0, undiscounted_return=0.0, iteration=job.job_id))
    return out


def drive(runner, outcome_of, limit=200) -> list:
    """Ask for jobs and report them until the runner has none; returns the jobs played."""
    jobs = []
    for k in range(limit):
        job = runner.request_job(EvalJobRequest(request_id=k, worker="w"))
        if isinstance(job, NoJob):
            return jobs
        jobs.append(job)
        runner.report(EvalReport(request_id=k, job_id=job.job_id, run_name="t", worker="w",
                                 records=records_for(job, outcome_of)))
    raise AssertionError("the runner never ran out of jobs")


def new_pool(tmp_path, cfg) -> PoolState:
    pool = PoolState.for_run(tmp_path, "t", cfg.ladder)
    assert pool.submit(Candidate(id=CHAMP, env_steps=100, iteration=1)) == "admitted_free"
    pool.save()
    return pool


def by_pattern(table):
    """outcome_of from {(a, b): outcome of a}, by seed parity when given a pair of values."""
    def outcome_of(a, b, seed, side):
        if (a, b) in table:
            v = table[(a, b)]
            return v[(seed + side) % 2] if isinstance(v, tuple) else v
        v = table[(b, a)]
        return -(v[(seed + side) % 2] if isinstance(v, tuple) else v)
    return outcome_of


def test_a_free_champion_plays_the_anchors_then_a_candidate_is_promoted(tmp_path):
    cfg = config(stratified_snapshots=0)
    new_pool(tmp_path, cfg)
    runner = GateRunner(cfg, tmp_path, say=lambda s: None)
    # The champion's anchor record: 4 battles = 2 seeds per anchor, 1 job of 2 seeds each.
    jobs = drive(runner, by_pattern({(CHAMP, NOOP): 1, (CHAMP, RAND): (1, 0)}))
    assert [(j.a, j.b, j.seeds) for j in jobs] == [(CHAMP, NOOP, [0, 1]), (CHAMP, RAND, [0, 1])]
    assert [j.job_id for j in jobs] == [0, 1]
    pool = PoolState.for_run(tmp_path, "t", cfg.ladder)
    # vs random_legal the outcome alternates win / draw... (1, 0) by (seed + side) % 2: a win and a
    # draw on every seed, (1 + 0.5) / 2 = 0.75.
    assert pool.anchor_record[CHAMP] == {NOOP: 1.0, RAND: 0.75}
    pool.submit(Candidate(id=CAND, env_steps=200, iteration=2))
    pool.save()
    jobs = drive(runner, by_pattern({(CAND, CHAMP): 1, (CAND, NOOP): 1, (CAND, RAND): (1, 0)}))
    # 8 battles vs the champion = 4 seeds in 2 jobs, then 1 job per anchor.
    assert [(j.a, j.b, j.seeds) for j in jobs] == [
        (CAND, CHAMP, [0, 1]), (CAND, CHAMP, [2, 3]), (CAND, NOOP, [0, 1]), (CAND, RAND, [0, 1])]
    pool = PoolState.for_run(tmp_path, "t", cfg.ladder)
    assert pool.champion == CAND and CAND in pool.members and pool.gates_passed == 1
    assert pool.anchor_record[CAND] == {NOOP: 1.0, RAND: 0.75}
    rec = read_gate_record(gate_record_path(tmp_path, "t", CAND))
    want = decide_gate(np.ones((4, 2)), {NOOP: np.ones((2, 2)), RAND: np.array([[1, 0.5], [0.5, 1]])},
                       {NOOP: 1.0, RAND: 0.75}, None, cfg.ladder.gate,
                       stream(cfg.master_seed, "eval/bootstrap/{comparison}", comparison=CAND),
                       candidate=CAND, champion=CHAMP)
    assert rec.decision == want and want.verdict == "promote"
    assert rec.eval_seed_set_hash == seed_set_hash(eval_seed_set(cfg.master_seed, 8))
    assert rec.settled_after == "stratified" and rec.champion_anchor_record == {NOOP: 1.0, RAND: 0.75}
    assert [j.job_id for j in rec.jobs] == [2, 3, 4, 5]
    # Condition 1 by hand: 8 wins of 8, Wilson lower bound 8/(8+z^2) ... = 0.6756
    c1 = rec.decision.conditions[0]
    assert (c1.n, c1.observed, round(c1.bound, 4)) == (8, 1.0, 0.6756)
    assert runner.last_lower_bound == c1.bound


def test_a_candidate_that_loses_to_the_champion_is_discarded_without_anchor_games(tmp_path):
    cfg = config()
    pool = new_pool(tmp_path, cfg)
    pool.set_anchor_record(CHAMP, {NOOP: 1.0, RAND: 0.9})
    pool.submit(Candidate(id=CAND, env_steps=200, iteration=2))
    pool.save()
    runner = GateRunner(cfg, tmp_path, say=lambda s: None)
    jobs = drive(runner, by_pattern({(CAND, CHAMP): (-1, 1)}))
    assert {(j.a, j.b) for j in jobs} == {(CAND, CHAMP)}
    pool = PoolState.for_run(tmp_path, "t", cfg.ladder)
    assert pool.discarded == [CAND] and pool.champion == CHAMP and pool.consecutive_gate_failures == 1
    rec = read_gate_record(gate_record_path(tmp_path, "t", CAND))
    c1, *rest = rec.decision.conditions
    assert rec.decision.verdict == "discard" and rec.settled_after == "champion"
    assert (c1.passed, c1.skipped, c1.n, c1.observed) == (False, False, 8, 0.5)
    assert all(c.skipped and c.reason == SETTLED_REASON for c in rest)


def test_condition_three_matches_decide_gate_on_the_same_scores_and_fit(tmp_path):
    cfg = config()
    pool = new_pool(tmp_path, cfg)
    pool.set_anchor_record(CHAMP, {NOOP: 1.0, RAND: 0.75})
    for m in (M1, M2):  # two more members, admitted by an earlier gate
        pool.submit(Candidate(id=m, env_steps=150, iteration=2))
        pool.resolve(m, GateDecision(candidate=m, champion=CHAMP, admit=True, promote=False, cycle=True,
                                     verdict="admit_cycle", conditions=[]))
    pool.submit(Candidate(id=CAND, env_steps=300, iteration=3))
    pool.save()
    # Earlier evaluation games give the fit the champion and both members.
    old = []
    for jid, (a, b, o) in enumerate([(CHAMP, M1, (1, 0)), (CHAMP, M2, (1, 1)), (M1, M2, (0, 1)),
                                     (CHAMP, NOOP, (1, 1)), (M1, NOOP, (1, 0))]):
        old += records_for(JobSpec(job_id=100 + jid, a=a, b=b, seeds=[0, 1, 2, 3], condition="x"),
                           by_pattern({(a, b): o}))
    ResultLog.for_run(tmp_path, "t").append(old)
    runner = GateRunner(cfg, tmp_path, say=lambda s: None)
    assert runner.next_job_id == 105
    table = {(CAND, CHAMP): 1, (CAND, NOOP): 1, (CAND, RAND): (1, 0), (CAND, M1): (1, 0), (CAND, M2): (0, 0)}
    jobs = drive(runner, by_pattern(table))
    rec = read_gate_record(gate_record_path(tmp_path, "t", CAND))
    assert sorted(rec.stratified_members) == [M1, M2]
    assert {j.b for j in jobs} == {CHAMP, NOOP, RAND, M1, M2}
    records = ResultLog.for_run(tmp_path, "t").read().records
    ours = [r for r in records if r.iteration >= 105]
    strat = {m: side_scores(ours, CAND, m, [0, 1]) for m in (M1, M2)}
    ratings = current_ratings(tmp_path, "t", cfg.ladder.rater)
    predicted = {m: ratings.predict(CHAMP, m) for m in (M1, M2)}
    assert rec.champion_predicted == predicted
    want = decide_gate(side_scores(ours, CAND, CHAMP, [0, 1, 2, 3]),
                       {a: side_scores(ours, CAND, a, [0, 1]) for a in (NOOP, RAND)}, {NOOP: 1.0, RAND: 0.75},
                       Stratified(scores={m: strat[m] for m in rec.stratified_members},
                                  champion_predicted=rec.champion_predicted),
                       cfg.ladder.gate, stream(cfg.master_seed, "eval/bootstrap/{comparison}", comparison=CAND),
                       candidate=CAND, champion=CHAMP)
    assert rec.decision == want
    c3 = want.conditions[-1]
    # vs M1 a win and a draw per seed (0.75), vs M2 draws (0.5): each member counts equally.
    assert c3.name == "no_pool_collapse" and not c3.skipped and c3.observed == 0.625 and c3.n == 8
    assert want.verdict == "admit_cycle"  # the fit predicts the champion at 0.7575 against them
    pool = PoolState.for_run(tmp_path, "t", cfg.ladder)
    assert CAND in pool.cycle and pool.champion == CHAMP


def test_a_late_job_is_handed_out_again_and_written_once(tmp_path):
    cfg = config()
    new_pool(tmp_path, cfg)
    clock = Clock()
    runner = GateRunner(cfg, tmp_path, say=lambda s: None, clock=clock)
    first = runner.request_job(EvalJobRequest(request_id=1, worker="slow"))
    second = runner.request_job(EvalJobRequest(request_id=2, worker="b"))
    assert (first.job_id, second.job_id) == (0, 1)
    third = runner.request_job(EvalJobRequest(request_id=3, worker="c"))
    assert isinstance(third, NoJob) and third.retry_after_s == 3.0
    clock.t = 99.9
    assert isinstance(runner.request_job(EvalJobRequest(request_id=4, worker="c")), NoJob)
    clock.t = 100.0
    again = runner.request_job(EvalJobRequest(request_id=5, worker="c"))
    assert (again.job_id, again.a, again.b, again.seeds) == (0, first.a, first.b, first.seeds)
    recs = records_for(again, by_pattern({(CHAMP, NOOP): 1}))
    ack = runner.report(EvalReport(request_id=6, job_id=0, run_name="t", worker="c", records=recs))
    late = runner.report(EvalReport(request_id=7, job_id=0, run_name="t", worker="slow", records=recs))
    assert (ack.count, late.count) == (8, 0)
    assert len(ResultLog.for_run(tmp_path, "t").read().records) == 8


def test_reports_that_are_not_the_jobs_games_are_refused(tmp_path):
    cfg = config()
    new_pool(tmp_path, cfg)
    runner = GateRunner(cfg, tmp_path, say=lambda s: None)
    job = runner.request_job(EvalJobRequest(request_id=1, worker="w"))
    good = records_for(job, by_pattern({(CHAMP, NOOP): 1}))
    with pytest.raises(ReportRefused, match=r"job 0: 7 records, expected 8 \(2 seats x 2 sides x 2 seeds\)"):
        runner.report(EvalReport(request_id=2, job_id=0, run_name="t", worker="w", records=good[:7]))
    swapped = [msgspec.structs.replace(good[0], player=NOOP, opponent=CHAMP)] + good[1:]
    with pytest.raises(ReportRefused, match=r"records\[0\]: scripted:noop vs snap:0+1 in the blue seat; the job "
                                            r"seats snap:0+1 blue and scripted:noop red on side 0"):
        runner.report(EvalReport(request_id=3, job_id=0, run_name="t", worker="w", records=swapped))
    with pytest.raises(ReportRefused, match="job 999: no such evaluation job was handed out"):
        runner.report(EvalReport(request_id=4, job_id=999, run_name="t", worker="w", records=good))
    with pytest.raises(ReportRefused, match="run_name 'other': this ladder gates run 't'"):
        runner.report(EvalReport(request_id=5, job_id=0, run_name="other", worker="w", records=good))
    assert ResultLog.for_run(tmp_path, "t").read().records == []
