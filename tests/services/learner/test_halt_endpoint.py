"""The learner's halt endpoint: only a request with the right bearer token asks for a halt."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from services.learner.halt import HaltEndpoint, reason_from, token_problem

TOKEN = "s3cret-halt-token-0123"  # at least MIN_TOKEN_CHARS


@pytest.fixture
def endpoint():
    asked = []
    reg = CollectorRegistry()
    counter = Counter("halt_requests", "x", ["outcome"], registry=reg)
    ep = HaltEndpoint("127.0.0.1", 0, TOKEN, asked.append, counter)
    yield ep, asked, reg
    ep.close()


def post(port, body=b"{}", token=TOKEN, path="/halt"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_right_token_halts_with_the_alerts_as_reason(endpoint):
    ep, asked, reg = endpoint
    grafana = {"title": "[FIRING:1]", "alerts": [{"labels": {"alertname": "manual_stop"},
                                                    "annotations": {"summary": "loss exploded"}}]}
    code, text = post(ep.port, json.dumps(grafana).encode())
    assert code == 202 and asked == ["operator halt: manual_stop: loss exploded"]
    assert reg.get_sample_value("halt_requests_total", {"outcome": "accepted"}) == 1


@pytest.mark.parametrize("token", [None, "wrong", TOKEN + " "])
def test_a_missing_or_wrong_token_is_refused_and_counted(endpoint, token):
    ep, asked, reg = endpoint
    code, _ = post(ep.port, token=token)
    assert code == 401 and asked == []
    assert reg.get_sample_value("halt_requests_total", {"outcome": "unauthorized"}) == 1


def test_other_paths_and_oversized_bodies_are_refused(endpoint):
    ep, asked, _ = endpoint
    assert post(ep.port, path="/metrics")[0] == 404
    assert post(ep.port, body=b"x" * (1 << 17))[0] == 413
    assert asked == []


def test_reason_from_plain_and_broken_bodies():
    assert reason_from(b'{"reason": "maintenance"}') == "maintenance"
    assert reason_from(b"not json") == "operator halt (unparseable body)"
    assert reason_from(b"[1, 2]") == "operator halt"


# ----------------------------------------------------------------------------- hostile input (issue 12)

import socket  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

from services.learner import halt as halt_module  # noqa: E402
from services.learner.halt import MAX_CONNECTIONS, content_length  # noqa: E402


def raw_request(port: int, head: str, body: bytes = b"", *, close_write: bool = True, timeout: float = 10.0) -> bytes:
    """Send ``head`` (CRLF line ends added) and ``body`` on a plain socket; everything answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        if close_write:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(4096):
            out += chunk
        return out


HEAD = "POST /halt HTTP/1.1\nHost: x\nAuthorization: Bearer " + TOKEN + "\n"


@pytest.mark.parametrize("length, status, outcome", [
    ("abc", b"400", "bad_request"),    # before: the connection closed with no response
    ("-1", b"400", "bad_request"),     # before: halted (read(-1) read to EOF)
    ("+5", b"400", "bad_request"),
    ("5, 5", b"400", "bad_request"),
])
def test_a_bad_content_length_is_a_400_and_no_halt(endpoint, length, status, outcome):
    ep, asked, reg = endpoint
    answer = raw_request(ep.port, HEAD + f"Content-Length: {length}\n", b'{"reason": "x"}')
    assert answer.split(b" ")[1] == status and b"Content-Length must be one non-negative whole number" in answer
    assert asked == []
    assert reg.get_sample_value("halt_requests_total", {"outcome": outcome}) == 1


def test_a_short_body_does_not_halt(endpoint):
    # Before: a body shorter than its Content-Length (the peer closed early) still halted.
    ep, asked, reg = endpoint
    answer = raw_request(ep.port, HEAD + "Content-Length: 100\n", b'{"reason": "x"}')
    assert answer.split(b" ")[1] == b"400" and b"body of 15 bytes, Content-Length says 100: not halting" in answer
    assert asked == []
    assert reg.get_sample_value("halt_requests_total", {"outcome": "incomplete"}) == 1


