"""The standing strength measurement (services/ladder/strength.py) driven through the ladder
service's handler by synthetic evaluator reports: planning, one job-id space with the gates,
scores and Wilson intervals worked out by hand, the rating pinned at scripted:noop, a restart
that resumes, a superseded request, and the row keys absent until measured."""

from __future__ import annotations

import math

import pytest

from services.ladder.rating import fit_with, games_from_results
from services.ladder.service import LadderService
from services.ladder.strength import plan_path, read_plan
from services.learner.ladder_status import ladder_row
from services.learner.pool_client import strength_due
from shared.config import load_config
from shared.messages import Ack, EvalJob, EvalJobRequest, EvalReport, LadderStatusRequest, MeasureStrength, NoJob
from tests.services.ladder.test_gate_runner import records_for

NOOP, RAND, FA = "scripted:noop", "scripted:random_legal", "scripted:first-affordable"
S1, S2, S3 = "0" * 15 + "a", "0" * 15 + "b", "0" * 15 + "c"


def config():
    return load_config({"profile": "tiny", "run_name": "t",
                        "ladder": {"pool": {"eval_seed_count": 8}, "gate": {
                            "champion_games": 8, "anchor_games": 4, "stratified_games": 4}},
                        "evaluation": {"job_seeds": 2, "job_deadline_s": 100.0,
                                       "strength": {"every_iterations": 5, "games_per_anchor": 6,
                                                    "anchors": [NOOP, RAND, FA]}}})


def outcome(a, b, seed, side):
    """The snapshot wins every game against noop, wins blue and loses red against random_legal,
    draws every game against first-affordable."""
    return {NOOP: 1, RAND: 1 if side == 0 else -1, FA: 0}[b]


def service(tmp_path, said):
    return LadderService(config(), bind="tcp://127.0.0.1:*", runs_dir=tmp_path, say=said.append)


def measure(svc, sid, iteration, k=1):
    return svc.handle(MeasureStrength(request_id=k, run_name="t", snapshot_id=sid, env_steps=100 * iteration,
                                      iteration=iteration, timesteps=192 * iteration))


def play(svc, limit=None):
    """Ask for jobs and report them (``limit`` at most); returns the jobs handed out."""
    jobs = []
    while limit is None or len(jobs) < limit:
        job = svc.handle(EvalJobRequest(request_id=50, worker="w"))
        if isinstance(job, NoJob):
            break
        assert isinstance(job, EvalJob)
        jobs.append(job)
        ack = svc.handle(EvalReport(request_id=51, job_id=job.job_id, run_name="t", worker="w",
                                    records=records_for(job, outcome)))
        assert isinstance(ack, Ack) and ack.count == 4 * len(job.seeds)
    return jobs


def wilson(k, n, z=1.96):
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def test_the_cadence_is_every_nth_iteration_and_zero_is_off():
    assert [i for i in range(1, 21) if strength_due(5, i)] == [5, 10, 15, 20]
    assert not any(strength_due(0, i) for i in range(1, 100))


def test_a_strength_snapshot_is_planned_played_scored_and_rated(tmp_path):
    said: list[str] = []
    svc = service(tmp_path, said)
    status = svc.handle(LadderStatusRequest(request_id=2, run_name="t"))
    assert status.strength is None and not [k for k in ladder_row(status) if k.startswith("strength/")]
    ack = measure(svc, S1, 5)
    # 6 games an anchor: 3 seeds, jobs of at most 2 seeds -> 2 jobs an anchor, 3 anchors.
    assert isinstance(ack, Ack) and ack.count == 6
    assert measure(svc, S1, 5).count == 0  # a retried request plans nothing
    jobs = play(svc, limit=5)
    assert [(j.a, j.b, j.seeds) for j in jobs[:2]] == [("snap:" + S1, NOOP, [0, 1]), ("snap:" + S1, NOOP, [2])]
    # the snapshot's first 2 games (replays_per_strength_snapshot) are recorded: its first job's
    assert [j.record_games for j in jobs] == [2, 0, 0, 0, 0]
    # five of six jobs played: no partial score, every strength key absent
    assert svc.handle(LadderStatusRequest(request_id=3, run_name="t")).strength is None
    assert len(play(svc)) == 1
    s = svc.handle(LadderStatusRequest(request_id=4, run_name="t")).strength
    assert s.snapshot == "snap:" + S1 and s.iteration == 5 and s.env_steps == 500 and s.measured == 1
    assert s.games == {NOOP: 6, RAND: 6, FA: 6}
    assert s.score == {NOOP: 1.0, RAND: 0.5, FA: 0.5}
    for anchor, k in ((NOOP, 6), (RAND, 3), (FA, 3)):
        lo, hi = wilson(k, 6)
        assert s.score_lo[anchor] == pytest.approx(lo, abs=1e-12) and s.score_hi[anchor] == pytest.approx(hi, abs=1e-12)
    assert s.score_lo[NOOP] == pytest.approx(0.6097, abs=1e-4)  # 6/6: (1 + z^2/12 - z^2/12) / (1 + z^2/6)
    # the rating is the run rater's BTD fit of exactly these 36 records (18 games), noop pinned at 0
    records = [r for line in svc.strength.by_job.values() for r in line]
    assert len(records) == 36  # 18 games, two seat records each
    table = fit_with(games_from_results(records), config().ladder.rater)
    assert table.ratings[NOOP] == 0.0 and table.games == 18
    assert s.rating == table.ratings["snap:" + S1] and s.rating_se == table.se["snap:" + S1]
    assert s.rating > 0 and s.rating_se > 0  # it beat the pinned anchor 6 of 6
    row = ladder_row(svc.handle(LadderStatusRequest(request_id=5, run_name="t")))
    assert row["strength/score/" + RAND] == 0.5 and row["strength/score_lo/" + NOOP] == s.score_lo[NOOP]
    assert row["strength/rating"] == s.rating and row["strength/games/" + FA] == 6
    assert any("strength of snap:" + S1 in line and "rating" in line for line in said)
    # the ladder's own gauges
    from prometheus_client import generate_latest

    text = generate_latest(svc.metrics.registry).decode()
    assert 'royalefleet_ladder_strength_score{anchor="scripted:noop"} 1.0' in text
    assert "royalefleet_ladder_strength_iteration 5.0" in text
    svc.close()


