"""A rollout that outlives its learner: the learner restarts, resumes from a checkpoint and
restarts this rollout's battles at the checkpoint's ordinals, which the rollout may have played
past. Found by ``royalefleet chaos``: the plan's assignments below the battle's current ordinal
were dropped, every start failed with ``no assignment for battle 0 ordinal 28``, and the run
halted on worker_failures_persistent three iterations later."""

from __future__ import annotations

import pytest

from services.rollout.battles import Shard
from services.rollout.service import RolloutService
from shared.config import EnvConfig
from shared.messages import Assignment, Plan
from shared.preflight import run_preflight

SEED = 11
ENV = EnvConfig(max_steps=20)


@pytest.fixture(scope="module")
def pf():
    return run_preflight(ENV, SEED)


def rollout_with_one_shard(pf) -> RolloutService:
    r = RolloutService.__new__(RolloutService)  # no sockets: only the plan handling is exercised
    r.n_battles, r.n_shards = 2, 1
    r.shards = [Shard(0, ENV, 2, pf.codec, SEED, 0.9, mask_only_scripted=True)]
    return r


def plan(battles, restart, ordinals, iteration=1) -> Plan:
    return Plan(iteration=iteration, battles=battles, restart_ordinals=restart, gamma=0.99, fresh=False,
                assignments=[Assignment(b, k, "scripted", "scripted:noop", 0) for b in battles for k in ordinals])


def test_a_restart_below_the_current_ordinal_keeps_the_plans_assignments(pf):
    r = rollout_with_one_shard(pf)
    r._on_plan(plan([0, 1], [29, 29], range(29, 33)))  # the first learner: battles at ordinal 29
    assert [b.ordinal for b in r.shards[0].battles] == [29, 29]
    # The learner is killed and resumes from a checkpoint whose battles stood at ordinal 28.
    r._on_plan(plan([0, 1], [28, 28], range(28, 32), iteration=1))
    shard = r.shards[0]
    assert [(b.battle_id, b.ordinal) for b in shard.battles] == [(0, 28), (1, 28)]
    assert sorted(shard.table) == [(b, k) for b in (0, 1) for k in (29, 30, 31, 32)]  # 32: the first plan's


def test_a_running_battle_still_drops_assignments_of_episodes_it_has_played(pf):
    r = rollout_with_one_shard(pf)
    r._on_plan(plan([0, 1], [5, 5], range(5, 9)))
    r._on_plan(plan([0, 1], [-1, -1], range(3, 10), iteration=2))  # not restarted: 3 and 4 are past
    assert [b.ordinal for b in r.shards[0].battles] == [5, 5]
    assert sorted(r.shards[0].table) == [(b, k) for b in (0, 1) for k in (5, 6, 7, 8, 9)]
