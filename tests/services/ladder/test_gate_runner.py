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


# ----------------------------------------------------------------------------- a gate across a ladder restart


def play(runner, outcome_of, n: int, first_request: int = 100) -> list:
    """Hand out and report ``n`` jobs; returns them."""
    jobs = []
    for k in range(n):
        job = runner.request_job(EvalJobRequest(request_id=first_request + k, worker="w"))
        assert not isinstance(job, NoJob), job.reason
        runner.report(EvalReport(request_id=first_request + k, job_id=job.job_id, run_name="t", worker="w",
                                 records=records_for(job, outcome_of)))
        jobs.append(job)
    return jobs


def gated_pool(tmp_path, cfg):
    pool = new_pool(tmp_path, cfg)
    pool.set_anchor_record(CHAMP, {NOOP: 1.0, RAND: 0.75})
    pool.submit(Candidate(id=M1, env_steps=150, iteration=2))
    pool.save()
    return pool


# M1 beats the champion on every game and matches its anchor record: promoted after the
# champion and anchor phases (no stratified phase in these configs).
WINS = by_pattern({(M1, CHAMP): 1, (M1, NOOP): 1, (M1, RAND): (1, 0)})


def comparable(rec):
    return msgspec.structs.replace(rec, wall_seconds=0.0, decided_at="")


def test_a_gate_interrupted_by_a_ladder_restart_resumes_and_decides_as_if_never_stopped(tmp_path):
    cfg = config(stratified_snapshots=0)
    # Uninterrupted, in a folder of its own.
    gated_pool(tmp_path / "straight", cfg)
    straight = GateRunner(cfg, tmp_path / "straight", say=lambda s: None)
    straight_jobs = drive(straight, WINS)
    want = read_gate_record(gate_record_path(tmp_path / "straight", "t", M1))
    assert want.decision.verdict == "promote" and len(straight_jobs) == 4

    # Interrupted: both champion-phase jobs and the first anchor job played, the second anchor
    # job handed out and never reported (its evaluator died with the ladder).
    gated_pool(tmp_path / "split", cfg)
    lines: list[str] = []
    first = GateRunner(cfg, tmp_path / "split", say=lines.append)
    played = play(first, WINS, 3)
    lost = first.request_job(EvalJobRequest(request_id=1, worker="dies"))
    assert [j.job_id for j in played] + [lost.job_id] == [0, 1, 2, 3]
    journal = tmp_path / "split" / "t" / "ladder" / "gate_in_flight.json"
    assert journal.exists()
    del first

    second = GateRunner(cfg, tmp_path / "split", say=lines.append)
    assert second.next_job_id == 4  # past every planned id, the unreported one included
    rest = drive(second, WINS)
    assert [(j.job_id, j.a, j.b, j.seeds) for j in rest] == [(3, lost.a, lost.b, lost.seeds)]
    assert "ladder: resumed the gate of " + M1 + " vs " + CHAMP + " in phase anchors: 3 of 4 jobs already played" \
        in "\n".join(lines)
    got = read_gate_record(gate_record_path(tmp_path / "split", "t", M1))
    assert comparable(got) == comparable(want)
    assert [j.job_id for j in got.jobs] == [0, 1, 2, 3]
    # Every job's games are in the log once: nothing was played twice.
    ids = [r.iteration for r in ResultLog.for_run(tmp_path / "split", "t").read().records]
    assert sorted(ids) == sorted([0] * 8 + [1] * 8 + [2] * 8 + [3] * 8)
    assert not journal.exists()
    assert PoolState.for_run(tmp_path / "split", "t", cfg.ladder).champion == M1


def test_a_journal_that_no_longer_fits_is_dropped_and_the_gate_planned_anew(tmp_path):
    cfg = config(stratified_snapshots=0)
    gated_pool(tmp_path, cfg)
    first = GateRunner(cfg, tmp_path, say=lambda s: None)
    play(first, WINS, 1)
    changed = config(stratified_snapshots=0, champion_games=12)
    lines: list[str] = []
    second = GateRunner(changed, tmp_path, say=lines.append)
    jobs = drive(second, WINS)
    assert lines[0] == (f"ladder: not resuming the gate of {M1} vs {CHAMP} in flight: the gate config "
                        "(ladder.gate, evaluation.job_seeds) changed since it was planned")
    # Planned anew: 12 battles = 6 seeds = 3 jobs vs the champion, ids after the old plan's (0, 1).
    assert [(j.job_id, j.b, j.seeds) for j in jobs[:3]] == [(2, CHAMP, [0, 1]), (3, CHAMP, [2, 3]),
                                                            (4, CHAMP, [4, 5])]
    assert read_gate_record(gate_record_path(tmp_path, "t", M1)).gate == changed.ladder.gate


def test_a_journal_of_a_decided_gate_is_dropped(tmp_path):
    cfg = config(stratified_snapshots=0)
    gated_pool(tmp_path, cfg)
    runner = GateRunner(cfg, tmp_path, say=lambda s: None)
    play(runner, WINS, 3)
    journal = tmp_path / "t" / "ladder" / "gate_in_flight.json"
    stale = journal.read_bytes()
    drive(runner, WINS)
    assert not journal.exists()
    # A stop between applying the decision and removing the journal leaves it behind.
    journal.write_bytes(stale)
    lines: list[str] = []
    after = GateRunner(cfg, tmp_path, say=lines.append)
    job = after.request_job(EvalJobRequest(request_id=1, worker="w"))
    assert isinstance(job, NoJob) and job.reason == "no gate pending"
    assert lines == [f"ladder: not resuming the gate of {M1} vs {CHAMP} in flight: the champion is now {M1}, "
                     f"not {CHAMP}"]
    assert not journal.exists()


