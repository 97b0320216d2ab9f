"""ZeroMQ sockets with the options every service needs, and the one send/receive path.

Conventions (see ../docs/protocol.md):

* Servers (learner, ladder, checkpoint) bind a ROUTER; clients connect a DEALER. Rollouts
  connect to the learner, never the reverse: behind one DNS name with several replicas, a
  connect from the learner would reach only one of them.
* Every socket has a short LINGER, so closing a socket with a message queued for a peer that
  is gone never blocks a shutdown (``docker compose stop`` sends SIGTERM and waits 10 s).
* Every receiving socket has MAXMSGSIZE: ZeroMQ drops a peer that sends more, before Python
  sees a byte.
* Sends never block: a full queue or an absent peer is reported (``False``) and counted.
* Requests to the ladder and the checkpoint service carry a ``request_id``; ``Client.request``
  waits with a deadline and raises ``ServiceTimeout`` instead of waiting forever.
"""

from __future__ import annotations

import itertools
import os
import time

import msgspec
import zmq

from shared.messages import Decoder, ProtocolError, encode

LINGER_MS = 200


def context() -> zmq.Context:
    return zmq.Context.instance()


def _common(sock: zmq.Socket, max_bytes: int | None) -> zmq.Socket:
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    if max_bytes:
        sock.setsockopt(zmq.MAXMSGSIZE, int(max_bytes))
    return sock


def bind_router(address: str, *, max_bytes: int | None = None, ctx: zmq.Context | None = None) -> zmq.Socket:
    """A ROUTER bound to ``address`` (``tcp://host:port``). ROUTER_MANDATORY makes a send to
    a peer that has gone an error we count instead of a silent drop."""
    sock = _common((ctx or context()).socket(zmq.ROUTER), max_bytes)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.setsockopt(zmq.SNDHWM, 10_000)
    sock.setsockopt(zmq.RCVHWM, 10_000)
    try:
        sock.bind(address)
    except zmq.ZMQError as exc:
        sock.close(0)
        raise OSError(f"cannot bind {address}: {exc} (is another royalefleet service still running?)") from None
    return sock


def connect_dealer(address: str, *, max_bytes: int | None = None, ctx: zmq.Context | None = None) -> zmq.Socket:
    """A DEALER connected to ``address``; it reconnects by itself if the server restarts."""
    sock = _common((ctx or context()).socket(zmq.DEALER), max_bytes)
    sock.setsockopt(zmq.RECONNECT_IVL, 100)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
    sock.setsockopt(zmq.SNDHWM, 10_000)
    sock.connect(address)
    return sock


def send(sock: zmq.Socket, body, arrays=None, *, identity: bytes | None = None) -> bool:
    """Send one message without blocking. Arrays go out zero-copy: the caller hands them
    over and must not write to them afterwards. Returns False if it could not be queued (no
    such peer, or its queue is full)."""
    frames = encode(body, arrays)
    if identity is not None:
        frames = [identity, *frames]
    try:
        sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
        return True
    except zmq.Again:
        return False
    except zmq.ZMQError as exc:
        if exc.errno == zmq.EHOSTUNREACH:
            return False
        raise


def recv(sock: zmq.Socket, decoder: Decoder, *, router: bool = False):
    """Receive one message (the caller has polled). Returns (identity or None, body, arrays).
    Raises ProtocolError for anything malformed; the identity is in ``exc.identity``."""
    frames = sock.recv_multipart(copy=False)
    identity = None
    if router:
        identity = bytes(frames[0])
        frames = frames[1:]
    try:
        body, arrays = decoder.decode(frames)
    except ProtocolError as exc:
        exc.identity = identity  # type: ignore[attr-defined]
        raise
    return identity, body, arrays


class ServiceTimeout(TimeoutError):
    pass


class Client:
    """A DEALER that makes request/reply calls to one ROUTER service."""

    def __init__(self, address: str, decoder: Decoder, *, name: str, max_bytes: int | None = None,
                 timeout_s: float = 30.0):
        self.address, self.name, self.timeout_s = address, name, timeout_s
        self._decoder = decoder
        self._sock = connect_dealer(address, max_bytes=max_bytes)
        self._ids = itertools.count(int.from_bytes(os.urandom(3), "little") << 20)

    def next_id(self) -> int:
        return next(self._ids)

    def request(self, body, arrays=None, *, timeout_s: float | None = None):
        """Send ``body`` (whose ``request_id`` must be fresh) and wait for the reply with the
        same id. Replies to older requests are dropped. Raises ServiceTimeout."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        if not send(self._sock, body, arrays):
            # A DEALER queues while the connection is pending; a refusal here means the queue
            # is full, which only a server that stopped reading can cause.
            raise ServiceTimeout(f"{self.name} at {self.address} is not accepting requests")
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._sock.poll(int(left * 1000) + 1, zmq.POLLIN):
                if time.monotonic() >= deadline:
                    raise ServiceTimeout(
                        f"{self.name} at {self.address} did not answer within {timeout_s or self.timeout_s:.0f} s"
                    )
                continue
            try:
                _, reply, arrays_in = recv(self._sock, self._decoder)
            except ProtocolError:
                continue
            if getattr(reply, "request_id", None) == body.request_id:
                return reply, arrays_in

    def close(self) -> None:
        self._sock.close(0)


def tcp(host: str, port: int) -> str:
    return f"tcp://{host}:{port}"


def decode_json(data: bytes, type_):
    return msgspec.json.decode(data, type=type_)
