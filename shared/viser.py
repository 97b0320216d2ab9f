"""RoyaleViser's two UDP channels, as royalefleet speaks them.

A viewer (``python -m royaleviser --stream HOST:PORT``) says hello (``royalegym.viser.HELLO``,
one datagram a second while it is open) to two addresses:

* ``HOST:PORT`` (default 127.0.0.1:9870), the **frames**: RoyaleGym's own
  ``royalegym.viser.ViserPublisher`` bound there and handed to an env sends one msgpack frame per
  engine tick while a viewer is attached, nothing otherwise (``royalefleet play --viser``, the
  evaluator's ``--viser``).
* ``HOST:PORT + 1`` (``STATUS_PORT_OFFSET``), the **status**: one msgpack datagram
  ``{"learning": {field: value, ...}}`` holding the whole training status (the viewer's learning
  panel: ``iteration``, ``policy_loss``, ``kl``, ``clip_frac``, ``entropy``, ... and ``extra``, a
  map of any further name to a number or a string; a field left out is drawn as a dash).
  ``StatusChannel`` below is royalefleet's sender (the learner's ``--viser``).

Both are loopback by default, UDP, and never wait for the viewer: a send that the kernel
refuses is dropped.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from typing import Any

import msgspec

# No royalegym (numpy) import here: the services' settings import this module before the
# evaluator lowers its CPU priority, and threads started by a library at load keep the old one.
STREAM_HOST = "127.0.0.1"
STREAM_PORT = 9870
"""RoyaleViser's default stream address, RoyaleGym's ``royalegym.viser.HOST`` / ``PORT``
(tests/services/learner/test_viser_status.py checks that they agree)."""
STREAM_DEFAULT = f"{STREAM_HOST}:{STREAM_PORT}"
STATUS_PORT_OFFSET = 1
"""The status channel's port is the stream's plus this (where the viewer says hello for it)."""
STATUS_TAG = "learning"
"""The one key of a status datagram (``{"learning": {...}}``)."""
ATTACHED_S = 3.0
"""A viewer whose last hello is older than this is gone: nothing is sent to it."""
COPIES = 3
"""Each status is sent this many times to one viewer, a hello apart (UDP acknowledges nothing)."""
MAX_DATAGRAM = 65507
"""UDP over IPv4: a status encoded bigger is not sent (``dropped``)."""


def parse_address(text: str) -> tuple[str, int]:
    """``"HOST:PORT"`` -> (host, port). Raises ValueError ``expected HOST:PORT, for example
    127.0.0.1:9870`` for anything else (no host, a port that is not a number in 1..65535)."""
    host, _, port = str(text).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, for example {STREAM_DEFAULT}")
    return host, int(port)


def address_option(text: str) -> str:
    """A service setting's value: ``text`` when it is HOST:PORT, "" (off) when empty. Raises
    ValueError naming the form (``shared.service_settings`` exits 2 naming the flag)."""
    if not text:
        return ""
    parse_address(text)
    return text


def status_address(stream: str) -> tuple[str, int]:
    """The status channel's (host, port) for a viewer streaming from ``stream`` (HOST:PORT): the
    same host, PORT + 1. Raises ValueError for a bad address or PORT 65535."""
    host, port = parse_address(stream)
    if port + STATUS_PORT_OFFSET > 65535:
        raise ValueError(f"{stream}: the status channel needs port {port + STATUS_PORT_OFFSET}, past 65535")
    return host, port + STATUS_PORT_OFFSET


def encode_status(fields: dict[str, Any]) -> bytes:
    """One status datagram: ``{"learning": fields}`` as msgpack. ``fields`` holds numbers and
    strings (and ``extra``, a dict of them); a value msgpack cannot carry raises TypeError."""
    return msgspec.msgpack.encode({STATUS_TAG: fields})


class StatusChannel:
    """The status channel's sender: binds ``host:port`` (UDP), keeps the last status given to
    ``publish`` and sends it to the viewer that last said hello, at ``publish`` and then on each
    of that viewer's hellos until it has had ``COPIES`` copies; a viewer that says hello later
    (or again after ``ATTACHED_S`` away) is sent the standing status at once.

    A daemon thread waits for the hellos (``select``, at most ``poll_s`` at a time), so a learner
    busy in its update for minutes still answers a new viewer. ``publish`` never blocks: the
    socket is non-blocking and a send the kernel refuses is dropped. Counters: ``sent``
    (datagrams), ``dropped`` (statuses too big or not encodable). Raises OSError at construction
    when the address cannot be bound (the text names it and what to do)."""

    def __init__(self, host: str, port: int, *, poll_s: float = 0.5):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._sock.bind((host, port))
        except OSError as exc:
            self._sock.close()
            raise OSError(f"cannot bind the RoyaleViser status channel {host}:{port} ({exc.strerror or exc}); "
                          "another process holds it (one learner per port), or the host is not this machine's: "
                          "give another address") from None
        self._sock.setblocking(False)
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self.sent = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._data: bytes | None = None
        self._viewer: tuple[str, int] | None = None
        self._heard = 0.0
        self._owed = 0  # copies of the standing status the viewer is still owed
        self._stop = threading.Event()
        self._poll_s = poll_s
        self._thread = threading.Thread(target=self._listen, name="viser-status", daemon=True)
        self._thread.start()

    @property
    def attached(self) -> bool:
        """Whether a viewer said hello within ``ATTACHED_S``."""
        with self._lock:
            return self._viewer is not None and time.monotonic() - self._heard < ATTACHED_S

    def publish(self, fields: dict[str, Any]) -> bool:
        """Make ``fields`` the standing status and send it to an attached viewer. Returns whether
        a datagram went out. Never raises for the viewer's sake; a status that cannot be encoded
        or is over ``MAX_DATAGRAM`` is counted in ``dropped`` and not kept."""
        try:
            data = encode_status(fields)
        except (TypeError, ValueError, OverflowError):
            data = None
        if data is None or len(data) > MAX_DATAGRAM:
            self.dropped += 1
            return False
        with self._lock:
            self._data, self._owed = data, COPIES
            return self._send_owed()

    def close(self) -> None:
        """Stop the thread and close the socket (idempotent)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * self._poll_s + 1.0)
        with self._lock:
            self._sock.close()

    # ------------------------------------------------------------------ internals (lock held)

    def _send_owed(self) -> bool:
        fresh = self._viewer is not None and time.monotonic() - self._heard < ATTACHED_S
        if not fresh or self._data is None or self._owed <= 0:
            return False
        try:
            self._sock.sendto(self._data, self._viewer)
        except OSError:  # a full buffer or a viewer gone between its hello and this send
            return False
        self._owed -= 1
        self.sent += 1
        return True

    def _hello(self, sender: tuple[str, int], now: float) -> None:
        if sender != self._viewer or now - self._heard >= ATTACHED_S:
            self._owed = COPIES  # a new viewer (or one back after a gap) holds nothing yet
        self._viewer, self._heard = sender, now
        self._send_owed()

    def _listen(self) -> None:
        from royalegym.viser import HELLO

        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._sock], [], [], self._poll_s)
            except (OSError, ValueError):  # closed under us
                return
            if not ready:
                continue
            with self._lock:
                while True:
                    try:
                        data, sender = self._sock.recvfrom(64)
                    except OSError:  # drained (BlockingIOError), or closed
                        break
                    if data == HELLO:
                        self._hello((sender[0], sender[1]), time.monotonic())
