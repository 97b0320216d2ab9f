"""The search in the rollout (``Welcome.search``, ``learner.algorithm = "alphazero"``): Gumbel
AlphaZero's root, split between the learner and the rollout at the Step.

The learner, answering a round, draws each learner choice row's candidates by Gumbel-top-k of
the live actor's prior (central inference, batched like every round; the no-op always among
them) and sends them in the Step with their keys g + log prior (``search_slots``,
``search_candidates``, ``search_keys``). The rollout, before it steps, tries every candidate in
a copy of the battle (``shared.search.lookahead.Lookahead.scores``: the battle saved with
``env.snapshot()``, loaded into a second env, the candidate then ``depth`` decisions of
RoyaleGym's ``random`` playout, the leaf scored by ``board_value``, or under ``leaf_value``
"critic" by the learner: one ``LeafQuery`` per step with every leaf, answered by the live critic's
n-step return before any move is chosen), plays the candidate with the highest key +
sigma(q_hat) (``shared.search.targets.gumbel_move_index``) and reports the scores and moves with
the next round; the learner turns them into the completed-Q target.
Forced decisions (~93 %) are never searched. The other seat plays in the simulation as the
battle's opponent does when the rollout holds that player (a scripted bot, stateless); a pool
snapshot's or the learner's seat (inferred centrally, not here) is played by RoyaleGym's
``random`` (docs/design.md, "Search in the rollouts and an AlphaZero learner").

Exactness: the real battle is only read until it steps with the move (``env.snapshot()`` and
its ``battle_state``); its engine, RNG streams, observation memory and episode bookkeeping are
untouched, and every simulation draw comes from ``search/battle/{b}/ordinal/{k}/tick/{t}/seat/{s}``,
so the scores are a pure function of the saved battle and the master seed and the move a pure
function of them and the learner's keys: exact resume stays exact.

Torch-free, like the rest of the rollout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from shared.messages import GROUP_LEARNER, GROUP_SCRIPTED, SEATS
from shared.search.lookahead import Lookahead
from shared.search.spec import RolloutSearch
from shared.search.targets import gumbel_move_index
from shared.seeding import derive_int, stream_path

RANDOM_MODEL = "scripted:random"
"""The opponent model of a seat the rollout does not hold a player for (RoyaleGym's ``random``)."""


class _MaskBot:
    """A scripted bot (``act(obs, mask, rng)``, reads the mask alone) as the simulation's
    opponent (``act(obs, rng)``); None plays the no-op."""

    scripted_seat = True

    def __init__(self, bot):
        self.bot = bot

    def act(self, obs: dict, rng: np.random.Generator) -> int:
        return 0 if self.bot is None else int(self.bot.act(obs, obs["action_mask"], rng))


@dataclass
class SearchResult:
    """One shard's search for one step: ``slots`` int16 (s,) local slots searched;
    ``candidates`` int16 (s, k) their candidates (-1 pads); ``q`` float32 (s, k) the scores (0 in
    padding); ``moves`` int16 (s,) the move each played; ``seconds`` wall time; ``sim_steps``
    engine decisions stepped in simulations; ``refused`` slots named that could not be searched
    (not a learner seat, or candidates not distinct legal actions there: those play the Step's
    action)."""

    slots: np.ndarray
    candidates: np.ndarray
    q: np.ndarray
    moves: np.ndarray
    seconds: float
    sim_steps: int
    refused: int = 0


class ShardSearch:
    """The search of one rollout (one ``Lookahead``, its simulation env built on first use)."""

    def __init__(self, spec: RolloutSearch, env_cfg, master_seed: int, make_scripted):
        self.spec, self.master_seed = spec, master_seed
        self.lookahead = Lookahead(env_cfg, spec.depth)
        self.gamma = 0.99  # set_gamma: the Plan's, before any step
        self.random_model = _MaskBot(make_scripted(RANDOM_MODEL))

    def seed(self, battle, seat: int) -> int:
        """The named seed of ``battle``'s decision now, for ``seat``."""
        return derive_int(self.master_seed, stream_path(
            "search/battle/{battle}/ordinal/{ordinal}/tick/{tick}/seat/{seat}",
            battle=battle.battle_id, ordinal=battle.ordinal, tick=battle.tick, seat=seat))

    def opponent_model(self, battle, seat: int):
        other = 1 - seat
        if battle.groups[other] == GROUP_SCRIPTED:
            return _MaskBot(battle.scripted[other])
        return self.random_model

    def _searchable(self, battles, slot: int, cand: np.ndarray) -> bool:
        i, seat = divmod(slot, 2)
        if not 0 <= i < len(battles) or battles[i].groups[seat] != GROUP_LEARNER or not len(cand):
            return False
        mask = battles[i].obs[SEATS[seat]]["action_mask"]
        return bool(cand.min() >= 0 and cand.max() < len(mask) and mask[cand].all()
                    and len(np.unique(cand)) == len(cand))

    def set_gamma(self, gamma: float) -> None:
        """The iteration's discount (the Plan's), for the critic's leaves (``leaf_value`` "critic")."""
        self.gamma = float(gamma)

    def run(self, battles, slots: np.ndarray, candidates: np.ndarray, keys: np.ndarray,
            value_leaves=None) -> SearchResult:
        """Search ``slots`` (local, 2 i + seat, of ``battles``) as the battles stand (between two
        decisions) over the learner's ``candidates`` (s, k) (-1 pads, at the end) with their
        ``keys`` (s, k); returns the scores and each slot's move.

        Under ``leaf_value`` "critic" every searchable slot is simulated first, then
        ``value_leaves(leaf observations, returns (n,) float64, discounts (n,) float64)`` (the
        rollout's ``LeafQuery`` to the learner) gives each leaf's score (n,) in one request, and
        only then are the moves chosen. Raises ValueError when that callable is missing."""
        critic = self.spec.leaf_value == "critic"
        if critic and value_leaves is None:
            raise ValueError("leaf_value 'critic' needs value_leaves (the learner's LeafQuery)")
        t0 = time.perf_counter()
        steps0 = self.lookahead.stats.sim_steps
        k = candidates.shape[1]
        done, cands, picked, sims, refused = [], [], [], [], 0
        for slot, row, key in zip(np.asarray(slots, np.int64).tolist(), candidates, keys):
            n = int(np.count_nonzero(row >= 0))
            cand = np.asarray(row[:n], np.int64)
            if not self._searchable(battles, slot, cand):
                refused += 1
                continue
            battle, seat = battles[slot // 2], slot % 2
            sims.append(self.lookahead.simulate(battle.env, SEATS[seat], cand.tolist(),
                                                self.opponent_model(battle, seat), self.seed(battle, seat),
                                                gamma=self.gamma if critic else None, leaves=critic))
            done.append(slot)
            cands.append(row)
            picked.append(key)
        if critic and sims:
            leaf_q = value_leaves([o for p in sims for o in p.leaves], np.concatenate([p.returns for p in sims]),
                                  np.concatenate([p.discounts for p in sims]))
            cuts = np.cumsum([len(p.board) for p in sims])[:-1]
            scores = [np.asarray(q, np.float32) for q in np.split(np.asarray(leaf_q, np.float32), cuts)]
        else:  # the scores as they travel (float32): the learner checks the move with the same numbers
            scores = [p.board.astype(np.float32) for p in sims]
        moves = [int(row[gumbel_move_index(key[: len(q)], q, c_scale=self.spec.c_scale)])
                 for row, key, q in zip(cands, picked, scores)]
        padded = [np.concatenate([q, np.zeros(k - len(q), np.float32)]) for q in scores]
        return SearchResult(slots=np.asarray(done, np.int16), candidates=np.asarray(cands, np.int16).reshape(-1, k),
                            q=np.asarray(padded, np.float32).reshape(-1, k), moves=np.asarray(moves, np.int16),
                            seconds=time.perf_counter() - t0, sim_steps=self.lookahead.stats.sim_steps - steps0,
                            refused=refused)
