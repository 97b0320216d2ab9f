"""The skeleton every service's ``main`` runs (``services/<name>/main.py``): settings in, the
service started, SIGTERM and SIGINT turned into a stop, the run, and the exit code.

A service's ``main.py`` declares its ``Settings`` (``shared.service_settings``: every setting is
a flag, a ``ROYALEFLEET_*`` variable or its default, in that order of precedence, so
``royalefleet up`` on loopback and Compose share one code path; a bad value exits 2 naming it),
and a ``start(settings, say)`` that builds the service and says what it serves, then hands both
to ``run_service``::

    def main(argv: list[str] | None = None) -> int:
        return run_service("ladder", parse_settings(argv), start)

Exit codes, the same for every service (the launcher and Compose read them):

- 0: the service ran and stopped (its ``run`` may return another code, which is passed on:
  the learner's 3, halted);
- 2: it refused to start as configured (``ConfigError``, or ``StartRefused`` with code 2) or
  its run ended in a refusal (``SystemExit`` with a message): final, a restart cannot help,
  so the launcher does not restart it;
- 1 (``StartRefused(..., code=1)``): the machine refused, e.g. a port is taken: a restart may
  find it free. A service may pass its own code for a refusal of its run (``refusal_code``:
  the learner's 4, a service it needed did not answer).

What a refusal says goes to stderr, prefixed with the service's name; the service's own lines
(``say``) to stdout, flushed at once so that the launcher and ``docker logs`` show them live.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from shared.config import ConfigError

S = TypeVar("S")
Say = Callable[[str], None]


def say(text: str) -> None:
    """Print one line of the service's log on stdout, flushed."""
    print(text, flush=True)


class StartRefused(Exception):
    """Why a service cannot start: ``run_service`` prints ``message`` on stderr (after the
    service's name) and exits ``code``: 2 when a restart cannot help (a corrupt pool, a socket
    that cannot be bound as configured), 1 when it might (a port taken)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.message = message
        self.code = code


class Service(Protocol):
    """What ``run_service`` runs: ``run`` blocks until the service stops and returns the exit
    code; ``request_stop`` (the signal handler, so it takes and ignores its two arguments) asks
    it to stop at its next safe point; ``close`` releases its sockets and servers, once, after
    ``run``."""

    def request_stop(self, *_: Any) -> None: ...

    def run(self) -> int: ...

    def close(self) -> None: ...


class Running:
    """A started service with what ``start`` opened beside it: ``metrics_server`` (a
    Prometheus /metrics server, shut down after the service is closed) and ``stopped`` (the
    line said once it is closed; None says nothing)."""

    def __init__(self, service: Service, *, metrics_server: Any = None, stopped: str | None = None):
        self.service, self.metrics_server, self.stopped = service, metrics_server, stopped

    def request_stop(self, *_: Any) -> None:
        self.service.request_stop()

    def run(self) -> int:
        return self.service.run()

    def close(self) -> None:
        self.service.close()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
        if self.stopped is not None:
            say(self.stopped)


def serve_metrics(service: Service, port: int, host: str, registry: Any = None) -> tuple[Any, str]:
    """Start the Prometheus /metrics server of the started ``service`` on ``host:port``
    (``port`` 0: none) for ``registry`` (None: prometheus_client's global one). Returns (the
    server or None, its URL or "off" for the start line). When the port cannot be served,
    closes ``service`` and raises ``StartRefused`` code 1 naming the port and ``--metrics-port 0``."""
    if not port:
        return None, "off"
    from prometheus_client import REGISTRY, start_http_server

    from shared.transport import register_plaintext_gauge

    try:  # royalefleet_insecure_plaintext (issue 38); once per registry
        register_plaintext_gauge(REGISTRY if registry is None else registry)
    except ValueError:
        pass
    try:
        server, _ = start_http_server(port, addr=host, registry=REGISTRY if registry is None else registry)
    except OSError as exc:
        service.close()
        raise StartRefused(f"cannot serve metrics on {host}:{port}: {exc} (set --metrics-port 0 to run without)",
                           code=1) from None
    return server, f"http://{host}:{port}/metrics"


def run_service(name: str, settings: S, start: Callable[[S, Say], Service], *,
                refusal_code: Callable[[SystemExit], int] = lambda exc: 2) -> int:
    """Start the service ``start(settings, say)`` builds, stop it on SIGTERM or SIGINT, run it
    and close it; the exit code (above). ``name`` prefixes what a refusal says. A
    ``SystemExit`` with a message out of ``run`` is said and exits ``refusal_code(exc)`` (2
    unless the service says otherwise); one with a number is passed on as it is."""
    try:
        service = start(settings, say)
    except ConfigError as exc:
        return _refused(name, str(exc), 2)
    except StartRefused as exc:
        return _refused(name, exc.message, exc.code)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, service.request_stop)
    try:
        return service.run()
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise
        say(exc.code)
        return refusal_code(exc)
    finally:
        service.close()


def _refused(name: str, message: str, code: int) -> int:
    print(f"{name}: {message}", file=sys.stderr, flush=True)
    return code
