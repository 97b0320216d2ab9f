"""The learner's authenticated halt endpoint, for operator-defined halts from Grafana.

``POST /halt`` with ``Authorization: Bearer <token>`` asks the learner to stop at its next safe
point as an alarm halt does: the checkpoint of the state the last row describes, a diagnostic
bundle naming the reason, exit code 3. The body may be Grafana's webhook payload (its alerts'
names and summaries become the reason) or any JSON with a ``reason``. The token comes from the
environment (``ROYALEFLEET_HALT_TOKEN``, at least ``MIN_TOKEN_CHARS`` characters: a shorter one
refuses the learner's start) and is compared in constant time; without a token the
endpoint is not started at all. Anything else gets 400/401/404/413/503 and is counted, never acted
on; the server is bounded (``HaltEndpoint``: a connection cap and an idle timeout).
"""

from __future__ import annotations

import hmac
import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from shared.run_dir import HALTED, RunDir

MAX_BODY = 1 << 16
HALTED_FILE = HALTED
"""``<run>/halted.json``, {iteration, reason}: written by a halt; every later start refuses until
it is cleared (``--clear-halt``)."""


def mark_halted(run: str | os.PathLike, iteration: int, reason: str) -> None:
    """``RunDir(run).mark_halted``: write ``<run>/halted.json`` atomically. Raises OSError."""
    RunDir(run).mark_halted(iteration, reason)


def read_halt_mark(run: str | os.PathLike) -> str | None:
    """``RunDir(run).read_halt_mark``: ``at iteration N: <reason>``, or None when not halted."""
    return RunDir(run).read_halt_mark()


def reason_from(body: bytes) -> str:
    """A one-line reason from a Grafana webhook payload or ``{"reason": ...}``."""
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        return "operator halt (unparseable body)"
    if not isinstance(doc, dict):
        return "operator halt"
    reason = doc.get("reason")
    if isinstance(reason, str):
        return reason[:500]
    alerts = doc.get("alerts")
    if not isinstance(alerts, list):
        alerts = []
    names = []
    for a in alerts[:10]:
        if isinstance(a, dict):
            labels, ann = a.get("labels"), a.get("annotations")
            labels = labels if isinstance(labels, dict) else {}
            ann = ann if isinstance(ann, dict) else {}
            names.append(str(labels.get("alertname") or labels.get("alarm") or "alert")
                         + (f": {ann['summary']}" if isinstance(ann.get("summary"), str) else ""))
    title = doc.get("title") if isinstance(doc.get("title"), str) else ""
    return ("operator halt: " + ("; ".join(names) or title or "webhook"))[:500]


IDLE_TIMEOUT_S = 5.0
"""A connection that sends nothing for this long (headers or body) is closed, not waited on."""
REQUEST_DEADLINE_S = 15.0
"""A whole request must arrive within this: one trickling a byte at a time is cut off too."""
MAX_CONNECTIONS = 8
"""Connections served at once; one more is answered 503 and closed at once (no thread)."""


