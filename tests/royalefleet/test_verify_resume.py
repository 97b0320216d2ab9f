"""The proof users trust: a run stopped and resumed in a fresh learner process writes the same
metric rows as one that never stopped (every field but wall-clock ones, the state digest
included), with two rollout processes; and the comparison catches a resume that lost state.

Sizing: two rollouts of 4 battles, the shipped mix -> 12 learner rows a cycle, T = 16. The first
test cuts episodes at 16 decisions, so every episode ends exactly at an iteration boundary (no
battle can end sooner: RoyaleGym allows only the no-op for a seat's first 9 decisions) and
nothing is in flight at the stop. The others leave episodes in flight: the checkpoint's battle
states carry them over (services/learner/battle_states.py).
"""

from __future__ import annotations

import json

import pytest

from royalefleet.verify_resume import verify_resume
from shared.config import load_config

pytestmark = pytest.mark.slow


def config(tmp_path, max_steps: int = 16):
    return load_config({"profile": "tiny", "runs_dir": str(tmp_path), "env": {"max_steps": max_steps}})


def _in_flight(keep, iteration: int) -> list[int]:
    """Decisions each battle's episode had played at the split checkpoint (from its index)."""
    path = keep / "split" / "checkpoints" / f"{iteration:08d}" / "battle_states" / "index.json"
    return [e["decisions"] for e in json.loads(path.read_text())["battles"]]


def _first_resumed_row(keep) -> dict:
    rows = [json.loads(line) for line in (keep / "split" / "metrics.jsonl").read_text().splitlines()]
    return next(r for r in rows if "resume/battles_restored" in r)


def test_a_resumed_run_continues_row_for_row_with_two_rollouts(tmp_path):
    lines = []
    problems = verify_resume(config(tmp_path), iterations=3, split=1, rollouts=2, keep_dir=str(tmp_path / "v"),
                             say=lines.append)
    assert problems == [], "\n".join(lines)
    assert any("learner: resumed iteration 1 " in s for s in lines)
    assert lines[-1].startswith("verify-resume: exact")


def test_a_split_mid_episode_for_every_battle_that_then_ends_and_begins_the_next(tmp_path):
    """Episodes of 24 decisions: at the split every battle is 16 decisions in; all 8 are restored
    (none refused, none left unheld), the continued episodes end 8 decisions into the resumed
    iteration and the next ones begin there. (The tiny profile as shipped, episodes of up to 40
    decisions, has every battle in flight the same way; one stack covers both.)"""
    lines, keep = [], tmp_path / "v"
    problems = verify_resume(config(tmp_path, 24), iterations=2, split=1, rollouts=2, keep_dir=str(keep),
                             say=lines.append)
    assert problems == [], "\n".join(lines)
    assert _in_flight(keep, 1) == [16] * 8
    row = _first_resumed_row(keep)
    assert (row["resume/battles_restored"], row["resume/battles_refused"], row["resume/battles_unheld"]) == (8, 0, 0)
    assert row["env/episodes"] == 12  # every learner seat-episode ended


def test_a_resume_that_drops_the_optimizer_state_is_caught(tmp_path):
    lines = []
    problems = verify_resume(config(tmp_path), iterations=2, split=1, rollouts=2, keep_dir=str(tmp_path / "v"),
                             perturb="optimizers", say=lines.append)
    assert any("PERTURBED resume" in s for s in lines)
    # The first iteration after the resume already differs, and the state digest says so.
    assert problems and problems[0].startswith("iteration 2:"), problems
    assert "run/state_digest" in problems[0] or "field(s) differ" in problems[0]


def test_a_frame_stacked_run_resumes_exactly_with_episodes_in_flight(tmp_path):
    """obs.frame_stack = 2, one rollout of 4 battles (6 learner rows a cycle, T = 32), episodes of
    up to 40 decisions (the tiny profile's): at the split every battle is 32 decisions in, so the
    resumed iteration's first rows need the history the checkpoint carried
    (frame_history/carry.msgpack); the rows still equal."""
    lines, keep = [], tmp_path / "v"
    cfg = load_config({"profile": "tiny", "runs_dir": str(tmp_path), "obs": {"frame_stack": 2}})
    problems = verify_resume(cfg, iterations=2, split=1, rollouts=1, keep_dir=str(keep), say=lines.append)
    assert problems == [], "\n".join(lines)
    assert _in_flight(keep, 1) == [32] * 4
    carry = keep / "split" / "checkpoints" / f"{1:08d}" / "frame_history" / "carry.msgpack"
    import msgspec

    doc = msgspec.msgpack.decode(carry.read_bytes())
    # every learner-held seat (both seats of the mirror battle, one of each other) at the boundary
    assert doc["k"] == 2 and len(doc["entries"]) >= 4 and all(e[5] == [True] for e in doc["entries"])