def test_a_chunked_body_is_refused(endpoint):
    ep, asked, _ = endpoint
    answer = raw_request(ep.port, HEAD + "Transfer-Encoding: chunked\n", b"5\r\nhello\r\n0\r\n\r\n")
    assert answer.split(b" ")[1] == b"400" and asked == []


def test_a_complete_request_on_a_raw_socket_halts(endpoint):
    ep, asked, _ = endpoint
    body = b'{"reason": "maintenance"}'
    answer = raw_request(ep.port, HEAD + f"Content-Length: {len(body)}\n", body)
    assert answer.split(b" ")[1] == b"202" and asked == ["maintenance"]


def test_idle_connections_are_capped_and_timed_out(monkeypatch):
    # Before: one thread per connection, with no idle timeout (300 idle connections, 300 threads).
    monkeypatch.setattr(halt_module, "IDLE_TIMEOUT_S", 1.0)
    asked: list[str] = []
    reg = CollectorRegistry()
    ep = HaltEndpoint("127.0.0.1", 0, TOKEN, asked.append, Counter("halt_requests", "x", ["outcome"], registry=reg))
    threads_before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", ep.port), timeout=10) for _ in range(MAX_CONNECTIONS + 20)]
    try:
        peak = 0
        ends: list[bytes] = []
        deadline = time.monotonic() + 10.0
        for s in idle:  # every connection ends by itself: a 503 at once, or EOF after the idle timeout
            s.settimeout(max(0.1, deadline - time.monotonic()))
            peak = max(peak, threading.active_count() - threads_before)
            data = b""
            while chunk := s.recv(100):
                data += chunk
            ends.append(data)
        assert peak <= MAX_CONNECTIONS
        assert all(e == b"" or e.startswith(b"HTTP/1.0 503") for e in ends)
        busy = sum(e.startswith(b"HTTP/1.0 503") for e in ends)
        assert busy >= 1 and reg.get_sample_value("halt_requests_total", {"outcome": "busy"}) == busy
        assert asked == []
    finally:
        for s in idle:
            s.close()
    code, _ = post(ep.port, b'{"reason": "after"}')  # and the endpoint serves again
    assert code == 202 and asked == ["after"]
    ep.close()


def test_content_length_parsing():
    assert [content_length(v) for v in (None, "0", " 12 ", "65536")] == [0, 0, 12, 65536]
    assert [content_length(v) for v in ("", "abc", "-1", "+1", "1.0", "1 2", "١٢", "9" * 13)] == [None] * 8


def test_a_trickled_request_is_cut_off_at_the_request_deadline(monkeypatch):
    # Each byte comes within the idle timeout, so only the whole-request deadline ends it.
    monkeypatch.setattr(halt_module, "IDLE_TIMEOUT_S", 1.0)
    monkeypatch.setattr(halt_module, "REQUEST_DEADLINE_S", 1.5)
    asked: list[str] = []
    ep = HaltEndpoint("127.0.0.1", 0, TOKEN, asked.append)
    try:
        with socket.create_connection(("127.0.0.1", ep.port), timeout=5) as s:
            started = time.monotonic()
            head = (HEAD + "Content-Length: 2\n\n").replace("\n", "\r\n").encode() + b"{}"
            closed = False
            for byte in head:
                try:
                    s.sendall(bytes([byte]))
                except OSError:
                    closed = True
                    break
                time.sleep(0.3)
                if time.monotonic() - started > 4:
                    break
            s.settimeout(3)
            try:
                closed = closed or s.recv(100) == b""
            except TimeoutError:
                pass  # still open: the deadline did not cut it off
            except OSError:
                closed = True  # reset by the server
        assert closed and time.monotonic() - started < 4
        assert asked == []
    finally:
        ep.close()


def test_a_short_or_padded_halt_token_is_refused_with_what_to_do():
    """Issue 38: a minimum length, so the token cannot be guessed by whoever reaches the port."""
    with pytest.raises(ValueError, match=r"ROYALEFLEET_HALT_TOKEN is 6 characters, fewer than 16: anyone who can "
                                         r"reach the halt port could guess it; make one with `openssl rand -hex 16`"):
        HaltEndpoint("127.0.0.1", 0, "s3cret", lambda reason: None)
    assert token_problem("x" * 15) is not None and token_problem("x" * 16) is None
    assert "whitespace" in token_problem(" " + "x" * 20)
