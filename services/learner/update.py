"""Step 5 of an iteration (docs/iteration.md): the PPO update over a rectangle's trainable rows
(``services/learner/ppo.py``), then the LR backoff's look at its KL.

The seam: ``ppo_batch`` hands the update a typed ``shared.batches.PpoBatch`` (seed 000's
fields, observations as packed rows by reference); the update reads it by field name."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from services.learner import extension_hooks
from services.learner.advantages import Advantages
from services.learner.frame_history import of_cells
from services.learner.ppo import UpdateData, ppo_update
from services.learner.rectangle import Rectangle
from services.learner.stops import StopRequested
from shared.batches import PackedObs, PpoBatch
from shared.seeding import stream

if TYPE_CHECKING:
    from services.learner.service import Learner


@dataclass
class UpdateResult:
    n_train: int
    """Rows trained on: the trainable cells, or 0 when the NaN guard tripped (no update ran)."""
    stats: dict = field(default_factory=dict)
    """``ppo/...`` keys of ``ppo_update``; empty when nothing was trained."""
    seconds: float = 0.0


def ppo_batch(rect: Rectangle, adv: Advantages, n_actions: int) -> PpoBatch:
    """The trainable cells of ``rect`` as a ``PpoBatch``, in (cycle, slot) order: the same
    rows, in the same order, as the update has always trained on. ``players`` is each record's
    global slot. No row is copied: ``obs`` indexes the rectangle's packed rows."""
    t_idx, r_idx = np.nonzero(adv.trainable)
    obs = PackedObs(rect.rows.reshape(-1, rect.row_bytes), t_idx * rect.R + r_idx, rect.mask_offset, n_actions)
    return PpoBatch(
        obs=obs, players=r_idx.astype(np.int32), actions=rect.actions[t_idx, r_idx],
        behavior_log_probs=rect.log_probs[t_idx, r_idx], advantages=adv.advantages[t_idx, r_idx],
        returns=adv.returns[t_idx, r_idx], values=adv.values[t_idx, r_idx], n_legal=rect.n_legal[t_idx, r_idx],
        policy_lag=rect.policy_lag[t_idx, r_idx], telemetry={"nan_trips": adv.nan_trips},
    )


def run_update(learner: Learner, rect: Rectangle, adv: Advantages, *, iteration: int, sched: dict,
               inference_precision: str | None, behaviour_model=None) -> UpdateResult:
    """Train ``learner.parts.model`` on ``rect``. Raises StopRequested at the next minibatch once a
    stop is requested (the weights are then mid-update: the caller must not capture them).

    ``behaviour_model``: the snapshot that inferred the rectangle's lag-1 cells (overlap). When
    there are any, ``ppo/ratio_max_abs_dev`` is measured against the actor that inferred each
    row of the first batch (``overlap.behaviour_ratio_dev``), before the first step; the
    ratio inside the update stays against the rows' own log-probs."""
    cfg = learner.parts.cfg
    t0 = time.perf_counter()
    batch = ppo_batch(rect, adv, learner.parts.pf.spec.n_actions)
    n_train = len(batch) if not adv.nan_trips else 0
    if not n_train:
        return UpdateResult(0, {}, time.perf_counter() - t0)
    # CUDA: the trainable rows go to the device once, here; CPU: numpy per minibatch.
    t_idx, r_idx = np.divmod(batch.obs.index, rect.R)
    stacked = None if cfg.obs.frame_stack == 1 else (lambda c: of_cells(learner.parts.frame_history, t_idx[c], r_idx[c]))
    batch_of = learner.parts.policy.fetcher(batch.obs.rows, batch.obs.index, stacked)

    def fetch(idx):
        # Called once per minibatch: the point where a stop request abandons the
        # update (the checkpoint written is then the last row's state, not this one).
        if learner.stopping:
            raise StopRequested
        return batch_of(idx)

    data = UpdateData.from_batch(batch, fetch, old_log_prob_precision=inference_precision)

    def epoch_rng(e: int):
        return stream(cfg.master_seed, "ppo/minibatch/iteration/{iteration}/epoch/{epoch}", iteration=iteration, epoch=e)

    behaviour_dev = None
    lags = batch.policy_lag
    if behaviour_model is not None and lags.any():
        from services.learner.overlap import behaviour_ratio_dev, first_batch

        cells = first_batch(n_train, cfg.ppo.batch_size, epoch_rng(0))
        behaviour_dev = behaviour_ratio_dev({0: learner.parts.model, 1: behaviour_model}, batch_of, cells, data.actions,
                                            data.old_log_probs, lags, data.n_legal)
    exts = learner.parts.extensions  # shared/learner_extension.py; () trains exactly as without them
    lr_mult = extension_hooks.lr_multiplier(exts, iteration, learner.state.env_steps) if exts else 1.0
    with extension_hooks.scaled_lr(learner.parts.opt_actor, lr_mult):
        stats = ppo_update(learner.parts.model, learner.parts.opt_actor, learner.parts.opt_critic, data, cfg.ppo, epoch_rng,
                           learner.parts.device, ent_coef=sched["ent_coef"], ent_coef_noop=sched["ent_coef_noop"],
                           extensions=exts, iteration=iteration)
    if exts:
        stats["ppo/actor_lr_multiplier"] = lr_mult
        stats["ppo/actor_frozen"] = 1.0 if lr_mult == 0.0 else 0.0
        stats.update(extension_hooks.end_update(exts, stats))
    if behaviour_dev is not None and "ppo/ratio_max_abs_dev" in stats:
        stats["ppo/ratio_max_abs_dev"] = behaviour_dev
    learner.parts.lr_backoff.observe(stats.get("ppo/kl"), learner.parts.opt_actor, learner.parts.opt_critic)
    return UpdateResult(n_train, stats, time.perf_counter() - t0)
