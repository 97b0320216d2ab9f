"""A running local stack exports every metric the generated dashboards and alert rules read, and
halts on an authenticated operator request (Grafana's halt contact point) with a checkpoint and
a bundle naming the reason."""

from __future__ import annotations

import json
import urllib.request

import pytest

from royalefleet import grafana as gen
from shared.metric_schema import prometheus_name
from tests.stack import Up, read_rows, run_to_exit, tiny_config
from tests.shared.test_alarms import PENDING_ROW_KEYS
from tests.royalefleet.test_grafana import PENDING_DASHBOARD_KEYS, all_exprs, metric_names

pytestmark = pytest.mark.slow

# Series that exist only under conditions this small run does not meet, each with its reason.
CONDITIONAL = {
    "royalefleet_learner_ppo_value_clip_fraction": "only with ppo.value_clipping",
    "royalefleet_checkpoint_verify_failures_total": "counted only when a stored checkpoint fails to verify",
    "up": "Prometheus's own series",
    "royalefleet_learner_ladder_rating": "only once a pool member's evaluation games are fitted",
    "royalefleet_learner_ladder_rating_se": "only once a pool member's evaluation games are fitted",
    "royalefleet_learner_ladder_transitivity_residual": "only once a pair has ladder.rater.min_pair_games eval games",
    "royalefleet_learner_ladder_gate_score_lower_bound": "only once a gate has decided a candidate",
    "royalefleet_learner_env_win_rate_pool": "only once a pool episode against a snapshot has finished",
    "royalefleet_ladder_champion_info": "only once the pool has a champion (one series, labelled by member)",
}
# Whole families of row keys, by prefix, with the reason this run has none of them.
CONDITIONAL_PREFIXES = {
    "royalefleet_learner_dqn_": "only under learner.algorithm \"dqn\" (this run trains PPO)",
    "royalefleet_learner_strength_": "only once a strength job has been measured (the tiny profile turns it off)",
}


def scrape(port: int) -> set[str]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names


def test_a_running_stack_exports_what_dashboards_and_rules_read_and_halts_on_request(tmp_path):
    cfg_path = tiny_config(tmp_path / "runs", env={"max_steps": 12})
    cfg = json.loads(cfg_path.read_text())
    s = cfg["services"]
    up = Up(cfg_path, env={"ROYALEFLEET_HALT_TOKEN": "t0ken"})
    try:
        up.wait_for(lambda x: x.startswith("it    2 "), 240, "iteration 2")
        exported = set()
        for port in (s["learner_metrics_port"], s["ladder_metrics_port"], s["checkpoint_metrics_port"],
                     s["rollout_metrics_port"], s["evaluator_metrics_port"]):
            exported |= scrape(port)
        pending = {prometheus_name(k)[0] for k in PENDING_ROW_KEYS} | {gen.learner(k) for k in PENDING_DASHBOARD_KEYS}
        referenced = {n for _, e in all_exprs() for n in metric_names(e)}
        missing = sorted(n for n in referenced - exported - pending - set(CONDITIONAL)
                         if not n.startswith(tuple(CONDITIONAL_PREFIXES)))
        assert not missing, f"read by a dashboard or rule but not exported by the running stack: {missing}"

        # An operator halt through the endpoint Grafana's contact point calls.
        req = urllib.request.Request(f"http://127.0.0.1:{s['learner_halt_port']}/halt", method="POST",
                                     data=json.dumps({"reason": "maintenance window"}).encode(),
                                     headers={"Authorization": "Bearer t0ken"})
        assert urllib.request.urlopen(req, timeout=10).status == 202
        assert up.wait_exit(120) == 3
    finally:
        if up.proc.poll() is None:
            up.kill()
    run = tmp_path / "runs" / "default"
    last = read_rows(run)[-1]["run/iteration"]
    index = json.loads((run / "checkpoints" / "index.json").read_text())
    assert index["entries"][-1]["iteration"] == last
    bundle = run / "bundles" / str(last)
    assert (bundle / "operator_halt.txt").read_text().strip() == "maintenance window"
    assert any("halted by the operator" in line for line in up.lines)


def test_a_halt_alarm_stops_the_run_with_a_checkpoint_and_a_bundle(tmp_path):
    # noop_collapse_severe reads policy/cards_per_match (learner seats); a threshold no policy
    # can stay above and a patience of 1 make it fire on the first iteration with an episode.
    # Checkpoints every 5 iterations: the one written at iteration 1 is the halt's.
    cfg_path = tiny_config(tmp_path / "runs", env={"max_steps": 12}, checkpoint={"every_iterations": 5},
                           alarms={"cards_per_match_halt": 1000.0, "patience_overrides": {"noop_collapse_severe": 1}})
    up, code = run_to_exit(cfg_path, timeout=240)
    assert code == 3, up.tail(20)
    run = tmp_path / "runs" / "default"
    rows = read_rows(run)
    assert len(rows) == 1 and rows[0]["policy/cards_per_match"] < 1000
    assert any(line.startswith("alarm [halt] noop_collapse_severe") for line in up.lines)
    fired = [json.loads(x) for x in (run / "alarms.jsonl").read_text().splitlines()]
    assert any(f["alarm"] == "noop_collapse_severe" and f["iteration"] == 1 for f in fired), fired
    index = json.loads((run / "checkpoints" / "index.json").read_text())
    assert index["entries"][-1]["iteration"] == 1  # the state the halting row describes
    halt = json.loads((run / "bundles" / "1" / "halt.json").read_text())
    assert "noop_collapse_severe" in json.dumps(halt)
    assert not up.children()

    # A halt stays a halt: the next start refuses (exit 3 again: Compose's on-failure retries
    # give up) until the operator clears it, and then the run resumes from the halt's checkpoint.
    mark = json.loads((run / "halted.json").read_text())
    assert mark["iteration"] == 1 and "noop_collapse_severe" in mark["reason"]
    again, code = run_to_exit(cfg_path, "--iterations", "1", timeout=240)
    assert code == 3, again.tail(20)
    assert any("was halted at iteration 1" in line and "--clear-halt" in line for line in again.lines), again.lines[-10:]
    assert len(read_rows(run)) == 1
    # Cleared, with the halting alarm off, it resumes at iteration 2.
    doc = json.loads(cfg_path.read_text())
    doc["alarms"]["disabled"] = ["noop_collapse_severe"]
    cfg_path.write_text(json.dumps(doc))
    cleared, code = run_to_exit(cfg_path, "--iterations", "2", "--clear-halt", timeout=240)
    assert code == 0, cleared.tail(20)
    assert any("clearing the halt of run 'default' at iteration 1" in line for line in cleared.lines)
    assert [r["run/iteration"] for r in read_rows(run)] == [1, 2]
    assert not (run / "halted.json").exists()
