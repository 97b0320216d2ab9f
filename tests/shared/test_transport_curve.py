"""CURVE authentication on loopback: an allow-listed client is served; an unknown key and a
plain (non-CURVE) client get nothing while the allowed one still works; the allow-list is
re-read without a restart; ``royalefleet keys`` writes what the services read from
ROYALEFLEET_CURVE_DIR; a real service started with it refuses strangers."""

from __future__ import annotations

import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zmq
import zmq.auth

from royalefleet import cmd_keys
from shared import transport
from shared.messages import Decoder, Error, FromCheckpoint, LoadLatest, NotFound, SaveCheckpoint, Saved
from shared.transport import CURVE_DIR_ENV, Client, CurveClient, CurveServer
from shared.writer_token import checkpoint_token

REPO = Path(__file__).resolve().parents[2]
REFUSED_WAIT_MS = 1500


class Net:
    """Sockets on a private context, closed in an order that is safe for ZeroMQ: a socket may
    be closed only by the thread using it, so the ZAP handler stops itself, the test's sockets
    are closed here, and each refusal watcher closes its monitor once its socket is gone."""

    def __init__(self):
        self.ctx = zmq.Context()
        self.sockets: list[zmq.Socket] = []

    def server(self, curve, address="tcp://127.0.0.1:*") -> tuple[zmq.Socket, str]:
        sock = transport.bind_router(address, ctx=self.ctx, curve=curve)
        self.sockets.append(sock)
        return sock, sock.getsockopt_string(zmq.LAST_ENDPOINT)

    def client(self, address, curve=None) -> zmq.Socket:
        sock = transport.connect_dealer(address, ctx=self.ctx, curve=curve)
        self.sockets.append(sock)
        return sock

    def raw(self, kind) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        self.sockets.append(sock)
        return sock

    def close(self) -> None:
        transport.stop_curve(self.ctx)
        for sock in self.sockets:
            sock.close(0)
        deadline = time.monotonic() + 5
        for t in threading.enumerate():
            if t.name == "curve-refusal-watch":
                t.join(max(0.0, deadline - time.monotonic()))
        self.ctx.term()


@pytest.fixture
def net():
    n = Net()
    yield n
    n.close()


@pytest.fixture
def keys(tmp_path) -> Path:
    folder = tmp_path / "keys"
    cmd_keys.ensure_keys(str(folder), ["box2"])
    zmq.auth.create_certificates(str(tmp_path), "stranger")
    return folder


def server_keys(folder: Path, role: str = "learner") -> CurveServer:
    """Server ``role``'s keys from the keys folder ``folder`` (its own folder, roles/<role>)."""
    return transport.curve_server_keys({CURVE_DIR_ENV: str(folder / "roles" / role)})


def client_keys(folder: Path, role: str | None = "rollout") -> CurveClient:
    """Client ``role``'s keys from the keys folder ``folder``; ``role`` None: ``folder`` is a
    client's own keys folder (an extracted host bundle)."""
    return transport.curve_client_keys({CURVE_DIR_ENV: str(folder / "roles" / role if role else folder)})


def stranger(keys: Path) -> CurveClient:
    return CurveClient(str(keys.parent / "stranger.key_secret"), str(keys / "server.key"))


def echo_once(server: zmq.Socket, wait_ms: int = 5000) -> list[bytes] | None:
    """Answer one message (the payload upper-cased); None if none arrived within wait_ms."""
    if not server.poll(wait_ms, zmq.POLLIN):
        return None
    identity, payload = server.recv_multipart()
    server.send_multipart([identity, payload.upper()])
    return [payload]


def test_an_allowed_client_gets_a_reply_and_is_identified_by_its_key(net, keys):
    server, address = net.server(server_keys(keys))
    client = net.client(address, curve=client_keys(keys))
    client.send(b"hello")
    assert server.poll(5000, zmq.POLLIN)
    frames = server.recv_multipart(copy=False)
    assert bytes(frames[1]) == b"hello"
    public, _ = zmq.auth.load_certificate(str(keys / "client.key"))
    assert frames[1].get("User-Id") == public.decode()  # the key, not a self-declared name
    server.send_multipart([bytes(frames[0]), b"HELLO"])
    assert client.poll(5000, zmq.POLLIN) and client.recv() == b"HELLO"


