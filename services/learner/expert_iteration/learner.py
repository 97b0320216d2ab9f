"""Expert iteration behind the learner's algorithm boundary (``learner.algorithm =
"expert_iteration"``; docs/expert-iteration.md).

AlphaZero's machinery, composed: the rollouts search the learner seats' choice decisions
(``alphazero.rounds.SearchRounds`` over an ``ExpitBook``, a ``SearchBook`` whose targets are on a
fixed scale), the mid-step answers are AlphaZero's, the update is ``alphazero.update.az_update``.
What differs:

* the behaviour: the rollouts' rows, the search's prior and its mid-step answers are inferred by
  the **current generation**, a frozen copy of the network (generation 0: the start, a warm
  start's clone or the untrained actor; then the ladder's last promoted champion,
  ``generations.Generations``), not by the network being trained;
* the training: each iteration's searched rows (policy target, value target: the search's root
  value or the realized return) join a bounded replay (``replay.SearchReplay``) and the next
  generation's network trains on all of it at ``expert_iteration.lr_actor`` / ``lr_critic``;
* the row: ``expit/`` keys, the generation and the prior the network plays against the targets
  (``prior.prior_metrics``) beside the searched move's.

State (the ``expert_iteration`` checkpoint component): the generation's network, the generation
record and the replay, so a resume collects with the same prior and trains on the same rows.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from services.learner.advantages import values_and_advantages
from services.learner.algorithm import RowKeys, TrainResult, UpdateResult
from services.learner.alphazero.book import rollout_search_of
from services.learner.alphazero.rounds import SearchRounds
from services.learner.alphazero.update import az_update
from services.learner.checkpoint_types import Component
from services.learner.expert_iteration.declare import settings
from services.learner.expert_iteration.generations import Generations
from services.learner.expert_iteration.prior import legal_log_priors, prior_metrics
from services.learner.expert_iteration.replay import FILES as REPLAY_FILES
from services.learner.expert_iteration.replay import ReplayPart, SearchReplay
from services.learner.expert_iteration.targets import ExpitBook
from services.learner.extension_hooks import lr_multiplier
from services.learner.stops import stoppable
from shared.messages import snapshot_of
from shared.search.spec import RolloutSearch
from shared.seeding import stream

if TYPE_CHECKING:
    from services.learner.advantages import Advantages
    from services.learner.algorithm import AlgorithmParts, TrainContext
    from services.learner.collected import Collected

NAME = "expert_iteration"
GENERATION_FILES = ("expert_iteration/generation.json", "expert_iteration/generation.safetensors")
EXTENSIONS_TAKEN = ("warm_start",)
"""The extension sections it honours: the warm start (its clone is generation 0; its hold
multiplies the actor's rate). The others hook into the PPO update and are refused."""


def searched_part(iteration: int, c: Collected, adv: Advantages, book: ExpitBook, root: bool) -> ReplayPart:
    """The trainable cells of ``c.rect`` with a search target, in (cycle, slot) order, as a
    replay part: value target the root value (``root``) or the cell's return. Under playout-cap
    randomisation (``book.fast``) with the return as value target, the trainable fast rows too,
    in the same order, value-only: an empty legal slice (policy weight 0 in the batch); under
    ``root`` they have no root value and stay out."""
    rect = c.rect
    cells = [(int(t), int(r)) for t, r in zip(*np.nonzero(adv.trainable))
             if (int(t), int(r)) in book.targets or (not root and (int(t), int(r)) in book.fast)]
    t_idx = np.asarray([t for t, _ in cells], np.int64)
    r_idx = np.asarray([r for _, r in cells], np.int64)
    found = [book.targets.get(cell) for cell in cells]
    targets = [x for x in found if x is not None]
    offsets = np.zeros(len(cells) + 1, np.int64)
    np.cumsum([0 if x is None else len(x.ids) for x in found], out=offsets[1:])
    if root:
        values = np.asarray([book.searched[cell].root for cell in cells], np.float32)
    else:
        values = adv.returns[t_idx, r_idx].astype(np.float32)
    return ReplayPart(iteration, np.ascontiguousarray(rect.rows[t_idx, r_idx]),
                      np.concatenate([x.ids for x in targets]) if targets else np.zeros(0, np.int16), offsets,
                      np.concatenate([x.probs for x in targets]) if targets else np.zeros(0, np.float32), values)


class ExpertIterationAlgorithm:
    """Expert iteration (module docstring), registered as ``learner.algorithm = "expert_iteration"``."""

    name = NAME
    extension_hooks = frozenset({"fresh_start", "resumed", "actor_lr_multiplier", "state", "load_state"})
    """The hooks of the one extension it takes (``EXTENSIONS_TAKEN``: the warm start), as AlphaZero's
    (``algorithm.Algorithm.extension_hooks``); the PPO actor-loss hooks are not run."""

    def __init__(self, parts: AlgorithmParts):
        cfg, ex = parts.cfg, settings(parts.cfg)
        other = sorted(set(cfg.extensions) - set(EXTENSIONS_TAKEN))
        if other:
            raise SystemExit(f"learner: expert_iteration takes the extension sections {list(EXTENSIONS_TAKEN)}; "
                             f"{other} hook into the PPO update it does not run: remove them")
        self.cfg, self.model, self.codec, self.device, self.say = cfg, parts.model, parts.pf.codec, parts.device, parts.say
        self.book = ExpitBook(c_scale=cfg.alphazero.c_scale, candidates=cfg.alphazero.candidates,
                              master_seed=cfg.master_seed, target_c_scale=ex.c_scale, keep=ex.keep,
                              value_scale=ex.value_scale, move_keep=cfg.alphazero.keep if cfg.alphazero.stable() else None,
                              critic_scores=cfg.alphazero.leaf_value == "critic" or cfg.alphazero.value_scale > 0,
                              full_share=cfg.alphazero.full_search_share,
                              plans=cfg.alphazero.candidates_from == "plans",
                              own_argmax=cfg.alphazero.own_pick == "argmax")
        self.round_hooks = SearchRounds(self.book)
        self.replay = SearchReplay(ex.replay_iterations, ex.replay_rows)
        self.generations = Generations()
        self.generation_model = None
        """The current generation's actor-critic (frozen); built at the first behaviour."""
        self.switched = False
        self.frozen = None
        """The learner's ``FrozenActors`` (a promoted champion's weights come from the snapshot
        store through it); known from the first capture or restore."""
        self.components = (Component(NAME, GENERATION_FILES + REPLAY_FILES, self._save, self._load, state=True,
                                     owner=NAME),)

    def rollout_search(self) -> RolloutSearch:
        """The rollouts search as under AlphaZero (the ``alphazero`` section)."""
        return rollout_search_of(self.cfg.alphazero)

    # ------------------------------------------------------------------ the generation

    def behaviour(self, iteration: int, policy, reward_divisor: float = 1.0):
        """The current generation's ``Policy`` (switched first when the ladder promoted a new
        champion since; ``generations``); empties the book for the iteration."""
        from shared.nn.policy import Policy

        self.book.begin(reward_divisor if self.cfg.advantage.standardize_rewards else 1.0)
        if self.generation_model is None:  # generation 0: the network as the run starts (after a warm start)
            self.generation_model = frozen_copy(self.model)
        self.switched = self.switch_if_promoted()
        return Policy(self.generation_model, self.codec, self.device)

    def switch_if_promoted(self) -> bool:
        """Load the champion the ladder promoted into the generation's actor (its critic: the
        live critic now); False when none is due or its snapshot cannot be read (said; tried
        again next iteration)."""
        champion = self.generations.due()
        if champion is None:
            return False
        sid = snapshot_of(champion)
        if sid is None or self.frozen is None:
            self.say(f"learner: expert iteration cannot read champion {champion!r} (no snapshot store yet)")
            return False
        from services.learner.frozen import SnapshotUnavailable

        try:
            actor = self.frozen.get(sid).model.actor
        except SnapshotUnavailable as exc:
            self.say(f"learner: generation {self.generations.number + 1} ({champion}) not taken yet: {exc}")
            return False
        assert self.generation_model is not None
        self.generation_model.actor.load_state_dict(actor.state_dict())
        self.generation_model.critic.load_state_dict(self.model.critic.state_dict())
        self.generations.switched(champion)
        self.say(f"learner: expert iteration: generation {self.generations.number} is {champion} (promoted by the "
                 f"ladder's gate); the rollouts search with its prior")
        return True

    def _save(self, parts, state) -> dict[str, bytes]:
        from shared.nn.statefiles import module_to_bytes

        self.frozen = parts.frozen
        self.generations.observe(parts.pool.status.last)  # the gate's verdict as of this row
        files = {GENERATION_FILES[0]: msgspec.json.encode(self.generations),
                 GENERATION_FILES[1]: module_to_bytes(self.generation_model)}
        files.update(self.replay.to_files())
        return files

    def _load(self, parts, state, files: dict[str, bytes]) -> None:
        from shared.nn.statefiles import bytes_to_module

        self.frozen = parts.frozen
        self.generations = msgspec.json.decode(files[GENERATION_FILES[0]], type=Generations)
        self.generation_model = frozen_copy(self.model)
        bytes_to_module(self.generation_model, files[GENERATION_FILES[1]])
        self.replay.load_files(files)

    # ------------------------------------------------------------------ training

    def train(self, collected: Collected, context: TrainContext) -> TrainResult:
        """The value pass (the realized returns, for the row and ``value_target = "return"``),
        this iteration's searched rows into the replay, then ``az_update`` over the replay."""
        c, ctx, cfg, ex = collected, context, self.cfg, settings(self.cfg)
        adv = values_and_advantages(ctx.policy, c.rect, ctx.return_scaler, frame_history=None, gamma=c.sched["gamma"],
                                    lam=cfg.alphazero.value_lambda, standardize_rewards=cfg.advantage.standardize_rewards)
        row = self.book.row(c.seconds, c.stats.env_steps)
        part = searched_part(c.iteration, c, adv, self.book, ex.value_target == "root")
        row.update(self.played_keys(c, adv, part))
        if not adv.nan_trips:  # a tripped rectangle's values and returns are not trusted: its rows stay out
            self.replay.add(part)
        row.update({"expit/generation": float(self.generations.number), "expit/generation_switched": float(self.switched),
                    "expit/replay_rows": float(len(self.replay)), "expit/replay_iterations": float(len(self.replay.parts))})
        # the labels (policy targets) this iteration gave the replay, and the replay's: under playout-cap
        # randomisation it also holds value-only rows
        row["expit/labels_added"] = float(0 if adv.nan_trips else part.labels())
        row["expit/replay_labels"] = float(self.replay.labels())
        t0 = time.perf_counter()
        if adv.nan_trips or not len(self.replay):
            return TrainResult(adv, UpdateResult(0, {}, time.perf_counter() - t0), row)
        batch = self.replay.batch(c.rect.mask_offset, ctx.n_actions)
        fetch = stoppable(ctx.policy.fetcher(batch.obs.rows, batch.obs.index), ctx.stopping)

        def epoch_rng(e: int):
            return stream(cfg.master_seed, "expit/minibatch/iteration/{iteration}/epoch/{epoch}",
                          iteration=c.iteration, epoch=e)

        hold = lr_multiplier(ctx.extensions, c.iteration, ctx.env_steps)
        with learning_rates(((ctx.opt_actor, ex.lr_actor * hold), (ctx.opt_critic, ex.lr_critic))):
            stats = az_update(ctx.model, ctx.opt_actor, ctx.opt_critic, batch, fetch, cfg.ppo, epoch_rng, ctx.device)
        labelled = part.labelled()
        if len(labelled):  # the next generation's prior on this iteration's searched rows, after its update
            nxt = prior_metrics(labelled.legal_offsets, labelled.probs,
                                legal_log_priors(ctx.policy, labelled.rows, labelled.legal_ids, labelled.legal_offsets))
            row.update({f"expit/next_{k}": v for k, v in nxt.items()})
        return TrainResult(adv, UpdateResult(len(batch), stats, time.perf_counter() - t0), row)

    def played_keys(self, c: Collected, adv: Advantages, part: ReplayPart) -> dict[str, float]:
        """The generation's prior (the one the rollouts played) against this iteration's targets,
        and the searched move's agreement with them (``expit/prior_*``, ``expit/move_top1``)."""
        keys = sorted(k for k in self.book.searched if k in self.book.targets and adv.trainable[k])
        if not keys:
            return {}
        searched = [self.book.searched[k] for k in keys]
        labelled = part.labelled()
        out = {f"expit/prior_{k}": v for k, v in prior_metrics(
            labelled.legal_offsets, labelled.probs, np.concatenate([s.prior for s in searched])).items()}
        top = [int(self.book.targets[k].ids[int(np.argmax(self.book.targets[k].probs))]) for k in keys]
        out["expit/move_top1"] = float(np.mean([s.move == t for s, t in zip(searched, top)]))
        out["expit/root_value"] = float(np.mean([s.root for s in searched]))
        return out

    def row_keys(self, collected: Collected, result: TrainResult, context: TrainContext) -> RowKeys:
        """The update's ``az/`` keys, then the search's ``search/`` and the ``expit/`` keys."""
        return RowKeys(after_update=result.update.stats, end=result.row)


@contextmanager
def learning_rates(pairs):
    """Each (optimizer, lr) of ``pairs`` at its lr inside the block, at the rates it had after
    it: the optimizers' saved state keeps the run's ``ppo`` rates, which a resume restores
    (services/learner/resume.py), so a capture after a restore hashes as the one before."""
    before = [[g["lr"] for g in opt.param_groups] for opt, _ in pairs]
    for opt, lr in pairs:
        for g in opt.param_groups:
            g["lr"] = lr
    try:
        yield
    finally:
        for (opt, _), lrs in zip(pairs, before):
            for g, lr in zip(opt.param_groups, lrs):
                g["lr"] = lr


def frozen_copy(model):
    """A frozen deep copy of ``model`` (``overlap.behaviour_snapshot``)."""
    from services.learner.overlap import behaviour_snapshot

    return behaviour_snapshot(model)