class _BoundedServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with at most ``MAX_CONNECTIONS`` handler threads: the extra
    connection gets a 503 and is closed on the accepting thread."""

    daemon_threads = True
    request_queue_size = 64
    slots: threading.BoundedSemaphore
    lock: threading.Lock
    deadlines: dict
    on_busy = staticmethod(lambda: None)

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            self.on_busy()
            try:
                request.settimeout(1.0)
                request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):
        with self.lock:
            self.deadlines[request] = time.monotonic() + REQUEST_DEADLINE_S
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.lock:
                self.deadlines.pop(request, None)
            self.slots.release()

    def cut_overdue(self) -> None:
        """Shut down every connection past its request deadline (the idle timeout bounds each
        read; this bounds them all together, so a request trickled byte by byte ends too)."""
        now = time.monotonic()
        with self.lock:
            overdue = [r for r, deadline in self.deadlines.items() if deadline < now]
        for request in overdue:
            try:
                request.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def content_length(value: str | None) -> int | None:
    """The body length a ``Content-Length`` header names: None when it is not one non-negative
    decimal number (``abc``, ``-1``, ``+5``, ``1, 2``); a missing header is a body of 0."""
    if value is None:
        return 0
    value = value.strip()
    if not value or not value.isascii() or not value.isdigit() or len(value) > 12:
        return None
    return int(value)


MIN_TOKEN_CHARS = 16
"""The shortest halt token accepted (``openssl rand -hex 16`` gives 32): a short one is guessed."""


def token_problem(token: str) -> str | None:
    """Why ``token`` may not guard the halt endpoint (shorter than ``MIN_TOKEN_CHARS``, or
    surrounding whitespace that a header would lose), or None."""
    if token != token.strip():
        return "ROYALEFLEET_HALT_TOKEN has leading or trailing whitespace; a bearer header cannot carry it: remove it"
    if len(token) < MIN_TOKEN_CHARS:
        return (f"ROYALEFLEET_HALT_TOKEN is {len(token)} characters, fewer than {MIN_TOKEN_CHARS}: anyone who can "
                "reach the halt port could guess it; make one with `openssl rand -hex 16` (LEARNER_HALT_TOKEN "
                "under Compose), or unset it to run without the endpoint")
    return None


class HaltEndpoint:
    """``POST /halt`` on ``host:port``, served by a bounded server: at most ``MAX_CONNECTIONS``
    at once (more: 503), every read under ``IDLE_TIMEOUT_S`` and the whole request under
    ``REQUEST_DEADLINE_S``, one request per connection. A halt
    is asked for only after the whole request is read and well formed: the path, the token, a
    ``Content-Length`` that is a number up to ``MAX_BODY`` (no ``Transfer-Encoding``) and exactly
    that many body bytes. ``counter`` (labels ``outcome``) counts accepted, unauthorized,
    not_found, too_large, bad_request (400: a length that is not a number, chunked bodies),
    incomplete (the body ended or stalled short of its length) and busy."""

    def __init__(self, host: str, port: int, token: str, on_halt, counter=None):
        problem = token_problem(token)
        if problem:  # issue 38: a minimum length, refused with what to do
            raise ValueError(problem)
        self.token = token.encode()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            timeout = IDLE_TIMEOUT_S  # StreamRequestHandler sets it on the socket: no endless idle


            def log_message(self, *args):  # the learner's output is for the learner's lines
                pass

            def _answer(self, code: int, text: str) -> None:
                data = (text + "\n").encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                    self.send_header("Content-Length", str(len(data)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the peer is gone: nothing to tell it
                self.close_connection = True

            def do_POST(self):
                if self.path.rstrip("/") != "/halt":
                    endpoint._count("not_found")
                    return self._answer(404, "POST /halt")
                given = (self.headers.get("Authorization") or "").encode()
                if not hmac.compare_digest(given, b"Bearer " + endpoint.token):
                    endpoint._count("unauthorized")
                    return self._answer(401, "missing or wrong bearer token")
                if self.headers.get("Transfer-Encoding") is not None:
                    endpoint._count("bad_request")
                    return self._answer(400, "send the body with a Content-Length, not a Transfer-Encoding")
                length = content_length(self.headers.get("Content-Length"))
                if length is None:
                    endpoint._count("bad_request")
                    return self._answer(400, "Content-Length must be one non-negative whole number")
                if length > MAX_BODY:
                    endpoint._count("too_large")
                    return self._answer(413, f"body over {MAX_BODY} bytes")
                body = b""
                try:
                    while len(body) < length:
                        chunk = self.rfile.read(length - len(body))
                        if not chunk:
                            break
                        body += chunk
                except OSError:  # socket.timeout included: a body that stalls is not a request
                    pass
                if len(body) != length:
                    endpoint._count("incomplete")
                    return self._answer(400, f"body of {len(body)} bytes, Content-Length says {length}: not halting")
                reason = reason_from(body)
                on_halt(reason)
                endpoint._count("accepted")
                self._answer(202, "halting at the next safe point: " + reason)

            def do_GET(self):
                endpoint._count("not_found")
                self._answer(404, "POST /halt")

        self.counter = counter
        self.server = _BoundedServer((host, port), Handler)
        self.server.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.server.lock, self.server.deadlines = threading.Lock(), {}
        self.server.on_busy = lambda: self._count("busy")
        self.port = self.server.server_address[1]
        self._closed = threading.Event()
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="halt-endpoint")
        self.thread.start()
        self.watchdog = threading.Thread(target=self._watch, daemon=True, name="halt-endpoint-deadlines")
        self.watchdog.start()

    def _watch(self) -> None:
        while not self._closed.wait(0.25):
            self.server.cut_overdue()

    def _count(self, outcome: str) -> None:
        if self.counter is not None:
            self.counter.labels(outcome).inc()

    def close(self) -> None:
        self._closed.set()
        self.server.shutdown()
        self.server.server_close()
