"""A user reward: ``per_tick`` for every engine tick a decision lasts, the same for both seats.

So an episode's undiscounted return is exactly ``per_tick * 10 * episode_steps`` at the default
500 ms decision (10 ticks): what the Compose test reads back from the result log to prove that
the rollouts in their own image paid this reward and not the shipped one.
"""

from __future__ import annotations

import math

from royalegym.reward import RewardFunction


class TickReward(RewardFunction):
    def __init__(self, per_tick: float = 0.01):
        problems = self.config_problems({"per_tick": per_tick})
        if problems:
            raise ValueError("; ".join(problems))
        self.per_tick = float(per_tick)

    @staticmethod
    def config_problems(kwargs: dict) -> list[str]:
        """What the constructor refuses, for the config check at load (shared/components.py)."""
        w = kwargs.get("per_tick", 0.01)
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            return [f"per_tick={w!r} must be a finite number >= 0"]
        return []

    def config(self) -> dict[str, object]:
        return {"per_tick": self.per_tick}

    def get_reward(self, team, prev, state, results) -> float:
        return self.per_tick * (state.tick - prev.tick)