def test_an_unknown_key_gets_nothing_while_the_allowed_client_still_works(net, keys, capsys):
    server, address = net.server(server_keys(keys))
    bad = net.client(address, curve=stranger(keys))
    bad.send(b"let me in")
    assert echo_once(server, REFUSED_WAIT_MS) is None  # never reaches the server
    assert not bad.poll(100, zmq.POLLIN)
    out = capsys.readouterr().out
    assert "CURVE refused a client" in out  # the server says so ...
    assert "refused this client's key" in out  # ... and so does the client
    good = net.client(address, curve=client_keys(keys))
    good.send(b"ping")
    assert echo_once(server) == [b"ping"]
    assert good.poll(5000, zmq.POLLIN) and good.recv() == b"PING"
    # ... and the stranger is not retried: ZeroMQ drops a refused connection for good.
    with pytest.raises(zmq.Again):
        bad.send(b"again", zmq.NOBLOCK)
    assert echo_once(server, 500) is None


def test_a_plain_client_is_refused_by_a_curve_server(net, keys):
    server, address = net.server(server_keys(keys))
    plain = net.client(address)
    plain.send(b"no keys")
    assert echo_once(server, REFUSED_WAIT_MS) is None
    good = net.client(address, curve=client_keys(keys))
    assert ask_after_echo(server, good, b"ok") == b"OK"


def ask_after_echo(server, client, payload):
    client.send(payload)
    assert echo_once(server) == [payload]
    assert client.poll(5000, zmq.POLLIN)
    return client.recv()


def test_a_curve_client_does_not_talk_to_a_server_with_another_key(net, keys, tmp_path):
    """The client pins the server's public key: an impostor server gets no message."""
    zmq.auth.create_certificates(str(tmp_path), "impostor")
    impostor, address = net.server(CurveServer(str(tmp_path / "impostor.key_secret"),
                                                str(keys / "roles" / "learner" / "clients")))
    client = net.client(address, curve=client_keys(keys))
    client.send(b"secret")
    assert echo_once(impostor, REFUSED_WAIT_MS) is None


def test_the_allow_list_is_read_again_without_a_restart(net, keys, tmp_path):
    lines: list[str] = []
    sock = net.raw(zmq.ROUTER)
    allow_list = keys / "roles" / "learner" / "clients"
    allowed = transport.curve_server(sock, str(keys / "server.key_secret"), str(allow_list), say=lines.append)
    sock.bind("tcp://127.0.0.1:*")
    address = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    bad = net.client(address, curve=stranger(keys))
    bad.send(b"1")
    assert echo_once(sock, REFUSED_WAIT_MS) is None
    assert allowed.refused >= 1
    assert any("refused a client" in line for line in lines)
    shutil.copy(tmp_path / "stranger.key", allow_list / "stranger.key")  # admit it
    late = net.client(address, curve=stranger(keys))
    late.send(b"2")
    got = echo_once(sock)
    assert got in ([b"1"], [b"2"])  # the first reconnect of `bad` may win the race
    (allow_list / "stranger.key").unlink()  # revoke: new handshakes are refused again
    again = net.client(address, curve=stranger(keys))
    again.send(b"3")
    while (got := echo_once(sock, REFUSED_WAIT_MS)) is not None:
        assert got != [b"3"]


def test_curve_is_off_unless_the_keys_folder_is_named():
    assert transport.curve_server_keys({}) is None
    assert transport.curve_client_keys({CURVE_DIR_ENV: ""}) is None
    assert transport.curve_server_keys({CURVE_DIR_ENV: "/k"}) == CurveServer("/k/server.key_secret", "/k/clients")
    assert transport.curve_client_keys({CURVE_DIR_ENV: "/k"}) == CurveClient("/k/client.key_secret", "/k/server.key")


def test_missing_keys_are_an_oserror_that_says_how_to_make_them(net, tmp_path):
    with pytest.raises(OSError, match="royalefleet keys"):
        net.server(server_keys(tmp_path / "nowhere"))
    with pytest.raises(OSError, match="royalefleet keys"):
        net.client("tcp://127.0.0.1:1", curve=client_keys(tmp_path / "nowhere"))
    # a client role's folder holds no server secret: it cannot serve
    folder = tmp_path / "k"
    cmd_keys.ensure_keys(str(folder))
    with pytest.raises(OSError, match="server.key_secret"):
        net.server(server_keys(folder, "rollout"))
    with pytest.raises(OSError, match="no secret key"):
        net.server(CurveServer(str(folder / "server.key"), str(folder / "clients")))


