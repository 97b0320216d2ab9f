"""Pool battles against a frozen snapshot in the whole local stack (``royalefleet up``).

The learner snapshots its actor after iteration 1 (``candidate_every_env_steps`` is below one
iteration's env steps); the ladder admits the run's first candidate free (the champion, the
pool's one member); from then on the pool battle's episodes meet ``snap:<id>``, whose seat the
learner infers with the snapshot's fp16 actor loaded from the checkpoint service.

Sizes: one rollout of 4 battles; the mix (0.5, 0.35, 0.15) gives role_counts (2, 1, 1), so
4 + 2 = 6 learner rows a cycle and T = ceil(192 / 6) = 32 cycles, 128 decisions an iteration.
Episodes are cut at 12 decisions (none can finish sooner), so the pool battle's episode k
spans decisions 12k .. 12k + 12. The candidate is admitted after iteration 1 (decisions 0-32),
while episode 2 (24-36) is in flight: that one keeps the scripted stand-in it began with, and
episodes 3 onwards (from decision 36, cycle 4 of iteration 2) meet the snapshot. So the frozen
seat answers 32 - 4 = 28 rows in iteration 2 and 32 in iteration 3, and episodes 3..7 (the last
ends at decision 96, the close of iteration 3) are games against it.
"""

from __future__ import annotations

import json

import pytest

from tests.stack import read_rows, run_to_exit, tiny_config

pytestmark = pytest.mark.slow


def test_pool_battles_are_played_by_the_admitted_snapshot(tmp_path):
    cfg = tiny_config(tmp_path / "runs", env={"max_steps": 12},
                      ladder={"pool": {"candidate_every_env_steps": 100}})
    up, code = run_to_exit(cfg, "--rollouts", "1", "--iterations", "3", timeout=300)
    assert code == 0, up.tail()
    run = tmp_path / "runs" / "default"
    rows = read_rows(run)
    assert [r["run/iteration"] for r in rows] == [1, 2, 3]
    assert all(r["run/cycles"] == 32 and r["health/trainable_rows"] == 192 for r in rows)
    pool = json.loads((run / "ladder" / "pool.json").read_text())
    (snap,) = pool["members"]  # a member is its player id, snap:<snapshot_id>
    assert snap.startswith("snap:") and (run / "snapshots" / snap[5:] / "actor.safetensors").is_file()

    records = [json.loads(x)["record"] for x in (run / "ladder" / "results.jsonl").read_text().splitlines()]
    pool_records = [r for r in records if r["role"] == "pool"]
    vs_snap = [r for r in pool_records if snap in (r["player"], r["opponent"])]
    # Iteration 1 had no pool member: its pool episodes fell back to a scripted opponent.
    assert sorted(r["ordinal"] for r in vs_snap) == [3, 3, 4, 4, 5, 5, 6, 6, 7, 7]
    assert all(r["iteration"] >= 2 for r in vs_snap)
    assert {r["opponent"] for r in pool_records if r["ordinal"] <= 2 and r["player"] == "learner"} <= {
        "scripted:noop", "scripted:random_legal"}
    # Each such episode has both seats recorded: the learner's and the snapshot's.
    assert sorted({r["player"] for r in vs_snap}) == sorted(["learner", snap])
    for r in vs_snap:
        assert r["opponent"] == ("learner" if r["player"] == snap else snap)
    # The snapshot's seat was answered by its actor: rows counted, no no-op stand-in, loaded once.
    assert [r["health/frozen_rows"] for r in rows] == [0, 28, 32]
    assert all(r["health/frozen_noop_rows"] == 0 and r["health/frozen_episodes_unreported"] == 0 for r in rows)
    # Loaded once, at iteration 2's boundary (the plan names it for later episodes); every row
    # is then a hit, and so is iteration 3's boundary look-up.
    assert [r["health/frozen_loads"] for r in rows] == [0, 1, 0]
    assert [r["health/frozen_hits"] for r in rows] == [0, 28, 33]
    assert [r["health/frozen_resident"] for r in rows] == [0, 1, 1]
    assert sum(r["health/frozen_load_failures"] for r in rows) == 0
    # Never trained on: exactly the learner's 192 rows each iteration, the mask held.
    assert all(r["health/illegal_action_rate"] == 0.0 for r in rows)
    assert not up.children()
