"""ZeroMQ sockets with the options every service needs, and the one send/receive path.

Conventions (see ../docs/protocol.md):

* Servers (learner, ladder, checkpoint) bind a ROUTER; clients connect a DEALER. Rollouts
  connect to the learner, never the reverse: behind one DNS name with several replicas, a
  connect from the learner would reach only one of them.
* Every socket has a short LINGER, so closing a socket with a message queued for a peer that
  is gone never blocks a shutdown (``docker compose stop`` sends SIGTERM and waits 10 s).
* Every socket has MAXMSGSIZE (``max_bytes``, else ``DEFAULT_MAX_BYTES``): ZeroMQ drops the connection of a peer that sends a
  bigger frame, before Python sees a byte. ``recv`` bounds the whole message (all its frames
  together) by the same number and refuses the rest as ``oversized``, counted by the caller.
* Sends never block: a full queue or an absent peer is reported (``False``) and counted.
* Requests to the ladder and the checkpoint service carry a ``request_id``; ``Client.request``
  waits with a deadline and raises ``ServiceTimeout`` instead of waiting forever.
* Optional authentication: ZeroMQ CURVE (``curve=`` on ``bind_router`` / ``connect_dealer`` /
  ``Client``; off unless given). A server admits only clients whose public key is in its
  allow-list folder; an unknown key or a plain (non-CURVE) client gets no connection at all.
  ``curve_server_keys()`` / ``curve_client_keys()`` read the folder from
  ``ROYALEFLEET_CURVE_DIR`` (unset or empty: off, as on loopback; Compose sets it). The folder
  is what ``royalefleet keys`` writes::

      server.key  server.key_secret   the servers' keypair (the secret only where servers run)
      client.key  client.key_secret   this host's client keypair (rollouts; the learner as a
                                      client of the ladder and the checkpoint service)
      clients/<name>.key              the allow-list: public keys of admitted clients

* Plaintext stays on loopback: ``bind_router`` and ``connect_dealer`` without CURVE refuse an
  address that is not loopback (``127.0.0.0/8``, ``::1``, ``localhost``, ``ipc://``,
  ``inproc://``) unless this process was started with ``ROYALEFLEET_INSECURE_PLAINTEXT=1``
  (``plaintext_refusal``); the flag is shown by ``doctor`` and by every service's metrics
  (``royalefleet_insecure_plaintext``, ``register_plaintext_gauge``).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import zmq

from shared.messages import MAX_FRAMES, Decoder, ProtocolError, encode

if TYPE_CHECKING:  # zmq.auth loads asyncio: imported where CURVE is used, not on the loopback path
    from zmq.auth.thread import ThreadAuthenticator

LINGER_MS = 200


def context() -> zmq.Context:
    return zmq.Context.instance()


DEFAULT_MAX_BYTES = 64 << 20
"""MAXMSGSIZE of a socket made without ``max_bytes``: ``services.max_message_mb``'s default.
No socket receives without a limit (issue 38: the learner's ladder client had none)."""


def _common(sock: zmq.Socket, max_bytes: int | None) -> zmq.Socket:
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    sock.setsockopt(zmq.MAXMSGSIZE, int(max_bytes or DEFAULT_MAX_BYTES))
    return sock


INSECURE_ENV = "ROYALEFLEET_INSECURE_PLAINTEXT"
"""Set to 1 to let a service without CURVE bind or connect beyond loopback (an explicit,
shown choice: doctor says it and the metrics carry ``royalefleet_insecure_plaintext 1``)."""


def insecure_plaintext(environ=None) -> bool:
    """Whether ``INSECURE_ENV`` is set to 1 (or true/yes) in ``environ`` (default: this process)."""
    value = (os.environ if environ is None else environ).get(INSECURE_ENV, "")
    return value.strip().lower() in ("1", "true", "yes")


def is_loopback(address: str) -> bool:
    """Whether a ZeroMQ ``address`` stays on this host: ``ipc://``/``inproc://``, or ``tcp://``
    to ``localhost``, 127.0.0.0/8 or ::1. A wildcard (``*``, 0.0.0.0, ::) or a name is not."""
    import ipaddress

    scheme, _, rest = address.partition("://")
    if scheme in ("ipc", "inproc"):
        return True
    host = rest.rpartition(":")[0] if rest.count(":") == 1 or rest.startswith("[") else rest
    host = host.split(";")[-1].strip("[]")  # "source;host" connect form: the far end counts
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plaintext_refusal(address: str, curve, environ=None) -> str | None:
    """Why a socket may not use ``address`` without CURVE (``curve`` None), or None: plaintext
    beyond loopback without ``INSECURE_ENV``=1."""
    if curve is not None or is_loopback(address) or insecure_plaintext(environ):
        return None
    return (f"{address} is not a loopback address and CURVE is off ({CURVE_DIR_ENV} unset): anyone on the network "
            f"could read and send this service's messages. Turn CURVE on (`royalefleet keys`, then {CURVE_DIR_ENV}"
            f"=<keys folder>; Compose does by default), use 127.0.0.1, or accept plaintext explicitly with "
            f"{INSECURE_ENV}=1")


def register_plaintext_gauge(registry) -> None:
    """Add ``royalefleet_insecure_plaintext`` (1 when this process runs with ``INSECURE_ENV``=1,
    else 0) to the Prometheus ``registry``."""
    from prometheus_client import Gauge

    gauge = Gauge("royalefleet_insecure_plaintext", f"1 when this service was started with {INSECURE_ENV}=1 "
                  "(plaintext allowed beyond loopback without CURVE)", registry=registry)
    gauge.set_function(lambda: float(insecure_plaintext()))


def bind_router(address: str, *, max_bytes: int | None = None, ctx: zmq.Context | None = None,
                curve: CurveServer | None = None) -> zmq.Socket:
    """A ROUTER bound to ``address`` (``tcp://host:port``). ROUTER_MANDATORY makes a send to
    a peer that has gone an error we count instead of a silent drop. With ``curve`` only the
    allow-listed clients can connect (``curve_server``). Raises OSError (``plaintext_refusal``)
    for a non-loopback address without CURVE, unless ``ROYALEFLEET_INSECURE_PLAINTEXT=1``."""
    refusal = plaintext_refusal(address, curve)
    if refusal:
        raise OSError(f"will not bind {refusal}")
    sock = _common((ctx or context()).socket(zmq.ROUTER), max_bytes)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.setsockopt(zmq.SNDHWM, 10_000)
    sock.setsockopt(zmq.RCVHWM, 10_000)
    if curve is not None:
        try:
            curve_server(sock, curve.secret_key_file, curve.allowed_clients_dir, name=address)
        except OSError:
            sock.close(0)
            raise
    try:
        sock.bind(address)
    except zmq.ZMQError as exc:
        sock.close(0)
        raise OSError(f"cannot bind {address}: {exc} (is another royalefleet service still running?)") from None
    return sock


def connect_dealer(address: str, *, max_bytes: int | None = None, ctx: zmq.Context | None = None,
                   curve: CurveClient | None = None) -> zmq.Socket:
    """A DEALER connected to ``address``; it reconnects by itself if the server restarts.
    With ``curve`` it authenticates to a CURVE server (``curve_client``). Raises OSError
    (``plaintext_refusal``) for a non-loopback address without CURVE, unless
    ``ROYALEFLEET_INSECURE_PLAINTEXT=1``."""
    refusal = plaintext_refusal(address, curve)
    if refusal:
        raise OSError(f"will not connect to {refusal}")
    sock = _common((ctx or context()).socket(zmq.DEALER), max_bytes)
    sock.setsockopt(zmq.RECONNECT_IVL, 100)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
    sock.setsockopt(zmq.SNDHWM, 10_000)
    if curve is not None:
        try:
            curve_client(sock, curve.client_secret_file, curve.server_public_file)
        except OSError:
            sock.close(0)
            raise
        _report_refusal(sock, address, curve)
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


def recv_frames(sock: zmq.Socket, *, router: bool = False) -> tuple[bytes | None, list]:
    """Receive one message's frames (the caller has polled): (identity or None, frames).

    MAXMSGSIZE bounds each frame; this bounds the whole message with the same number: frames
    are taken one at a time, and once their total passes the socket's MAXMSGSIZE (or their
    count passes ``MAX_FRAMES``) the rest are received and released at once, never kept, and
    ProtocolError("oversized"/"frames") is raised with the identity in ``exc.identity`` and the
    header frame in ``exc.head`` (when it alone fits: a server can still read the request id to
    answer the refusal). (ZeroMQ
    itself has queued the message whole by then; what this bounds is what a service holds and
    decodes.)"""
    limit = _max_message_bytes(sock)
    identity = bytes(sock.recv(copy=False)) if router else None
    frames: list = []
    head = None
    total = count = 0
    more = True
    while more:
        frame = sock.recv(copy=False)
        more = frame.more
        count += 1
        total += len(frame)
        if count == 1 and (not limit or total <= limit):
            head = frame
        if (limit and total > limit) or count > MAX_FRAMES:
            frames = []  # release what was kept; the remaining frames are read and dropped
        else:
            frames.append(frame)
        del frame
    if (limit and total > limit) or count > MAX_FRAMES:
        reason = "frames" if count > MAX_FRAMES else "oversized"
        exc = ProtocolError(reason, f"message of {count} frames, {total} bytes; the limit is {MAX_FRAMES} frames"
                            + (f" and {limit} bytes (max_message_mb) for the whole message" if limit else ""))
        exc.identity = identity  # type: ignore[attr-defined]
        exc.head = head  # type: ignore[attr-defined]
        try:
            raise exc
        finally:
            # The traceback keeps this frame; a local naming the exception would make a cycle
            # (exception -> traceback -> frame -> exception) that only Python's cyclic GC frees,
            # keeping the refused message's first frame (up to max_message_mb) alive meanwhile:
            # 3 x 48 MiB messages kept 48 MB each until a collection (docs/reliability.md).
            del exc, head
    return identity, frames


def _max_message_bytes(sock: zmq.Socket) -> int:
    limit = sock.getsockopt(zmq.MAXMSGSIZE)
    return limit if limit > 0 else 0


def recv(sock: zmq.Socket, decoder: Decoder, *, router: bool = False):
    """Receive one message (the caller has polled). Returns (identity or None, body, arrays).
    Raises ProtocolError for anything malformed or over the whole-message bound
    (``recv_frames``); the identity is in ``exc.identity``."""
    identity, frames = recv_frames(sock, router=router)
    try:
        body, arrays = decoder.decode(frames)
    except ProtocolError as exc:
        exc.identity = identity  # type: ignore[attr-defined]
        raise
    return identity, body, arrays


class ServiceTimeout(TimeoutError):
    pass


class RequestStopped(Exception):
    """``Client.request`` gave up waiting because the client's ``stop`` event was set (the
    process was asked to stop: SIGTERM, Ctrl-C). Not a timeout: nothing is wrong with the peer."""


STOP_POLL_S = 0.1
"""How often a request with a ``stop`` event looks at it while it waits for the reply."""


class Client:
    """A DEALER that makes request/reply calls to one ROUTER service.

    A reply that comes after its request timed out is kept (its body, without arrays: the last
    ``LATE_KEPT``), so a caller that must know whether a timed-out request was carried out
    after all can ask (``late_reply``, ``answered_after``) instead of sending it again blind."""

    LATE_KEPT = 64

    def __init__(self, address: str, decoder: Decoder, *, name: str, max_bytes: int | None = None,
                 timeout_s: float = 30.0, curve: CurveClient | None = None, stop: threading.Event | None = None):
        """``stop``: an event that, once set, ends any wait of ``request`` within ``STOP_POLL_S``
        (``RequestStopped``), so a process asked to stop never sits out a dead peer's timeout."""
        self.address, self.name, self.timeout_s, self.stop = address, name, timeout_s, stop
        self._decoder = decoder
        self._sock = connect_dealer(address, max_bytes=max_bytes, curve=curve)
        self._ids = itertools.count(int.from_bytes(os.urandom(3), "little") << 20)
        self._late: dict[int, object] = {}
        self.last_answered = -1
        """The highest request id a reply has come for (ids only grow)."""

    def _keep(self, reply) -> None:
        rid = getattr(reply, "request_id", None)
        if isinstance(rid, int):
            self.last_answered = max(self.last_answered, rid)
            self._late[rid] = reply  # never its arrays: a late checkpoint is no memory to hold
            while len(self._late) > self.LATE_KEPT:
                del self._late[next(iter(self._late))]

    def late_reply(self, request_id: int):
        """The reply (its body) that came for ``request_id`` after its request timed out, or
        None. Reads whatever replies wait on the socket first; never blocks."""
        while self._sock.poll(0, zmq.POLLIN):
            try:
                _, reply, _ = recv(self._sock, self._decoder)
            except ProtocolError:
                continue
            self._keep(reply)
        return self._late.pop(request_id, None)

    def answered_after(self, request_id: int) -> bool:
        """Whether a request sent after ``request_id`` has been answered. One connection
        delivers in order, so then a missing reply to ``request_id`` means it was lost on the
        way (the service restarted), not that it is still waiting to be served."""
        return self.last_answered > request_id

    def next_id(self) -> int:
        return next(self._ids)

    def request(self, body, arrays=None, *, timeout_s: float | None = None):
        """Send ``body`` (whose ``request_id`` must be fresh) and wait for the reply with the
        same id. Replies to older requests are kept for ``late_reply``. Raises ServiceTimeout, or
        RequestStopped when the client's ``stop`` event is set meanwhile."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        if self.stop is not None and self.stop.is_set():
            raise RequestStopped(f"not asking the {self.name}: stopping")
        if not send(self._sock, body, arrays):
            # A DEALER queues while the connection is pending; a refusal here means the queue
            # is full, which only a server that stopped reading can cause.
            raise ServiceTimeout(f"{self.name} at {self.address} is not accepting requests")
        while True:
            left = deadline - time.monotonic()
            if self.stop is not None:
                if self.stop.is_set():
                    raise RequestStopped(f"stopped waiting for the {self.name}")
                left = min(left, STOP_POLL_S)
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
                self.last_answered = max(self.last_answered, body.request_id)
                return reply, arrays_in
            self._keep(reply)  # the late reply of an earlier request

    def close(self) -> None:
        self._sock.close(0)


# ----------------------------------------------------------------------------- CURVE

CURVE_DIR_ENV = "ROYALEFLEET_CURVE_DIR"
"""The one switch: the keys folder (layout in the module docstring). Unset or empty: off."""

SERVER_SECRET = "server.key_secret"
SERVER_PUBLIC = "server.key"
CLIENT_SECRET = "client.key_secret"
CLIENT_PUBLIC = "client.key"
ALLOWED_CLIENTS = "clients"
CLIENTS_DIR_ENV = "ROYALEFLEET_CURVE_CLIENTS_DIR"
"""The allow-list folder when it is not ``<keys folder>/clients``: under Kubernetes the keys and
the allow-list are two Secrets mounted apart (deploy/k8s, docs/kubernetes.md), since a Secret
volume cannot hold a sub-folder that grows as hosts are added. Unset or empty: the default."""


@dataclass(frozen=True)
class CurveServer:
    secret_key_file: str
    allowed_clients_dir: str


@dataclass(frozen=True)
class CurveClient:
    client_secret_file: str
    server_public_file: str


def _curve_dir(environ) -> str | None:
    folder = (os.environ if environ is None else environ).get(CURVE_DIR_ENV, "")
    return folder or None


def curve_server_keys(environ=None) -> CurveServer | None:
    """The server side's keys from ``ROYALEFLEET_CURVE_DIR``, or None (CURVE off)."""
    folder = _curve_dir(environ)
    if folder is None:
        return None
    clients = (os.environ if environ is None else environ).get(CLIENTS_DIR_ENV, "")
    return CurveServer(os.path.join(folder, SERVER_SECRET), clients or os.path.join(folder, ALLOWED_CLIENTS))


def curve_client_keys(environ=None) -> CurveClient | None:
    """The client side's keys from ``ROYALEFLEET_CURVE_DIR``, or None (CURVE off)."""
    folder = _curve_dir(environ)
    if folder is None:
        return None
    return CurveClient(os.path.join(folder, CLIENT_SECRET), os.path.join(folder, SERVER_PUBLIC))


def _load_key(path: str, *, secret: bool) -> tuple[bytes, bytes | None]:
    """(public, secret) from a certificate file ``zmq.auth.create_certificates`` wrote. Every
    failure is an OSError naming the file and the remedy (services report OSErrors at start)."""
    import zmq.auth

    hint = f"(generate the keys with `royalefleet keys`; {CURVE_DIR_ENV} names their folder)"
    try:
        public, secret_key = zmq.auth.load_certificate(path)
    except OSError as exc:
        raise OSError(f"CURVE key file {path}: {exc.strerror or exc} {hint}") from None
    except ValueError as exc:
        raise OSError(f"CURVE key file {path}: not a key certificate ({exc}) {hint}") from None
    if secret and secret_key is None:
        raise OSError(f"CURVE key file {path} holds no secret key: use the .key_secret file {hint}")
    return public, secret_key


class _AllowList:
    """The public keys in one folder (``*.key``), read again whenever the folder's key files
    change: a rollout host added (or removed) while the servers run takes effect at its next
    handshake, with no restart. Called on ZAP's thread, once per handshake."""

    def __init__(self, folder: str, say):
        self.folder, self.say = folder, say
        self._signature: tuple | None = None
        self._keys: frozenset[bytes] = frozenset()
        self._refused: set[bytes] = set()
        self._bad: set[str] = set()
        self.refused = 0
        self.reload()

    def _scan(self) -> tuple:
        """(name, mtime, size) of each key file; one removed between the listing and its stat
        (a host retired mid-handshake) is left out, not raised."""
        try:
            entries = [e for e in os.scandir(self.folder) if e.name.endswith(".key")]
        except OSError:
            return ()
        out = []
        for e in entries:
            try:
                if e.is_file():
                    st = e.stat()
                    out.append((e.name, st.st_mtime_ns, st.st_size))
            except OSError:
                continue
        return tuple(sorted(out))

    def reload(self) -> None:
        import zmq.auth

        signature = self._scan()
        if signature == self._signature:
            return
        keys = set()
        for name, _, _ in signature:
            path = os.path.join(self.folder, name)
            try:
                public, _ = zmq.auth.load_certificate(path)
            except (OSError, ValueError) as exc:
                if path not in self._bad:
                    self._bad.add(path)
                    self.say(f"transport: CURVE allow-list: skipped {path}: {exc}")
                continue
            keys.add(public)
        self._keys, self._signature = frozenset(keys), signature

    def __len__(self) -> int:
        return len(self._keys)

    def callback(self, domain: str, key: bytes) -> bool:
        """Whether ``key`` is admitted. Never raises: pyzmq calls it on the authenticator's
        loop, which an exception would end, after which no client could connect until a
        restart; anything that goes wrong refuses this handshake and is said."""
        try:
            return self._admit(key)
        except Exception as exc:  # noqa: BLE001 - the ZAP loop must survive whatever the folder does
            self.refused += 1
            self.say(f"transport: CURVE refused a handshake: reading the allow-list {self.folder} failed "
                     f"({type(exc).__name__}: {exc}); the next handshake reads it again")
            return False

    def _admit(self, key: bytes) -> bool:
        self.reload()
        if key in self._keys:
            return True
        self.refused += 1
        if key not in self._refused and len(self._refused) < 1000:
            self._refused.add(key)
            self.say(f"transport: CURVE refused a client with key {key.decode(errors='replace')}: not in "
                     f"{self.folder} (copy that host's client.key there as <name>.key to admit it)")
        return False


_auth_lock = threading.Lock()
_authenticators: dict[zmq.Context, ThreadAuthenticator] = {}
_zap_domains = itertools.count(1)


def _authenticator(ctx: zmq.Context) -> ThreadAuthenticator:
    """One ZAP handler per context (ZeroMQ allows one); every CURVE server socket of the
    context gets its own ZAP domain and allow-list on it."""
    from zmq.auth.thread import ThreadAuthenticator

    with _auth_lock:
        auth = _authenticators.get(ctx)
        if auth is None or not auth.is_alive():
            auth = ThreadAuthenticator(ctx)
            auth.start()
            _authenticators[ctx] = auth
        return auth


def stop_curve(ctx: zmq.Context | None = None) -> None:
    """Stop the context's ZAP handler (its sockets would otherwise keep ``ctx.term()`` waiting).
    Servers on that context admit nobody afterwards."""
    ctx = ctx or context()
    with _auth_lock:
        auth = _authenticators.pop(ctx, None)
    if auth is not None:
        auth.stop()


def curve_server(sock: zmq.Socket, secret_key_file: str, allowed_clients_dir: str, *, name: str = "",
                 say=None) -> _AllowList:
    """Make ``sock`` (before it binds) a CURVE server that admits only clients whose public key
    is a ``*.key`` file in ``allowed_clients_dir``: an unknown key or a plain client completes
    no handshake, so not one of its messages reaches the socket. Returns the allow-list (its
    ``refused`` counts refused handshakes)."""
    say = say or (lambda text: print(text, flush=True))
    public, secret = _load_key(secret_key_file, secret=True)
    if not os.path.isdir(allowed_clients_dir):
        raise OSError(f"CURVE allow-list folder {allowed_clients_dir} does not exist "
                      f"(generate the keys with `royalefleet keys`; {CURVE_DIR_ENV} names their folder)")
    allowed = _AllowList(allowed_clients_dir, say)
    domain = f"royalefleet-{next(_zap_domains)}"
    _authenticator(sock.context).configure_curve_callback(domain, credentials_provider=allowed)
    sock.zap_domain = domain.encode()
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_server = True
    say(f"transport: CURVE on{' for ' + name if name else ''}: {len(allowed)} client key(s) allowed "
        f"from {allowed_clients_dir}")
    return allowed


def _report_refusal(sock: zmq.Socket, address: str, curve: CurveClient, say=None) -> threading.Thread:
    """Say so when the server refuses this client's key. ZeroMQ does not retry a connection
    whose CURVE handshake was refused: without this line the client would just stay silent.
    A thread reads the socket's monitor (only it touches the monitor socket) and ends when the
    socket closes."""
    say = say or (lambda text: print(text, flush=True))
    monitor = sock.get_monitor_socket(
        zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_MONITOR_STOPPED)

    def watch() -> None:
        from zmq.utils.monitor import parse_monitor_message

        try:
            while True:
                event = parse_monitor_message(monitor.recv_multipart())
                if event["event"] == zmq.EVENT_MONITOR_STOPPED:
                    break
                what = ("refused this client's key" if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH
                        else "failed the CURVE handshake (is the server's public key right?)")
                say(f"transport: {address} {what} ({curve.client_secret_file}). ZeroMQ does not retry: admit "
                    f"this host's client.key on the server host (clients/<name>.key) and restart this service")
        except zmq.ZMQError:
            pass
        finally:
            monitor.close(0)

    thread = threading.Thread(target=watch, name="curve-refusal-watch", daemon=True)
    thread.start()
    return thread


def curve_client(sock: zmq.Socket, client_secret_file: str, server_public_file: str) -> None:
    """Make ``sock`` (before it connects) a CURVE client with the keypair in
    ``client_secret_file``, talking only to the server whose public key is in
    ``server_public_file``."""
    public, secret = _load_key(client_secret_file, secret=True)
    server_public, _ = _load_key(server_public_file, secret=False)
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_serverkey = server_public


def tcp(host: str, port: int) -> str:
    return f"tcp://{host}:{port}"
