"""The DQN learner's stages inside the learner service (``learner.algorithm = "dqn"``).

The fleet stays as it is: the same rollouts, rounds, rectangle, ladder, checkpoint service and
evaluators. What changes per iteration:

* collection: central inference acts by ``DqnBehaviour`` (epsilon-greedy over the legal set
  from the slot's one uniform) on the Q rows: greedy by the heads' mean Q, or under
  ``dqn.behaviour = "thompson"`` by the head drawn for the seat's episode. At ``dqn.heads`` 1
  without dueling the Q rows are the actor network's logits (``QActor``); otherwise they come
  from ``PointerQ`` (K pointer heads over the actor's architecture, optionally dueling), and
  after every update the actor is rewritten as the heads' mean (``pointer_q.played_actor``), so
  pool snapshots, evaluators and ``royalefleet eval`` play it unchanged, as the masked softmax
  of the mean Q over the legal set (a Boltzmann policy at temperature 1; docs/design.md);
* training: the rectangle's decisions into n-step windows (``windows.feed_rectangle``, with
  each cell's acted head and the iteration's epsilon), the windows into prioritized replay
  with their bootstrap masks, then ``dqn.updates_per_iteration`` Double DQN steps
  (``update.dqn_update``) once the replay holds ``dqn.learning_starts`` records, the target
  network copied every ``dqn.target_update_period`` steps.

State kept in the checkpoint (``checkpoint_files``): the online Q network (at one head: the
actor again), the target network, the DQN optimizer, the optimizer-step count, the replay and
the open windows. Every draw is name-addressed
(``dqn/bootstrap_masks/iteration/{i}``, ``dqn/replay/iteration/{i}``), so a resumed run
continues the same buffer and the same minibatches.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

import msgspec
import numpy as np
import torch

from services.learner.advantages import Advantages
from services.learner.algorithm import RowKeys, TrainResult, UpdateResult
from services.learner.checkpoint_types import Component
from services.learner.dqn.behaviour import EPISODE_KEYS, MEAN_HEAD, DqnBehaviour, bootstrap_masks, epsilon
from services.learner.dqn.network import make_target
from services.learner.dqn.pointer_q import PointerQ, played_actor
from services.learner.dqn.replay import PrioritizedReplay
from services.learner.dqn.state_files import (REPLAY_FILES, WINDOW_FILES, replay_from_files, replay_to_files,
                                              windows_from_files, windows_to_files)
from services.learner.dqn.update import DqnUpdateSpec, dqn_update
from services.learner.dqn.windows import WindowBuilder, feed_rectangle
from shared.nn.statefiles import bytes_to_module, bytes_to_optimizer, module_to_bytes, optimizer_to_bytes
from shared.seeding import stream

if TYPE_CHECKING:
    from services.learner.algorithm import AlgorithmParts, TrainContext
    from services.learner.collected import Collected
    from shared.nn.policy import Policy

STATE_FILES = ("dqn/online.safetensors", "dqn/target.safetensors", "dqn/optimizer.safetensors", "dqn/optimizer.json",
               "dqn/counters.json")
FILES = STATE_FILES + REPLAY_FILES + WINDOW_FILES


class QActor(torch.nn.Module):
    """The actor's logits read as one head of Q rows: obs -> (B, 1, A)."""

    def __init__(self, actor_critic):
        super().__init__()
        self.net = actor_critic

    def forward(self, obs):
        return self.net.actor_logits(obs)[:, None, :]


