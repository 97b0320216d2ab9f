"""A real tiny run with a user reward, a deck curriculum and a timestep limit (issue 16): the
curriculum read back from the result log, the stop at the first boundary at or past the limit,
and a resume after an edit to the user's package refused naming user_code."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from tests.stack import REPO, Up, read_rows, tiny_config
from tests.user_package import reward_doc, write_package

STARTER = ["Knight", "Archer", "Giant", "Minions", "Fireball", "Zap", "Cannon", "Musketeer"]
HOG = ["HogRider", "Musketeer", "Cannon", "Skeletons", "Fireball", "Log", "Knight", "Zap"]
ROYAL = ["Giant", "Archer", "Minions", "Zap", "Fireball", "Cannon", "Knight", "Skeletons"]


@pytest.mark.slow
def test_a_user_reward_and_curriculum_run_stop_at_the_timestep_limit_and_refuse_an_edited_resume(tmp_path):
    name = "mybot_" + uuid.uuid4().hex[:8]
    folder = write_package(tmp_path / "src", name)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "src"), str(REPO), os.environ.get("PYTHONPATH", "")]),
           "ROYALEFLEET_ALLOW_MODULES": name}  # the user's package, allowed on this machine
    runs = tmp_path / "runs"
    doc_env = reward_doc(name, per_tick=0.01, red_bonus=0.0)
    doc_env["seat_decks"] = {"deck": STARTER, "field": [HOG, ROYAL]}
    config = tiny_config(runs, env=doc_env, local={"evaluators": 0})
    up = Up(config, "--timesteps", "200", env=env)
    assert up.wait_exit(300) == 0, up.tail()
    rows = read_rows(runs / "default")
    # timesteps_per_iteration is 192: the first boundary at or past 200 is the second one
    assert [r["run/iteration"] for r in rows] == [1, 2]
    assert rows[0]["run/timesteps"] < 200 <= rows[1]["run/timesteps"]
    assert any("reach timestep_limit 200" in line for line in up.lines), up.tail()

    log = (runs / "default" / "ladder" / "results.jsonl").read_text().splitlines()
    records = [json.loads(line)["record"] for line in log]
    roles = {r["role"] for r in records}
    # the tiny mix (4 battles) holds 2 mirror battles and the rest against scripted or pool opponents
    assert "mirror" in roles and roles - {"mirror"}, roles
    for r in records:
        if r["role"] == "mirror" or r["player"] == "learner":
            assert sorted(r["deck"]) == sorted(STARTER), r
        else:
            assert sorted(r["deck"]) in (sorted(HOG), sorted(ROYAL)), r
        # the user's reward, as written: 0.01 a tick, 10 ticks a decision, nothing else
        assert r["undiscounted_return"] == pytest.approx(0.1 * r["episode_steps"], rel=1e-12), r
    assert any(r["role"] != "mirror" and r["player"] == "learner" for r in records)

    # an edit to the user's package is another run: the resume is refused naming user_code
    (folder / "util.py").write_text("def ticks_between(prev, state):\n    return 3 * (state.tick - prev.tick)\n")
    refused = Up(config, "--timesteps", "400", env=env)
    assert refused.wait_exit(300) != 0
    text = "\n".join(refused.lines)
    assert "refusing to resume" in text and "user_code: checkpoint {" in text and name in text, refused.tail()
    assert len(read_rows(runs / "default")) == 2
