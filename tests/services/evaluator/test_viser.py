"""The evaluator's ``--viser``: its games stream to a RoyaleViser viewer (a local UDP listener
that says hello as the viewer does and decodes what RoyaleGym's publisher sends), a frame per
engine tick from the first game's start, and the games' records are exactly the unwatched ones."""

from __future__ import annotations

import time

import pytest

from services.evaluator.main import parse_settings
from services.evaluator.service import Evaluator
from shared.config import load_config
from shared.messages import EvalJob
from tests.viser_viewer import Viewer, free_udp_port

NOOP, RAND = "scripted:noop", "scripted:random_legal"
WANTED = 60


@pytest.fixture(scope="module")
def cfg():
    return load_config({"profile": "tiny", "run_name": "t"})


def evaluator(cfg, said, viser=""):
    # no ladder and no checkpoint service answer: scripted players need neither
    return Evaluator(cfg, ladder="tcp://127.0.0.1:9", checkpoint="tcp://127.0.0.1:9", say=said.append, viser=viser)


def play(ev):
    try:
        return ev.play(EvalJob(request_id=1, job_id=3, run_name="t", a=RAND, b=NOOP, seeds=[0], deadline_s=60.0))
    finally:
        ev.close()


@pytest.mark.slow
def test_the_evaluator_streams_its_games_tick_by_tick_and_plays_them_exactly_as_unwatched(cfg):
    unwatched = play(evaluator(cfg, []))
    port, said = free_udp_port(), []
    watching = evaluator(cfg, said, f"127.0.0.1:{port}")
    watching.env()  # binds the publisher, so the viewer's hellos wait for the first game's reset
    with Viewer(port, wanted=WANTED) as viewer:
        time.sleep(0.3)
        watched = play(watching)
        frames = viewer.wait_for(WANTED, 5)
    assert f"evaluator: streaming its games to RoyaleViser at 127.0.0.1:{port} (run 't')" in said[0]
    assert watched == unwatched  # RAND vs NOOP on seed 0, both sides: records identical field by field
    assert len(watched) == 4 and min(r.episode_ticks for r in watched) > WANTED
    assert len(frames) >= WANTED
    first = frames[:WANTED]
    # the first game from its start: its reset's frame, then one frame per engine tick, in order
    assert [f["tick"] for f in first] == list(range(first[0]["tick"], first[0]["tick"] + WANTED))
    assert first[0]["tick"] == 0 and not any(f["game_over"] for f in first)
    assert all(f["meta"]["run"] == "t" and f["meta"]["source"] == "engine" for f in first)
    assert [f["meta"]["seq"] for f in first] == list(range(WANTED))
    assert all(len(f["players"]) == 2 for f in first)


def test_off_by_default_and_a_bad_address_exits_2_naming_the_flag(capsys):
    assert parse_settings([], environ={}).viser == ""
    assert parse_settings([], environ={"ROYALEFLEET_VISER": "127.0.0.1:9870"}).viser == "127.0.0.1:9870"
    with pytest.raises(SystemExit) as exc:
        parse_settings(["--viser", "nowhere"], environ={})
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--viser" in err and "nowhere" in err and "expected HOST:PORT, for example 127.0.0.1:9870" in err


def test_an_address_another_evaluator_holds_is_said_and_the_games_play_on(cfg):
    import socket

    from services.evaluator.service import stream_to_viser
    from shared.envs import build_env
    from shared.evaluation import eval_env_config

    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    holder.bind(("127.0.0.1", 0))
    taken = holder.getsockname()[1]
    said: list[str] = []
    env = build_env(eval_env_config(cfg.env))
    try:
        assert not stream_to_viser(env, f"127.0.0.1:{taken}", "t", said.append)
        assert env.viser is None
    finally:
        env.close()
        holder.close()
    assert said[0].startswith(f"evaluator: --viser 127.0.0.1:{taken}: cannot stream to 127.0.0.1:{taken} because "
                              "something is already using it")
    assert said[0].endswith("; playing without streaming")
