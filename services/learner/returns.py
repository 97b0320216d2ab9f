"""Reward scaling by a running std of discounted returns (royalelearn-facts §4 "Reward scaling").

Each iteration, before GAE:

1. Per slot, the running discounted return of the episode in flight is advanced through the
   iteration's rows, ``g <- gamma * g + r`` on every valid cell, and fed (unstandardised,
   unclipped) to a running mean/variance. ``g`` restarts at 0 after a cell that ended its
   episode (terminated or truncated) and at an invalid cell (the slot's sequence is broken:
   a lost round, or the seat is not the learner's). An episode still in flight at the end of
   the rectangle carries its ``g`` into the next iteration.
2. Rewards are divided by the running std of those returns (including this iteration's), once
   more than one return has been seen. The mean is NEVER subtracted: a zero-sum game's rewards
   keep their sign, and a win stays positive.
3. The scaled rewards are clipped to +-``reward_clip`` (in std units).

The running statistics use Chan et al.'s parallel form of Welford's update (one numpy pass
per iteration, combined with the running triple), in float64; the variance is the unbiased
one (ddof 1). ``state()``/``load_state()`` carry the triple and the in-flight returns as plain
JSON numbers, so a checkpoint resumes the scaling bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

MIN_STD = 1e-8
"""A running std at or below this (e.g. every return so far exactly 0) divides by 1 instead."""


class ReturnScaler:
    """Running std of discounted returns over learner cells; divides rewards by it, then clips.

    Args:
        reward_clip: the bound on |scaled reward| (``AdvantageConfig.reward_clip``).
    """

    def __init__(self, reward_clip: float = 10.0):
        if not (math.isfinite(reward_clip) and reward_clip > 0):
            raise ValueError(f"reward_clip must be a finite number > 0, got {reward_clip!r}")
        self.reward_clip = float(reward_clip)
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0  # sum of squared deviations from the mean
        self.running: np.ndarray | None = None  # (R,) float64, the in-flight discounted return per slot

    # ------------------------------------------------------------------ statistics

    def update(self, samples: np.ndarray) -> None:
        """Fold a batch of samples into (count, mean, m2)."""
        x = np.asarray(samples, dtype=np.float64).ravel()
        n_b = x.size
        if n_b == 0:
            return
        mean_b = float(x.mean())
        m2_b = float(((x - mean_b) ** 2).sum())
        n_a = self.count
        n = n_a + n_b
        delta = mean_b - self.mean
        self.mean += delta * n_b / n
        self.m2 += m2_b + delta * delta * n_a * n_b / n
        self.count = n

    @property
    def var(self) -> float | None:
        """Unbiased variance of every return seen; None before two."""
        return self.m2 / (self.count - 1) if self.count > 1 else None

    @property
    def std(self) -> float | None:
        var = self.var
        return math.sqrt(max(var, 0.0)) if var is not None else None

    def divisor(self) -> float:
        """What rewards are divided by now: the running std, or 1 before two returns (or when
        the std is at most ``MIN_STD``)."""
        std = self.std
        return std if std is not None and std > MIN_STD else 1.0

    # ------------------------------------------------------------------ one iteration

    def scale(
        self,
        rewards: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        valid: np.ndarray,
        gamma: float,
    ) -> tuple[np.ndarray, dict[str, float]]:
        """One iteration's (T, R) rewards -> (scaled rewards (T, R) float32, stats).

        ``valid`` marks the cells that count (the learner's trainable cells); every other cell
        is 0 in the output and restarts its slot's running return. ``gamma`` is the iteration's
        discount (the same number GAE uses). If R differs from the previous call's (the fleet
        changed), the in-flight returns restart at 0.

        Stats: ``ppo/reward_scale`` (the divisor), ``ppo/reward_clip_frac`` (share of valid
        cells with |r / scale| > reward_clip; absent with no valid cell), ``ppo/return_std``
        (the running std after this iteration; absent before two returns).
        """
        rewards = np.asarray(rewards, dtype=np.float64)
        if rewards.ndim != 2:
            raise ValueError(f"rewards must be (T, R), got shape {rewards.shape}")
        terminated, truncated, valid = (np.asarray(a, dtype=bool) for a in (terminated, truncated, valid))
        for name, a in (("terminated", terminated), ("truncated", truncated), ("valid", valid)):
            if a.shape != rewards.shape:
                raise ValueError(f"{name} must be {rewards.shape}, got {a.shape}")
        if not math.isfinite(gamma) or not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
        n_steps, n_slots = rewards.shape
        if self.running is None or self.running.shape != (n_slots,):
            self.running = np.zeros(n_slots, dtype=np.float64)
        if not np.isfinite(rewards[valid]).all():
            raise ValueError("a valid cell holds a non-finite reward")

        # Forward discounted returns, cell by cell in time, vectorised over slots.
        returns = np.zeros((n_steps, n_slots), dtype=np.float64)
        g = self.running
        for t in range(n_steps):
            g = np.where(valid[t], gamma * g + rewards[t], 0.0)
            returns[t] = g
            g = np.where(terminated[t] | truncated[t], 0.0, g)
        self.running = g
        # Time-major order: the same samples in the same order on every run.
        self.update(returns[valid])

        scale = self.divisor()
        scaled = np.where(valid, rewards / scale, 0.0)
        clipped = np.abs(scaled) > self.reward_clip
        out = np.clip(scaled, -self.reward_clip, self.reward_clip).astype(np.float32)

        stats: dict[str, float] = {"ppo/reward_scale": float(scale)}
        n_valid = int(valid.sum())
        if n_valid:
            stats["ppo/reward_clip_frac"] = int((clipped & valid).sum()) / n_valid
        if self.std is not None:
            stats["ppo/return_std"] = float(self.std)
        return out, stats

    # ------------------------------------------------------------------ checkpoint

    def state(self) -> dict:
        """Plain JSON-able numbers (Python floats round-trip exactly through JSON)."""
        return {
            "count": int(self.count),
            "mean": float(self.mean),
            "m2": float(self.m2),
            "reward_clip": self.reward_clip,
            "running": None if self.running is None else [float(x) for x in self.running],
        }

    def load_state(self, state: dict) -> None:
        count, mean, m2 = int(state["count"]), float(state["mean"]), float(state["m2"])
        if count < 0 or not (math.isfinite(mean) and math.isfinite(m2)) or m2 < 0:
            raise ValueError(f"not a return-scaler state: count {count}, mean {mean}, m2 {m2}")
        self.count, self.mean, self.m2 = count, mean, m2
        # reward_clip is the config's (a change on resume takes effect); the saved one is informational.
        running = state.get("running")
        self.running = None if running is None else np.array(running, dtype=np.float64)
