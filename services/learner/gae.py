"""Generalised Advantage Estimation over one iteration's (T, R) rectangle.

GAE (Schulman, Moritz, Levine, Jordan, Abbeel 2016, "High-Dimensional Continuous Control
Using Generalized Advantage Estimation", eq. 16):

    delta_t = r_t + gamma * V_next(t) - V(s_t)
    A_t     = delta_t + gamma * lam * A_{t+1}      (while the episode continues)
    G_t     = A_t + V(s_t)                          (the value target, TD(lambda) return)

Episode ends (royalelearn-facts §4 "GAE"):

* terminated at t (the game was decided): V_next = 0.
* truncated at t (a step limit CUT the episode): V_next = V(final observation of that
  episode), ``final_values[t]``. Bootstrapping a truncation from 0 would throw away the value
  of every position a step limit ended; bootstrapping it from ``values[t+1]`` would take the
  value of the NEXT episode's first observation, which is another game.
* otherwise V_next = ``values[t+1]`` (row T is the bootstrap row: the observation after the
  last collected step).

The recursion never crosses an episode end, the end of the rectangle, or an invalid cell (a
round that did not arrive); an invalid cell gets advantage 0 and return 0.
"""

from __future__ import annotations

import math

import numpy as np


def _check(rewards, values, final_values, terminated, truncated, valid):
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be (T, R), got shape {rewards.shape}")
    t, r = rewards.shape
    expected = {"final_values": (t, r), "terminated": (t, r), "truncated": (t, r), "valid": (t, r), "values": (t + 1, r)}
    arrays = {"final_values": final_values, "terminated": terminated, "truncated": truncated, "valid": valid, "values": values}
    for name, shape in expected.items():
        if arrays[name].shape != shape:
            raise ValueError(f"{name} must be {shape} for rewards of shape {(t, r)}, got {arrays[name].shape}")


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    final_values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    valid: np.ndarray,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns, vectorised over the R slots (a backward loop over T).

    Args:
        rewards: (T, R) float32, the reward of row t's step.
        values: (T+1, R) float32, V(s_t); row T is V of the observation after the last step.
        final_values: (T, R) float32, V(final observation) of an episode truncated at t; read
            only where ``truncated``.
        terminated, truncated: (T, R) bool, row t's step ended the episode.
        valid: (T, R) bool, row t's transition is complete (observation, action, step result).
        gamma, lam: discount and GAE lambda.

    Returns:
        (advantages, returns), each (T, R) float32, 0 on invalid cells.
    """
    rewards, values, final_values = (np.asarray(a, dtype=np.float64) for a in (rewards, values, final_values))
    terminated, truncated, valid = (np.asarray(a, dtype=bool) for a in (terminated, truncated, valid))
    _check(rewards, values, final_values, terminated, truncated, valid)
    n_steps, n_slots = rewards.shape

    # float64 inside: a long recursion in float32 drifts by more than the reference's 1e-6.
    advantages = np.zeros((n_steps, n_slots), dtype=np.float64)
    next_advantage = np.zeros(n_slots, dtype=np.float64)
    for t in reversed(range(n_steps)):
        ended = terminated[t] | truncated[t]
        next_value = np.where(terminated[t], 0.0, np.where(truncated[t], final_values[t], values[t + 1]))
        delta = rewards[t] + gamma * next_value - values[t]
        # Carry A[t+1] back only inside one episode and only from a cell that exists.
        carries = ~ended & (valid[t + 1] if t + 1 < n_steps else False)
        advantage = delta + gamma * lam * np.where(carries, next_advantage, 0.0)
        advantages[t] = np.where(valid[t], advantage, 0.0)  # where(): an invalid cell's NaN stays out
        next_advantage = advantages[t]
    returns = np.where(valid, advantages + values[:n_steps], 0.0)
    return advantages.astype(np.float32), returns.astype(np.float32)


def credit_horizon_seconds(gamma: float, lam: float, decision_ms: float) -> float:
    """The effective GAE credit horizon, 1 / (1 - gamma * lam) decisions, in seconds.
    0.5 s decisions: gamma 0.997, lam 0.99 -> 38.55 s; the references' lam 0.95 -> ~9.8 s."""
    discount = gamma * lam
    return math.inf if discount >= 1.0 else (decision_ms / 1000.0) / (1.0 - discount)
