"""A running local stack exports every metric the generated dashboards and alert rules read, fires
a generated rule through Prometheus and Alertmanager to a webhook on loopback, and halts on an
authenticated operator request (Grafana's halt contact point) with a checkpoint and a bundle
naming the reason."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request

import pytest
import yaml

from royalefleet import grafana as gen
from shared.metric_schema import prometheus_name
from tests.stack import REPO, Up, free_ports, read_rows, run_to_exit, tiny_config
from tests.shared.test_alarms import PENDING_ROW_KEYS
from tests.royalefleet.test_grafana import PENDING_DASHBOARD_KEYS, all_exprs, metric_names

pytestmark = pytest.mark.slow

# Series that exist only under conditions this small run does not meet, each with its reason.
CONDITIONAL = {
    "royalefleet_learner_ppo_value_clip_fraction": "only with ppo.value_clipping",
    "royalefleet_checkpoint_verify_failures_total": "counted only when a stored checkpoint fails to verify",
    "up": "Prometheus's own series",
    "ALERTS": "Prometheus's own series (the rules that fire or are pending)",
    "royalefleet_learner_ladder_rating": "only once a pool member's evaluation games are fitted",
    "royalefleet_learner_ladder_rating_se": "only once a pool member's evaluation games are fitted",
    "royalefleet_learner_ladder_transitivity_residual": "only once a pair has ladder.rater.min_pair_games eval games",
    "royalefleet_learner_ladder_gate_score_lower_bound": "only once a gate has decided a candidate",
    "royalefleet_learner_env_win_rate_pool": "only once a pool episode against a snapshot has finished",
    "royalefleet_ladder_champion_info": "only once the pool has a champion (one series, labelled by member)",
    "royalefleet_learner_ppo_actor_lr_multiplier": "only with the warm_start extension's actor hold",
    "royalefleet_learner_throughput_search_time_frac": "only when the rollouts search (learner.algorithm \"alphazero\")",
    "royalefleet_learner_throughput_searched_decisions_per_second": "only when the rollouts search (alphazero)",
    "royalefleet_learner_throughput_engine_steps_per_second": "only when the rollouts search (alphazero)",
}
# Whole families of row keys, by prefix, with the reason this run has none of them.
CONDITIONAL_PREFIXES = {
    "royalefleet_learner_dqn_": "only under learner.algorithm \"dqn\" (this run trains PPO)",
    "royalefleet_learner_strength_": "only once a strength job has been measured (the tiny profile turns it off)",
    "royalefleet_learner_imitation_": "only with the imitation extension's KL anchor (this run has none)",
    "royalefleet_learner_az_": "only under learner.algorithm \"alphazero\" (this run trains PPO)",
    "royalefleet_learner_search_": "only under learner.algorithm \"alphazero\": the search's targets",
    "royalefleet_learner_expit_strength_": "only once a generation's strength is measured (evaluation.strength."
                                           "generations: an algorithm with generations; this run trains PPO)",
    "royalefleet_ladder_generation_strength_": "only once a generation's strength is measured (as above)",
}


def scrape(port: int) -> set[str]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """One tiny stack at iteration 2 for the tests below (the last one halts it): (Up, its config
    document, its runs folder)."""
    runs = tmp_path_factory.mktemp("live") / "runs"
    # 12-step matches play few cards: noop_collapse_severe (a halt, patience 5) would stop the run
    # at iteration 5 on its own, while the tests below still need it, so it is off here.
    cfg_path = tiny_config(runs, env={"max_steps": 12}, alarms={"disabled": ["noop_collapse_severe"],
                                                                "patience_overrides": {"noop_collapse": 1}})
    up = Up(cfg_path, env={"ROYALEFLEET_HALT_TOKEN": "t0ken-0123456789ab"})
    try:
        up.wait_for(lambda x: x.startswith("it    2 "), 240, "iteration 2")
        yield up, json.loads(cfg_path.read_text()), runs
    finally:
        if up.proc.poll() is None:
            up.kill()


PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
FIRED = "noop_collapse"
"""The generated rule the alert test fires: the learner's own verdict on ``policy/cards_per_match
< 8``, which a tiny run of 12-step matches meets from its first row (checked on the row itself
below); the stack's config gives it a patience of 1, which the rule reads from the learner."""


