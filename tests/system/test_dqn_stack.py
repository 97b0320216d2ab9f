"""The DQN learner on the whole local stack (``learner.algorithm = "dqn"``): real battles, the
same rollouts, ladder and checkpoint service. Its rows carry the dqn/ keys and no ppo/ key,
epsilon follows its schedule, and a run stopped and resumed in a fresh learner writes the same
rows as one that never stopped (replay, open windows, online and target networks and optimizer
in the checkpoint; every draw name-addressed, Thompson heads included).

One run (three stack starts: ~160 s on two loaded cores) covers the richest configuration,
two dueling heads under Thompson with bootstrap p 0.5; the one-head path (the actor's logits as
its Q row) is the same service code with ``PointerQ`` replaced by ``QActor`` and runs in
tests/test_learning_dqn.py."""

from __future__ import annotations

import pytest

from royalefleet.verify_resume import verify_resume
from shared.config import load_config
from shared.metric_schema import schema_key

pytestmark = pytest.mark.slow

DQN = {"replay_capacity": 2000, "replay_memory_mb": 256, "learning_starts": 64, "batch_size": 32,
       "updates_per_iteration": 8, "target_update_period": 10, "epsilon_decay_iterations": 1}


def test_a_dqn_run_of_two_dueling_thompson_heads_resumes_row_for_row_and_its_mean_plays_in_the_pool(tmp_path):
    """heads 2, dueling, Thompson, bootstrap p 0.5 on the tiny stack: the learner snapshots its
    actor after iteration 1 (``candidate_every_env_steps`` below one iteration's env steps), the
    ladder admits it, and iteration 2's pool battles meet it (as tests/system/test_frozen_stack.py
    works out: 28 frozen rows). The snapshot is exactly the fp16 of the checkpoint's online Q
    network written into the actor as its heads' mean (``pointer_q.played_actor``)."""
    import json

    import numpy as np
    import torch
    from safetensors.numpy import load as st_load
    import zstandard

    from services.checkpoint.store import CheckpointStore
    from services.learner.dqn.pointer_q import PointerQ, played_actor
    from shared.nn.model import ActorCritic
    from shared.nn.statefiles import bytes_to_module, module_to_bytes
    from shared.preflight import run_preflight

    cfg = load_config({"profile": "tiny", "runs_dir": str(tmp_path), "env": {"max_steps": 12},
                       "learner": {"algorithm": "dqn"}, "ladder": {"pool": {"candidate_every_env_steps": 100}},
                       "dqn": {**DQN, "heads": 2, "dueling": True, "behaviour": "thompson", "bootstrap_p": 0.5}})
    lines = []
    problems = verify_resume(cfg, iterations=2, split=1, rollouts=1, keep_dir=str(tmp_path / "v"), say=lines.append)
    assert problems == [], "\n".join(lines)
    assert lines[-1].startswith("verify-resume: exact")
    run = tmp_path / "v" / "straight"
    rows = [json.loads(s) for s in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["dqn/epsilon"] for r in rows] == [1.0, 0.05]
    assert [r["dqn/at_epsilon_floor"] for r in rows] == [0.0, 1.0]
    assert all(r["dqn/optimizer_steps"] == 8.0 for r in rows)
    assert [r["dqn/target_syncs"] for r in rows] == [0.0, 1.0]  # steps 8 and 16 against a period of 10
    assert rows[-1]["dqn/replay_size"] == sum(r["dqn/windows_added"] for r in rows)
    assert not [k for r in rows for k in r if k.startswith("ppo/")]
    assert all(schema_key(k) for r in rows for k in r), [k for r in rows for k in r if not schema_key(k)]
    assert all(r["dqn/heads_used"] == 2.0 for r in rows)  # both heads drawn over each iteration's episodes
    assert all(r["dqn/head_disagreement"] > 0 for r in rows)
    # the pool played the K-head snapshot: every frozen row answered by it, none by a stand-in
    assert [r["health/frozen_rows"] for r in rows] == [0, 28]
    assert sum(r["health/frozen_noop_rows"] + r["health/frozen_load_failures"] for r in rows) == 0
    (snap,) = json.loads((run / "ladder" / "pool.json").read_text())["members"]
    snapshot = (run / "snapshots" / snap[5:] / "actor.safetensors").read_bytes()

    _, files = CheckpointStore(run / "checkpoints", say=lambda s: None).read(1)
    pf = run_preflight(cfg.env, cfg.master_seed)
    model = ActorCritic(pf.spec, cfg.net)
    qnet = PointerQ(model.actor, 2, dueling=True, seed=0)
    bytes_to_module(qnet, files["dqn/online.safetensors"])
    played_actor(qnet, model.actor)
    assert module_to_bytes(model.actor) == files["actor/model.safetensors"]
    assert module_to_bytes(model.actor.half()) == snapshot
    assert not torch.equal(qnet.noop.weight[0], qnet.noop.weight[1])
    # the records carry their acted head (Thompson: 0 or 1) and their half of the bootstrap sample
    arrays = st_load(zstandard.ZstdDecompressor().decompress(files["replay/arrays.safetensors.zst"]))
    n = json.loads(files["replay/state.json"])["size"]
    assert set(np.unique(arrays["acted_heads"][:n]).tolist()) == {0, 1}
    assert 0.35 < arrays["masks"][:n].mean() < 0.65
