"""Step 1 of an iteration, the boundary: wait for the rollouts, fix the slot map and the
rectangle's shape, ask for the plan and send it (docs/iteration.md, step 1)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from services.learner.admission import plan_size
from services.learner.frozen import plan_snapshots
from services.learner.stops import StopRequested
from shared.messages import Plan, PlanRequest

if TYPE_CHECKING:
    from prometheus_client import Counter

    from services.learner.rounds import Collector
    from services.learner.fleet import Member
    from services.learner.parts import IterationState, LearnerParts, Say

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
