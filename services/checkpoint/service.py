"""The checkpoint service: a ROUTER that writes and reads checkpoints for the learner.

Requests (``shared.messages.ToCheckpoint``) and replies:

* ``SaveCheckpoint`` (arrays: one 1-D uint8 array per file, named as in ``names``) ->
  write atomically under ``<runs_dir>/<run_name>/checkpoints/``, prune to ``keep`` ->
  ``Saved(request_id, path, bytes_written)`` (``bytes_written``: the sum of the file sizes).
* ``LoadLatest`` -> ``Loaded(request_id, path, iteration, names, meta, skipped)`` with the
  files as arrays (the newest checkpoint that verifies; ``skipped`` names each newer one that
  did not and why), or ``NotFound(request_id, reason, skipped)`` (``skipped`` empty: the run
  has no checkpoint; not empty: it has some and none verifies).
* Saves (``SaveCheckpoint``, ``SaveSnapshot``) carry the run's writer token
  (``shared.writer_token``): with a token configured, one without it is refused as
  ``unauthorized`` before anything is touched: no folder, no write, no prune.
* Anything refused -> ``Error(request_id, reason)``; ``request_id`` is read from the raw
  message where possible so the client's pending request fails fast instead of timing out,
  and is -1 when it cannot be. Each refusal is counted in
  ``royalefleet_checkpoint_messages_refused_total{reason}``.

A frame larger than ``max_message_mb`` is dropped by ZeroMQ (MAXMSGSIZE) with its connection
before it is read: no reply is possible, the client times out. A message whose frames together
pass ``max_message_mb`` is refused as ``oversized`` (``shared.transport.recv_frames``). Refusals
are printed escaped and at most one line per reason every 10 s (``shared.log_guard``).

Nothing a peer sends and no disk error ends the loop; only SIGTERM/SIGINT do (within one
poll interval, 0.2 s). Run: ``python -m services.checkpoint --help`` (services/checkpoint/main.py).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path

import msgspec
import numpy as np
import zmq
from prometheus_client import CollectorRegistry, Counter, Histogram

from services.checkpoint.store import (
    NEXT_OLDER,
    CheckpointCorrupt,
    CheckpointStore,
    check_file_names,
    check_folder_name,
    checkpoint_name,
)
from services.checkpoint.snapshots import SnapshotCorrupt, SnapshotStore
from shared.log_guard import RefusalLog
from shared.messages import (
    PROTOCOL_REFUSALS,
    Decoder,
    Error,
    LoadLatest,
    LoadSnapshot,
    SaveSnapshot,
    SnapshotLoaded,
    SnapshotSaved,
    Loaded,
    NotFound,
    ProtocolError,
    SaveCheckpoint,
    Saved,
    ToCheckpoint,
)
from shared.transport import recv_frames, send
from shared.writer_token import TOKEN_ENV, token_matches
from shared.run_dir import RunDir
from shared.serve_loop import RequestLoop

MIB = 1 << 20

REFUSAL_REASONS = (
    # from shared.messages.ProtocolError
    *PROTOCOL_REFUSALS,
    # from this service
    "unauthorized", "run_name", "iteration", "file_name", "names", "meta", "corrupt_index", "write_failed",
    "read_failed", "internal",
)
"""Every ``reason`` label of the refusal counter, created at zero so dashboards see them."""


class Refusal(Exception):
    """A request this service will not carry out: ``reason`` is the metric label, the text
    goes back to the client in ``Error.reason``."""

    def __init__(self, reason: str, text: str):
        self.reason = reason
        super().__init__(text)


class Metrics:
    """The service's Prometheus metrics, registered in ``registry`` (tests pass a fresh
    CollectorRegistry; ``main`` the process-wide default, which adds process_* metrics)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        r = registry if registry is not None else CollectorRegistry()
        p = "royalefleet_checkpoint_"
        self.writes = Counter(p + "writes", "Checkpoints written", registry=r)
        self.bytes_written = Counter(p + "bytes_written", "Bytes of checkpoint files written", registry=r)
        self.write_seconds = Histogram(
            p + "write_seconds", "Wall time of one checkpoint write, fsyncs included (seconds)",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60), registry=r,
        )
        self.loads = Counter(p + "loads", "LoadLatest requests answered with a checkpoint", registry=r)
        self.verify_failures = Counter(
            p + "verify_failures", "Checkpoints skipped because a file did not match its manifest", registry=r
        )
        self.housekeeping_failures = Counter(
            p + "housekeeping_failures", "Folders that could not be removed (retried by the next prune)", registry=r
        )
        self.refused = Counter(p + "messages_refused", "Requests answered with Error, by reason", ["reason"], registry=r)
        for reason in REFUSAL_REASONS:
            self.refused.labels(reason)


class _LooseEnvelope(msgspec.Struct):
    body: msgspec.Raw = msgspec.Raw(b"\xc0")


class _LooseBody(msgspec.Struct):
    request_id: int = -1


