"""The rollouts the learner knows, the battles each runs, the iteration's slot map, and how long
the rollouts wait for the learner (``IdleMeter``).

Battle ids are global and stable: a rollout keeps its battles for as long as it lives; a
newcomer takes the lowest free ids (those of a rollout that was lost, first). Membership changes
only at an iteration boundary (``arrange``), so the rectangle of one iteration is fixed: R
slots = 2 x the battles of the active rollouts, ordered by battle id, slot ``2 * b_index + seat``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from shared.assignments import AssignmentTable
from shared.messages import Assignment


@dataclass
class Member:
    instance: str
    identity: bytes
    battles: int
    shards: int
    host: str
    pid: int
    battle_ids: list[int] = field(default_factory=list)
    active: bool = False
    ready: bool = False
    """Its battles are built (it said so after Welcome): it can answer a Plan in time."""
    lost: bool = False
    wire_codec: int = 1
    """The wire codec its Welcome named (shared/codec.py): how its rounds carry their rows."""
    fresh: bool = True
    last_seen: float = field(default_factory=time.monotonic)
    registered: float = field(default_factory=time.monotonic)
    """When its Hello was taken (monotonic s): ``forget_unready`` measures its build from here."""
    held: dict = field(default_factory=dict)
    """shard -> (Round, arrays): the cycle-T round of the previous iteration, which is this
    iteration's cycle 0 (the battles did not move in between)."""

    @property
    def per_shard(self) -> int:
        return self.battles // self.shards

    def label(self) -> str:
        return f"{self.instance}@{self.host}:{self.pid}"


@dataclass
class SlotMap:
    """Where every (member, shard) lands in the rectangle."""

    n_battles: int
    battle_ids: np.ndarray  # (n_battles,) global ids in slot order
    slots: dict[tuple[str, int], np.ndarray]  # (instance, shard) -> global slots of its local slots

    @property
    def n_slots(self) -> int:
        return 2 * self.n_battles


