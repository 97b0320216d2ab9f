"""The DQN learner on the whole local stack (``learner.algorithm = "dqn"``): real battles, the
same rollouts, ladder and checkpoint service. Its rows carry the dqn/ keys and no ppo/ key,
epsilon follows its schedule, and a run stopped and resumed in a fresh learner writes the same
rows as one that never stopped (replay, open windows, target network and optimizer in the
checkpoint; every draw name-addressed)."""

from __future__ import annotations

import pytest

from royalefleet.verify_resume import verify_resume
from shared.config import load_config
from shared.metric_schema import schema_key

pytestmark = pytest.mark.slow

DQN = {"replay_capacity": 2000, "replay_memory_mb": 256, "learning_starts": 64, "batch_size": 32,
       "updates_per_iteration": 8, "target_update_period": 10, "epsilon_decay_iterations": 1}


def test_a_dqn_run_resumes_row_for_row_and_rows_are_dqn_rows(tmp_path):
    import json

    cfg = load_config({"profile": "tiny", "runs_dir": str(tmp_path), "env": {"max_steps": 16},
                       "learner": {"algorithm": "dqn"}, "dqn": DQN})
    lines = []
    problems = verify_resume(cfg, iterations=2, split=1, rollouts=1, keep_dir=str(tmp_path / "v"), say=lines.append)
    assert problems == [], "\n".join(lines)
    assert lines[-1].startswith("verify-resume: exact")
    rows = [json.loads(s) for s in (tmp_path / "v" / "straight" / "metrics.jsonl").read_text().splitlines()]
    assert [r["dqn/epsilon"] for r in rows] == [1.0, 0.05]
    assert [r["dqn/at_epsilon_floor"] for r in rows] == [0.0, 1.0]
    assert all(r["dqn/optimizer_steps"] == 8.0 for r in rows)
    assert [r["dqn/target_syncs"] for r in rows] == [0.0, 1.0]  # steps 8 and 16 against a period of 10
    assert rows[-1]["dqn/replay_size"] == sum(r["dqn/windows_added"] for r in rows)
    assert not [k for r in rows for k in r if k.startswith("ppo/")]
    assert all(schema_key(k) for r in rows for k in r), [k for r in rows for k in r if not schema_key(k)]