class TallyBehaviour(DqnBehaviour):
    """``DqnBehaviour`` that also counts, over one iteration, the choice rows it explored on and
    the greedy ones it waited on (``update.behaviour_stats``'s keys), and carries ``model`` for
    the collection (which clears its precision record and stamps its actor's digest)."""

    def __init__(self, q_rows, eps: float, model, *, thompson=None, mean_head: int = 0):
        super().__init__(q_rows, eps, thompson=thompson, mean_head=mean_head)
        self.model = model
        self.choice = self.explored = self.greedy = self.greedy_noop = 0
        self.cell_heads: dict[tuple[int, int], int] = {}
        """(cycle, slot) -> the head that cell acted by (Thompson; the rest acted by ``mean_head``)."""

    def act(self, rows, n_legal, uniforms, heads=None, *, history=None, episodes=None):
        actions, log_probs = super().act(rows, n_legal, uniforms, heads, history=history, episodes=episodes)
        if episodes is not None:
            e = np.asarray(episodes, np.int64).reshape(-1, len(EPISODE_KEYS))
            self.cell_heads.update(zip(zip(e[:, 0].tolist(), e[:, 1].tolist()), self.last["heads"].tolist()))
        choice = n_legal > 1
        ex = self.last["explored"]
        self.choice += int(choice.sum())
        self.explored += int((choice & ex).sum())
        self.greedy += int((choice & ~ex).sum())
        self.greedy_noop += int((choice & ~ex & (actions == 0)).sum())
        return actions, log_probs

    def heads_table(self, T: int, R: int) -> np.ndarray:
        """(T, R) int64: the head each cell acted by (``mean_head`` where none was recorded)."""
        out = np.full((T, R), self.mean_head, np.int64)
        for (t, r), h in self.cell_heads.items():
            if t < T:
                out[t, r] = h
        return out

    def row(self, floor: float) -> dict[str, float]:
        used = float(len(set(self.cell_heads.values()))) if self.cell_heads else 1.0
        out = {"dqn/epsilon": float(self.eps), "dqn/at_epsilon_floor": float(self.eps <= floor), "dqn/heads_used": used}
        if self.choice:
            out["dqn/explore_frac"] = self.explored / self.choice
        if self.greedy:
            out["dqn/greedy_noop_frac"] = self.greedy_noop / self.greedy
        return out


