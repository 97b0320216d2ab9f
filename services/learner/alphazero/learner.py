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

from services.learner.advantages import Advantages, values_and_advantages
from services.learner.alphazero.book import SearchBook
from services.learner.alphazero.update import az_update
from services.learner.stops import StopRequested
from services.learner.update import UpdateResult
from shared.batches import AlphaZeroBatch, PackedObs
from shared.seeding import stream

if TYPE_CHECKING:
    from services.learner.rectangle import Rectangle
    from services.learner.service import Learner


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


class AlphaZeroLearner:
    """The AlphaZero stages of the learner (module docstring)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.book = SearchBook(c_scale=cfg.alphazero.c_scale, candidates=cfg.alphazero.candidates,
                               master_seed=cfg.master_seed)

    def behaviour(self, policy, reward_divisor: float = 1.0):
        """The collection's policy (the live actor); empties the book for the iteration, whose
        critic sees rewards divided by ``reward_divisor`` (the leaves' simulated rewards too)."""
        self.book.begin(reward_divisor if self.cfg.advantage.standardize_rewards else 1.0)
        return policy

    def train(self, learner: Learner, c) -> tuple[Advantages, UpdateResult, dict]:
        """Values, returns and the update over ``c`` (a ``Collected``); returns the advantages
        the row reads, the update's result and the ``search/`` and ``az/`` keys."""
        p, cfg = learner.parts, self.cfg
        adv = values_and_advantages(p.policy, c.rect, p.return_scaler, frame_history=None, gamma=c.sched["gamma"],
                                    lam=cfg.alphazero.value_lambda, standardize_rewards=cfg.advantage.standardize_rewards)
        extra = self.book.row(c.seconds, c.stats.env_steps)
        t0 = time.perf_counter()
        batch = az_batch(c.rect, adv, self.book, p.pf.spec.n_actions)
        if adv.nan_trips or not len(batch):
            return adv, UpdateResult(0, {}, time.perf_counter() - t0), extra
        batch_of = p.policy.fetcher(batch.obs.rows, batch.obs.index)

        def fetch(cells):
            if learner.stopping:  # a stop abandons the update at the next minibatch (update.py's rule)
                raise StopRequested
            return batch_of(cells)

        def epoch_rng(e: int):
            return stream(cfg.master_seed, "az/minibatch/iteration/{iteration}/epoch/{epoch}", iteration=c.iteration,
                          epoch=e)

        stats = az_update(p.model, p.opt_actor, p.opt_critic, batch, fetch, cfg.ppo, epoch_rng, p.device)
        return adv, UpdateResult(len(batch), stats, time.perf_counter() - t0), extra | stats
