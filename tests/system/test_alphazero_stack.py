"""The AlphaZero learner on the whole local stack (``learner.algorithm = "alphazero"``): real
battles, the same rollouts, ladder and checkpoint service. The rollouts search the learner's
choice decisions, its rows carry the search/ and az/ keys and no ppo/ key, the actor trains on
the search targets, its snapshot joins the pool and plays iteration 2's frozen seats, and a run
stopped and resumed in a fresh learner writes the same rows as one that never stopped (the
search a pure function of the restored battles and the master seed)."""

from __future__ import annotations


import pytest

from shared.config import load_config
from tests.stack import exact_rows
from shared.metric_schema import schema_key

pytestmark = pytest.mark.slow


def test_an_alphazero_run_searches_trains_on_its_targets_and_resumes_row_for_row(tmp_path):
    cfg = load_config({"profile": "tiny", "runs_dir": str(tmp_path), "env": {"max_steps": 12},
                       "learner": {"algorithm": "alphazero"},
                       "alphazero": {"candidates": 4, "depth": 6, "leaf_value": "critic"},
                       "ladder": {"pool": {"candidate_every_env_steps": 100}}})
    rows = exact_rows(cfg, tmp_path)
    assert not [k for r in rows for k in r if k.startswith("ppo/")]
    assert all(schema_key(k) for r in rows for k in r), [k for r in rows for k in r if not schema_key(k)]
    for r in rows:
        assert r["search/decisions"] > 0 and r["search/decisions"] == r["az/policy_rows"]
        assert r["search/simulations_per_decision"] <= 4.0
        assert 0 < r["search/sim_steps"] <= r["search/decisions"] * 4 * 7 + 4 * 2 * 4 * 7  # + a held round's
        assert 0 < r["throughput/search_time_frac"] < 1 and r["search/refused"] == 0
        assert r["throughput/engine_steps_per_second"] > r["throughput/env_steps_per_second"]
        assert r["az/actor_optimizer_steps"] > 0 and r["az/policy_loss"] > 0
        assert r["search/target_kl_prior"] >= 0
        # every simulated candidate's leaf was valued by the critic, in a LeafQuery mid-step
        assert r["search/critic_leaves"] >= r["search/decisions"] * r["search/simulations_per_decision"]
    # the network opponents (the learner in mirror battles, the pool snapshot) played in the
    # simulations by the learner's answers (sim_opponent "battle", the default)
    assert sum(r.get("search/opponent_rows", 0) for r in rows) > 0
    # the pool played the snapshot: every frozen row answered by it, none by a stand-in
    assert rows[0]["health/frozen_rows"] == 0 and rows[1]["health/frozen_rows"] > 0
    assert sum(r["health/frozen_noop_rows"] + r["health/frozen_load_failures"] for r in rows) == 0
