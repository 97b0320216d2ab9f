"""``throughput/rollout_idle_frac``: the share of wall time the fleet's rollouts spent waiting
for the learner, as the learner sees it.

A rollout is busy from the Step the learner sends one of its shards to the arrival of that
shard's next round (it steps the battles and packs the rows); its shards step one after
another in one process, so their busy times add up. Between two metric rows, a rollout's idle
fraction is 1 - busy / wall; the row has the mean over the rollouts present at both rows
(each rollout's own view, from its process, is ``royalefleet_rollout_idle_frac`` on its
``/metrics``). Waiting for inference, for the update (without overlap) and for the boundary
all count as idle.
"""

from __future__ import annotations

import time


class IdleMeter:
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
