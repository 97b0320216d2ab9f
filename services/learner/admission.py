"""What a rollout's Hello may claim: the sizes this learner can plan, hold and receive.

A Hello says how many battles and shards a rollout will run; everything the learner allocates
for an iteration follows from the fleet's total. A Hello whose numbers this learner cannot
serve is answered with ``Refused`` naming the field and the limit, before the rollout becomes a
member (a member claiming 50,000 battles used to end the learner at the next boundary). The
limits, each derived from the config and the machine, never a fixed guess:

* ``battles`` / ``shards``: positive, ``battles`` a multiple of ``shards``;
* one shard's Round (learner and frozen rows, plus as many truncation rows) must fit the
  message limit ``services.max_message_mb``, or ZeroMQ would drop every round it sends;
* the plan for the fleet with this rollout (battles x lookahead assignments, the lookahead as
  ``plan_size`` computes it) must fit the ladder's ``MAX_PLAN_ASSIGNMENTS`` per request and
  ``MAX_BATTLES``, or the ladder refuses the iteration's plan;
* the iteration's rectangle for the fleet with this rollout (``rectangle_bytes``) must fit
  ``MEMORY_SHARE`` of the memory available when the learner started.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from shared.config import RunConfig
from shared.matchmaking import MAX_BATTLES, MAX_PLAN_ASSIGNMENTS, role_counts
from shared.messages import Hello

MIN_EPISODE_DECISIONS = 10
"""No episode ends sooner: RoyaleGym allows only the no-op for a seat's first 9 decisions."""

MEMORY_SHARE = 0.75
"""Share of the memory available at start that one iteration's rectangle may take (the update's
minibatches, the models and the optimizer need the rest)."""

RECTANGLE_SLOT_BYTES = 48
"""Bytes per (cycle, slot) of a rectangle besides its packed row: group, tick, legal count,
action, log-prob, reward, flags and status (services/learner/rectangle.py), rounded up."""

ROUND_OVERHEAD_BYTES = 64 << 10
"""Header and per-slot scalar arrays of one Round, bounded generously."""


def plan_size(cfg: RunConfig, n_battles: int) -> tuple[int, int, int]:
    """(cycles T, learner rows per cycle, lookahead) of an iteration of ``n_battles`` battles:
    T = ceil(ppo.timesteps_per_iteration / learner rows), learner rows = battles + mirror battles
    (both seats learn), lookahead = ceil((T + 1) / shortest episode) + 2 episodes per battle."""
    mirror, _, _ = role_counts(tuple(cfg.ladder.mix), n_battles)
    learner_rows = n_battles + mirror
    cycles = max(1, math.ceil(cfg.ppo.timesteps_per_iteration / learner_rows))
    shortest = min(MIN_EPISODE_DECISIONS, cfg.env.max_steps or MIN_EPISODE_DECISIONS)
    return cycles, learner_rows, math.ceil((cycles + 1) / shortest) + 2


def rectangle_bytes(cfg: RunConfig, n_battles: int, row_bytes: int) -> int:
    """Bytes of one iteration's rectangle for ``n_battles`` battles: (T + 1) x 2 n_battles cells of
    ``row_bytes + RECTANGLE_SLOT_BYTES``."""
    cycles, _, _ = plan_size(cfg, n_battles)
    return (cycles + 1) * 2 * n_battles * (row_bytes + RECTANGLE_SLOT_BYTES)


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo, else free physical pages; None when neither is known."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


@dataclass(frozen=True)
class HelloLimits:
    cfg: RunConfig
    row_bytes: int
    memory_budget: int | None
    """Bytes one rectangle may take (``MEMORY_SHARE`` of the memory available at start); None
    when the machine does not say."""

    @classmethod
    def at_start(cls, cfg: RunConfig, row_bytes: int) -> HelloLimits:
        available = available_memory_bytes()
        return cls(cfg, row_bytes, None if available is None else int(available * MEMORY_SHARE))

    def refusal(self, msg: Hello, fleet_battles: int) -> str | None:
        """Why the learner refuses ``msg`` when the fleet already runs ``fleet_battles`` battles
        (None to accept); the text names the Hello's field, the limit and its source."""
        if msg.battles < 1 or msg.shards < 1 or msg.battles % msg.shards:
            return f"Hello.battles={msg.battles} must be a positive multiple of Hello.shards={msg.shards}"
        per_shard = msg.battles // msg.shards
        round_bytes = 2 * 2 * per_shard * self.row_bytes + ROUND_OVERHEAD_BYTES
        max_message = self.cfg.services.max_message_mb << 20
        if round_bytes > max_message:
            most = max(1, (max_message - ROUND_OVERHEAD_BYTES) // (4 * self.row_bytes))
            return (f"Hello.battles={msg.battles} in Hello.shards={msg.shards}: a shard's round could carry "
                    f"{round_bytes / 2**20:.1f} MiB, over services.max_message_mb={self.cfg.services.max_message_mb}; "
                    f"run at most {most} battles per shard (more shards)")
        total = fleet_battles + msg.battles
        _, _, lookahead = plan_size(self.cfg, total)
        if total > MAX_BATTLES or total * lookahead > MAX_PLAN_ASSIGNMENTS:
            return (f"Hello.battles={msg.battles}: the fleet would run {total} battles, and their plan "
                    f"({total} x lookahead {lookahead} = {total * lookahead} assignments) is over the ladder's "
                    f"{MAX_PLAN_ASSIGNMENTS} per request (battles at most {MAX_BATTLES}); the fleet runs "
                    f"{fleet_battles} battles now: start this rollout with fewer")
        if self.memory_budget is not None:
            need = rectangle_bytes(self.cfg, total, self.row_bytes)
            if need > self.memory_budget:
                return (f"Hello.battles={msg.battles}: the fleet would run {total} battles, whose iteration "
                        f"needs {need / 2**20:.1f} MiB of rollout memory, over this learner's budget of "
                        f"{self.memory_budget / 2**20:.1f} MiB ({MEMORY_SHARE:.0%} of the memory available at "
                        f"start); start this rollout with fewer battles")
        return None