def test_job_ids_are_one_space_with_the_gates_and_a_restart_resumes_the_plan(tmp_path):
    said: list[str] = []
    svc = service(tmp_path, said)
    measure(svc, S1, 5)
    played = play(svc, limit=2)
    ids = [j.job_id for e in read_plan(plan_path(tmp_path, "t")).entries for j in e.jobs]
    assert ids == list(range(6)) and svc.gates.next_job_id == 6
    svc.close()
    again = service(tmp_path, said)
    assert again.gates.next_job_id == 6  # planned but unplayed strength ids are never reused
    rest = play(again)
    assert sorted(j.job_id for j in rest) == [2, 3, 4, 5]  # the two played before are not handed out again
    assert {j.job_id for j in played} == {0, 1}
    s = again.handle(LadderStatusRequest(request_id=6, run_name="t")).strength
    assert s.score == {NOOP: 1.0, RAND: 0.5, FA: 0.5}
    again.close()
    third = service(tmp_path, said)
    assert third.handle(LadderStatusRequest(request_id=7, run_name="t")).strength == s  # read back, same numbers
    third.close()


def test_a_waiting_snapshot_is_superseded_by_a_newer_one_and_bad_requests_are_refused(tmp_path):
    said: list[str] = []
    svc = service(tmp_path, said)
    measure(svc, S1, 5)
    play(svc, limit=1)  # S1 has started: it is kept
    measure(svc, S2, 10)
    measure(svc, S3, 15)  # S2 has no game handed out yet: replaced by S3
    assert [e.snapshot for e in read_plan(plan_path(tmp_path, "t")).entries] == ["snap:" + S1, "snap:" + S3]
    assert any("snap:" + S2 in line and "superseded by iteration 15" in line for line in said)
    play(svc)
    s = svc.handle(LadderStatusRequest(request_id=8, run_name="t")).strength
    assert s.snapshot == "snap:" + S3 and s.measured == 2 and s.pending == 0
    err = svc.handle(MeasureStrength(request_id=9, run_name="t", snapshot_id="XYZ", env_steps=0, iteration=1))
    assert "snapshot_id 'XYZ': expected the checkpoint service's 16 lowercase hex id" in err.reason
    err = svc.handle(MeasureStrength(request_id=10, run_name="u", snapshot_id=S1, env_steps=0, iteration=1))
    assert "run_name 'u': this ladder measures run 't'" in err.reason
    svc.close()


def test_the_config_refuses_a_strength_set_the_seed_set_cannot_hold_or_without_noop():
    from shared.config import ConfigError

    with pytest.raises(ConfigError, match=r"evaluation.strength.games_per_anchor: 20 paired battles need 10 "
                                          r"evaluation seeds, but ladder.pool.eval_seed_count is 8"):
        load_config({"profile": "tiny", "ladder": {"pool": {"eval_seed_count": 8}, "gate": {
                         "champion_games": 8, "anchor_games": 4, "stratified_games": 4}},
                     "evaluation": {"strength": {"every_iterations": 5, "games_per_anchor": 20}}})
    with pytest.raises(ConfigError, match=r"evaluation.strength.anchors: \['scripted:push'\] lacks scripted:noop"):
        load_config({"profile": "tiny", "evaluation": {"strength": {"every_iterations": 5,
                                                                    "anchors": ["scripted:push"]}}})


