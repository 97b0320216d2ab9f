"""Expert iteration on the whole local stack (``learner.algorithm = "expert_iteration"``): real
battles, the rollouts searching with the generation's prior, the replay growing across
iterations, and a run stopped and resumed in a fresh learner writing the same rows as one that
never stopped (the generation's network and the replay restored from the checkpoint)."""

from __future__ import annotations


import pytest

from shared.config import load_config
from tests.stack import exact_rows
from shared.metric_schema import schema_key

pytestmark = pytest.mark.slow


def test_an_expert_iteration_run_replays_its_searched_rows_and_resumes_row_for_row(tmp_path):
    cfg = load_config({"profile": "tiny", "runs_dir": str(tmp_path), "env": {"max_steps": 12},
                       "learner": {"algorithm": "expert_iteration"},
                       "alphazero": {"candidates": 4, "depth": 6, "leaf_value": "critic"},
                       "expert_iteration": {"replay_iterations": 4},
                       "ladder": {"pool": {"candidate_every_env_steps": 100}}})
    rows = exact_rows(cfg, tmp_path)
    assert not [k for r in rows for k in r if k.startswith("ppo/")]
    assert all(schema_key(k) for r in rows for k in r), [k for r in rows for k in r if not schema_key(k)]
    decisions = [r["search/decisions"] for r in rows]
    assert all(d > 0 for d in decisions)
    # the replay holds both iterations' searched rows (the resumed learner's from the checkpoint), and
    # the update trains on all of it
    assert [r["expit/replay_rows"] for r in rows] == [decisions[0], decisions[0] + decisions[1]]
    assert [r["expit/replay_iterations"] for r in rows] == [1, 2]
    assert [r["az/policy_rows"] for r in rows] == [r["expit/replay_rows"] for r in rows]
    # the run's first snapshot is the champion, admitted free: no gate passed, so no promotion, and
    # generation 0 plays throughout
    assert any(r.get("ladder/champion_id", "").startswith("snap:") for r in rows)
    for r in rows:
        assert r.get("ladder/gates_passed", 0) == 0
        assert r["expit/generation"] == 0 and r["expit/generation_switched"] == 0
        assert 0 <= r["expit/prior_top1"] <= 1 and r["expit/prior_kl_target"] >= 0 and r["expit/prior_entropy"] > 0
        assert 0 <= r["expit/next_top1"] <= 1 and r["expit/next_kl_target"] >= 0
    # generation 0 is frozen: the prior the rollouts play is the start's, while the network trained
    # moved toward the targets (its KL to them fell below the frozen prior's on the same rows)
    assert all(r["expit/next_kl_target"] < r["expit/prior_kl_target"] for r in rows)
