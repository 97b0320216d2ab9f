"""The per-cell GAE oracle (a test's, not the learner's: it moved here from
``services/learner/gae.py``)."""

from __future__ import annotations

import numpy as np


def compute_gae_reference(
    rewards: np.ndarray,
    values: np.ndarray,
    final_values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    valid: np.ndarray,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``services.learner.gae.compute_gae``'s quantity one cell at a time in plain Python, slot
    by slot: the test oracle the vectorised estimator is checked against."""
    n_steps, n_slots = np.shape(rewards)
    advantages = np.zeros((n_steps, n_slots), dtype=np.float32)
    returns = np.zeros((n_steps, n_slots), dtype=np.float32)
    for r in range(n_slots):
        following = 0.0  # A[t+1] of this slot, if the recursion may use it
        for t in range(n_steps - 1, -1, -1):
            if not valid[t][r]:
                following = 0.0
                continue
            if terminated[t][r]:
                next_value = 0.0
            elif truncated[t][r]:
                next_value = float(final_values[t][r])
            else:
                next_value = float(values[t + 1][r])
            delta = float(rewards[t][r]) + gamma * next_value - float(values[t][r])
            episode_goes_on = not terminated[t][r] and not truncated[t][r]
            next_exists = t + 1 < n_steps and bool(valid[t + 1][r])
            advantage = delta + gamma * lam * following if episode_goes_on and next_exists else delta
            advantages[t][r] = advantage
            returns[t][r] = advantage + float(values[t][r])
            following = advantage
    return advantages, returns
