"""One path for alerts: ``royalefleet alerts test`` through Alertmanager's API (a loopback
stand-in here; Debian's Alertmanager end to end when installed) and ``--direct`` to the webhook,
and the relay that posts fired alarms from ``alarms.jsonl`` under ``royalefleet up``."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import threading
import time

import pytest
import yaml

from royalefleet import cli
from royalefleet.alert_relay import REPEAT_S, AlarmRelay, alert_of_record, relay_for
from royalefleet.grafana import NOTIFY_RECEIVER, alertmanager_config
from services.learner.alarms import AlarmMonitor
from shared.config import AlarmConfig
from tests.stack import free_ports


class Receiver(http.server.ThreadingHTTPServer):
    """Keeps every POST's path and JSON body; answers ``status``."""

    def __init__(self, status: int = 200):
        self.posts: list[tuple[str, object]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.posts.append((self.path, json.loads(body)))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.shutdown()


def test_alerts_test_posts_one_alert_to_alertmanagers_api(receiver, capsys):
    assert cli.main(["alerts", "test", "--alertmanager", receiver.url + "/"]) == 0
    ((path, body),) = receiver.posts
    assert path == "/api/v2/alerts"
    (alert,) = body
    assert alert["labels"] == {"alertname": "royalefleet_test_alert", "severity": "warning",
                               "service": "royalefleet-alerts-test"}
    assert alert["startsAt"] < alert["endsAt"]
    assert f"Alertmanager at {receiver.url} took royalefleet_test_alert" in capsys.readouterr().out


def test_alerts_test_says_what_to_do_when_alertmanager_is_not_there(capsys):
    (port,) = free_ports(1)
    assert cli.main(["alerts", "test", "--alertmanager", f"http://127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert f"Alertmanager did not take the test alert: http://127.0.0.1:{port}/api/v2/alerts:" in err
    assert "docker compose --profile monitoring up -d" in err and "--direct" in err


def test_alerts_test_direct_posts_alertmanagers_webhook_json(receiver, monkeypatch, capsys):
    monkeypatch.setenv("ALERT_WEBHOOK_URL", receiver.url + "/hook")
    assert cli.main(["alerts", "test", "--direct"]) == 0
    ((path, body),) = receiver.posts
    assert path == "/hook" and body["receiver"] == NOTIFY_RECEIVER and body["status"] == "firing"
    assert [a["labels"]["alertname"] for a in body["alerts"]] == ["royalefleet_test_alert"]
    monkeypatch.delenv("ALERT_WEBHOOK_URL")
    assert cli.main(["alerts", "test", "--direct"]) == 2
    assert "ALERT_WEBHOOK_URL is not set: set it to your receiver's URL" in capsys.readouterr().err


def test_alerts_test_direct_names_a_refusing_receiver(monkeypatch, capsys):
    refusing = Receiver(status=403)
    try:
        monkeypatch.setenv("ALERT_WEBHOOK_URL", refusing.url + "/hook")
        assert cli.main(["alerts", "test", "--direct"]) == 1
    finally:
        refusing.shutdown()
    assert f"the receiver refused the test alert: {refusing.url}/hook answered HTTP 403" in capsys.readouterr().err


def fired_lines(monitor_rows, cfg=None) -> list[bytes]:
    """alarms.jsonl as the learner writes it for these rows (its monitor, its record)."""
    import tempfile

    with tempfile.TemporaryDirectory() as run:
        monitor = AlarmMonitor(cfg or AlarmConfig(), run_dir=run, say=lambda s: None)
        for row in monitor_rows:
            monitor.observe(row)
        path = os.path.join(run, "alarms.jsonl")
        return open(path, "rb").read().splitlines(keepends=True) if os.path.exists(path) else []


def test_the_relay_posts_an_alarm_when_it_starts_firing_and_again_after_the_repeat(tmp_path):
    """kl_high (warn, patience 3) held 5 iterations: the learner writes lines at counts 3, 4, 5;
    the relay posts the first only, then again once REPEAT_S has passed; a halt is critical."""
    path = tmp_path / "alarms.jsonl"
    path.write_bytes(b'{"alarm": "old", "consecutive": 1, "patience": 1}\n')  # before this start: not posted
    posts = []
    relay = AlarmRelay(str(path), "http://receiver", "myrun", poster=lambda url, body: posts.append((url, body)))
    lines = fired_lines([{"ppo/kl": 0.5}] * 5)
    assert [json.loads(x)["consecutive"] for x in lines] == [3, 4, 5]
    with open(path, "ab") as fh:
        fh.write(lines[0] + lines[1][:10])  # the second line half written
    assert relay.poll(now=1000.0) == 1
    ((url, body),) = posts
    assert url == "http://receiver" and body["receiver"] == NOTIFY_RECEIVER
    (alert,) = body["alerts"]
    assert alert["labels"] == {"alertname": "kl_high", "alarm": "kl_high", "severity": "warning",
                               "service": "learner", "run": "myrun"}
    assert alert["annotations"]["summary"].startswith("kl_high [warning]: held 3 iteration(s) in a row at iteration")
    with open(path, "ab") as fh:
        fh.write(lines[1][10:])
    assert relay.poll(now=1000.0 + REPEAT_S - 1) == 0  # still firing, within the repeat interval
    with open(path, "ab") as fh:
        fh.write(lines[2])
    assert relay.poll(now=1000.0 + REPEAT_S) == 1 and len(posts) == 2
    halt = json.loads(fired_lines([{"health/nan_guard_trips": 1.0}])[0])
    assert alert_of_record(halt, "r")["labels"]["severity"] == "critical"


def test_the_relay_says_a_failed_post_once_and_keeps_going(tmp_path):
    path = tmp_path / "alarms.jsonl"
    said = []

    def refuse(url, body):
        raise OSError(f"{url}: connection refused")

    relay = AlarmRelay(str(path), "http://127.0.0.1:9/x", "r", say=said.append, poster=refuse)
    for _ in range(2):
        with open(path, "ab") as fh:
            fh.write(json.dumps({"alarm": "nonfinite", "severity": "halt", "consecutive": 1, "patience": 1}).encode()
                     + b"\n")
        assert relay.poll() == 1
    assert len(said) == 1 and said[0].startswith("alerts: could not post 1 alert(s) to ALERT_WEBHOOK_URL: "
                                                 "http://127.0.0.1:9/x: connection refused")


def test_up_relays_only_when_the_variable_is_set(tmp_path):
    said = []
    assert relay_for(str(tmp_path / "run"), str(tmp_path / "a.jsonl"), said.append, environ={}) is None
    assert said[-1].startswith("alerts: ALERT_WEBHOOK_URL is not set, so fired alarms go only to this log")
    assert relay_for(str(tmp_path / "run"), "a", said.append, environ={"ALERT_WEBHOOK_URL": "ntfy.sh/x"}) is None
    assert "is not an http:// or https:// URL" in said[-1]
    relay = relay_for(str(tmp_path / "run"), "a", said.append, environ={"ALERT_WEBHOOK_URL": "https://h/x"})
    assert relay is not None and relay.run == "run" and relay.url == "https://h/x"


ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


@pytest.mark.skipif(ALERTMANAGER is None, reason="needs Debian's prometheus-alertmanager (.ci/run installs it)")
def test_alerts_test_reaches_the_webhook_through_a_real_alertmanager(tmp_path, receiver):
    """The generated alertmanager.yml (group_wait cut to 1 s) started by alertmanager/start.sh:
    `royalefleet alerts test` reaches the webhook on loopback."""
    from tests.stack import REPO

    am_dir = tmp_path / "am"
    (am_dir / "data").mkdir(parents=True)
    shutil.copy(REPO / "alertmanager" / "start.sh", am_dir / "start.sh")
    cfg = alertmanager_config()
    cfg["route"] |= {"group_wait": "1s", "group_interval": "1s"}
    (am_dir / "alertmanager.yml").write_text(yaml.safe_dump(cfg))
    (port,) = free_ports(1)
    proc = subprocess.Popen(["sh", str(am_dir / "start.sh"), str(am_dir / "data"),
                             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn"],
                            env=os.environ | {"ALERT_WEBHOOK_URL": receiver.url + "/hook", "ALERTMANAGER": ALERTMANAGER},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while cli.main(["alerts", "test", "--alertmanager", f"http://127.0.0.1:{port}"]) != 0:
            assert proc.poll() is None and time.monotonic() < deadline, "alertmanager did not start"
            time.sleep(0.3)
        deadline = time.monotonic() + 30
        while not receiver.posts and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(10)
    assert receiver.posts, "no POST reached the webhook within 30 s"
    path, body = receiver.posts[0]
    assert path == "/hook" and body["receiver"] == NOTIFY_RECEIVER
    assert [a["labels"]["alertname"] for a in body["alerts"]] == ["royalefleet_test_alert"]