def test_keys_layout_is_idempotent_and_bundles_a_host(tmp_path, net, capsys):
    folder = tmp_path / "keys"
    assert cmd_keys.main(["--dir", str(folder), "--hosts", "1"]) == 0
    out = capsys.readouterr().out
    assert "host-1" in out and "copy" in out
    names = {p.relative_to(folder).as_posix() for p in folder.rglob("*")
             if p.is_file() and not p.relative_to(folder).as_posix().startswith("roles/")}
    assert names == {"server.key", "server.key_secret", "client.key", "client.key_secret", "learner.key",
                     "learner.key_secret", "evaluator.key", "evaluator.key_secret",
                     "clients/learner/local.key", "clients/learner/host-1.key", "clients/ladder/learner.key",
                     "clients/ladder/evaluator.key", "clients/checkpoint/learner.key",
                     "clients/checkpoint/evaluator.key", "hosts/host-1/server.key", "hosts/host-1/client.key",
                     "hosts/host-1/client.key_secret"}
    assert (folder / "server.key_secret").stat().st_mode & 0o077 == 0
    before = {n: (folder / n).read_bytes() for n in names}
    assert cmd_keys.ensure_keys(str(folder), ["host-1"]) == []  # nothing rewritten
    assert {n: (folder / n).read_bytes() for n in names} == before

    # A bundle is the host's keys as a .tar.gz; extracted, it is a client keys folder that the
    # server (reading the learner host's folder) admits.
    data = cmd_keys.bundle_tar(str(folder), "host-1")
    host_dir = tmp_path / "box"
    host_dir.mkdir()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"server.key", "client.key", "client.key_secret"}
        assert members["client.key_secret"].mode == 0o600 and members["client.key"].uid == cmd_keys.IMAGE_UID
        tar.extractall(host_dir, filter="data")
    server, address = net.server(server_keys(folder))
    client = net.client(address, curve=client_keys(host_dir, None))
    assert ask_after_echo(server, client, b"from box") == b"FROM BOX"