def test_an_unreadable_journal_is_set_aside_and_the_gate_planned_anew(tmp_path):
    cfg = config(stratified_snapshots=0)
    gated_pool(tmp_path, cfg)
    journal = tmp_path / "t" / "ladder" / "gate_in_flight.json"
    journal.write_bytes(b'{"kind": "gate", "cand')
    lines: list[str] = []
    runner = GateRunner(cfg, tmp_path, say=lines.append)
    assert lines[0].startswith(f"ladder: {journal} does not decode (") and lines[0].endswith(
        "moved to gate_in_flight.json.unreadable, the gate in flight is planned anew")
    assert (journal.parent / "gate_in_flight.json.unreadable").read_bytes() == b'{"kind": "gate", "cand'
    jobs = drive(runner, WINS)
    assert [j.job_id for j in jobs] == [0, 1, 2, 3]
    assert PoolState.for_run(tmp_path, "t", cfg.ladder).champion == M1


def test_a_report_of_a_journalled_job_that_comes_before_any_request_is_written(tmp_path):
    cfg = config(stratified_snapshots=0)
    gated_pool(tmp_path, cfg)
    first = GateRunner(cfg, tmp_path, say=lambda s: None)
    play(first, WINS, 1)
    held = first.request_job(EvalJobRequest(request_id=1, worker="e"))  # job 1, in play when the ladder stops
    second = GateRunner(cfg, tmp_path, say=lambda s: None)
    ack = second.report(EvalReport(request_id=2, job_id=held.job_id, run_name="t", worker="e",
                                   records=records_for(held, WINS)))
    assert (held.job_id, ack.count) == (1, 8)
    jobs = drive(second, WINS)
    assert [j.job_id for j in jobs] == [2, 3]  # the anchor jobs: job 1 is not played again
    assert PoolState.for_run(tmp_path, "t", cfg.ladder).champion == M1


def test_a_job_whose_logged_batch_was_cut_short_is_played_again_and_then_counts(tmp_path):
    cfg = config(stratified_snapshots=0)
    gated_pool(tmp_path, cfg)
    first = GateRunner(cfg, tmp_path, say=lambda s: None)
    play(first, WINS, 1)
    held = first.request_job(EvalJobRequest(request_id=1, worker="e"))
    # The ladder died half-way through writing job 1's report: 3 of its 8 lines are in the log.
    log = ResultLog.for_run(tmp_path, "t")
    log.append(records_for(held, WINS)[:3])
    lines: list[str] = []
    second = GateRunner(cfg, tmp_path, say=lines.append)
    again = second.request_job(EvalJobRequest(request_id=2, worker="e"))
    assert again.job_id == 1
    assert any(s.startswith("ladder: job 1's games in the result log are not whole (job 1: 3 records, expected 8")
               for s in lines)
    second.report(EvalReport(request_id=3, job_id=1, run_name="t", worker="e", records=records_for(again, WINS)))
    del second
    # Another restart: the whole batch counts; the cut one is passed over.
    third = GateRunner(cfg, tmp_path, say=lines.append)
    jobs = drive(third, WINS)
    assert [j.job_id for j in jobs] == [2, 3]
    assert "resumed the gate of " + M1 + " vs " + CHAMP + " in phase anchors: 2 of 4 jobs" in "\n".join(lines)


def test_a_plan_that_cannot_be_journalled_hands_out_no_job_until_it_is(tmp_path, monkeypatch):
    import services.ladder.gate_runner as gr

    cfg = config(stratified_snapshots=0)
    gated_pool(tmp_path, cfg)
    lines: list[str] = []
    runner = GateRunner(cfg, tmp_path, say=lines.append)
    play(runner, WINS, 1)
    real = gr.replace_file

    def full_disk(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(gr, "replace_file", full_disk)
    play(runner, WINS, 1)  # completes the champion phase: the anchor phase is planned, not journalled
    for k in range(2):
        job = runner.request_job(EvalJobRequest(request_id=10 + k, worker="w"))
        assert isinstance(job, NoJob)
        assert job.reason.startswith("the gate's plan cannot be saved to ") and "No space left" in job.reason
    assert sum("cannot save the gate's plan" in s for s in lines) == 1
    monkeypatch.setattr(gr, "replace_file", real)
    job = runner.request_job(EvalJobRequest(request_id=20, worker="w"))
    assert (job.job_id, job.b) == (2, NOOP)
    assert lines[-1].endswith("again; jobs are handed out")
    journal = msgspec.json.decode((tmp_path / "t" / "ladder" / "gate_in_flight.json").read_bytes())
    assert journal["phase"] == "anchors" and [j["job_id"] for j in journal["jobs"]] == [0, 1, 2, 3]


def test_two_appends_in_one_millisecond_stay_two_batches():
    """A batch cut short by a crash and the whole one resent in the same millisecond (one wall
    time): the repeated record starts the second batch, so the whole one is found (this merged
    them into one of 3 + 8 records and the gate was planned again, 2-5 % of runs)."""
    from services.ladder.gate_runner import job_batches
    from services.ladder.results import ResultLine

    from types import SimpleNamespace

    job = SimpleNamespace(job_id=5, a=M1, b=CHAMP, seeds=[11, 12])  # what records_for reads of a job
    recs = records_for(job, WINS)
    wall = "2026-12-04T01:55:00.123+00:00"
    lines = [ResultLine(run_name="t", wall=wall, record=r) for r in recs[:3] + recs]
    got = job_batches(lines)[5]
    assert list(got) == [(wall, 0), (wall, 1)]
    assert [len(b) for b in got.values()] == [3, 8]
    assert got[(wall, 1)] == recs
