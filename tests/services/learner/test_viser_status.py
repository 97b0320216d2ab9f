"""The learner's ``--viser``: its status line reaches RoyaleViser's status channel (the stream's
port + 1) when a viewer says hello: a local UDP listener says the viewer's hello and decodes the
``{"learning": {...}}`` datagram; nothing is sent while nobody watches."""

from __future__ import annotations

import socket
import time

import pytest

from services.learner.main import parse_settings
from services.learner.row import write_row
from services.learner.viser_status import ViserStatus, learning_status, open_status
from shared.viser import StatusChannel
from tests.services.learner.rig import build_learner
from tests.services.learner.test_stages import collected, full_row
from tests.viser_viewer import Viewer, free_udp_port


def test_the_default_stream_address_is_royalegyms():
    import royalegym.viser

    from shared.viser import STREAM_DEFAULT, STREAM_HOST, STREAM_PORT, status_address

    assert (STREAM_HOST, STREAM_PORT) == (royalegym.viser.HOST, royalegym.viser.PORT)
    assert STREAM_DEFAULT == "127.0.0.1:9870" and status_address(STREAM_DEFAULT) == ("127.0.0.1", 9871)


def test_the_status_holds_the_progress_lines_facts_by_the_viewers_names():
    row = {"run/iteration": 7, "run/timesteps": 4096, "throughput/collected_steps_per_second": 113.5,
           "throughput/env_steps_per_second": 220.25, "time/update": 23.25, "ppo/kl": 0.0125,
           "ppo/clip_fraction": 0.0625, "ppo/entropy": 3.5, "ppo/policy_loss": -0.01, "ppo/value_loss": 0.5,
           "env/win_rate_scripted": 0.75, "env/episodes_vs/scripted:noop": 3, "env/episodes_vs/scripted:random_legal": 5,
           "health/rows_invalid": 0, "run/state_digest": "abc"}
    assert learning_status(row, "myrun") == {
        "run": "myrun", "iteration": 7, "policy_loss": -0.01, "value_loss": 0.5, "entropy": 3.5, "kl": 0.0125,
        "clip_frac": 0.0625, "env_steps_per_s": 220.25,
        "extra": {"timesteps": 4096, "learner timesteps/s": 113.5, "update s": 23.25, "win vs scripted": 0.75,
                  "episodes vs scripted": 8, "rows lost": 0}}


def test_a_viewer_that_says_hello_gets_the_rows_status_on_port_plus_one(tmp_path):
    stream = free_udp_port()
    said: list[str] = []
    status = ViserStatus(f"127.0.0.1:{stream}", "unit", said.append)
    learner = build_learner(str(tmp_path), say=said.append, viser_status=status)
    learner.state.timesteps, learner.state.env_steps = 2, 4
    row, _ = full_row(learner, collected(learner))
    try:
        assert status.channel.address == ("127.0.0.1", stream + 1)
        assert said[0] == (f"learner: the status line goes to RoyaleViser's status channel on 127.0.0.1:{stream + 1} "
                           f"while a viewer watches (python -m royaleviser --stream 127.0.0.1:{stream})")
        with Viewer(stream + 1) as viewer:
            deadline = time.monotonic() + 5
            while not status.channel.attached and time.monotonic() < deadline:
                time.sleep(0.02)
            write_row(learner.parts, row)
            got = viewer.wait_for(1, 5)
    finally:
        status.close()
    assert got, "no status reached the viewer"
    learning = got[0]["learning"]
    assert list(got[0]) == ["learning"]
    # collected(): iteration 1, 2 trainable rows over 2.0 s of collection, 4 env steps, an update of 1.0 s, KL 0
    assert learning["run"] == "unit" and learning["iteration"] == 1 and learning["kl"] == 0.0
    assert learning["env_steps_per_s"] == 4 / 2.0
    assert learning["extra"]["timesteps"] == 2
    assert learning["extra"]["learner timesteps/s"] == 2 / 2.0
    assert learning["extra"]["update s"] == 1.0
    assert said[-1].startswith("it    1 | ts         2 | 1 ts/s | update 1.0 s")  # the same facts, as printed


def test_the_standing_status_goes_to_a_viewer_that_comes_later_and_nothing_goes_unasked():
    port = free_udp_port()
    channel = StatusChannel("127.0.0.1", port, poll_s=0.05)
    try:
        assert not channel.publish({"iteration": 4, "kl": 0.02})  # nobody watching: kept, not sent
        assert channel.sent == 0 and not channel.attached
        with Viewer(port) as viewer:
            got = viewer.wait_for(1, 5)  # its hello alone brings the standing status
            assert got[0] == {"learning": {"iteration": 4, "kl": 0.02}}
            assert channel.attached
            assert channel.publish({"iteration": 5, "kl": 0.01})
            got = viewer.wait_for(1 + 1, 5)
        assert {"learning": {"iteration": 5, "kl": 0.01}} in got[1:]
        # each status reaches one viewer a few times (UDP acknowledges nothing), then stops
        assert got.count({"learning": {"iteration": 4, "kl": 0.02}}) <= 3
    finally:
        channel.close()


def test_a_status_too_big_for_a_datagram_is_counted_not_sent():
    channel = StatusChannel("127.0.0.1", 0)
    try:
        assert not channel.publish({"extra": {"x": "y" * 70_000}})
        assert channel.dropped == 1
    finally:
        channel.close()


def test_off_by_default_a_bad_address_exits_2_and_a_taken_one_is_said():
    assert parse_settings([], environ={}).viser == ""
    assert parse_settings([], environ={"ROYALEFLEET_VISER": "127.0.0.1:9870"}).viser == "127.0.0.1:9870"
    with pytest.raises(SystemExit) as exc:
        parse_settings(["--viser", "9870"], environ={})
    assert exc.value.code == 2
    assert open_status("", "r", print) is None
    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    holder.bind(("127.0.0.1", 0))
    taken = holder.getsockname()[1]
    said: list[str] = []
    try:
        assert open_status(f"127.0.0.1:{taken - 1}", "r", said.append) is None
    finally:
        holder.close()
    assert said == [f"learner: --viser 127.0.0.1:{taken - 1}: cannot bind the RoyaleViser status channel "
                    f"127.0.0.1:{taken} (Address already in use); another process holds it (one learner per port), "
                    "or the host is not this machine's: give another address; training without RoyaleViser's status"]