class DqnAlgorithm:
    """DQN behind the learner's algorithm boundary (``algorithm.Algorithm``; module docstring),
    registered as ``learner.algorithm = "dqn"``."""

    name = "dqn"
    extension_hooks: frozenset[str] = frozenset()
    round_hooks = None

    def __init__(self, parts: AlgorithmParts):
        cfg, d, pf, model, device, policy, say = (parts.cfg, parts.cfg.dqn, parts.pf, parts.model, parts.device,
                                                  parts.policy, parts.say)
        self.cfg, self.master_seed, self.policy, self.pf, self.model, self.device = d, cfg.master_seed, policy, pf, model, device
        codec = pf.codec
        self.replay = PrioritizedReplay(d.replay_capacity, codec.row_bytes, d.heads, alpha=d.per_alpha, beta=d.per_beta,
                                        budget_mb=d.replay_memory_mb)
        self.builder = WindowBuilder(d.n_step, 0.99, codec.row_bytes, mask_offset=codec.omask)  # gamma: per iteration
        self.own_network = d.heads > 1 or d.dueling
        """Whether the Q network is ``PointerQ`` (its own parameters; the actor is its heads'
        mean) rather than the actor's logits read as one head (``QActor``)."""
        if self.own_network:
            seed = int(stream(cfg.master_seed, "dqn/heads/init").integers(2**62))
            self.online = PointerQ(model.actor, d.heads, dueling=d.dueling, seed=seed,
                                   autocast=cfg.net.autocast).to(device)
            played_actor(self.online, model.actor)
            self.trained = self.online
        else:
            self.online = QActor(model)
            self.trained = model.actor
        """The module whose parameters the DQN optimizer steps (``dqn/online.safetensors``)."""
        params = self.trained.parameters()
        self.target = make_target(self.online)
        self.opt = torch.optim.Adam(params, lr=d.lr, eps=cfg.ppo.adam_eps)
        self.steps = 0
        """Optimizer steps since the run began (the target period counts across iterations)."""
        say(f"learner: DQN replay of {d.replay_capacity:,} records, {self.replay.nbytes / 2**20:.0f} MiB "
                    f"(budget {d.replay_memory_mb:.0f} MiB)")
        self.components = (Component("dqn", FILES, lambda p, s: self.checkpoint_files(),
                                     lambda p, s, f: self.load_checkpoint_files(f), state=True, owner="dqn"),)
        """The target network, the optimizer, the replay and the open windows (``FILES``)."""

    def rollout_search(self) -> None:
        return None

    def behaviour(self, iteration: int, policy: Policy | None = None, reward_divisor: float = 1.0) -> TallyBehaviour:
        """Epsilon-greedy (or Thompson) over the Q rows at ``iteration``'s epsilon; the live
        actor's ``policy`` only packs the rows."""
        eps = epsilon(iteration - 1, start=self.cfg.epsilon_start, floor=self.cfg.epsilon_floor,
                      decay_iterations=self.cfg.epsilon_decay_iterations)

        def q_rows(rows):
            obs = self.policy.obs_batch(rows)
            return self.online(obs), obs["mask"]

        thompson = (self.master_seed, self.cfg.heads) if self.cfg.behaviour == "thompson" else None
        return TallyBehaviour(q_rows, eps, self.model, thompson=thompson,
                              mean_head=MEAN_HEAD if self.cfg.heads > 1 else 0)

    def train(self, collected: Collected, context: TrainContext | None = None) -> TrainResult:
        """Windows, replay, update over ``collected``. Returns the (value-free) ``Advantages``
        the row reads (trainable cells, NaN count), the update result and the behaviour's row
        keys. Its parts are its own (``context`` unused)."""
        c = collected
        d, rect, it = self.cfg, c.rect, c.iteration
        t0 = time.perf_counter()
        trainable = rect.trainable()
        nan_trips = int(np.count_nonzero(~np.isfinite(rect.reward[trainable])))
        behaviour = cast(TallyBehaviour, c.policy)  # what ``behaviour`` gave the collection
        # The schedule's gamma at the iteration's start sums this iteration's windows (a window's
        # discount is gamma^k of the gamma it was summed with: no caller-side gamma later).
        self.builder.gamma = float(c.sched["gamma"])
        feed_rectangle(self.builder, rect, heads=behaviour.heads_table(rect.T, rect.R), epsilon=behaviour.eps)
        windows = self.builder.drain()
        masks = bootstrap_masks(stream(self.master_seed, "dqn/bootstrap_masks/iteration/{iteration}", iteration=it),
                                len(windows), d.heads, d.bootstrap_p)
        self.replay.add(windows, masks)
        stats: dict = {"dqn/replay_size": float(len(self.replay)), "dqn/windows_added": float(len(windows))}
        if not nan_trips and len(self.replay) >= d.learning_starts:
            spec = DqnUpdateSpec(d.updates_per_iteration, d.batch_size, d.target_update_period, d.max_grad_norm,
                                 d.huber_delta)
            stats.update(dqn_update(self.online, self.target, self.opt, self.replay, spec,
                                    stream(self.master_seed, "dqn/replay/iteration/{iteration}", iteration=it),
                                    self.policy.obs_batch, mask_offset=self.pf.codec.omask, n_actions=self.pf.spec.n_actions,
                                    steps_before=self.steps, device=self.device))
            self.steps += d.updates_per_iteration
            if self.own_network:  # what every snapshot and evaluator plays: the heads' mean
                played_actor(self.online, self.model.actor)
        zeros = np.zeros(trainable.shape, np.float32)
        adv = Advantages(np.zeros((rect.T + 1, rect.R), np.float32), zeros, zeros, zeros, trainable, nan_trips)
        n_train = int(trainable.sum()) if not nan_trips else 0
        return TrainResult(adv, UpdateResult(n_train, stats, time.perf_counter() - t0), behaviour.row(d.epsilon_floor))

    def row_keys(self, collected: Collected, result: TrainResult, context: TrainContext) -> RowKeys:
        """The ``dqn/`` keys: the update's, then the behaviour's (epsilon, heads, exploration)."""
        return RowKeys(after_update=result.update.stats, end=result.row)

    # -------------------------------------------------------------- checkpoint

    def checkpoint_files(self) -> dict[str, bytes]:
        files = {"dqn/online.safetensors": module_to_bytes(self.trained),
                 "dqn/target.safetensors": module_to_bytes(self.target)}
        files["dqn/optimizer.safetensors"], files["dqn/optimizer.json"] = optimizer_to_bytes(self.opt)
        files["dqn/counters.json"] = msgspec.json.encode({"steps": self.steps})
        files.update(replay_to_files(self.replay))
        files.update(windows_to_files(self.builder))
        return files

    def load_checkpoint_files(self, files: dict[str, bytes]) -> None:
        bytes_to_module(self.trained, files["dqn/online.safetensors"])
        bytes_to_module(self.target, files["dqn/target.safetensors"])
        bytes_to_optimizer(self.opt, files["dqn/optimizer.safetensors"], files["dqn/optimizer.json"])
        self.steps = int(msgspec.json.decode(files["dqn/counters.json"])["steps"])
        replay_from_files(self.replay, files)
        windows_from_files(self.builder, files)