class Fleet:
    def __init__(self):
        self.members: dict[str, Member] = {}
        self.by_identity: dict[bytes, str] = {}
        self.ordinal: dict[int, int] = {}
        """battle id -> the ordinal of the episode it is in (as of the last round filed). A
        restarted battle begins that episode again from its first decision (it never finished,
        so nothing of it is in the result log), unless a resume hands it its recorded state
        (services/learner/battle_states.py): then it continues that episode."""
        self.lost_total = 0
        self.forgotten_total = 0
        """Members forgotten because they never became ready (``forget_unready``)."""
        self.assignments = AssignmentTable()
        """(battle id, ordinal) -> the assignment that battle plays (or will play) at that
        episode, as the rollout holding it applies it: what tells the learner which snapshot
        holds a GROUP_FROZEN slot (see ``record_plan``)."""

    def add(self, member: Member) -> None:
        old = self.by_identity.get(member.identity)
        if old and old in self.members and old != member.instance:
            # The same socket said Hello again with a new instance: its old self is gone.
            self.mark_lost(self.members[old])
        self.members[member.instance] = member
        self.by_identity[member.identity] = member.instance

    def get(self, instance: str) -> Member | None:
        return self.members.get(instance)

    def mark_lost(self, member: Member) -> None:
        if not member.lost:
            member.lost = True
            self.lost_total += 1

    def forget_unready(self, deadline_s: float, now: float | None = None) -> list[Member]:
        """Mark lost (and count in ``forgotten_total``) every member that said Hello more than
        ``deadline_s`` seconds ago and has not said it is ready: a rollout killed while building
        its battles never will, and every boundary would wait for it. One that is merely slow
        is told to rejoin when it next speaks (the learner answers an unknown instance so) and
        joins again, its battles already built. Returns the members forgotten now."""
        now = time.monotonic() if now is None else now
        gone = [m for m in self.members.values()
                if not (m.ready or m.active or m.lost) and now - m.registered > deadline_s]
        for m in gone:
            self.mark_lost(m)
            self.forgotten_total += 1
        return gone

    def active(self) -> list[Member]:
        return sorted((m for m in self.members.values() if m.active and not m.lost), key=lambda m: m.battle_ids[0])

    def arrange(self) -> list[Member]:
        """Apply membership changes at an iteration boundary; returns the active members.

        Lost members are dropped and their battles freed; waiting members get the lowest
        free battle ids and start fresh (their battles restart at each battle's next ordinal).
        """
        for inst in [i for i, m in self.members.items() if m.lost]:
            m = self.members.pop(inst)
            if self.by_identity.get(m.identity) == inst:
                del self.by_identity[m.identity]
        taken = {b for m in self.members.values() if m.active for b in m.battle_ids}
        for m in sorted(self.members.values(), key=lambda m: m.last_seen):
            if m.active:
                m.fresh = m.fresh or len(m.held) != m.shards
                continue
            if not m.ready:
                continue  # still building its battles: it joins at a later boundary
            free: list[int] = []
            b = 0
            while len(free) < m.battles:
                if b not in taken:
                    free.append(b)
                b += 1
            taken.update(free)
            m.battle_ids, m.active, m.fresh = free, True, True
        return self.active()

    def record_plan(self, members: list[Member], assignments: list[Assignment], continued=frozenset()) -> None:
        """Take the plan just sent to ``members`` into ``assignments`` by the rule a rollout
        applies it with (``shared.assignments.AssignmentTable.take``): a fresh member's battles restart
        at their ordinal with the NEW assignment; a running battle keeps the assignment of the
        episode in flight (it was applied when the episode began; the ladder may since answer
        differently, e.g. after the pool changed) and takes the new one for later ordinals.
        Entries of battles no member runs, and of episodes already over, are dropped.
        ``continued``: battles of fresh members that continue a recorded episode (a resume,
        services/learner/battle_states.py): in flight, not restarted."""
        restarted = {b for m in members if m.fresh for b in m.battle_ids} - set(continued)
        in_flight = {(b, o) for b, o in self.ordinal.items() if b not in restarted}
        self.assignments.take(assignments, live={b for m in members for b in m.battle_ids}, floor=self.ordinal,
                              in_flight=in_flight)

    def assignment(self, battle: int, ordinal: int) -> Assignment | None:
        """The assignment episode ``ordinal`` of ``battle`` plays, or None if no plan named it."""
        return self.assignments.get((battle, ordinal))

    def slot_map(self, members: list[Member]) -> SlotMap:
        order = sorted(((b, m.instance, i) for m in members for i, b in enumerate(m.battle_ids)))
        position = {(inst, i): k for k, (_, inst, i) in enumerate(order)}
        slots = {}
        for m in members:
            per = m.per_shard
            for s in range(m.shards):
                base = [2 * position[(m.instance, s * per + j)] for j in range(per)]
                slots[(m.instance, s)] = np.array([x + seat for x in base for seat in (0, 1)], dtype=np.int64)
        ids = np.array([b for b, _, _ in order], dtype=np.int64)
        return SlotMap(len(order), ids, slots)


class IdleMeter:
    """``throughput/rollout_idle_frac``: the share of wall time the fleet's rollouts spent waiting
    for the learner, as the learner sees it.
    
    A rollout is busy from the Step the learner sends one of its shards to the arrival of that
    shard's next round (it steps the battles and packs the rows); its shards step one after
    another in one process, so their busy times add up. Between two metric rows, a rollout's idle
    fraction is 1 - busy / wall; the row has the mean over the rollouts present at both rows
    (each rollout's own view, from its process, is ``royalefleet_rollout_idle_frac`` on its
    ``/metrics``). Waiting for inference, for the update (without overlap) and for the boundary
    all count as idle."""

    def __init__(self):
        self._last_time: float | None = None
        self._last_busy: dict[str, float] = {}

    def row_keys(self, busy_seconds: dict[str, float], instances: list[str], now: float | None = None) -> dict:
        """``throughput/rollout_idle_frac`` since the previous call (absent at the first call
        or without a rollout present at both)."""
        now = time.monotonic() if now is None else now
        out = {}
        if self._last_time is not None and now > self._last_time:
            wall = now - self._last_time
            fracs = [min(1.0, max(0.0, 1.0 - (busy_seconds.get(i, 0.0) - self._last_busy[i]) / wall))
                     for i in instances if i in self._last_busy]
            if fracs:
                out["throughput/rollout_idle_frac"] = sum(fracs) / len(fracs)
        self._last_time, self._last_busy = now, {i: busy_seconds.get(i, 0.0) for i in instances}
        return out
