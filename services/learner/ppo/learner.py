"""The PPO learner as the learner service runs it (``learner.algorithm = "ppo"``): an
``algorithm.Algorithm`` whose round is the live actor's answers and whose update is steps 3-5
of docs/iteration.md: the value pass and GAE (``advantages.values_and_advantages``), the
trainable cells as a ``shared.batches.PpoBatch`` (seed 000's fields, observations as packed rows
by reference), the extensions' hooks and ``ppo_update`` (``update.py``), then the LR backoff's
look at its KL. Its state is the generic checkpoint's (actor, critic, their Adams, the return
scaler, the LR backoff): no components of its own.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from services.learner import extension_hooks
from services.learner.advantages import Advantages, values_and_advantages
from services.learner.algorithm import RowKeys, TrainResult, UpdateResult
from services.learner.frame_history import of_cells
from services.learner.measures import policy_lag_metrics
from services.learner.ppo.update import UpdateData, ppo_update
from services.learner.stops import stoppable
from shared.batches import PackedObs, PpoBatch
from shared.seeding import stream

if TYPE_CHECKING:
    from services.learner.algorithm import AlgorithmParts, TrainContext
    from services.learner.collected import Collected
    from services.learner.rectangle import Rectangle
    from shared.nn.policy import Policy


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


def run_update(ctx: TrainContext, rect: Rectangle, adv: Advantages, *, iteration: int, sched: dict,
               inference_precision: str | None, behaviour_model=None) -> UpdateResult:
    """Train ``ctx.model`` on ``rect``. Raises StopRequested at the next minibatch once
    ``ctx.stopping()`` (the weights are then mid-update: the caller must not capture them).

    ``behaviour_model``: the snapshot that inferred the rectangle's lag-1 cells (overlap). When
    there are any, ``ppo/ratio_max_abs_dev`` is measured against the actor that inferred each
    row of the first batch (``overlap.behaviour_ratio_dev``), before the first step; the
    ratio inside the update stays against the rows' own log-probs."""
    cfg = ctx.cfg
    t0 = time.perf_counter()
    batch = ppo_batch(rect, adv, ctx.n_actions)
    n_train = len(batch) if not adv.nan_trips else 0
    if not n_train:
        return UpdateResult(0, {}, time.perf_counter() - t0)
    # CUDA: the trainable rows go to the device once, here; CPU: numpy per minibatch.
    t_idx, r_idx = np.divmod(batch.obs.index, rect.R)
    stacked = None if cfg.obs.frame_stack == 1 else (lambda c: of_cells(ctx.frame_history, t_idx[c], r_idx[c]))
    batch_of = ctx.policy.fetcher(batch.obs.rows, batch.obs.index, stacked)
    fetch = stoppable(batch_of, ctx.stopping)  # the behaviour check below reads without the stop

    data = UpdateData.from_batch(batch, fetch, old_log_prob_precision=inference_precision)

    def epoch_rng(e: int):
        return stream(cfg.master_seed, "ppo/minibatch/iteration/{iteration}/epoch/{epoch}", iteration=iteration, epoch=e)

    behaviour_dev = None
    lags = batch.policy_lag
    if behaviour_model is not None and lags.any():
        from services.learner.overlap import behaviour_ratio_dev, first_batch

        cells = first_batch(n_train, cfg.ppo.batch_size, epoch_rng(0))
        behaviour_dev = behaviour_ratio_dev({0: ctx.model, 1: behaviour_model}, batch_of, cells, data.actions,
                                            data.old_log_probs, lags, data.n_legal)
    exts = ctx.extensions  # shared/learner_extension.py; () trains exactly as without them
    lr_mult = extension_hooks.lr_multiplier(exts, iteration, ctx.env_steps) if exts else 1.0
    with extension_hooks.scaled_lr(ctx.opt_actor, lr_mult):
        stats = ppo_update(ctx.model, ctx.opt_actor, ctx.opt_critic, data, cfg.ppo, epoch_rng, ctx.device,
                           ent_coef=sched["ent_coef"], ent_coef_noop=sched["ent_coef_noop"], extensions=exts,
                           iteration=iteration)
    if exts:
        stats["ppo/actor_lr_multiplier"] = lr_mult
        stats["ppo/actor_frozen"] = 1.0 if lr_mult == 0.0 else 0.0
        stats.update(extension_hooks.end_update(exts, stats))
    if behaviour_dev is not None and "ppo/ratio_max_abs_dev" in stats:
        stats["ppo/ratio_max_abs_dev"] = behaviour_dev
    ctx.lr_backoff.observe(stats.get("ppo/kl"), ctx.opt_actor, ctx.opt_critic)
    return UpdateResult(n_train, stats, time.perf_counter() - t0)


class PpoAlgorithm:
    """PPO behind the learner's algorithm boundary (module docstring)."""

    name = "ppo"
    extension_hooks = frozenset(extension_hooks.HOOKS)
    round_hooks = None
    components = ()

    def __init__(self, parts: AlgorithmParts):
        del parts  # PPO's parts are the generic ones, handed to each update in its TrainContext

    def rollout_search(self) -> None:
        return None

    def behaviour(self, iteration: int, policy: Policy, reward_divisor: float) -> Policy:
        """The live actor answers the rounds."""
        return policy

    def train(self, collected: Collected, context: TrainContext) -> TrainResult:
        """The value pass and GAE (``advantage.gae_lambda``), then ``run_update``."""
        c, a = collected, context.cfg.advantage
        adv = values_and_advantages(context.policy, c.rect, context.return_scaler, frame_history=context.frame_history,
                                    gamma=c.sched["gamma"], lam=a.gae_lambda, standardize_rewards=a.standardize_rewards)
        upd = run_update(context, c.rect, adv, iteration=c.iteration, sched=c.sched,
                         inference_precision=c.inference_precision,
                         behaviour_model=getattr(c.policy, "behaviour_model", None))
        return TrainResult(adv, upd)

    def row_keys(self, collected: Collected, result: TrainResult, context: TrainContext) -> RowKeys:
        """The ``ppo/`` keys: the scheduled entropy coefficients, the return scale and learning
        rates, the advantages' and returns' means with the update's keys, the policy lag."""
        adv, upd, sched = result.advantages, result.update, collected.sched
        update: dict = {}
        if upd.n_train:
            update["ppo/advantage_mean"] = float(adv.advantages[adv.trainable].mean())
            update["ppo/return_mean"] = float(adv.returns[adv.trainable].mean())
        update.update(upd.stats)
        return RowKeys(after_schedule={"ppo/ent_coef": sched["ent_coef"], "ppo/ent_coef_noop": sched["ent_coef_noop"]},
                       after_choice={**adv.scale_stats, **context.lr_backoff.metrics(context.opt_actor, context.opt_critic)},
                       after_update=update, after_frozen=policy_lag_metrics(collected.rect, adv.trainable))
