"""The learner's authenticated halt endpoint, for operator-defined halts from Grafana.

``POST /halt`` with ``Authorization: Bearer <token>`` asks the learner to stop at its next safe
point as an alarm halt does: the checkpoint of the state the last row describes, a diagnostic
bundle naming the reason, exit code 3. The body may be Grafana's webhook payload (its alerts'
names and summaries become the reason) or any JSON with a ``reason``. The token comes from the
environment (``ROYALEFLEET_HALT_TOKEN``) and is compared in constant time; without a token the
endpoint is not started at all. Anything else gets 401/404/413 and is counted, never acted on.
"""

from __future__ import annotations

import hmac
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from shared.durable import replace_file

MAX_BODY = 1 << 16
HALTED_FILE = "halted.json"
"""``<run>/halted.json``, {iteration, reason}: written by a halt; every later start refuses until
it is cleared (``--clear-halt``)."""


def mark_halted(run_dir: str | os.PathLike, iteration: int, reason: str) -> None:
    """Write ``<run_dir>/halted.json`` ({iteration, reason}) atomically. Raises OSError."""
    replace_file(os.path.join(run_dir, HALTED_FILE),
                 json.dumps({"iteration": iteration, "reason": reason}).encode() + b"\n")


def read_halt_mark(run_dir: str | os.PathLike) -> str | None:
    """``at iteration N: <reason>`` when the run is marked halted (a mark that does not decode
    says so instead), None when it is not."""
    path = os.path.join(run_dir, HALTED_FILE)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"({path} is unreadable: {exc})"
    try:
        mark = json.loads(data)
        return f"at iteration {mark['iteration']}: {mark['reason']}"
    except (ValueError, KeyError, TypeError) as exc:
        return f"({path} is unreadable: {exc!r})"


def reason_from(body: bytes) -> str:
    """A one-line reason from a Grafana webhook payload or ``{"reason": ...}``."""
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        return "operator halt (unparseable body)"
    if not isinstance(doc, dict):
        return "operator halt"
    if isinstance(doc.get("reason"), str):
        return doc["reason"][:500]
    alerts = doc.get("alerts") if isinstance(doc.get("alerts"), list) else []
    names = []
    for a in alerts[:10]:
        if isinstance(a, dict):
            labels = a.get("labels") if isinstance(a.get("labels"), dict) else {}
            ann = a.get("annotations") if isinstance(a.get("annotations"), dict) else {}
            names.append(str(labels.get("alertname") or labels.get("alarm") or "alert")
                         + (f": {ann['summary']}" if isinstance(ann.get("summary"), str) else ""))
    title = doc.get("title") if isinstance(doc.get("title"), str) else ""
    return ("operator halt: " + ("; ".join(names) or title or "webhook"))[:500]


class HaltEndpoint:
    def __init__(self, host: str, port: int, token: str, on_halt, counter=None):
        self.token = token.encode()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # the learner's output is for the learner's lines
                pass

            def _answer(self, code: int, text: str) -> None:
                data = (text + "\n").encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                if self.path.rstrip("/") != "/halt":
                    endpoint._count("not_found")
                    return self._answer(404, "POST /halt")
                given = (self.headers.get("Authorization") or "").encode()
                if not hmac.compare_digest(given, b"Bearer " + endpoint.token):
                    endpoint._count("unauthorized")
                    return self._answer(401, "missing or wrong bearer token")
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    endpoint._count("too_large")
                    return self._answer(413, f"body over {MAX_BODY} bytes")
                reason = reason_from(self.rfile.read(length) if length else b"")
                on_halt(reason)
                endpoint._count("accepted")
                self._answer(202, "halting at the next safe point: " + reason)

            def do_GET(self):
                endpoint._count("not_found")
                self._answer(404, "POST /halt")

        self.counter = counter
        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="halt-endpoint")
        self.thread.start()

    def _count(self, outcome: str) -> None:
        if self.counter is not None:
            self.counter.labels(outcome).inc()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