class Receiver(http.server.ThreadingHTTPServer):
    """A webhook on loopback that keeps every POST's JSON body, with the time it came."""

    def __init__(self):
        self.posts: list[tuple[float, dict]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.posts.append((time.monotonic(), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def _wait_ready(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{proc.args[0]} exited {proc.returncode}: {proc.stdout.read()[-2000:]}"
        try:
            if urllib.request.urlopen(url, timeout=2).status == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} not ready after {timeout} s")


@pytest.mark.skipif(PROMETHEUS is None or ALERTMANAGER is None,
                    reason="needs Debian's prometheus and prometheus-alertmanager (.ci/run installs them)")
def test_a_generated_rule_fires_through_prometheus_and_alertmanager_to_the_webhook(stack, tmp_path):
    """prometheus/rules/alarms.yml as generated (no ``for``: the rule reads the learner's count
    and its patience, 1 under this run's config) on the live learner's metrics, Prometheus evaluating every second and sending to Alertmanager,
    Alertmanager started by alertmanager/start.sh on the generated alertmanager.yml (group_wait
    and group_interval cut to 1 s): the receiver on loopback gets the alert with its labels."""
    up, cfg, runs = stack
    assert up.proc.poll() is None, up.tail(20)
    row = read_rows(runs / "default")[-1]
    assert row["policy/cards_per_match"] < 8, row["policy/cards_per_match"]  # the condition holds
    t0 = time.monotonic()
    rules = yaml.safe_load((REPO / "prometheus" / "rules" / "alarms.yml").read_text())
    (rule,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == FIRED]
    assert rule["expr"] == gen.alarm_expr(gen.ALARMS_BY_NAME[FIRED]) and "for" not in rule
    (tmp_path / "alarms.yml").write_text(yaml.safe_dump(rules))
    am_dir = tmp_path / "alertmanager"
    am_dir.mkdir()
    shutil.copy(REPO / "alertmanager" / "start.sh", am_dir / "start.sh")
    am_cfg = yaml.safe_load((REPO / "alertmanager" / "alertmanager.yml").read_text())
    assert am_cfg["receivers"][0]["webhook_configs"][0]["url"] == "${ALERT_WEBHOOK_URL}"
    am_cfg["route"] |= {"group_wait": "1s", "group_interval": "1s"}
    (am_dir / "alertmanager.yml").write_text(yaml.safe_dump(am_cfg))
    (am_dir / "data").mkdir()
    prom_port, am_port = free_ports(2)
    prom_cfg = gen.prometheus_config()
    prom_cfg["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    prom_cfg["alerting"]["alertmanagers"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{am_port}"]}]
    prom_cfg["rule_files"] = [str(tmp_path / "alarms.yml")]
    prom_cfg["scrape_configs"] = [{"job_name": "learner", "static_configs": [
        {"targets": [f"127.0.0.1:{cfg['services']['learner_metrics_port']}"]}]}]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(prom_cfg))

    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
    procs = []
    try:
        procs.append(subprocess.Popen(
            ["sh", str(am_dir / "start.sh"), str(am_dir / "data"), f"--web.listen-address=127.0.0.1:{am_port}",
             "--cluster.listen-address=", "--log.level=warn"],
            env=os.environ | {"ALERT_WEBHOOK_URL": url, "ALERTMANAGER": ALERTMANAGER},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        procs.append(subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        _wait_ready(f"http://127.0.0.1:{am_port}/-/ready", procs[0], 30)
        _wait_ready(f"http://127.0.0.1:{prom_port}/-/ready", procs[1], 30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
                a["labels"]["alertname"] == FIRED for _, p in receiver.posts for a in p["alerts"]):
            time.sleep(0.2)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        receiver.shutdown()
    fired = [(t, p, a) for t, p in receiver.posts for a in p["alerts"] if a["labels"]["alertname"] == FIRED]
    up._read()
    assert fired, (f"no POST for {FIRED} within 60 s; posts: {[p for _, p in receiver.posts]}; "
                   f"stack {'running' if up.proc.poll() is None else f'exited {up.proc.returncode}'}:\n{up.tail(15)}")
    t, post, alert = fired[0]
    assert post["receiver"] == gen.NOTIFY_RECEIVER and post["status"] == "firing" and alert["status"] == "firing"
    assert alert["labels"] | {"instance": "", "job": ""} == {
        "alertname": FIRED, "alarm": FIRED, "severity": "warning", "service": "learner", "job": "", "instance": ""}
    assert alert["annotations"]["summary"].startswith(f"{FIRED} [warning]: policy/cards_per_match < 8 (default "
                                                      "thresholds) has held ")
    print(f"alert test: rule fired and posted {t - t0:.1f} s after the test began "
          f"({len(receiver.posts)} POST(s), alerts {sorted({a['labels']['alertname'] for _, p in receiver.posts for a in p['alerts']})})")


def test_a_running_stack_exports_what_dashboards_and_rules_read_and_halts_on_request(stack):
    up, cfg, runs = stack
    s = cfg["services"]
    try:
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
                                     headers={"Authorization": "Bearer t0ken-0123456789ab"})
        assert urllib.request.urlopen(req, timeout=10).status == 202
        assert up.wait_exit(120) == 3
    finally:
        if up.proc.poll() is None:
            up.kill()
    run = runs / "default"
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
    # ALERT_WEBHOOK_URL set: `royalefleet up` posts the halt to the webhook, critical, before it stops.
    cfg_path = tiny_config(tmp_path / "runs", env={"max_steps": 12}, checkpoint={"every_iterations": 5},
                           alarms={"cards_per_match_halt": 1000.0, "patience_overrides": {"noop_collapse_severe": 1}})
    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        up, code = run_to_exit(cfg_path, timeout=240, env={
            "ALERT_WEBHOOK_URL": f"http://127.0.0.1:{receiver.server_address[1]}/hook"})
    finally:
        receiver.shutdown()
    assert code == 3, up.tail(20)
    posted = {a["labels"]["alarm"]: a for _, p in receiver.posts for a in p["alerts"]}
    assert posted["noop_collapse_severe"]["labels"]["severity"] == "critical", receiver.posts
    assert all(p["receiver"] == gen.NOTIFY_RECEIVER for _, p in receiver.posts)
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
