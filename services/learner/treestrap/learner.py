"""TreeStrap behind the learner's algorithm boundary (``learner.algorithm = "treestrap"``;
docs/treestrap.md).

Expert iteration's machinery (``expert_iteration.learner.ExpertIterationAlgorithm``: the rollouts
search with the current generation's prior, the generations the ladder's gate promotes, the
bounded replay of searched rows, the value target), with the policy learnt the TreeStrap way:

* an ensemble of ``treestrap.heads`` score heads over the actor's trunk (``heads.ScoreHeads``),
  head h trained toward each replayed row's search target on its bootstrap sample only
  (``masks``, Bernoulli(``treestrap.bootstrap_p``) per row and head, drawn once when the row
  enters the replay: ``log.CandidateLog``);
* the proposal, the actor's own policy head (what the rollouts play and search from), trained
  toward the Thompson choice among each row's searched candidates: per row ``treestrap.draws``
  heads drawn from ``treestrap/thompson/iteration/{i}``, each head's argmax taken
  (``ensemble.thompson_choice``), by the heads as they stand before this iteration's update;
* the row: the update's ``treestrap/`` keys, the ensemble's steadiness on the replayed rows
  (``ensemble.ensemble_keys``), and expert iteration's ``search/`` and ``expit/`` keys.

State: expert iteration's component (the generation, the replay) and ``treestrap``: the heads,
their Adam, the candidate log; a resume trains the same heads on the same rows and masks.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import torch

from services.learner.advantages import values_and_advantages
from services.learner.algorithm import RowKeys, TrainResult, UpdateResult
from services.learner.alphazero.rounds import SearchRounds
from services.learner.checkpoint_types import Component
from services.learner.dqn.behaviour import bootstrap_masks
from services.learner.expert_iteration.learner import (
    GENERATION_FILES,
    ExpertIterationAlgorithm,
    learning_rates,
    searched_part,
)
from services.learner.expert_iteration.declare import settings as expit_settings
from services.learner.expert_iteration.prior import legal_log_priors, prior_metrics
from services.learner.expert_iteration.replay import FILES as REPLAY_FILES
from services.learner.extension_hooks import lr_multiplier
from services.learner.stops import stoppable
from services.learner.treestrap.batch import (
    TreeStrapBatch,
    candidate_batch,
    candidate_positions,
    proposal_batch,
    search_top,
)
from services.learner.treestrap.book import TreeBook
from services.learner.treestrap.declare import NAME, settings
from services.learner.treestrap.ensemble import ensemble_keys, thompson_choice, thompson_probs
from services.learner.treestrap.heads import ScoreHeads, tile_features
from services.learner.treestrap.log import FILES as LOG_FILES
from services.learner.treestrap.log import CandidateLog
from services.learner.treestrap.update import treestrap_update
from shared.nn.model import precision
from shared.seeding import derive_int, stream, stream_path

if TYPE_CHECKING:
    from services.learner.algorithm import AlgorithmParts, TrainContext
    from services.learner.collected import Collected

HEAD_FILES = ("treestrap/heads.safetensors", "treestrap/heads_adam.safetensors", "treestrap/heads_adam.json")


def candidate_scores(model, heads, fetch, candidates: np.ndarray, autocast: str, device, chunk: int = 256) -> np.ndarray:
    """float64 (n, K, k): every head's score of each row's candidates (int (n, k), -1 padded:
    -inf there), forwarded ``chunk`` rows at a time without gradient (``fetch(cells)``: the obs
    dict of sorted record indices 0..n-1)."""
    n, k = candidates.shape
    out = np.full((n, heads.heads, k), -np.inf)
    cand = np.asarray(candidates, np.int64)
    with torch.no_grad():
        for start in range(0, n, chunk):
            cells = np.arange(start, min(n, start + chunk))
            obs = fetch(cells)
            with tile_features(model.actor) as seen:
                model.actor_logits(obs)
            with precision(device.type, autocast):
                scores = heads(seen[-1], obs["mask"]).double().cpu().numpy()
            c = cand[cells]
            got = np.take_along_axis(scores, np.maximum(c, 0)[:, None, :].repeat(heads.heads, 1), axis=2)
            out[cells] = np.where(c[:, None, :] >= 0, got, -np.inf)
    return out


class TreeStrapAlgorithm(ExpertIterationAlgorithm):
    """TreeStrap (module docstring), registered as ``learner.algorithm = "treestrap"``."""

    name = NAME

    def __init__(self, parts: AlgorithmParts):
        super().__init__(parts)
        cfg, ex, az, self.tcfg = parts.cfg, expit_settings(parts.cfg), parts.cfg.alphazero, settings(parts.cfg)
        self.book = self.tree_book = TreeBook(c_scale=az.c_scale, candidates=az.candidates, master_seed=cfg.master_seed,
                             target_c_scale=ex.c_scale, keep=ex.keep, value_scale=ex.value_scale,
                             move_keep=az.keep if az.stable() else None,
                             critic_scores=az.leaf_value == "critic" or az.value_scale > 0)
        self.round_hooks = SearchRounds(self.book)
        actor = parts.model.actor
        self.heads = ScoreHeads(actor.spec, actor.channels, self.tcfg.heads,
                                derive_int(cfg.master_seed, stream_path("treestrap/heads/init"))).to(parts.device)
        self.opt_heads = torch.optim.Adam(self.heads.parameters(), lr=self.tcfg.lr_heads)
        self.log = CandidateLog(az.candidates, self.tcfg.heads)
        # two components where expert iteration's class has one (its attribute's inferred type is a 1-tuple)
        self.components = (  # type: ignore[assignment]
            Component("expert_iteration", GENERATION_FILES + REPLAY_FILES, self._save, self._load, state=True, owner=NAME),
            Component(NAME, HEAD_FILES + LOG_FILES, self._save_tree, self._load_tree, state=True, owner=NAME),
        )

    def _save_tree(self, parts, state) -> dict[str, bytes]:
        from shared.nn.statefiles import module_to_bytes, optimizer_to_bytes

        files = {HEAD_FILES[0]: module_to_bytes(self.heads)}
        files[HEAD_FILES[1]], files[HEAD_FILES[2]] = optimizer_to_bytes(self.opt_heads)
        files.update(self.log.to_files())
        return files

    def _load_tree(self, parts, state, files: dict[str, bytes]) -> None:
        from shared.nn.statefiles import bytes_to_module, bytes_to_optimizer

        bytes_to_module(self.heads, files[HEAD_FILES[0]])
        bytes_to_optimizer(self.opt_heads, files[HEAD_FILES[1]], files[HEAD_FILES[2]])
        self.log.load_files(files)

    def train(self, collected: Collected, context: TrainContext) -> TrainResult:
        """The value pass, this iteration's searched rows into the replay (their candidates and
        masks into the log), the Thompson targets by the heads, then ``treestrap_update``."""
        c, ctx, cfg, ex, ts = collected, context, self.cfg, expit_settings(self.cfg), self.tcfg
        adv = values_and_advantages(ctx.policy, c.rect, ctx.return_scaler, frame_history=None, gamma=c.sched["gamma"],
                                    lam=cfg.alphazero.value_lambda, standardize_rewards=cfg.advantage.standardize_rewards)
        row = self.book.row(c.seconds, c.stats.env_steps)
        part = searched_part(c.iteration, c, adv, self.book, ex.value_target == "root")
        row.update(self.played_keys(c, adv, part))
        if not adv.nan_trips:  # a tripped rectangle's rows stay out (expert iteration's rule)
            cells = [(int(t), int(r)) for t, r in zip(*np.nonzero(adv.trainable)) if (int(t), int(r)) in self.book.targets]
            masks = bootstrap_masks(stream(cfg.master_seed, "treestrap/bootstrap_masks/iteration/{iteration}",
                                           iteration=c.iteration), len(cells), ts.heads, ts.bootstrap_p)
            self.replay.add(part)
            self.log.add(c.iteration, self.tree_book.candidate_table(cells, cfg.alphazero.candidates), masks)
        row.update({"expit/generation": float(self.generations.number), "expit/generation_switched": float(self.switched),
                    "expit/replay_rows": float(len(self.replay)), "expit/replay_iterations": float(len(self.replay.parts))})
        t0 = time.perf_counter()
        if adv.nan_trips or not len(self.replay):
            return TrainResult(adv, UpdateResult(0, {}, time.perf_counter() - t0), row)
        search = self.replay.batch(c.rect.mask_offset, ctx.n_actions)
        cands, masks = self.log.aligned(self.replay)
        fetch = stoppable(ctx.policy.fetcher(search.obs.rows, search.obs.index), ctx.stopping)
        scores = candidate_scores(ctx.model, self.heads, fetch, cands, cfg.net.autocast, ctx.device)
        positions = candidate_positions(search.legal_ids, search.legal_offsets, cands)
        row.update({f"treestrap/{k}": v for k, v in ensemble_keys(scores, search_top(search, positions)).items()})
        drawn = stream(cfg.master_seed, "treestrap/thompson/iteration/{iteration}", iteration=c.iteration).integers(
            ts.heads, size=(len(search), ts.draws))
        choice = thompson_probs(thompson_choice(scores, drawn), cands.shape[1])
        batch = TreeStrapBatch(search, proposal_batch(search, positions, choice), masks,
                               candidate_batch(search, cands, positions) if ts.head_support == "candidates" else None)

        def epoch_rng(e: int):
            return stream(cfg.master_seed, "treestrap/minibatch/iteration/{iteration}/epoch/{epoch}",
                          iteration=c.iteration, epoch=e)

        hold = lr_multiplier(ctx.extensions, c.iteration, ctx.env_steps)
        with learning_rates(((ctx.opt_actor, ex.lr_actor * hold), (ctx.opt_critic, ex.lr_critic))):
            stats = treestrap_update(ctx.model, self.heads, (ctx.opt_actor, ctx.opt_critic, self.opt_heads), batch, fetch,
                                     cfg.ppo, ts.ensemble_coef, epoch_rng, ctx.device)
        if len(part):  # the next generation's proposal on this iteration's searched rows, after its update
            nxt = prior_metrics(part.legal_offsets, part.probs,
                                legal_log_priors(ctx.policy, part.rows, part.legal_ids, part.legal_offsets))
            row.update({f"expit/next_{k}": v for k, v in nxt.items()})
        return TrainResult(adv, UpdateResult(len(batch), stats, time.perf_counter() - t0), row)

    def row_keys(self, collected: Collected, result: TrainResult, context: TrainContext) -> RowKeys:
        """The update's ``treestrap/`` keys, then ``search/``, ``expit/`` and the ensemble's keys."""
        return RowKeys(after_update=result.update.stats, end=result.row)


