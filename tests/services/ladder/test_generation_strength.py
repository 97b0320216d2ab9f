"""Each promoted generation's strength (services/ladder/generation_strength.py) driven through
the ladder service's handler by synthetic evaluator reports: the champion chain planned
(generation 0 free, generation 1 promoted by a gate), the searched and not-an-opponent-model
pairings, one job-id space, the scores and Wilson intervals worked out by hand, flowing to the
learner's row, its gauges, the ladder's gauges, ``status``, ``strength`` and ``report``; a restart
that neither replans nor forgets; off by default outside expert iteration."""

from __future__ import annotations

import argparse
import math

import pytest
from prometheus_client import generate_latest

from royalefleet import generation_report
from services.ladder.gate import GateDecision
from services.ladder.generation_strength import plan_path, read_plan
from services.ladder.pool import Candidate, PoolState
from services.ladder.service import LadderService
from services.learner.ladder_status import ladder_row
from shared.config import ConfigError, load_config
from shared.messages import Ack, EvalJob, EvalJobRequest, EvalReport, LadderStatusRequest, NoJob
from shared.metric_schema import prometheus_name, schema_key
from tests.services.ladder.test_gate_runner import records_for

DEF, RAND = "scripted:defend", "scripted:random_legal"
S1, S2 = "snap:" + "0" * 15 + "a", "snap:" + "0" * 15 + "b"


def config(**generations):
    gens = {"enabled": True, "anchors": [DEF, RAND], "games": 4, "search": "+search:4:10",
            "searched_anchors": [DEF], "searched_games": 2, "sim_as": "random"} | generations
    return load_config({"profile": "tiny", "run_name": "t", "ladder": {"pool": {"eval_seed_count": 8}, "gate": {
                            "champion_games": 8, "anchor_games": 4, "stratified_games": 4}},
                        "evaluation": {"job_seeds": 2, "job_deadline_s": 100.0,
                                       "strength": {"every_iterations": 0, "generations": gens}}})


def outcome(a, b, seed, side):
    """Unsearched: beats defend on seed 0 (both sides), draws it on seed 1; beats random_legal
    blue, loses red. Searched: beats defend always; with opp=random beats defend blue, draws red;
    against the previous generation wins seed 0 blue only (the rest lost)."""
    if "+search" not in a:
        return {DEF: 1 if seed == 0 else 0, RAND: 1 if side == 0 else -1}.get(b, 0)  # 0: a gate's games
    if ",opp=random" not in a:
        return 1
    if b == DEF:
        return 1 if side == 0 else 0
    return 1 if (seed, side) == (0, 0) else -1


