"""Steps 3-4 of an iteration (docs/iteration.md): the value pass and GAE over a collected rectangle.

One no-grad critic pass over every learner cell of rows 0..T and over the truncated episodes'
final observations, the batch judged (non-finite values or rewards are counted, and the update
is then skipped), rewards scaled when ``advantage.standardize_rewards``, then GAE
(``services/learner/gae.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from services.learner.frame_history import after_cells, of_cells
from services.learner.gae import compute_gae
from services.learner.rectangle import Rectangle


@dataclass
class Advantages:
    """What the update and the row read. Arrays are (T + 1, R) float32 for ``values``, (T, R)
    for the rest; ``trainable`` is (T, R) bool."""

    values: np.ndarray
    final_values: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray
    trainable: np.ndarray
    nan_trips: int
    """Non-finite values, final values, rewards and advantages counted (``health/nan_guard_trips``)."""
    scale_stats: dict = field(default_factory=dict)
    critic_seconds: float = 0.0
    gae_seconds: float = 0.0


def values_and_advantages(policy, rect: Rectangle, return_scaler, *, gamma: float, lam: float,
                          standardize_rewards: bool, frame_history=None) -> Advantages:
    """The value pass and GAE of ``rect`` (the critic of ``policy`` as it stands).
    ``frame_history``: the learner's ``FrameHistory`` (each cell's previous rows under
    ``obs.frame_stack`` > 1; ignored at 1)."""
    T = rect.T
    t0 = time.perf_counter()
    cells = rect.learner_cells()
    values = np.zeros((T + 1, rect.R), np.float32)
    values[cells] = policy.values(rect.rows[cells], history=of_cells(frame_history, *np.nonzero(cells)))
    final_values = np.zeros((T, rect.R), np.float32)
    if rect.final_rows:
        # (cycle, slot) order, never arrival order: a CPU forward can round a row differently
        # depending on its place in the batch, so the batch itself must be reproducible.
        keys = sorted(rect.final_rows)
        fv = policy.values(np.stack([rect.final_rows[k] for k in keys]),
                           history=after_cells(frame_history, *np.array(keys).T))
        for (t, r), v in zip(keys, fv):
            final_values[t, r] = v
    t_critic = time.perf_counter() - t0
    t0 = time.perf_counter()
    trainable = rect.trainable()
    # Judge the batch before learning from it: a non-finite value or reward is counted
    # (health/nan_guard_trips, a halting alarm) and the update is skipped.
    nan_trips = int(np.count_nonzero(~np.isfinite(values[cells])) + np.count_nonzero(~np.isfinite(final_values))
                    + np.count_nonzero(~np.isfinite(rect.reward[trainable])))
    scale_stats: dict = {}
    rewards = rect.reward
    if standardize_rewards and not nan_trips:
        rewards, scale_stats = return_scaler.scale(rect.reward, rect.terminated, rect.truncated, trainable, gamma)
    adv, ret = compute_gae(rewards, values, final_values, rect.terminated, rect.truncated, trainable, gamma, lam)
    nan_trips += int(np.count_nonzero(~np.isfinite(adv[trainable])))
    return Advantages(values, final_values, adv, ret, trainable, nan_trips, scale_stats,
                      t_critic, time.perf_counter() - t0)
