"""services.ladder over loopback TCP: plans, episode reports, refusals, start-up, shutdown."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import msgspec
import pytest
import zmq

from services.ladder.results import ResultLog
from services.ladder.service import LadderService
from shared.config import profile
from shared.matchmaking import assign, battle_roles
from shared.messages import (
    Ack,
    Decoder,
    EpisodeRecord,
    Error,
    FromLadder,
    PlanReply,
    PlanRequest,
    ReportEpisodes,
    encode,
)
from shared.transport import Client

REPO = Path(__file__).resolve().parents[3]


def record(battle: int, ordinal: int, seat: str = "blue") -> EpisodeRecord:
    return EpisodeRecord(
        battle=battle, ordinal=ordinal, seat=seat, role="mirror", player="learner", opponent="learner",
        outcome=-1 if seat == "red" else 1, truncated=False, episode_steps=88, episode_ticks=880, own_crowns=1,
        enemy_crowns=0, own_tower_hp_frac=0.9, enemy_tower_hp_frac=0.4, elixir_leak_steps=0,
        elixir_count_exact=True, cards_played=9, undiscounted_return=0.5, iteration=1,
    )


class Running:
    """A LadderService answering on a free loopback port from a thread."""

    def __init__(self, runs_dir: Path, config=None):
        self.config = config or profile("cpu")
        self.said: list[str] = []
        self.service = LadderService(self.config, bind="tcp://127.0.0.1:*", runs_dir=runs_dir, say=self.said.append)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.service.serve, args=(self.stop,), kwargs={"poll_ms": 50})
        self.thread.start()
        self.client = Client(self.service.address, Decoder(FromLadder), name="ladder", timeout_s=5.0)

    def request(self, body):
        reply, _ = self.client.request(body)
        return reply

    def metric(self, name: str, **labels) -> float | None:
        return self.service.metrics.registry.get_sample_value("royalefleet_ladder_" + name, labels or None)

    def close(self):
        self.client.close()
        self.stop.set()
        self.thread.join(5)
        self.service.close()


@pytest.fixture
def ladder(tmp_path):
    running = Running(tmp_path)
    yield running
    running.close()


def test_plan_request_gets_counts_and_assignments(ladder):
    cfg = ladder.config
    battles, nexts, lookahead = [2 * i + 1 for i in range(96)], [i % 5 for i in range(96)], 4
    req = PlanRequest(request_id=ladder.client.next_id(), iteration=0, n_battles=96, battles=battles,
                      next_ordinals=nexts, lookahead=lookahead)
    reply = ladder.request(req)
    assert isinstance(reply, PlanReply) and reply.request_id == req.request_id
    assert reply.role_counts == (48, 34, 14)
    assert len(reply.assignments) == lookahead * len(battles)
    roles = battle_roles(cfg.master_seed, 96, cfg.ladder.mix)
    expected = [assign(cfg.master_seed, b, k, roles[i], cfg.ladder.scripted_opponents)
                for i, (b, first) in enumerate(zip(battles, nexts)) for k in range(first, first + lookahead)]
    assert reply.assignments == expected
    assert ladder.metric("plans_served_total") == 1
    assert ladder.metric("role_battles", role="mirror") == 48
    assert ladder.metric("role_battles", role="pool") == 34
    assert ladder.metric("role_battles", role="scripted") == 14
    assert ladder.metric("pool_fallback_battles") == 34  # no pool yet


def test_report_episodes_is_acked_and_logged(ladder, tmp_path):
    episodes = [record(0, 0), record(0, 0, "red"), record(3, 1)]
    req = ReportEpisodes(request_id=ladder.client.next_id(), run_name="default", episodes=episodes)
    reply = ladder.request(req)
    assert reply == Ack(request_id=req.request_id, count=3)
    path = tmp_path / "default" / "ladder" / "results.jsonl"
    lines = path.read_bytes().splitlines()
    assert len(lines) == 3
    assert ResultLog(path).read().records == episodes
    assert ladder.metric("episodes_recorded_total") == 3


@pytest.mark.parametrize(
    "body, named",
    [
        (dict(kind=PlanRequest, n_battles=16, battles=[0], next_ordinals=[0], lookahead=0), "lookahead 0"),
        (dict(kind=PlanRequest, n_battles=16, battles=[0], next_ordinals=[0], lookahead=10_001), "lookahead 10001"),
        (dict(kind=PlanRequest, n_battles=16, battles=[0, 1], next_ordinals=[0], lookahead=1), "2 battles but 1"),
        (dict(kind=PlanRequest, n_battles=2, battles=[3, 5], next_ordinals=[0, -4], lookahead=1), "ordinal -4"),
        (dict(kind=PlanRequest, n_battles=16, battles=[16], next_ordinals=[0], lookahead=1), "1 battles listed for an iteration of 16"),
        (dict(kind=PlanRequest, n_battles=2, battles=[-1, 5], next_ordinals=[0, 0], lookahead=1), "battle -1"),
        (dict(kind=PlanRequest, n_battles=16, battles=[2, 2], next_ordinals=[0, 0], lookahead=1), "listed twice"),
        (dict(kind=PlanRequest, n_battles=0, battles=[], next_ordinals=[], lookahead=1), "n_battles 0"),
        (dict(kind=ReportEpisodes, run_name="../escape", episodes=[]), "'../escape'"),
        (dict(kind=ReportEpisodes, run_name="a/b", episodes=[]), "'a/b'"),
        (dict(kind=ReportEpisodes, run_name="default",
              episodes=[record(0, 0), msgspec.structs.replace(record(1, 0), outcome=2)]),
         "records[1] (battle 1, ordinal 0, seat blue): outcome 2 is outside -1..1"),
        (dict(kind=ReportEpisodes, run_name="other-run", episodes=[record(0, 0)]),
         "run_name 'other-run': this ladder serves run 'default'"),
    ],
)
def test_bad_requests_are_refused_by_name(ladder, body, named):
    body = dict(body)
    kind = body.pop("kind")
    if kind is PlanRequest:
        body["iteration"] = 0
    req = kind(request_id=ladder.client.next_id(), **body)
    reply = ladder.request(req)
    assert isinstance(reply, Error) and reply.request_id == req.request_id
    assert named in reply.reason
    assert ladder.metric("messages_refused_total", reason="bad_request") == 1


def test_malformed_message_is_counted_and_service_keeps_answering(ladder):
    ctx = zmq.Context.instance()
    raw = ctx.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(ladder.service.address)
    try:
        raw.send_multipart([b"\xc1 this is not msgpack"])
        assert raw.poll(5000)
        reply, _ = Decoder(FromLadder).decode(raw.recv_multipart())
        assert isinstance(reply, Error) and reply.request_id == -1
        assert "undecodable" in reply.reason
        # A well-formed envelope of a kind the ladder does not take (Ack is a reply).
        raw.send_multipart(encode(Ack(request_id=7)))
        assert raw.poll(5000)
        reply, _ = Decoder(FromLadder).decode(raw.recv_multipart())
        assert isinstance(reply, Error) and reply.request_id == -1 and "unknown_kind" in reply.reason
    finally:
        raw.close(0)
    assert ladder.metric("messages_refused_total", reason="undecodable") == 1
    assert ladder.metric("messages_refused_total", reason="unknown_kind") == 1
    req = PlanRequest(request_id=ladder.client.next_id(), iteration=0, n_battles=1, battles=[0],
                      next_ordinals=[0], lookahead=2)
    reply = ladder.request(req)
    assert isinstance(reply, PlanReply) and reply.role_counts == (1, 0, 0)


def test_start_up_reads_the_existing_log(tmp_path):
    cfg = profile("cpu")
    log = ResultLog.for_run(tmp_path, cfg.run_name)
    log.append([record(0, 0), record(1, 0)])
    with open(log.path, "ab") as fh:
        fh.write(b'{"run_name": "default", "wall": "2026')  # torn by a crash
    running = Running(tmp_path, cfg)
    try:
        assert any("holds 2 records" in s for s in running.said)
        assert any("set aside line 3" in s for s in running.said)
        assert running.metric("result_log_torn_lines") == 1
        reply = running.request(ReportEpisodes(request_id=running.client.next_id(), run_name=cfg.run_name,
                                               episodes=[record(2, 0)]))
        assert reply.count == 1
    finally:
        running.close()
    assert log.read().records == [record(0, 0), record(1, 0), record(2, 0)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_module_entry_point_serves_metrics_and_stops_on_sigterm(tmp_path):
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"run_name": "entry", "master_seed": 7, "ladder": {"mix": [1.0, 0.0, 0.0]}}))
    port, metrics_port = _free_port(), _free_port()
    env = {**os.environ, "ROYALEFLEET_CONFIG": str(config), "ROYALEFLEET_RUNS_DIR": str(tmp_path / "runs"),
           "ROYALEFLEET_LADDER_BIND": "tcp://127.0.0.1:1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.ladder", "--bind", f"tcp://127.0.0.1:{port}",  # the flag wins over env
         "--metrics-port", str(metrics_port)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        client = Client(f"tcp://127.0.0.1:{port}", Decoder(FromLadder), name="ladder", timeout_s=10.0)
        try:
            reply, _ = client.request(PlanRequest(request_id=client.next_id(), iteration=0, n_battles=4,
                                                  battles=[0, 1, 2, 3], next_ordinals=[0] * 4, lookahead=1))
        finally:
            client.close()
        assert reply.role_counts == (4, 0, 0)  # the config file's mix
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
        assert "royalefleet_ladder_plans_served_total 1.0" in text
        assert 'royalefleet_ladder_role_battles{role="mirror"} 4.0' in text
        proc.send_signal(signal.SIGTERM)
        start = time.monotonic()
        out, _ = proc.communicate(timeout=5)
        assert time.monotonic() - start < 1.5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    assert "does not exist yet" in out and "master seed 7" in out and "ladder: stopped" in out


# ----------------------------------------------------------------------------- hostile input (issue 12)


@pytest.mark.parametrize(
    "field, value, named",
    [
        ("undiscounted_return", float("nan"), "undiscounted_return nan is not finite"),
        ("undiscounted_return", float("inf"), "undiscounted_return inf is not finite"),
        ("own_tower_hp_frac", float("nan"), "own_tower_hp_frac nan is not a fraction in [0, 1]"),
        ("enemy_tower_hp_frac", 1.5, "enemy_tower_hp_frac 1.5 is not a fraction in [0, 1]"),
        ("own_crowns", 4, "own_crowns 4 is outside 0..3"),
        ("episode_steps", -1, "episode_steps -1 is outside 0..2147483647"),
        ("reward_terms", {"win": float("-inf")}, "reward_terms['win'] = -inf"),
    ],
)
def test_a_record_that_json_cannot_carry_is_refused_before_the_ack(ladder, tmp_path, field, value, named):
    # Before: NaN/inf were acked and written as null, and the next read set the line aside.
    good = record(0, 0)
    bad = msgspec.structs.replace(record(1, 0), **{field: value})
    req = ReportEpisodes(request_id=ladder.client.next_id(), run_name="default", episodes=[good, bad])
    reply = ladder.request(req)
    assert isinstance(reply, Error) and reply.request_id == req.request_id
    assert f"records[1] (battle 1, ordinal 0, seat blue): {named}" in reply.reason
    assert "nothing of this batch was written" in reply.reason
    assert not (tmp_path / "default" / "ladder" / "results.jsonl").exists()
    assert ladder.metric("messages_refused_total", reason="bad_request") == 1
    assert any(named in line for line in ladder.said), ladder.said


def test_fuzzed_reports_create_no_run_folder(ladder, tmp_path):
    before = sorted(p.name for p in tmp_path.iterdir())
    for k in range(20):
        req = ReportEpisodes(request_id=ladder.client.next_id(), run_name=f"fuzz-{k}", episodes=[record(0, 0)])
        assert isinstance(ladder.request(req), Error)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert ladder.metric("messages_refused_total", reason="bad_request") == 20


def test_deep_nesting_is_a_counted_refusal_and_the_ladder_answers_on(ladder):
    # Before: a 5 KB envelope whose body is 5,000 nested one-element arrays raised RecursionError
    # out of the decoder and ended the serve loop.
    ctx = zmq.Context.instance()
    raw = ctx.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(ladder.service.address)
    nested = msgspec.msgpack.encode({"protocol": 1, "body": msgspec.Raw(b"\x91" * 5000 + b"\x01"), "arrays": []})
    try:
        raw.send_multipart([nested])
        assert raw.poll(5000)
        reply, _ = Decoder(FromLadder).decode(raw.recv_multipart())
        assert isinstance(reply, Error) and reply.request_id == -1 and reply.reason.startswith("nesting: ")
    finally:
        raw.close(0)
    assert ladder.metric("messages_refused_total", reason="nesting") == 1
    assert ladder.thread.is_alive()
    req = PlanRequest(request_id=ladder.client.next_id(), iteration=0, n_battles=1, battles=[0],
                      next_ordinals=[0], lookahead=2)
    assert isinstance(ladder.request(req), PlanReply)


def test_refusals_are_logged_escaped_and_rate_limited_per_reason(ladder):
    # Before: the ladder logged no refusal at all. msgspec's text quotes the unknown tag raw, so
    # the escape sequence and the newline would reach the terminal as they are.
    body = msgspec.msgpack.encode({"type": "x\x1b[2J\nFAKE LINE", "request_id": 1})
    frame = msgspec.msgpack.encode({"protocol": 1, "body": msgspec.Raw(body), "arrays": []})
    ctx = zmq.Context.instance()
    raw = ctx.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(ladder.service.address)
    try:
        for _ in range(50):
            raw.send_multipart([frame])
            assert raw.poll(5000)
            raw.recv_multipart()
    finally:
        raw.close(0)
    for _ in range(3):
        req = ReportEpisodes(request_id=ladder.client.next_id(), run_name="other", episodes=[record(0, 0)])
        assert isinstance(ladder.request(req), Error)
    refusals = [line for line in ladder.said if "refused" in line]
    # 50 of one reason within the interval: one line (the counter has all 50); the other
    # reason gets its own first line.
    assert len(refusals) == 2, refusals
    assert ladder.metric("messages_refused_total", reason="unknown_kind") == 50
    assert ladder.metric("messages_refused_total", reason="bad_request") == 3
    assert refusals[0] == ("ladder: refused a message (unknown_kind): refused message: Invalid value "
                           "'x\\x1b[2J\\nFAKE LINE' - at `$.type`")
    assert "refused ReportEpisodes" in refusals[1]
