"""Kills that land during a searched step's mid-step questions (issue 37 item 2), on the real
local stack of an ``expert_iteration`` run (royalefleet/chaos_mid_step.py catches the moment:
the learner frozen while a rollout's ``royalefleet_rollout_mid_step_waiting`` says 1, so the
question is outstanding when the kill lands, every time; no sleep decides it).

A rollout killed while it waits for its answer: the learner gives its shard up after the round
timeout (counted: a lost rollout, its pending searched rows as refused), trains on, and the
launcher's restart joins again. The learner killed with a question unanswered: the rollout gives
up after the round timeout (a counted mid-step timeout), says Hello again and joins the learner
resumed from its newest checkpoint, whose state is exactly that checkpoint's row's. Nothing is
counted twice: every row's replay holds exactly the searched rows of its window of iterations,
and the ladder files every finished episode once."""

from __future__ import annotations

import json
import re

import pytest

from royalefleet import chaos as chaos_mod
from royalefleet import chaos_mid_step

pytestmark = pytest.mark.slow


def test_kills_during_mid_step_questions_lose_nothing_and_nothing_waits_forever(tmp_path):
    chaos = chaos_mod.Chaos(tmp_path, seed=1, say=print, algorithm="expert_iteration")
    timeout = chaos.cfg.rollout.round_timeout_s
    chaos.start(doctor=False)
    try:
        chaos.wait_for("iteration 1", lambda: chaos.last_iteration() >= 1)
        chaos_mid_step.rollout_mid_question(chaos)
        chaos_mid_step.learner_mid_question(chaos, settle_s=0)
        chaos.wait_for("every service up", chaos.all_up)
        assert chaos.stop() == 0, chaos.tail()
    finally:
        if chaos.proc.poll() is None:
            chaos.abort()
        chaos.close()
    chaos_mod.check_run(chaos)
    f = chaos.figures
    assert chaos.problems == [], "\n".join(chaos.problems)
    assert f.kills == 2 and f.restarts >= 2
    # each kill landed during a question, and the next row came within the round timeout and an iteration
    assert [len(f.mid_question["rollout"]), len(f.mid_question["learner"])] == [1, 1]
    assert all(s < timeout + 60 for s in f.mid_question["rollout"] + f.mid_question["learner"]), f.mid_question
    lines = chaos.lines()
    rows = chaos.rows()
    # the rollout's death: its shard given up at the deadline and counted, its pending searched rows refused
    missed = [line for line in lines if f"missed the round deadline ({timeout:.0f} s)" in line]
    assert missed, chaos.tail(60)
    lost = [r for r in rows if r["health/rollouts_lost"]]
    assert len(lost) == 1 and lost[0]["search/refused"] > 0
    # no question went to a learner that had not sent its Step (refused unexpected, unanswered: a
    # stale Step played after a Rejoin), and every battle the checkpoint held continued
    assert not [line for line in lines if "outside a collection" in line or "did not answer SetState" in line]
    # the learner's death: resumed from its newest checkpoint, exactly that checkpoint's state
    resumed = [re.match(r"learner: resumed iteration (\d+) .*\(state ([0-9a-f]+)\)", line) for line in lines]
    resumed = [m for m in resumed if m]
    assert len(resumed) == 1
    it, digest = int(resumed[0][1]), resumed[0][2]
    assert rows[it - 1]["run/iteration"] == it and rows[it - 1]["run/state_digest"] == digest
    assert any(k.startswith("resume/") for k in rows[it])  # the first row the resumed learner wrote
    # nothing counted twice or lost: the replay is the searched rows of its last replay_iterations rows
    window = chaos.cfg.expert_iteration.replay_iterations
    decisions = [r["search/decisions"] for r in rows]
    assert [r["expit/replay_rows"] for r in rows] == [sum(decisions[max(0, k + 1 - window):k + 1])
                                                       for k in range(len(rows))]
    assert [r["run/iteration"] for r in rows] == list(range(1, len(rows) + 1)) and len(rows) > it
    # and the ladder filed every finished episode once, though its battle was re-played after each kill
    records = [json.loads(line)["record"] for line in (chaos.run_dir / "ladder" / "results.jsonl").read_text().splitlines()]
    keys = [(r["battle"], r["ordinal"], r["seat"]) for r in records]
    assert records and len(set(keys)) == len(keys), sorted(k for k in keys if keys.count(k) > 1)
