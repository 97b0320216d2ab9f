"""Steps 1-2 of an iteration (docs/iteration.md): the boundary and the collection with central
inference, as one unit (``collect_iteration``) that returns a ``Collected`` (``collected.py``):
everything the value pass, the update and the row read about the rectangle.

The boundary (step 1) is here: wait for the rollouts (``wait_for_rollouts``), fix the slot map
and the rectangle's shape, ask for the plan and send it (``send_plans``). The rounds themselves
(filing, inference, Steps, lost shards) are ``services/learner/rounds.py``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from services.learner.admission import plan_size
from services.learner.collected import Collected
from services.learner.frozen import plan_snapshots
from services.learner.rectangle import Rectangle
from services.learner.stops import StopRequested
from shared.config import RunConfig
from shared.messages import Plan, PlanRequest
from shared.schedules import value_at

if TYPE_CHECKING:
    from prometheus_client import Counter

    from services.learner.fleet import Member
    from services.learner.parts import IterationState, LearnerParts, Say
    from services.learner.rounds import Collector

STARTUP_WAIT_S = 120.0
"""How long the first iteration waits for ``min_rollouts`` before starting with fewer."""

JOIN_WAIT_S = 30.0
"""The longest a boundary waits for a registered rollout that is still building its battles."""


def wait_for_rollouts(collector: Collector, state: IterationState, *, min_rollouts: int, round_timeout_s: float,
                      forgotten: Counter, say: Say) -> list[Member]:
    """Block (handling messages) until a rollout is registered; before the first iteration
    (``state.first_iteration``), until ``min_rollouts`` are or ``STARTUP_WAIT_S`` has passed (so
    a local stack does not start its first iteration with whichever rollout built its battles
    first). Returns ``collector.fleet.arrange()``; raises StopRequested on a stop. ``forgotten``
    counts the rollouts forgotten while building (``rollouts_forgotten``)."""
    fleet = collector.fleet
    announced = False
    deadline = time.monotonic() + (STARTUP_WAIT_S if state.first_iteration else 0.0)
    # A rollout that said Hello is building its battles (0.3 s a battle, more under load):
    # wait for it, boundedly, so a restarted rollout rejoins at the next boundary. The bound
    # runs from its Hello, not from this boundary: one killed while building (a ghost) is
    # forgotten once, never waited for again at every later boundary.
    join_wait = max(round_timeout_s, JOIN_WAIT_S)
    collector.poll(0, lambda *a: None)  # Hellos that arrived during the update count
    while not collector.stop_requested:
        for m in fleet.forget_unready(join_wait):
            forgotten.inc()
            say(f"learner: forgot rollout {m.label()}: registered {join_wait:.0f} s ago and never said it "
                "was ready (killed while building its battles?); a live one is told to rejoin")
        members = [m for m in fleet.members.values() if not m.lost]
        waiting = sum(1 for m in members if m.ready or m.active)
        building = any(not (m.ready or m.active) for m in members)
        if waiting and not building and (waiting >= min_rollouts or time.monotonic() >= deadline):
            state.first_iteration = False
            return fleet.arrange()
        if not announced:
            say(f"learner: waiting for {min_rollouts - waiting} more rollout(s) to register")
            announced = True
        collector.poll(200, lambda *a: None)
    raise StopRequested


def send_plans(parts: LearnerParts, members, slot_map, gamma: float, iteration: int) -> tuple[int, int, list]:
    """Plan iteration ``iteration`` for ``members`` over ``slot_map``: the rectangle's shape
    (T cycles, learner rows a cycle), the ladder's assignments (or the same draw here), every
    rollout's Plan sent, the plan's snapshots loaded. Returns (T, learner rows a cycle, the
    plan's role counts)."""
    cfg = parts.cfg
    n = slot_map.n_battles
    T, learner_rows, lookahead = plan_size(cfg, n)  # one formula with the Hello limits (admission.py)
    battles = [int(b) for b in slot_map.battle_ids]
    ordinals = [parts.fleet.ordinal.get(b, 0) for b in battles]
    reply = parts.pool.request_plan(PlanRequest(
        request_id=parts.pool.ladder.next_id(), iteration=iteration, n_battles=n, battles=battles,
        next_ordinals=ordinals, lookahead=lookahead), parts.fleet)
    by_battle: dict[int, list] = {}
    for a in reply.assignments:
        by_battle.setdefault(a.battle, []).append(a)
    # battles continuing a recorded episode (a resume) are in flight, never restarted.
    continued = parts.battle_states.hand_out(parts.sock, parts.collector, members, parts.fleet, iteration,
                                               cfg.rollout.round_timeout_s)
    # which snapshot holds each frozen seat (the plan as the rollouts will apply it).
    parts.fleet.record_plan(members, reply.assignments, continued)
    for m in members:
        restart = [parts.fleet.ordinal.get(b, 0) if m.fresh and b not in continued else -1 for b in m.battle_ids]
        plan = Plan(iteration=iteration, battles=m.battle_ids, restart_ordinals=restart, gamma=gamma,
                    assignments=[a for b in m.battle_ids for a in by_battle.get(b, [])], fresh=m.fresh)
        parts.collector.send(m.identity, plan)
    # load the plan's snapshots now (the rollouts reset meanwhile), so the collection
    # meets no load: those of the episodes in flight first, as many as the LRU holds.
    parts.frozen.new_iteration()
    parts.frozen.prefetch(plan_snapshots(parts.fleet, battles, parts.frozen.capacity))
    return T, learner_rows, list(reply.role_counts)


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