def _request_id_of(frames: list) -> int:
    """Best-effort ``request_id`` of a message the decoder refused; -1 if there is none."""
    try:
        env = msgspec.msgpack.decode(bytes(frames[0]), type=_LooseEnvelope)
        return msgspec.msgpack.decode(env.body, type=_LooseBody).request_id
    except Exception:  # noqa: BLE001 - anything unreadable simply has no id
        return -1


class CheckpointService(RequestLoop):
    """Serves one bound ROUTER socket. ``out`` receives one line per event (stdout in
    ``main``); ``runs_dir`` holds one folder per run."""

    def __init__(self, sock: zmq.Socket, runs_dir: Path | str, *, keep: int, metrics: Metrics,
                 max_message_bytes: int = 64 * MIB, out: Callable[[str], None] | None = None,
                 token: str = ""):
        self.sock = sock
        self.token = token
        """The run's writer token (``shared.writer_token``); "" accepts every save."""
        self.runs_dir = Path(runs_dir)
        self.keep = keep
        self.metrics = metrics
        self.decoder = Decoder(ToCheckpoint, max_array_bytes=max_message_bytes)
        self.out = out or (lambda text: print(text, flush=True))
        self.refusal_log = RefusalLog(self.out)

    # ------------------------------------------------------------------ loop

    # serve(stop, poll_ms), run() and request_stop(): shared.serve_loop.RequestLoop

    def close(self) -> None:
        """Close the socket (LINGER is short, shared.transport: never blocks the stop)."""
        self.sock.close()

    def serve_one(self) -> None:
        """Receive one message and answer it. Never raises for anything the peer sent or
        the disk did; only a broken socket (ZMQError) escapes."""
        request_id = -1
        try:
            try:
                identity, frames = recv_frames(self.sock, router=True)
            except ProtocolError as exc:  # too big or too many frames: none of it was kept
                identity = exc.identity  # type: ignore[attr-defined]
                request_id = _request_id_of([exc.head]) if exc.head is not None else -1  # type: ignore[attr-defined]
                raise Refusal(exc.reason, str(exc)) from None
            try:
                body, arrays = self.decoder.decode(frames)
            except ProtocolError as exc:
                request_id = _request_id_of(frames) if frames else -1
                raise Refusal(exc.reason, str(exc)) from None
            request_id = body.request_id
            reply, reply_arrays = self.handle(body, arrays)
        except Refusal as exc:
            self.metrics.refused.labels(exc.reason).inc()
            self.refusal_log(exc.reason, f"refused request {request_id} ({exc.reason}): {exc}")
            reply, reply_arrays = Error(request_id=request_id, reason=str(exc)), None
        except Exception as exc:  # noqa: BLE001 - a bug must cost one request, not the service
            self.metrics.refused.labels("internal").inc()
            if self.refusal_log("internal", f"internal error on request {request_id}: {exc!r}"):
                self.out(traceback.format_exc())
            reply, reply_arrays = Error(request_id=request_id, reason=f"internal error: {exc!r}"), None
        if not send(self.sock, reply, reply_arrays, identity=identity):
            self.out(f"could not reply to request {request_id}: the client is gone or not reading")

    def handle(self, body, arrays: Mapping[str, np.ndarray]):
        """(reply, reply_arrays) for one decoded request. Raises Refusal."""
        if isinstance(body, SaveCheckpoint):
            return self.save(body, arrays)
        if isinstance(body, LoadLatest):
            return self.load_latest(body)
        if isinstance(body, SaveSnapshot):
            return self.save_snapshot(body, arrays)
        if isinstance(body, LoadSnapshot):
            return self.load_snapshot(body)
        raise Refusal("unknown_kind", f"the checkpoint service does not take {type(body).__name__}")

    # ------------------------------------------------------------------ requests

    def _store(self, run_name: str) -> CheckpointStore:
        try:
            check_folder_name(run_name, "run_name")
        except ValueError as exc:
            raise Refusal("run_name", str(exc)) from None
        return CheckpointStore(RunDir(self.runs_dir / run_name).checkpoints, say=self.out)

    def _count_housekeeping(self, store: CheckpointStore) -> None:
        if store.housekeeping_failures:
            self.metrics.housekeeping_failures.inc(store.housekeeping_failures)

    def _check_writer(self, msg) -> None:
        """Refuse a save without the run's writer token, before any folder is looked at."""
        if not token_matches(msg.token, self.token):
            raise Refusal(
                "unauthorized",
                f"{type(msg).__name__} for run {msg.run_name!r}: missing or wrong writer token; only the run's "
                f"learner writes its checkpoints (it reads the token from {TOKEN_ENV}, or derives it from the "
                "CURVE servers' key: start it with the same environment as this service)")

    def save(self, msg: SaveCheckpoint, arrays: Mapping[str, np.ndarray]):
        self._check_writer(msg)
        store = self._store(msg.run_name)
        try:
            checkpoint_name(msg.iteration)
        except ValueError as exc:
            raise Refusal("iteration", str(exc)) from None
        try:
            names = check_file_names(msg.names)
        except ValueError as exc:
            raise Refusal("file_name", str(exc)) from None
        if set(names) != set(arrays):
            raise Refusal(
                "names",
                f"names lists {sorted(set(names) - set(arrays))} without an array and arrays "
                f"{sorted(set(arrays) - set(names))} are not in names; send one array per name",
            )
        try:
            msgspec.json.decode(msg.meta)
        except msgspec.DecodeError as exc:
            raise Refusal("meta", f"meta is not a JSON document ({exc})") from None
        files = {name: arrays[name] for name in names}
        started = time.perf_counter()
        try:
            path = store.write(msg.iteration, files, msg.meta)
        except CheckpointCorrupt as exc:
            raise Refusal("corrupt_index", str(exc)) from None
        except ValueError as exc:
            raise Refusal("file_name", str(exc)) from None
        except OSError as exc:
            self._count_housekeeping(store)
            raise Refusal("write_failed", f"writing iteration {msg.iteration} of run {msg.run_name!r} failed: {exc}") from None
        seconds = time.perf_counter() - started
        total = sum(int(a.nbytes) for a in files.values())
        self.metrics.writes.inc()
        self.metrics.bytes_written.inc(total)
        self.metrics.write_seconds.observe(seconds)
        removed = store.prune(self.keep)
        self._count_housekeeping(store)
        self.out(
            f"checkpoint {path} {total / MIB:.2f} MB {seconds:.2f} s"
            + (f" (pruned {', '.join(removed)})" if removed else "")
        )
        return Saved(request_id=msg.request_id, path=str(path), bytes_written=total), None

    def load_latest(self, msg: LoadLatest):
        store = self._store(msg.run_name)
        problems: list[str] = []
        try:
            found = store.latest(problems)
        except CheckpointCorrupt as exc:
            raise Refusal("corrupt_index", str(exc)) from None
        except OSError as exc:
            raise Refusal("read_failed", f"reading checkpoints of run {msg.run_name!r} failed: {exc}") from None
        finally:
            if problems:
                self.metrics.verify_failures.inc(len(problems))
        # each problem without the "trying the next older" tail the log line carries
        skipped = [p.removesuffix(NEXT_OLDER) for p in problems]
        if found is None:
            why = (
                f"no checkpoint of run {msg.run_name!r} verifies ({len(problems)} skipped: {'; '.join(problems)})"
                if problems
                else f"no checkpoint of run {msg.run_name!r} in {store.root}"
            )
            return NotFound(request_id=msg.request_id, reason=why, skipped=skipped), None
        manifest, files = found
        self.metrics.loads.inc()
        path = store.root / checkpoint_name(manifest.iteration)
        self.out(f"loaded {path} for run {msg.run_name!r}")
        reply = Loaded(
            request_id=msg.request_id, path=str(path), iteration=manifest.iteration,
            names=list(files), meta=bytes(manifest.meta), skipped=skipped,
        )
        return reply, {name: np.frombuffer(data, dtype=np.uint8) for name, data in files.items()}


    def _snapshots(self, run_name: str) -> SnapshotStore:
        try:
            check_folder_name(run_name, "run_name")
        except ValueError as exc:
            raise Refusal("run_name", str(exc)) from None
        return SnapshotStore(RunDir(self.runs_dir / run_name).snapshots)

    def save_snapshot(self, msg: SaveSnapshot, arrays: Mapping[str, np.ndarray]):
        self._check_writer(msg)
        store = self._snapshots(msg.run_name)
        if set(arrays) != {"actor"}:
            raise Refusal("names", "a snapshot carries exactly one array, 'actor'")
        try:
            sid, path, created = store.write(arrays["actor"].tobytes(), msg.spec)
        except (ValueError, msgspec.DecodeError) as exc:
            raise Refusal("meta", f"snapshot spec refused: {exc}") from None
        except (OSError, SnapshotCorrupt) as exc:
            raise Refusal("write_failed", f"writing a snapshot of run {msg.run_name!r} failed: {exc}") from None
        if created:
            self.out(f"snapshot {path} {arrays['actor'].nbytes / MIB:.2f} MB")
        return SnapshotSaved(request_id=msg.request_id, snapshot_id=sid, path=str(path), created=created), None

    def load_snapshot(self, msg: LoadSnapshot):
        store = self._snapshots(msg.run_name)
        try:
            actor, spec = store.read(msg.snapshot_id)
        except ValueError as exc:
            raise Refusal("names", str(exc)) from None
        except FileNotFoundError:
            return NotFound(request_id=msg.request_id, reason=f"run {msg.run_name!r} has no snapshot {msg.snapshot_id}"), None
        except SnapshotCorrupt as exc:
            self.metrics.verify_failures.inc()
            raise Refusal("corrupt_index", str(exc)) from None
        return (SnapshotLoaded(request_id=msg.request_id, snapshot_id=msg.snapshot_id, spec=spec),
                {"actor": np.frombuffer(actor, dtype=np.uint8)})