def test_royalefleet_strength_and_status_read_the_measurement_from_the_run_folder(tmp_path, capsys):
    from royalefleet.cli import main

    said: list[str] = []
    svc = service(tmp_path, said)
    (tmp_path / "t").mkdir(exist_ok=True)
    (tmp_path / "t" / "config.json").write_bytes(__import__("msgspec").json.encode(config()))
    assert main(["strength", "t", "--runs-dir", str(tmp_path)]) == 1  # an empty listing exits 1, as every listing does
    assert capsys.readouterr().out == "no strength snapshot measured yet (0 pending)\n"
    measure(svc, S1, 5)
    play(svc)
    measure(svc, S2, 10)  # planned, not played: pending, never a partial score
    svc.close()
    s = svc.strength.summary
    assert main(["strength", "t", "--runs-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["iteration", "env_steps", "rating", "(Elo)", "noop", "random_legal", "first-affordable"]
    lo, hi = wilson(3, 6)
    assert lines[2].split() == ["5", "500", f"{s.rating:.0f}", "+-", f"{s.rating_se:.0f}", "1.00",
                                f"[{wilson(6, 6)[0]:.2f},", "1.00]", "0.50", f"[{lo:.2f},", f"{hi:.2f}]",
                                "0.50", f"[{lo:.2f},", f"{hi:.2f}]"]
    assert lines[3].startswith("1 snapshot(s) measured, 1 pending; games per anchor: 6;")
    from royalefleet.cmd_status import status_lines

    config_of_run = load_config({**__import__("msgspec").to_builtins(config()), "runs_dir": str(tmp_path)})
    text = "\n".join(status_lines(config_of_run)[0])
    assert (f"strength   iteration 5: rating {s.rating:.0f} +- {s.rating_se:.0f} Elo (noop = 0); noop 1.00 "
            f"[{wilson(6, 6)[0]:.2f}, 1.00], random_legal 0.50 [{lo:.2f}, {hi:.2f}]") in text


def test_a_search_budget_measures_the_searched_snapshot_on_the_same_games_on_the_line_below(tmp_path, capsys):
    import msgspec

    from royalefleet.cli import main

    cfg = msgspec.to_builtins(config())
    cfg["evaluation"]["strength"]["search"] = [8]
    said: list[str] = []
    svc = LadderService(load_config(cfg), bind="tcp://127.0.0.1:*", runs_dir=tmp_path, say=said.append)
    ack = measure(svc, S1, 5)
    assert ack.count == 12  # 6 jobs for the snapshot, 6 more for it searching
    searched = "snap:" + S1 + "+search:8"
    jobs = play(svc)
    assert [j.a for j in jobs] == ["snap:" + S1] * 6 + [searched] * 6
    assert [(j.b, j.seeds) for j in jobs[:6]] == [(j.b, j.seeds) for j in jobs[6:]]  # the same games
    assert any(line.endswith("(6 games each); searched too with +search:8") for line in said)
    s = svc.handle(LadderStatusRequest(request_id=4, run_name="t")).strength
    assert s.snapshot == "snap:" + S1  # the run's strength is the unsearched snapshot's
    svc.close()
    (tmp_path / "t" / "config.json").write_bytes(msgspec.json.encode(load_config(cfg)))
    assert main(["strength", "t", "--runs-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split()[:2] == ["5", "500"] and lines[3].split()[0] == "+search:8"
    assert lines[3].split()[4:6] == ["1.00", f"[{wilson(6, 6)[0]:.2f},"]  # the synthetic outcomes: 6 of 6 vs noop


@pytest.mark.slow
def test_a_real_stack_measures_the_learners_strength_into_its_row(tmp_path):
    """learner -> snapshot store -> ladder -> evaluator -> result log -> ladder status -> row:
    a tiny stack measuring every iteration against noop and first-affordable."""
    import json
    import time

    from tests.stack import Up, read_rows, tiny_config

    cfg = tiny_config(tmp_path, run_name="s", evaluation={
        "strength": {"every_iterations": 1, "games_per_anchor": 2, "anchors": [NOOP, FA]}})
    up = Up(cfg)
    try:
        up.wait_for(lambda line: "learner: strength snapshot snap:" in line, 120, "a strength snapshot")
        run = tmp_path / "s"
        deadline = time.monotonic() + 150
        while not (run / "metrics.jsonl").exists() or not any("strength/rating" in r for r in read_rows(run)):
            assert time.monotonic() < deadline, up.tail()
            time.sleep(0.5)
    finally:
        up.interrupt()
        up.wait_exit(120)
    rows = read_rows(run)
    first = next(i for i, r in enumerate(rows) if "strength/rating" in r)
    # absent, never 0, before: the first row is written long before an evaluator can have played
    assert first >= 1 and not any(k.startswith("strength/") for r in rows[:first] for k in r)
    r = rows[first]
    assert 1 <= r["strength/iteration"] <= r["run/iteration"]
    assert r["strength/games/" + NOOP] == 2 and r["strength/games/" + FA] == 2
    for anchor in (NOOP, FA):
        assert r["strength/score_lo/" + anchor] <= r["strength/score/" + anchor] <= r["strength/score_hi/" + anchor]
        assert r["strength/score/" + anchor] in (0.0, 0.25, 0.5, 0.75, 1.0)
    assert r["strength/rating_se"] > 0
    plan = json.loads((run / "ladder" / "strength.json").read_text())
    snap = plan["entries"][0]["snapshot"]
    assert (run / "snapshots" / snap.removeprefix("snap:")).is_dir()  # the learner wrote it to the store
    assert any("learner: strength snapshot" in line for line in up.lines)
