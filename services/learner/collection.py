"""Steps 1-2 of an iteration (docs/iteration.md): the boundary and the collection with central inference, as one
unit (``collect_iteration``) that returns a ``Collected`` (``collected.py``): everything the
value pass, the update and the row read about the rectangle.

The rounds themselves (filing, inference, Steps, lost shards) are ``services/learner/rounds.py``;
the boundary (rollouts, slot map, plan) is ``services/learner/boundary.py``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from services.learner.boundary import send_plans, wait_for_rollouts
from services.learner.collected import Collected
from services.learner.rectangle import Rectangle
from shared.config import RunConfig
from shared.schedules import value_at

if TYPE_CHECKING:
    from services.learner.parts import IterationState, LearnerParts


def evaluate_schedules(cfg: RunConfig, env_steps: int) -> dict[str, float]:
    """Every scheduled scalar, once, at the top of an iteration: the reward, GAE and the metric
    row then use one number each (seed 004, ScheduleState)."""
    return {
        "gamma": value_at(cfg.advantage.gamma, env_steps),
        "ent_coef": value_at(cfg.ppo.ent_coef, env_steps),
        "ent_coef_noop": value_at(cfg.ppo.ent_coef_noop, env_steps),
    }


def collect_iteration(parts: LearnerParts, state: IterationState, min_rollouts: int, iteration: int, env_steps: int,
                      policy) -> Collected:
    """Boundary and collection of ``iteration`` (the run's ``env_steps`` before it), its
    actions inferred by ``policy``, once ``min_rollouts`` rollouts are registered before the
    first iteration (``state.first_iteration``). Raises StopRequested when a stop arrives while
    it waits for the fleet (``wait_for_rollouts``); a stop during the rounds ends them and
    returns the ``Collected``, and ``Learner.run_iteration``, seeing the stop, raises
    StopRequested for it (nothing trains on the rectangle)."""
    t_iter = time.perf_counter()
    sched = evaluate_schedules(parts.cfg, env_steps)
    members = wait_for_rollouts(parts.collector, state, min_rollouts=min_rollouts,
                                round_timeout_s=parts.cfg.rollout.round_timeout_s,
                                forgotten=parts.metrics.rollouts_forgotten, say=parts.say)
    slot_map = parts.fleet.slot_map(members)
    T, learner_rows, roles = send_plans(parts, members, slot_map, sched["gamma"], iteration)
    rect = Rectangle.for_codec(T, slot_map.n_slots, parts.pf.codec)
    policy.model.last_precision.clear()  # this iteration's forwards say what they ran in
    if parts.device.type == "cuda":
        from services.learner.vram import reset_peak

        reset_peak(parts.device)
    t0 = time.perf_counter()
    stats = parts.collector.collect(iteration, members, slot_map, rect, policy, parts.cfg.master_seed,
                                      parts.cfg.rollout.round_timeout_s, frozen=parts.frozen)
    seconds = time.perf_counter() - t0
    counts = parts.frozen.counts()
    return Collected(iteration, sched, members, slot_map, T, learner_rows, roles, rect, stats, seconds,
                     policy.model.last_precision.get("actor"), t_iter, policy, counts)
