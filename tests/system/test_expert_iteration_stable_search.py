"""Expert iteration on the whole local stack with the rollouts searching by the ``+search`` players'
stable options (``alphazero.playouts``, ``halving``, ``continuation``, ``sim_opponents``,
``value_scale``, ``keep``): every reported search passes the learner's check of the players' move
rule (none refused), the rows carry searched decisions, and a run stopped and resumed writes the
same rows as one that never stopped; with playout-cap randomisation (``full_search_share`` 0.5),
plan candidates, redealt playouts and the prior's argmax as the own pick too, the coin's fast rows
in the replay value-only."""

from __future__ import annotations


import pytest

from shared.config import load_config
from tests.stack import exact_rows

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("opponents", [{"sim_opponent": "battle"},
                                       {"sim_opponents": ["defend", "random_legal"], "full_search_share": 0.5,
                                        "candidates_from": "plans", "redeal": True, "own_pick": "argmax"}],
                         ids=["battle-opponents", "scripted-opponents-playout-cap-plans-redeal-argmax"])
def test_a_run_searching_with_the_stable_options_is_accepted_and_resumes_row_for_row(tmp_path, opponents):
    """With the battle's own simulated opponents (a network opponent's simulated moves asked of the
    learner, one ``SimActQuery`` a simulated decision of each playout), and with two scripted ones
    drawn per playout under playout-cap randomisation, the candidates the plans after the prior's
    argmax and every playout redealing the enemy's unseen cards (one stack for all of these: each stack costs a minute of
    CI)."""
    cfg = load_config({"profile": "tiny", "runs_dir": str(tmp_path), "env": {"max_steps": 12},
                       "learner": {"algorithm": "expert_iteration"},
                       "alphazero": {"candidates": 4, "depth": 6, "playouts": 2, "halving": True,
                                     "continuation": "defend", "value_scale": 2000.0, "keep": 0.05, **opponents},
                       "expert_iteration": {"replay_iterations": 4, "value_target": "return"},
                       "ladder": {"pool": {"candidate_every_env_steps": 100}}})
    rows = exact_rows(cfg, tmp_path)
    assert all(r["search/decisions"] > 0 for r in rows)
    assert all(r["search/refused"] == 0 for r in rows)
    # the scores arrive on the tanh scale, so the root values lie in [-1, 1]
    assert all(-1 <= r["expit/root_value"] <= 1 for r in rows)
    assert all(r["throughput/labels_per_hour"] > 0 and r["throughput/replay_labels_per_hour"] > 0 for r in rows)
    if "full_search_share" in opponents:  # the coin's share realised; its fast rows trained value-only
        assert all(0 < r["search/full_frac"] < 1 and r["search/fast_decisions"] > 0 for r in rows)
        assert [r["az/policy_rows"] for r in rows] == [r["expit/replay_labels"] for r in rows]
        assert all(r["expit/replay_rows"] > r["expit/replay_labels"] for r in rows)
    else:
        assert [r["expit/replay_labels"] for r in rows] == [r["expit/replay_rows"] for r in rows]
    if "sim_opponent" in opponents:  # the mirror battles' network opponents were asked of the learner
        assert sum(r.get("search/opponent_rows", 0) for r in rows) > 0
    else:
        assert not any(r.get("search/opponent_rows", 0) for r in rows)
