"""`royalefleet play --viser` streams its matches to a RoyaleViser viewer: a local UDP listener
says hello as the viewer does and decodes what RoyaleGym's publisher sends."""

from __future__ import annotations

import socket
import threading
import time

import msgspec
import pytest

from royalefleet.cli import main


WANTED = 100


def free_udp_port() -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Viewer(threading.Thread):
    """Sends RoyaleViser's heartbeat to the publisher every 0.1 s and keeps every datagram back,
    until it holds ``WANTED`` frames: then it goes quiet, as a closed viewer does, and the
    publisher stops sending after its attach timeout."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        from royalegym.viser import HELLO

        self.hello, self.target, self.frames, self.stop = HELLO, ("127.0.0.1", port), [], threading.Event()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)

    def run(self):
        while not self.stop.is_set():
            if len(self.frames) < WANTED:
                self.sock.sendto(self.hello, self.target)
            try:
                while True:
                    data, _ = self.sock.recvfrom(1 << 17)
                    self.frames.append(msgspec.msgpack.decode(data))
            except (TimeoutError, OSError):
                pass


@pytest.mark.slow
def test_play_streams_every_tick_of_its_match_to_a_viewer_that_said_hello(tmp_path, capsys):
    (tmp_path / "watch").mkdir()  # a named run must exist (scripted players need nothing of it)
    port = free_udp_port()
    viewer = Viewer(port)
    viewer.start()
    try:
        argv = ["play", "scripted:defend", "scripted:random_legal", "--games", "1", "--profile", "tiny",
                "--runs-dir", str(tmp_path), "--run-name", "watch", "--out", str(tmp_path / "pages"),
                "--viser", f"127.0.0.1:{port}", "--speed", "0"]
        assert main(argv) == 0
    finally:
        time.sleep(0.2)
        viewer.stop.set()
        viewer.join(2)
    out = capsys.readouterr().out
    assert f"streaming to RoyaleViser at 127.0.0.1:{port} (run 'watch')" in out
    assert viewer.frames, "no frame reached the viewer"
    frames = viewer.frames[:WANTED]
    assert len(frames) == WANTED
    ticks = [f["tick"] for f in frames]
    # one frame per engine tick while attached (royalegym/env.py _advance), in order
    assert all(b > a for a, b in zip(ticks, ticks[1:])), ticks
    assert all(f["meta"]["run"] == "watch" and f["meta"]["source"] == "engine" for f in frames)
    assert all("units" in f and "players" in f for f in frames)


def test_a_bad_viser_address_is_refused_with_the_form(tmp_path, capsys):
    argv = ["play", "scripted:defend", "scripted:noop", "--profile", "tiny", "--runs-dir", str(tmp_path),
            "--viser", "nowhere"]
    assert main(argv) == 2
    assert "royalefleet play: --viser nowhere: expected HOST:PORT, for example 127.0.0.1:9870" in capsys.readouterr().err


def test_play_viser_names_the_extra_when_royaleviser_is_missing(monkeypatch):
    import importlib.util
    import tomllib
    from pathlib import Path

    from royalefleet import cmd_play

    extras = tomllib.loads((Path(cmd_play.__file__).parent.parent / "pyproject.toml").read_text())
    assert [d.split("==")[0] for d in extras["project"]["optional-dependencies"]["viser"]] == ["royaleviser"]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "royaleviser" else real(name, *a))
    assert cmd_play.viser_missing() == (" (RoyaleViser is not installed here: pip install -e '.[viser]' from the "
                                        "checkout, or pip install royaleviser where the viewer runs)")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    assert cmd_play.viser_missing() == ""
