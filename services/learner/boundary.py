"""Stage 1 of an iteration, the boundary: wait for the rollouts, fix the slot map and the
rectangle's shape, ask for the plan and send it (docs/iteration.md, step 1)."""

from __future__ import annotations

import time

from services.learner.admission import plan_size
from services.learner.frozen import plan_snapshots
from services.learner.stops import StopRequested
from shared import transport
from shared.messages import Plan, PlanRequest

STARTUP_WAIT_S = 120.0
"""How long the first iteration waits for ``min_rollouts`` before starting with fewer."""

JOIN_WAIT_S = 30.0
"""The longest a boundary waits for a registered rollout that is still building its battles."""


def wait_for_rollouts(learner) -> list:
    """Block (handling messages) until a rollout is registered; before the first iteration,
    until ``min_rollouts`` are or ``startup_wait_s`` has passed (so a local stack does not
    start its first iteration with whichever rollout built its battles first)."""
    announced = False
    deadline = time.monotonic() + (STARTUP_WAIT_S if learner.first_iteration else 0.0)
    # A rollout that said Hello is building its battles (0.3 s a battle, more under load):
    # wait for it, boundedly, so a restarted rollout rejoins at the next boundary. The bound
    # runs from its Hello, not from this boundary: one killed while building (a ghost) is
    # forgotten once, never waited for again at every later boundary.
    join_wait = max(learner.cfg.rollout.round_timeout_s, JOIN_WAIT_S)
    learner.collector.poll(0, lambda *a: None)  # Hellos that arrived during the update count
    while not learner.stopping:
        for m in learner.fleet.forget_unready(join_wait):
            learner.metrics.rollouts_forgotten.inc()
            learner.say(f"learner: forgot rollout {m.label()}: registered {join_wait:.0f} s ago and never said it "
                        "was ready (killed while building its battles?); a live one is told to rejoin")
        members = [m for m in learner.fleet.members.values() if not m.lost]
        waiting = sum(1 for m in members if m.ready or m.active)
        building = any(not (m.ready or m.active) for m in members)
        if waiting and not building and (waiting >= learner.min_rollouts or time.monotonic() >= deadline):
            learner.first_iteration = False
            return learner.fleet.arrange()
        if not announced:
            learner.say(f"learner: waiting for {learner.min_rollouts - waiting} more rollout(s) to register")
            announced = True
        learner.collector.poll(200, lambda *a: None)
    raise StopRequested


def send_plans(learner, members, slot_map, gamma: float, iteration: int) -> tuple[int, int, list]:
    """Plan iteration ``iteration`` for ``members`` over ``slot_map``: the rectangle's shape
    (T cycles, learner rows a cycle), the ladder's assignments (or the same draw here), every
    rollout's Plan sent, the plan's snapshots loaded. Returns (T, learner rows a cycle, the
    plan's role counts)."""
    cfg = learner.cfg
    n = slot_map.n_battles
    T, learner_rows, lookahead = plan_size(cfg, n)  # one formula with the Hello limits (admission.py)
    battles = [int(b) for b in slot_map.battle_ids]
    ordinals = [learner.fleet.ordinal.get(b, 0) for b in battles]
    reply = learner.pool.request_plan(PlanRequest(
        request_id=learner.pool.ladder.next_id(), iteration=iteration, n_battles=n, battles=battles,
        next_ordinals=ordinals, lookahead=lookahead), learner.fleet)
    by_battle: dict[int, list] = {}
    for a in reply.assignments:
        by_battle.setdefault(a.battle, []).append(a)
    # battles continuing a recorded episode (a resume) are in flight, never restarted.
    continued = learner.battle_states.hand_out(learner.sock, learner.collector, members, learner.fleet, iteration,
                                               cfg.rollout.round_timeout_s)
    # which snapshot holds each frozen seat (the plan as the rollouts will apply it).
    learner.fleet.record_plan(members, reply.assignments, continued)
    for m in members:
        restart = [learner.fleet.ordinal.get(b, 0) if m.fresh and b not in continued else -1 for b in m.battle_ids]
        plan = Plan(iteration=iteration, battles=m.battle_ids, restart_ordinals=restart, gamma=gamma,
                    assignments=[a for b in m.battle_ids for a in by_battle.get(b, [])], fresh=m.fresh)
        transport.send(learner.sock, plan, identity=m.identity)
    # load the plan's snapshots now (the rollouts reset meanwhile), so the collection
    # meets no load: those of the episodes in flight first, as many as the LRU holds.
    learner.frozen.new_iteration()
    learner.frozen.prefetch(plan_snapshots(learner.fleet, battles, learner.frozen.capacity))
    return T, learner_rows, list(reply.role_counts)
