"""The checkpoint service over loopback TCP: save/load, refusals, metrics, settings, signals."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import zmq
from prometheus_client import CollectorRegistry

from services.checkpoint.main import parse_settings
from services.checkpoint.service import CheckpointService, Metrics
from shared.messages import (
    Ack,
    Decoder,
    Error,
    FromCheckpoint,
    LoadLatest,
    Loaded,
    NotFound,
    SaveCheckpoint,
    Saved,
    encode,
)
from shared.transport import Client, bind_router, connect_dealer

REPO = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Running:
    """A CheckpointService serving on a thread, its registry, and a Client to it."""

    def __init__(self, runs_dir: Path, keep: int):
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.registry = CollectorRegistry()
        self.lines: list[str] = []
        sock = bind_router(self.address, max_bytes=64 << 20)
        self.service = CheckpointService(
            sock, runs_dir, keep=keep, metrics=Metrics(self.registry), out=self.lines.append
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(sock,), daemon=True)
        self.thread.start()
        self.client = Client(self.address, Decoder(FromCheckpoint), name="checkpoint", timeout_s=10)

    def _run(self, sock):
        try:
            self.service.serve(self.stop.is_set, poll_ms=20)
        finally:
            sock.close(0)

    def metric(self, name: str, **labels) -> float:
        return self.registry.get_sample_value(f"royalefleet_checkpoint_{name}", labels or None) or 0.0

    def save(self, run: str, iteration: int, files: dict[str, bytes], meta: bytes = b"{}"):
        msg = SaveCheckpoint(
            request_id=self.client.next_id(), run_name=run, iteration=iteration, names=list(files), meta=meta
        )
        return self.client.request(msg, {n: np.frombuffer(b, dtype=np.uint8) for n, b in files.items()})

    def load(self, run: str):
        return self.client.request(LoadLatest(request_id=self.client.next_id(), run_name=run))

    def raw(self, frames: list) -> tuple:
        """Send arbitrary frames on a fresh DEALER and decode the reply."""
        sock = connect_dealer(self.address)
        try:
            sock.send_multipart(frames)
            assert sock.poll(5000), "no reply from the checkpoint service"
            return Decoder(FromCheckpoint).decode(sock.recv_multipart())
        finally:
            sock.close(0)

    def close(self):
        self.client.close()
        self.stop.set()
        self.thread.join(5)


@pytest.fixture
def running(tmp_path):
    r = Running(tmp_path / "runs", keep=2)
    yield r
    r.close()


FILES = {
    "actor/model.safetensors": os.urandom(300_000),
    "optim/adam.json": b'{"lr": 2e-4}',
    "empty.bin": b"",
}
META = b'{"iteration": 4, "env_steps": 16384}'


def test_save_then_load_latest_returns_identical_bytes(running, tmp_path):
    reply, _ = running.save("exp1", 4, FILES, META)
    assert isinstance(reply, Saved)
    assert reply.bytes_written == 300_000 + 12
    assert Path(reply.path) == tmp_path / "runs" / "exp1" / "checkpoints" / "00000004"
    assert (Path(reply.path) / "actor" / "model.safetensors").read_bytes() == FILES["actor/model.safetensors"]

    reply, arrays = running.load("exp1")
    assert isinstance(reply, Loaded)
    assert (reply.iteration, reply.path, reply.meta) == (4, str(tmp_path / "runs" / "exp1" / "checkpoints" / "00000004"), META)
    assert reply.names == list(FILES)
    assert {n: a.tobytes() for n, a in arrays.items()} == FILES
    assert all(a.dtype == np.uint8 and a.ndim == 1 for a in arrays.values())

    assert running.metric("writes_total") == 1
    assert running.metric("bytes_written_total") == 300_012
    assert running.metric("write_seconds_count") == 1
    assert running.metric("loads_total") == 1
    assert any(line.startswith(f"checkpoint {reply.path} 0.29 MB") for line in running.lines)


def test_load_latest_of_an_unknown_run_is_not_found(running):
    reply, arrays = running.load("never-saved")
    assert isinstance(reply, NotFound) and "no checkpoint of run 'never-saved'" in reply.reason
    assert arrays == {}


def test_saves_are_pruned_to_keep_and_latest_skips_a_corrupt_one(running, tmp_path):
    for it in range(4):
        reply, _ = running.save("exp1", it, {"a": bytes([it]) * 10})
        assert isinstance(reply, Saved)
    root = tmp_path / "runs" / "exp1" / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["00000002", "00000003", "index.json"]
    (root / "00000003" / "a").write_bytes(b"\x09" * 10)  # same size, wrong hash
    reply, arrays = running.load("exp1")
    assert isinstance(reply, Loaded) and reply.iteration == 2 and arrays["a"].tobytes() == b"\x02" * 10
    assert running.metric("verify_failures_total") == 1


def test_malformed_frame_is_answered_counted_and_survived(running):
    body, _ = running.raw([b"\xff\x00 this is not msgpack"])
    assert isinstance(body, Error) and body.request_id == -1 and "undecodable" in body.reason
    assert running.metric("messages_refused_total", reason="undecodable") == 1
    reply, _ = running.save("exp1", 1, {"a": b"still serving"})
    assert isinstance(reply, Saved)


def test_unknown_message_type_is_refused_with_its_request_id(running):
    body, _ = running.raw(encode(Ack(request_id=77, count=1)))
    assert isinstance(body, Error) and body.request_id == 77 and "refused message" in body.reason
    assert running.metric("messages_refused_total", reason="unknown_kind") == 1
    reply, _ = running.load("nothing")
    assert isinstance(reply, NotFound)


def test_wrong_array_dtype_is_refused(running):
    msg = SaveCheckpoint(request_id=5, run_name="exp1", iteration=1, names=["a"], meta=b"{}")
    body, _ = running.raw(encode(msg, {"a": np.zeros(3, dtype=np.float32)}))
    assert isinstance(body, Error) and body.request_id == 5 and "expected 1-d uint8" in body.reason
    assert running.metric("messages_refused_total", reason="arrays") == 1


@pytest.mark.parametrize(
    "run_name, names, iteration, meta, reason, text",
    [
        ("../escape", ["a"], 1, b"{}", "run_name", "run_name '../escape' is not a plain folder name"),
        ("..", ["a"], 1, b"{}", "run_name", "is not a plain folder name"),
        ("exp1", ["../a"], 1, b"{}", "file_name", "'../a' has a '..' component"),
        ("exp1", ["manifest.json"], 1, b"{}", "file_name", "reserved for the checkpoint's own manifest"),
        ("exp1", ["a", "a"], 1, b"{}", "file_name", "'a' is given twice"),
        ("exp1", ["a", "b"], 1, b"{}", "names", "names lists ['b'] without an array"),
        ("exp1", ["a"], -3, b"{}", "iteration", "iteration -3 must be an int >= 0"),
        ("exp1", ["a"], 1, b"not json", "meta", "meta is not a JSON document"),
    ],
)
def test_refused_saves_name_the_problem(running, tmp_path, run_name, names, iteration, meta, reason, text):
    msg = SaveCheckpoint(request_id=running.client.next_id(), run_name=run_name, iteration=iteration, names=names, meta=meta)
    reply, _ = running.client.request(msg, {"a": np.frombuffer(b"x", dtype=np.uint8)})
    assert isinstance(reply, Error) and reply.request_id == msg.request_id
    assert text in reply.reason
    assert running.metric("messages_refused_total", reason=reason) == 1
    assert not (tmp_path / "escape").exists() and not (tmp_path / "runs" / "exp1").exists()


def test_write_failure_is_an_error_reply_not_a_crash(running, tmp_path):
    run = tmp_path / "runs" / "exp1"
    run.mkdir(parents=True)
    (run / "checkpoints").write_bytes(b"a file where the folder should be")
    reply, _ = running.save("exp1", 1, {"a": b"x"})
    assert isinstance(reply, Error) and "writing iteration 1 of run 'exp1' failed" in reply.reason
    assert running.metric("messages_refused_total", reason="write_failed") == 1
    reply, _ = running.save("exp2", 1, {"a": b"x"})
    assert isinstance(reply, Saved)


# ----------------------------------------------------------------------------- settings


def test_flags_win_over_environment_and_env_wins_over_defaults():
    env = {"ROYALEFLEET_CHECKPOINT_KEEP": "4", "ROYALEFLEET_RUNS_DIR": "/data/runs", "ROYALEFLEET_METRICS_PORT": "0"}
    s = parse_settings(["--keep", "7"], env)
    assert (s.keep, s.runs_dir, s.metrics_port, s.bind, s.max_message_mb) == (7, "/data/runs", 0, "tcp://127.0.0.1:5557", 64)
    assert parse_settings([], {}).metrics_host == "127.0.0.1"


def test_bad_settings_name_the_variable(capsys):
    with pytest.raises(SystemExit) as info:
        parse_settings([], {"ROYALEFLEET_CHECKPOINT_KEEP": "ten"})
    assert info.value.code == 2
    assert "ROYALEFLEET_CHECKPOINT_KEEP='ten': not a whole number" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_settings(["--metrics-port", "70000"], {})
    assert "70000 is not a port" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        parse_settings(["--help"], {})
    assert info.value.code == 0
    assert "ROYALEFLEET_CHECKPOINT_BIND" in capsys.readouterr().out


# ----------------------------------------------------------------------------- the process


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_process_serves_exports_metrics_and_stops_on_signal(tmp_path, signum):
    port, metrics_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "ROYALEFLEET_CHECKPOINT_KEEP": "1",
           "ROYALEFLEET_METRICS_PORT": "1",  # the flag below must win over this
           "ROYALEFLEET_CHECKPOINT_TOKEN": "t0ken"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.checkpoint", "--bind", f"tcp://127.0.0.1:{port}",
         "--runs-dir", str(tmp_path / "runs"), "--metrics-port", str(metrics_port)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    client = Client(f"tcp://127.0.0.1:{port}", Decoder(FromCheckpoint), name="checkpoint", timeout_s=10)
    try:
        assert "checkpoint service on" in proc.stdout.readline()
        for it in (1, 2):
            msg = SaveCheckpoint(request_id=client.next_id(), run_name="exp", iteration=it, names=["w"], meta=b"{}",
                                 token="t0ken")
            reply, _ = client.request(msg, {"w": np.arange(1000, dtype=np.uint8) // 4})
            assert isinstance(reply, Saved), reply
        assert proc.stdout.readline().startswith(f"checkpoint {tmp_path / 'runs' / 'exp' / 'checkpoints' / '00000001'} ")
        assert sorted(p.name for p in (tmp_path / "runs" / "exp" / "checkpoints").iterdir()) == ["00000002", "index.json"]
        page = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
        assert "royalefleet_checkpoint_writes_total 2.0" in page
        assert "royalefleet_checkpoint_bytes_written_total 2000.0" in page
        assert 'royalefleet_checkpoint_write_seconds_bucket{le="60.0"} 2.0' in page
        assert 'royalefleet_checkpoint_messages_refused_total{reason="undecodable"} 0.0' in page

        started = time.monotonic()
        proc.send_signal(signum)
        assert proc.wait(timeout=5) == 0
        assert time.monotonic() - started < 1.5
        assert "checkpoint service stopped" in proc.stdout.read()
    finally:
        client.close()
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_process_that_cannot_bind_says_why(tmp_path):
    blocker = zmq.Context.instance().socket(zmq.ROUTER)
    port = blocker.bind_to_random_port("tcp://127.0.0.1")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "services.checkpoint", "--bind", f"tcp://127.0.0.1:{port}", "--metrics-port", "0"],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "ROYALEFLEET_CHECKPOINT_TOKEN": "t"},
            capture_output=True, text=True, timeout=20,
        )
    finally:
        blocker.close(0)
    assert done.returncode == 2
    assert f"cannot bind tcp://127.0.0.1:{port}" in done.stderr


def test_process_without_a_writer_token_does_not_start(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("ROYALEFLEET_CHECKPOINT_TOKEN", "ROYALEFLEET_CURVE_DIR")}
    done = subprocess.run(
        [sys.executable, "-m", "services.checkpoint", "--bind", f"tcp://127.0.0.1:{free_port()}", "--metrics-port",
         "0", "--runs-dir", str(tmp_path)], cwd=REPO, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True,
        text=True, timeout=20)
    assert done.returncode == 2
    assert "no checkpoint writer token: ROYALEFLEET_CHECKPOINT_TOKEN is unset and CURVE is off" in done.stderr
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- hostile input (issue 12)


class Guarded(Running):
    """A service started with a writer token (as ``royalefleet up`` and Compose start it)."""

    TOKEN = "s3cret-token"

    def __init__(self, runs_dir: Path, keep: int):
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.registry = CollectorRegistry()
        self.lines: list[str] = []
        sock = bind_router(self.address, max_bytes=1 << 20)
        self.service = CheckpointService(sock, runs_dir, keep=keep, metrics=Metrics(self.registry),
                                         out=self.lines.append, max_message_bytes=1 << 20, token=self.TOKEN)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(sock,), daemon=True)
        self.thread.start()
        self.client = Client(self.address, Decoder(FromCheckpoint), name="checkpoint", timeout_s=10)

    def save_as(self, token: str, run: str, iteration: int, files: dict[str, bytes]):
        msg = SaveCheckpoint(request_id=self.client.next_id(), run_name=run, iteration=iteration,
                             names=list(files), meta=b"{}", token=token)
        return self.client.request(msg, {n: np.frombuffer(b, dtype=np.uint8) for n, b in files.items()})


@pytest.fixture
def guarded(tmp_path):
    r = Guarded(tmp_path, keep=2)
    yield r
    r.stop.set()
    r.thread.join(5)
    r.client.close()


def test_a_save_without_the_writer_token_is_refused_and_prunes_nothing(guarded, tmp_path):
    # Before: an unauthenticated SaveCheckpoint on the loopback default was written and pruned
    # the oldest good checkpoint (keep=2), and a resume then loaded the attacker's bytes.
    for it in (1, 2):
        reply, _ = guarded.save_as(Guarded.TOKEN, "r", it, {"a.bin": b"good"})
        assert isinstance(reply, Saved)
    for token in ("", "wrong", Guarded.TOKEN + "x"):
        reply, _ = guarded.save_as(token, "r", 3, {"a.bin": b"evil"})
        assert isinstance(reply, Error)
        assert "SaveCheckpoint for run 'r': missing or wrong writer token" in reply.reason
    assert sorted(p.name for p in (tmp_path / "r" / "checkpoints").iterdir() if p.is_dir()) == ["00000001", "00000002"]
    reply, arrays = guarded.load("r")
    assert isinstance(reply, Loaded) and reply.iteration == 2 and bytes(arrays["a.bin"]) == b"good"
    assert guarded.metric("messages_refused_total", reason="unauthorized") == 3
    # printed once (rate-limited per reason), the counter has all three
    assert sum("missing or wrong writer token" in line for line in guarded.lines) == 1


def test_refused_saves_and_snapshots_create_no_run_folder(guarded, tmp_path):
    from shared.messages import SaveSnapshot

    for k in range(10):
        reply, _ = guarded.save_as("", f"fuzz-{k}", 1, {"a.bin": b"x"})
        assert isinstance(reply, Error)
        reply, _ = guarded.client.request(
            SaveSnapshot(request_id=guarded.client.next_id(), run_name=f"snap-{k}", spec=b"{}"),
            {"actor": np.zeros(4, np.uint8)})
        assert isinstance(reply, Error) and "SaveSnapshot for run" in reply.reason
        reply, _ = guarded.load(f"load-{k}")
        assert isinstance(reply, NotFound)
    assert list(tmp_path.iterdir()) == []
    assert guarded.metric("messages_refused_total", reason="unauthorized") == 20


def test_a_message_over_the_limit_in_several_frames_is_refused_oversized(guarded, tmp_path):
    # Before: MAXMSGSIZE bounded each frame, so three frames just under 1 MiB were read whole.
    part = b"\0" * ((1 << 20) - 100)
    files = {"a.bin": part, "b.bin": part, "c.bin": part}
    reply, _ = guarded.save_as(Guarded.TOKEN, "r", 1, files)
    assert isinstance(reply, Error) and "for the whole message" in reply.reason  # answered: no 10 s timeout
    assert guarded.metric("messages_refused_total", reason="oversized") == 1
    assert not (tmp_path / "r").exists()
    reply, _ = guarded.save_as(Guarded.TOKEN, "r", 1, {"a.bin": b"small"})
    assert isinstance(reply, Saved)


def test_the_writer_token_rule(tmp_path):
    import zmq.auth

    from shared.writer_token import TOKEN_ENV, checkpoint_token, token_matches

    with pytest.raises(OSError, match=r"no checkpoint writer token: ROYALEFLEET_CHECKPOINT_TOKEN is unset and CURVE "
                       r"is off"):
        checkpoint_token({})  # never empty (issue 38)
    with pytest.raises(OSError, match="no checkpoint writer token"):
        checkpoint_token({TOKEN_ENV: "", "ROYALEFLEET_CURVE_DIR": ""})
    assert checkpoint_token({TOKEN_ENV: "abc", "ROYALEFLEET_CURVE_DIR": str(tmp_path)}) == "abc"
    zmq.auth.create_certificates(str(tmp_path), "server")
    derived = checkpoint_token({"ROYALEFLEET_CURVE_DIR": str(tmp_path)})
    assert len(derived) == 64 and derived == checkpoint_token({"ROYALEFLEET_CURVE_DIR": str(tmp_path)})
    other = tmp_path / "other"
    other.mkdir()
    zmq.auth.create_certificates(str(other), "server")
    assert checkpoint_token({"ROYALEFLEET_CURVE_DIR": str(other)}) != derived
    with pytest.raises(OSError, match="server.key_secret"):
        checkpoint_token({"ROYALEFLEET_CURVE_DIR": str(tmp_path / "missing")})
    assert token_matches("anything", "") and token_matches("t", "t") and not token_matches("", "t")


def test_latest_names_every_checkpoint_it_skipped_and_why(running, tmp_path):
    """Issue 12 item 6: the learner must tell "no checkpoint" (start fresh) from "checkpoints,
    none verifies" (refuse): ``skipped`` is empty for the first, and names each checkpoint and
    its failing file for the second; a fallback to an older one names the newer ones too."""
    for it in (1, 2):
        assert isinstance(running.save("exp1", it, {"a": bytes([it]) * 10, "b": b"x"})[0], Saved)
    root = tmp_path / "runs" / "exp1" / "checkpoints"
    (root / "00000002" / "b").write_bytes(b"y")  # same size, wrong hash
    reply, _ = running.load("exp1")
    assert isinstance(reply, Loaded) and reply.iteration == 1
    assert len(reply.skipped) == 1 and reply.skipped[0].startswith(f"checkpoint {root / '00000002'}: b: sha256 ")
    assert not reply.skipped[0].endswith("checkpoint")  # the log line's "trying the next older" tail is not in it
    (root / "00000001" / "a").unlink()
    reply, arrays = running.load("exp1")
    assert isinstance(reply, NotFound) and arrays == {}
    assert [s.split(": ")[:2] for s in reply.skipped] == [[f"checkpoint {root / '00000002'}", "b"],
                                                          [f"checkpoint {root / '00000001'}", "a"]]
    assert running.load("never-saved")[0].skipped == []