def test_bundle_writes_only_the_archive_to_stdout(tmp_path):
    folder = tmp_path / "keys"
    out = subprocess.run([sys.executable, "-m", "royalefleet.cmd_keys", "--dir", str(folder), "--bundle", "box9"],
                         capture_output=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
        assert sorted(tar.getnames()) == ["client.key", "client.key_secret", "server.key"]
    assert b"box9" in out.stderr
    assert (folder / "clients" / "learner" / "box9.key").exists()
    assert (folder / "roles" / "learner" / "clients" / "box9.key").exists()
    assert not (folder / "roles" / "ladder" / "clients" / "box9.key").exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_real_service_with_the_curve_variable_refuses_strangers(tmp_path, keys):
    """The checkpoint service as Compose runs it (ROYALEFLEET_CURVE_DIR set): the learner's
    keys get an answer; a stranger's key and a plain client get none."""
    address = f"tcp://127.0.0.1:{free_port()}"
    env = os.environ | {
        "ROYALEFLEET_CHECKPOINT_BIND": address, "ROYALEFLEET_RUNS_DIR": str(tmp_path / "runs"),
        "ROYALEFLEET_METRICS_PORT": "0", CURVE_DIR_ENV: str(keys / "roles" / "checkpoint"), "PYTHONPATH": str(REPO),
    }
    proc = subprocess.Popen([sys.executable, "-m", "services.checkpoint"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    clients = []
    try:
        def load(curve, timeout_s):
            c = Client(address, Decoder(FromCheckpoint), name="checkpoint", timeout_s=timeout_s, curve=curve)
            clients.append(c)
            return c.request(LoadLatest(request_id=c.next_id(), run_name="default"))

        reply, _ = load(client_keys(keys, "learner"), 30)  # waits for the service to start
        assert isinstance(reply, NotFound)
        reply, _ = load(client_keys(keys, "evaluator"), 10)  # evaluators load snapshots
        assert isinstance(reply, NotFound)
        with pytest.raises(transport.ServiceTimeout):
            load(stranger(keys), REFUSED_WAIT_MS / 1000)
        with pytest.raises(transport.ServiceTimeout):
            load(None, REFUSED_WAIT_MS / 1000)
        # A rollout's key, local or an extra host's, opens the learner only: no answer here.
        for rollout in (client_keys(keys), client_keys(keys / "hosts" / "box2", None)):
            with pytest.raises(transport.ServiceTimeout):
                load(rollout, REFUSED_WAIT_MS / 1000)

        # Writes need the run's writer token, derived from the servers' secret key: an admitted
        # evaluator (client keys only) cannot save; the learner (it holds the key) can.
        def save(curve, token):
            c = Client(address, Decoder(FromCheckpoint), name="checkpoint", timeout_s=10, curve=curve)
            clients.append(c)
            return c.request(SaveCheckpoint(request_id=c.next_id(), run_name="default", iteration=1,
                                            names=["a.bin"], meta=b"{}", token=token),
                             {"a.bin": np.frombuffer(b"abc", np.uint8)})[0]

        reply = save(client_keys(keys, "evaluator"), "")
        assert isinstance(reply, Error) and "missing or wrong writer token" in reply.reason
        assert not (tmp_path / "runs" / "default").exists()
        reply = save(client_keys(keys, "learner"), checkpoint_token({CURVE_DIR_ENV: str(keys / "roles" / "learner")}))
        assert isinstance(reply, Saved)
    finally:
        for c in clients:
            c.close()
        proc.send_signal(signal.SIGTERM)
        try:
            output, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
    assert "CURVE on" in output
    assert "refused a client" in output
    assert proc.returncode == 0, output


# ----------------------------------------------------------------------------- the ZAP loop survives (issue 38)


def test_a_key_file_removed_mid_handshake_refuses_that_one_and_a_good_client_connects_after(net, keys, monkeypatch):
    """A host's key removed between the allow-list's listing and its stat (a retired host,
    mid-handshake) used to raise inside pyzmq's authenticator loop, which then ended: no client
    connected until a restart. Now that handshake goes on without the file, one that fails in
    any other way is refused, and the next good client is served."""
    said: list[str] = []
    curve = server_keys(keys)
    sock = net.ctx.socket(zmq.ROUTER)
    net.sockets.append(sock)
    transport.curve_server(sock, curve.secret_key_file, curve.allowed_clients_dir, say=said.append)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    address = f"tcp://127.0.0.1:{port}"
    allow_list = Path(curve.allowed_clients_dir)  # the learner's own allow-list (roles/learner/clients)
    retired = allow_list / "retired.key"
    shutil.copy(keys.parent / "stranger.key", retired)
    real_scandir = os.scandir

    def listing_then_removed(path):
        entries = list(real_scandir(path))
        if retired.exists():
            retired.unlink()  # gone after the listing, before its stat
        return iter(entries)

    monkeypatch.setattr(transport.os, "scandir", listing_then_removed)
    first = net.client(address, curve=client_keys(keys))
    first.send(b"during")
    assert echo_once(sock) == [b"during"]  # the race cost nothing: the file is skipped
    monkeypatch.setattr(transport.os, "scandir", real_scandir)

    real_load = zmq.auth.load_certificate
    calls = []

    def broken_once(path):
        if not calls and Path(path).parent.name == "clients":  # the server's allow-list read, not a client's own key
            calls.append(path)
            raise RuntimeError("disk went away")
        return real_load(path)

    (allow_list / "box3.key").write_bytes((allow_list / "box2.key").read_bytes())  # a change: re-read
    monkeypatch.setattr(zmq.auth, "load_certificate", broken_once)
    refused = net.client(address, curve=client_keys(keys))
    refused.send(b"refused")
    assert echo_once(sock, REFUSED_WAIT_MS) is None
    assert any("reading the allow-list" in line and "RuntimeError: disk went away" in line for line in said), said
    good = net.client(address, curve=client_keys(keys))
    good.send(b"after")
    assert echo_once(sock) == [b"after"]
    assert good.poll(5000, zmq.POLLIN) and good.recv() == b"AFTER"