def wilson(k, n, z=1.96):
    """The Wilson score interval, written out again here (not shared.stats)."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def crown(tmp_path, cfg, *, promote: bool):
    """File S1 (admitted free: generation 0); with ``promote`` also S2 through a passed gate."""
    state = PoolState.for_run(tmp_path, "t", cfg.ladder)
    if state.champion is None:
        assert state.submit(Candidate(id=S1, env_steps=100, iteration=1)) == "admitted_free"
    if promote:
        assert state.submit(Candidate(id=S2, env_steps=900, iteration=9)) == "pending"
        state.resolve(S2, GateDecision(candidate=S2, champion=S1, admit=True, promote=True, cycle=False,
                                       verdict="promote", conditions=[]))
    state.save()


def play(svc):
    """Play every job the ladder hands out (the first champion's anchor record among them);
    returns the generation jobs."""
    jobs = []
    while not isinstance(job := svc.handle(EvalJobRequest(request_id=50, worker="w")), NoJob):
        assert isinstance(job, EvalJob)
        if svc.generations.owns(job.job_id):
            jobs.append(job)
        ack = svc.handle(EvalReport(request_id=51, job_id=job.job_id, run_name="t", worker="w",
                                    records=records_for(job, outcome)))
        assert isinstance(ack, Ack) and ack.count == 4 * len(job.seeds)
    return jobs


def test_each_generation_is_measured_unsearched_searched_and_without_an_opponent_model(tmp_path):
    said: list[str] = []
    cfg = config()
    crown(tmp_path, cfg, promote=False)
    svc = LadderService(cfg, bind="tcp://127.0.0.1:*", runs_dir=tmp_path, say=said.append)
    plan = read_plan(plan_path(tmp_path, "t"))
    # generation 0: 4 unsearched games an anchor (seeds 0-1, one job), 2 searched games (seed 0); no previous
    assert [(j.job_id, j.a, j.b, j.seeds, j.condition) for j in plan.entries[0].jobs] == [
        (0, S1, DEF, [0, 1], "generation:unsearched/" + DEF),
        (1, S1, RAND, [0, 1], "generation:unsearched/" + RAND),
        (2, S1 + "+search:4:10", DEF, [0], "generation:searched/" + DEF),
        (3, S1 + "+search:4:10,opp=random", DEF, [0], "generation:searched_sim_random/" + DEF)]
    status = svc.handle(LadderStatusRequest(request_id=1, run_name="t"))
    assert status.generations == [] and status.generations_pending == 1
    assert not [k for k in ladder_row(status) if k.startswith("expit/strength/")]  # absent, never 0
    crown(tmp_path, cfg, promote=True)
    svc.sync_generations()
    svc.sync_generations()  # planned once
    entries = read_plan(plan_path(tmp_path, "t")).entries
    assert [(e.generation, e.champion, e.previous, e.env_steps) for e in entries] == [
        (0, S1, None, 100), (1, S2, S1, 900)]
    assert [(j.job_id, j.a, j.b, j.condition) for j in entries[1].jobs][-1] == (
        8, S2 + "+search:4:10,opp=random", S1, "generation:searched_sim_random/previous")
    assert svc.gates.next_job_id == 9  # one id space with the gates
    jobs = play(svc)
    assert [j.job_id for j in jobs] == list(range(9)) and all(j.record_games == 0 for j in jobs)
    status = svc.handle(LadderStatusRequest(request_id=2, run_name="t"))
    g0, g1 = status.generations
    assert status.generations_pending == 0 and (g1.generation, g1.champion, g1.env_steps) == (1, S2, 900)
    # defend unsearched: seed 0 won twice, seed 1 drawn twice -> 3 of 4; random_legal 2 of 4;
    # searched 2 of 2; opp=random against defend 1.5 of 2; against the previous generation 1 of 2
    expected = {"unsearched/" + DEF: (3.0, 4), "unsearched/" + RAND: (2.0, 4), "searched/" + DEF: (2.0, 2),
                "searched_sim_random/" + DEF: (1.5, 2), "searched_sim_random/previous": (1.0, 2)}
    assert g1.games == {c: n for c, (_, n) in expected.items()}
    assert g1.score == {c: k / n for c, (k, n) in expected.items()}
    for c, (k, n) in expected.items():
        assert (g1.score_lo[c], g1.score_hi[c]) == pytest.approx(wilson(k, n), abs=1e-12)
    assert (g1.score_lo["unsearched/" + DEF], g1.score_hi["unsearched/" + DEF]) == pytest.approx(
        (0.300636, 0.954414), abs=1e-6)  # 3 of 4: centre 1.2302 / 1.9604, half 1.96 * sqrt(0.1069) / 1.9604
    assert g0.score == {c: v for c, v in g1.score.items() if c != "searched_sim_random/previous"}

    # the learner's row: the newest generation's keys, exact
    row = ladder_row(status)
    got = {k: v for k, v in row.items() if k.startswith("expit/strength/")}
    want = {"expit/strength/generation": 1, "expit/strength/measured": 2, "expit/strength/pending": 0}
    for c, (k, n) in expected.items():
        lo, hi = wilson(k, n)
        want |= {f"expit/strength/score/{c}": k / n, f"expit/strength/score_lo/{c}": pytest.approx(lo, abs=1e-12),
                 f"expit/strength/score_hi/{c}": pytest.approx(hi, abs=1e-12), f"expit/strength/games/{c}": n}
    assert got == want and all(schema_key(k) for k in got)
    # the learner's /metrics for the row, and the ladder's gauges per generation
    assert prometheus_name("expit/strength/score/searched/" + DEF) == (
        "royalefleet_learner_expit_strength_score", {"condition": "searched/" + DEF})
    from services.learner.metrics import LearnerMetrics

    learner = LearnerMetrics(port=None)
    learner.export(row)
    exported = generate_latest(learner.registry).decode()
    lo, _ = wilson(1.5, 2)
    assert 'royalefleet_learner_expit_strength_score{condition="searched_sim_random/scripted:defend"} 0.75' in exported
    assert f'royalefleet_learner_expit_strength_score_lo{{condition="searched_sim_random/scripted:defend"}} {lo!r}' in exported
    assert "royalefleet_learner_expit_strength_generation 1.0" in exported
    text = generate_latest(svc.metrics.registry).decode()
    assert ('royalefleet_ladder_generation_strength_score{condition="searched_sim_random/previous",'
            'generation="1"} 0.5') in text
    assert 'royalefleet_ladder_generation_strength_games{condition="unsearched/scripted:defend",generation="0"} 4.0' in text
    assert "royalefleet_ladder_generation_strength_pending 0.0" in text
    assert any("generation 1 (" + S2 + ") searched/scripted:defend: 1.000 [0.342, 1.000] over 2 games" in s
               for s in said)
    svc.close()

    # a restart reads the plan and the log: nothing replanned, nothing forgotten, the ids stay used
    again = LadderService(cfg, bind="tcp://127.0.0.1:*", runs_dir=tmp_path, say=said.append)
    assert again.gates.next_job_id == svc.gates.next_job_id > 9 and isinstance(again.handle(EvalJobRequest(request_id=3, worker="w")), NoJob)
    assert again.handle(LadderStatusRequest(request_id=4, run_name="t")).generations == [g0, g1]
    again.close()


def test_a_condition_is_reported_only_when_all_its_games_are_played(tmp_path):
    cfg = config(games=6)  # 3 seeds an anchor: jobs [0, 1] and [2]
    crown(tmp_path, cfg, promote=False)
    svc = LadderService(cfg, bind="tcp://127.0.0.1:*", runs_dir=tmp_path, say=lambda s: None)
    job = svc.generations.request_job(EvalJobRequest(request_id=1, worker="w"))  # the gate's jobs aside
    assert job.seeds == [0, 1]
    svc.handle(EvalReport(request_id=2, job_id=job.job_id, run_name="t", worker="w", records=records_for(job, outcome)))
    assert svc.handle(LadderStatusRequest(request_id=3, run_name="t")).generations == []
    job = svc.generations.request_job(EvalJobRequest(request_id=4, worker="w"))
    assert job.seeds == [2]
    svc.handle(EvalReport(request_id=5, job_id=job.job_id, run_name="t", worker="w", records=records_for(job, outcome)))
    (g,) = svc.handle(LadderStatusRequest(request_id=6, run_name="t")).generations
    assert g.games == {"unsearched/" + DEF: 6} and g.score == {"unsearched/" + DEF: 4.0 / 6}  # 2 + 1 + 1
    svc.close()


def test_off_by_default_outside_expert_iteration_and_on_under_it():
    gens = load_config({"profile": "cpu", "run_name": "t"}).evaluation.strength.generations
    assert gens.enabled is None
    assert [a for a in ("ppo", "dqn", "alphazero", "expert_iteration", "treestrap") if gens.active(a)] == [
        "expert_iteration", "treestrap"]
    # the test suite's profile turns it off, as it does the standing measurement
    assert not load_config({"profile": "tiny", "run_name": "t"}).evaluation.strength.generations.active(
        "expert_iteration")
    assert not config(enabled=False).evaluation.strength.generations.active("expert_iteration")
    assert config(enabled=True).evaluation.strength.generations.active("ppo")


def test_a_ppo_ladder_plans_no_generation_by_default(tmp_path):
    cfg = config(enabled=None)
    assert cfg.learner.algorithm == "ppo"
    crown(tmp_path, cfg, promote=True)
    svc = LadderService(cfg, bind="tcp://127.0.0.1:*", runs_dir=tmp_path, say=lambda s: None)
    svc.sync_generations()
    assert not plan_path(tmp_path, "t").exists()
    status = svc.handle(LadderStatusRequest(request_id=1, run_name="t"))
    assert status.generations == [] and status.generations_pending == 0
    assert not [k for k in ladder_row(status) if k.startswith("expit/strength/")]
    svc.close()


@pytest.mark.parametrize("field, value, message", [
    ("search", "+search:1", "evaluation.strength.generations.search: '+search:1' is not a search suffix"),
    ("search", "8", "evaluation.strength.generations.search: '8' is not a search suffix"),
    ("sim_as", "mirror", "evaluation.strength.generations.sim_as: 'mirror' is not a simulated bot"),
    ("games", 40, "evaluation.strength.generations.games: 40 games need 20 evaluation seeds, but "
                  "ladder.pool.eval_seed_count is 8"),
])
def test_the_config_refuses_a_bad_generation_measurement(field, value, message):
    with pytest.raises(ConfigError, match="(?s)" + message.replace("+", r"\+").replace(".", r"\.")):
        config(**{field: value})


def test_status_strength_and_report_show_each_generation(tmp_path, capsys):
    import msgspec

    from royalefleet.cli import main
    from royalefleet.cmd_report import GENERATION_PLOT
    from royalefleet.cmd_status import status_lines

    cfg = config()
    crown(tmp_path, cfg, promote=True)
    svc = LadderService(cfg, bind="tcp://127.0.0.1:*", runs_dir=tmp_path, say=lambda s: None)
    play(svc)
    measured = svc.generations.measured
    svc.close()
    (tmp_path / "t" / "config.json").write_bytes(msgspec.json.encode(cfg))
    of_run = load_config({**msgspec.to_builtins(cfg), "runs_dir": str(tmp_path)})
    lines = [x.strip() for x in status_lines(of_run)[0] if "generation" in x]
    assert lines[0] == ("generation 0 (" + S1 + "): unsearched/defend 0.75 [0.30, 0.95] (4); unsearched/random_legal "
                        "0.50 [0.15, 0.85] (4); searched/defend 1.00 [0.34, 1.00] (2); searched_sim_random/defend "
                        "0.75 [0.20, 0.97] (2)")
    assert lines[1].startswith("generation 1 (" + S2 + "): unsearched/defend 0.75 [0.30, 0.95] (4);")
    assert lines[1].endswith("; searched_sim_random/previous 0.50 [0.09, 0.91] (2)")
    assert lines[2].startswith("2 generation(s) measured, 0 pending")
    assert main(["strength", "t", "--runs-dir", str(tmp_path)]) == 0  # no standing snapshot, but generations
    out = capsys.readouterr().out.splitlines()
    table = out[out.index("each generation:") + 1:]
    assert table[1] == f"{0:>10}  {S1:<21} {100:>11}  {'unsearched/defend':<34} 0.75 [0.30, 0.95] n=4"
    assert table[-2] == f"{'':>45}  {'searched_sim_random/previous':<34} 0.50 [0.09, 0.91] n=2"
    assert main(["report", "t", "--runs-dir", str(tmp_path), "--out", str(tmp_path / "rep")]) == 2  # no metrics yet
    (tmp_path / "t" / "metrics.jsonl").write_text('{"run/iteration": 1, "run/timesteps": 10}\n')
    assert main(["report", "t", "--runs-dir", str(tmp_path), "--out", str(tmp_path / "rep")]) == 0
    assert GENERATION_PLOT in capsys.readouterr().out and (tmp_path / "rep" / GENERATION_PLOT).stat().st_size > 0
    page = (tmp_path / "rep" / "index.html").read_text()
    html_table = generation_report.table_html(measured)
    assert html_table in page and "<h2>Strength of each generation</h2>" in page
    assert ("<tr><td>1</td><td>" + S2 + "</td><td>0.75 [0.30, 0.95] n=4</td><td>0.50 [0.15, 0.85] n=4</td>"
            "<td>1.00 [0.34, 1.00] n=2</td><td>0.75 [0.20, 0.97] n=2</td><td>0.50 [0.09, 0.91] n=2</td></tr>") in html_table
    assert "<td>0</td><td>" + S1 + "</td>" in html_table and html_table.count("<td>-</td>") == 1  # gen 0: no previous


def test_verify_resume_does_not_compare_generation_strength_but_compares_the_generation():
    from royalefleet.verify_resume import _compare

    base = {"run/iteration": 2, "expit/generation": 1}
    measured = dict(base, **{"expit/strength/generation": 1, "expit/strength/score/unsearched/" + DEF: 0.75})
    assert _compare([base], [measured], first=2) == []  # the evaluators' clock, not the learner's
    assert _compare([base], [dict(base, **{"expit/generation": 2})], first=2) == [
        "iteration 2: 1 field(s) differ: expit/generation 1 != 2"]


def test_generation_jobs_take_every_other_turn_while_a_gate_has_jobs(tmp_path):
    cfg = config()
    crown(tmp_path, cfg, promote=False)  # the free champion's anchor record: gate jobs waiting
    svc = LadderService(cfg, bind="tcp://127.0.0.1:*", runs_dir=tmp_path, say=lambda s: None)
    order = []
    while not isinstance(job := svc.handle(EvalJobRequest(request_id=1, worker="w")), NoJob):
        order.append("generation" if svc.generations.owns(job.job_id) else job_kind(svc, job))
        svc.handle(EvalReport(request_id=2, job_id=job.job_id, run_name="t", worker="w",
                              records=records_for(job, outcome)))
    # the anchor record's 2 jobs (2 anchors x 4 games, 2 seeds a job) alternate with the
    # generation's 4 (no previous generation); the generation's rest once the gate has none
    assert order == ["gate", "generation", "gate", "generation", "generation", "generation"]
    svc.close()


def job_kind(svc, job) -> str:
    assert not svc.strength.owns(job.job_id)
    return "gate"


def test_a_plan_is_kept_but_not_played_once_the_measurement_is_turned_off(tmp_path):
    crown(tmp_path, config(), promote=False)
    LadderService(config(), bind="tcp://127.0.0.1:*", runs_dir=tmp_path, say=lambda s: None).close()
    planned = read_plan(plan_path(tmp_path, "t"))
    assert len(planned.entries[0].jobs) == 4
    svc = LadderService(config(enabled=False), bind="tcp://127.0.0.1:*", runs_dir=tmp_path, say=lambda s: None)
    assert svc.generations.request_job(EvalJobRequest(request_id=1, worker="w")) is None
    assert svc.gates.next_job_id >= 4  # its ids stay used
    assert read_plan(plan_path(tmp_path, "t")) == planned
    svc.close()
