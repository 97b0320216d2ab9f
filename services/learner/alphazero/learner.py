"""The AlphaZero learner's stages inside the learner service (``learner.algorithm = "alphazero"``).

The fleet stays as it is: the same rollouts, rounds, rectangle, ladder, checkpoint service and
evaluators, the actor and critic of PPO (so snapshots play in the pool and the gate unchanged).
What changes per iteration:

* collection: central inference names each learner choice row's candidates by Gumbel-top-k of
  the live actor's prior, the rollouts search them before they step and play Gumbel
  AlphaZero's move, and the next round's scores become the row's completed-Q target
  (``SearchBook``; services/rollout/search.py);
* training: the value pass and TD(``alphazero.value_lambda``) returns (lambda 1: the realized
  return-to-go) over the rectangle, the trainable cells as an ``AlphaZeroBatch`` (a searched
  cell: its target over the legal set, weight 1; every other cell value-only: an empty slice,
  weight 0), then ``az_update``.

State: none beyond the PPO learner's (actor, critic, their Adams, the return scaler); the book
holds one iteration's targets and is rebuilt from the rollouts' rounds, and a resumed battle's
search is a pure function of its restored state, so resume is exact as PPO's is.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from services.learner import extension_hooks
from services.learner.advantages import Advantages, values_and_advantages
from services.learner.algorithm import RowKeys, TrainResult, UpdateResult
from services.learner.alphazero.book import SearchBook, rollout_search_of
from services.learner.alphazero.rounds import SearchRounds
from services.learner.alphazero.update import az_update
from services.learner.stops import stoppable
from shared.batches import AlphaZeroBatch, PackedObs
from shared.search.spec import RolloutSearch
from shared.seeding import stream

if TYPE_CHECKING:
    from services.learner.algorithm import AlgorithmParts, TrainContext
    from services.learner.collected import Collected
    from services.learner.rectangle import Rectangle


def az_batch(rect: Rectangle, adv: Advantages, book: SearchBook, n_actions: int) -> AlphaZeroBatch:
    """The trainable cells of ``rect`` in (cycle, slot) order as an ``AlphaZeroBatch``: the
    value target is the cell's return, the policy slice its search target when ``book`` has one
    (weight 1), else empty (weight 0)."""
    t_idx, r_idx = np.nonzero(adv.trainable)
    ids, probs, counts = [], [], np.zeros(len(t_idx), np.int64)
    weights = np.zeros(len(t_idx), np.float32)
    for i, (t, r) in enumerate(zip(t_idx.tolist(), r_idx.tolist())):
        target = book.targets.get((t, r))
        if target is not None:
            ids.append(target.ids)
            probs.append(target.probs)
            counts[i] = len(target.ids)
            weights[i] = 1.0
    offsets = np.zeros(len(t_idx) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    obs = PackedObs(rect.rows.reshape(-1, rect.row_bytes), t_idx * rect.R + r_idx, rect.mask_offset, n_actions)
    return AlphaZeroBatch(obs=obs, players=r_idx.astype(np.int32),
                          policy_targets=np.concatenate(probs) if probs else np.zeros(0, np.float32),
                          value_targets=adv.returns[t_idx, r_idx].astype(np.float32), policy_weights=weights,
                          legal_ids=np.concatenate(ids) if ids else np.zeros(0, np.int16), legal_offsets=offsets,
                          n_actions=n_actions)


class AlphaZeroAlgorithm:
    """AlphaZero behind the learner's algorithm boundary (``algorithm.Algorithm``; module
    docstring), registered as ``learner.algorithm = "alphazero"``. Its round hooks
    (``rounds.SearchRounds``) name the candidates, keep the targets and answer the mid-step
    questions; its state is the generic checkpoint's (no components of its own)."""

    name = "alphazero"
    extension_hooks = frozenset({"fresh_start", "resumed", "actor_lr_multiplier", "state", "load_state"})
    """A warm start from a clone (``warm_start``: the weights at a fresh start, the actor held
    still for its first iterations); not the PPO actor-loss terms (imitation, KL anchor)."""
    components = ()

    def __init__(self, parts: AlgorithmParts):
        cfg = parts.cfg
        self.cfg = cfg
        self.book = SearchBook(c_scale=cfg.alphazero.c_scale, candidates=cfg.alphazero.candidates,
                               master_seed=cfg.master_seed,
                               move_keep=cfg.alphazero.keep if cfg.alphazero.stable() else None,
                               full_share=cfg.alphazero.full_search_share,
                               plans=cfg.alphazero.candidates_from == "plans",
                              own_argmax=cfg.alphazero.own_pick == "argmax")
        self.round_hooks = SearchRounds(self.book)

    def rollout_search(self) -> RolloutSearch:
        """The rollouts search the learner's choice decisions (``alphazero`` section)."""
        return rollout_search_of(self.cfg.alphazero)

    def behaviour(self, iteration: int, policy, reward_divisor: float = 1.0):
        """The collection's policy (the live actor); empties the book for the iteration, whose
        critic sees rewards divided by ``reward_divisor`` (the leaves' simulated rewards too)."""
        self.book.begin(reward_divisor if self.cfg.advantage.standardize_rewards else 1.0)
        return policy

    def train(self, collected: Collected, context: TrainContext) -> TrainResult:
        """Values, returns and the update over ``collected``; returns the advantages the row
        reads, the update's result and the ``search/`` keys (read before the update)."""
        c, ctx, cfg = collected, context, self.cfg
        adv = values_and_advantages(ctx.policy, c.rect, ctx.return_scaler, frame_history=None, gamma=c.sched["gamma"],
                                    lam=cfg.alphazero.value_lambda, standardize_rewards=cfg.advantage.standardize_rewards)
        search = self.book.row(c.seconds, c.stats.env_steps)
        t0 = time.perf_counter()
        batch = az_batch(c.rect, adv, self.book, ctx.n_actions)
        if adv.nan_trips or not len(batch):
            return TrainResult(adv, UpdateResult(0, {}, time.perf_counter() - t0), search)
        fetch = stoppable(ctx.policy.fetcher(batch.obs.rows, batch.obs.index), ctx.stopping)

        def epoch_rng(e: int):
            return stream(cfg.master_seed, "az/minibatch/iteration/{iteration}/epoch/{epoch}", iteration=c.iteration,
                          epoch=e)

        exts = ctx.extensions  # the warm start's hold: the actor's learning rate times 0 for its iterations
        lr_mult = extension_hooks.lr_multiplier(exts, c.iteration, ctx.env_steps) if exts else 1.0
        with extension_hooks.scaled_lr(ctx.opt_actor, lr_mult):
            stats = az_update(ctx.model, ctx.opt_actor, ctx.opt_critic, batch, fetch, cfg.ppo, epoch_rng, ctx.device)
        return TrainResult(adv, UpdateResult(len(batch), stats, time.perf_counter() - t0), search)

    def row_keys(self, collected: Collected, result: TrainResult, context: TrainContext) -> RowKeys:
        """The update's ``az/`` keys, then the search's ``search/`` (and its ``throughput/``) keys."""
        return RowKeys(after_update=result.update.stats, end=result.row)
