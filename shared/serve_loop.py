"""The request loop of the ROUTER services (ladder, checkpoint): poll the socket, answer one
request, do the service's periodic work, until told to stop. Each service says only how it
answers one request (``serve_one``) and what it does between requests (``tick``)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import zmq


class RequestLoop:
    """Mixin for a service with a bound ROUTER socket ``self.sock``. ``run`` and
    ``request_stop`` make it a ``shared.service_main.Service`` (its ``close`` is the service's)."""

    sock: zmq.Socket
    POLL_MS = 200
    """How long one poll waits (ms): the longest a stop or a ``tick`` waits for a quiet socket."""
    _stop_requested = False

    def request_stop(self, *_) -> None:
        """SIGTERM/SIGINT: ``run`` returns after the request it is answering (within ``POLL_MS``)."""
        self._stop_requested = True

    def run(self) -> int:
        """Serve until ``request_stop``; 0."""
        self.serve(lambda: self._stop_requested)
        return 0

    def serve(self, stop: threading.Event | Callable[[], bool], poll_ms: int | None = None) -> None:
        """Answer requests until ``stop`` (an Event, or a callable that returns True) says so,
        checked at least every ``poll_ms`` (default ``POLL_MS``); ``tick()`` after every poll."""
        should_stop = stop.is_set if isinstance(stop, threading.Event) else stop
        poll_ms = self.POLL_MS if poll_ms is None else poll_ms
        while not should_stop():
            if self.sock.poll(poll_ms, zmq.POLLIN):
                self.serve_one()
            self.tick()

    def serve_one(self) -> None:
        """Receive one request (the loop has polled) and answer it; raises only for a broken socket."""
        raise NotImplementedError

    def tick(self) -> None:
        """Periodic work between requests (default none)."""
