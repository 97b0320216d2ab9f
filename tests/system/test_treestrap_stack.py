"""TreeStrap on the whole local stack (``learner.algorithm = "treestrap"``): real battles searched
with the generation's prior, the heads trained on their bootstrap samples of the replay, the
proposal on the Thompson choice, and a run stopped and resumed in a fresh learner writing the same
rows as one that never stopped (the heads, their Adam and the candidate log restored)."""

from __future__ import annotations

import pytest

from shared.config import load_config
from shared.metric_schema import schema_key
from tests.stack import exact_rows

pytestmark = pytest.mark.slow


def test_a_treestrap_run_trains_its_heads_and_proposal_and_resumes_row_for_row(tmp_path):
    cfg = load_config({"profile": "tiny", "runs_dir": str(tmp_path), "env": {"max_steps": 12},
                       "learner": {"algorithm": "treestrap"},
                       "alphazero": {"candidates": 4, "depth": 6, "leaf_value": "critic"},
                       "treestrap": {"heads": 4},
                       "ladder": {"pool": {"candidate_every_env_steps": 100}}})
    rows = exact_rows(cfg, tmp_path)
    assert not [k for r in rows for k in r if k.startswith(("ppo/", "az/"))]
    assert all(schema_key(k) for r in rows for k in r), [k for r in rows for k in r if not schema_key(k)]
    decisions = [r["search/decisions"] for r in rows]
    assert all(d > 0 for d in decisions)
    assert [r["expit/replay_rows"] for r in rows] == [decisions[0], decisions[0] + decisions[1]]
    for r in rows:
        assert 0 < r["treestrap/included_frac"] < 1  # Bernoulli(0.5) membership: some pairs in, some out
        assert 0 <= r["treestrap/head_disagreement"] <= 1 and 0 <= r["treestrap/target_stability"] <= 1
        assert 0 <= r["treestrap/search_agreement"] <= 1
        assert r["treestrap/head_loss"] > 0 and r["treestrap/proposal_loss"] > 0
        assert r["expit/generation"] == 0  # no gate passed: generation 0's prior throughout
