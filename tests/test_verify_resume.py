"""The proof users trust: a run stopped and resumed in a fresh learner process writes the same
metric rows as one that never stopped (every field but wall-clock ones, the state digest
included), with two rollout processes; and the comparison catches a resume that lost state.

Sizing: two rollouts of 4 battles, the shipped mix -> 12 learner rows a cycle, T = 16; episodes
are cut at 16 decisions, so every episode ends exactly at an iteration boundary (no battle can
end sooner: RoyaleGym allows only the no-op for a seat's first 9 decisions) and nothing is in
flight at the stop.
"""

from __future__ import annotations

import pytest

from royalefleet.verify_resume import verify_resume
from shared.config import load_config

pytestmark = pytest.mark.slow


def config(tmp_path):
    return load_config({"profile": "tiny", "runs_dir": str(tmp_path), "env": {"max_steps": 16}})


def test_a_resumed_run_continues_row_for_row_with_two_rollouts(tmp_path):
    lines = []
    problems = verify_resume(config(tmp_path), iterations=3, split=1, rollouts=2, keep_dir=str(tmp_path / "v"),
                             say=lines.append)
    assert problems == [], "\n".join(lines)
    assert any("learner: resumed iteration 1 " in s for s in lines)
    assert lines[-1].startswith("verify-resume: exact")


def test_a_resume_that_drops_the_optimizer_state_is_caught(tmp_path):
    lines = []
    problems = verify_resume(config(tmp_path), iterations=2, split=1, rollouts=2, keep_dir=str(tmp_path / "v"),
                             perturb="optimizers", say=lines.append)
    assert any("PERTURBED resume" in s for s in lines)
    # The first iteration after the resume already differs, and the state digest says so.
    assert problems and problems[0].startswith("iteration 2:"), problems
    assert "run/state_digest" in problems[0] or "field(s) differ" in problems[0]
