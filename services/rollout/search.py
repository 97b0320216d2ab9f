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
With the stable options of the ``alphazero`` section (``playouts``, ``halving``,
``continuation``, ``sim_opponents``, ``value_scale``, ``keep``, ``redeal``: the ``+search`` players'
``p``, ``sh``, ``cont``, ``opp``, ``vs``, ``keep``, ``redeal``) a decision is searched by the players' own code,
``shared.search.halving.evaluate`` with the ``SearchSpec`` of the same options
(``RolloutSearch.spec``), and, once any of playouts, halving, value_scale or keep is set, the
move is its pick (the best mean; the first candidate, the prior's top Gumbel key, kept unless
beaten by more than ``keep``) and the scores reported are the candidates' means. With every
option at its default the scores and the move are exactly the one-playout search's.
Forced decisions (~93 %) are never searched, nor a choice decision the Step does not name: under
playout-cap randomisation (``alphazero.full_search_share`` below 1) the learner's coin leaves a
share of them out of ``search_slots``, and the rollout plays the Step's action there (the prior's
own sample), with no simulation. The other seat plays in the simulation as the
battle's opponent does: a scripted bot here (stateless); a pool snapshot or the learner's own
seat of a mirror battle by the learner's central inference, one ``SimActQuery`` per simulated
decision for all the slot's candidates side by side (``sim_opponent`` "battle", the default;
"random" plays RoyaleGym's ``random`` there instead; docs/design.md, "Search in the rollouts and
an AlphaZero learner").

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
from shared.search.halving import evaluate
from shared.search.hidden import seen_cards
from shared.search.lookahead import Lookahead
from shared.search.models import continuation, opponent_set
from shared.search.spec import RolloutSearch
from shared.search.targets import gumbel_move_index
from shared.seeding import derive_int, stream_path

RANDOM_MODEL = "scripted:random"
"""The opponent model of a seat the rollout does not hold a player for (RoyaleGym's ``random``)."""
SIM_RANDOM_LEGAL_NOOP_PROB = 0.9
"""``scripted:random_legal``'s no-op probability in a simulation (``continuation``,
``sim_opponents``) when the Welcome does not say: the ``+search`` players' (the config's default)."""


class _MaskBot:
    """A scripted bot (``act(obs, mask, rng)``, reads the mask alone) as the simulation's
    opponent (``act(obs, rng)``); None plays the no-op."""

    scripted_seat = True

    def __init__(self, bot):
        self.bot = bot

    def act(self, obs: dict, rng: np.random.Generator) -> int:
        return 0 if self.bot is None else int(self.bot.act(obs, obs["action_mask"], rng))


class _RemoteOpponent:
    """A network opponent (the learner's live actor in a mirror battle, a pool snapshot) inside the
    simulations: its moves come from the learner's central inference (``StepLearner.act``: one
    ``SimActQuery`` a simulated decision for every candidate's simulation side by side), sampled
    at a uniform from each simulation's own opponent stream."""

    scripted_seat = False
    lockstep = True

    def __init__(self, learner, player: str, battle: int, ordinal: int, codec):
        self.learner, self.player, self.battle, self.ordinal, self.codec = learner, player, battle, ordinal, codec

    def act_many(self, observations: list, rngs: list) -> list[int]:
        uniforms = np.array([r.random() for r in rngs], np.float64)
        rows = self.codec.pack_many(observations)[0]
        return self.learner.act(self.player, self.battle, self.ordinal, rows, uniforms).tolist()


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

    def __init__(self, spec: RolloutSearch, env_cfg, master_seed: int, make_scripted, codec=None,
                 random_legal_noop_prob: float = SIM_RANDOM_LEGAL_NOOP_PROB):
        """``codec``: the Welcome's ``shared.codec.Codec``, which packs the rows a query to the
        learner carries (required for ``leaf_value`` "critic" and ``sim_opponent`` "battle").
        ``random_legal_noop_prob``: ``scripted:random_legal``'s in the simulations (its
        continuation and simulated opponents, ``spec.cont`` / ``spec.opponents``)."""
        if spec.stable() and spec.leaf_value == "critic":
            raise ValueError("search: leaf_value 'critic' cannot score the players' move rule yet (playouts "
                             f"{spec.playouts}, halving {spec.halving}, value_scale {spec.value_scale}, keep "
                             f"{spec.keep}); the learner's config check refuses this combination")
        self.spec, self.master_seed, self.codec = spec, master_seed, codec
        self.search_spec = spec.spec()  # the +search players' SearchSpec of the same options
        self.noop_prob = float(random_legal_noop_prob)
        playout, needs_obs = continuation(self.search_spec, None, self.noop_prob)
        self.lookahead = Lookahead(env_cfg, spec.depth, _playout=playout, playout_obs=needs_obs)
        self.gamma = 0.99  # set_gamma: the Plan's, before any step
        self.random_model = _MaskBot(make_scripted(RANDOM_MODEL))

    def seed(self, battle, seat: int) -> int:
        """The named seed of ``battle``'s decision now, for ``seat``."""
        return derive_int(self.master_seed, stream_path(
            "search/battle/{battle}/ordinal/{ordinal}/tick/{tick}/seat/{seat}",
            battle=battle.battle_id, ordinal=battle.ordinal, tick=battle.tick, seat=seat))

    def opponent_model(self, battle, seat: int, learner=None):
        """Who plays ``battle``'s other seat in the simulations: its scripted bot; the learner's
        answer for a network opponent under ``sim_opponent`` "battle" (with a ``learner`` to
        ask); RoyaleGym's ``random`` otherwise."""
        other = 1 - seat
        if battle.groups[other] == GROUP_SCRIPTED:
            return _MaskBot(battle.scripted[other])
        if self.spec.sim_opponent == "battle" and learner is not None:
            return _RemoteOpponent(learner, battle.players[other], battle.battle_id, battle.ordinal, self.codec)
        return self.random_model

    def opponents(self, battle, seat: int, learner=None) -> list:
        """The simulated opponents of ``battle``'s ``seat``: ``opponent_model``'s alone, or the
        spec's scripted set (``shared.search.models.opponent_set``, as the players draw it)."""
        if not self.spec.opponents:
            return [self.opponent_model(battle, seat, learner)]
        return opponent_set(self.search_spec, None, self.noop_prob)

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
            learner=None) -> SearchResult:
        """Search ``slots`` (local, 2 i + seat, of ``battles``) as the battles stand (between two
        decisions) over the learner's ``candidates`` (s, k) (-1 pads, at the end) with their
        ``keys`` (s, k); returns the scores and each slot's move.

        ``learner`` (the step's ``services.rollout.mid_step.StepLearner``) answers mid-step:
        under ``sim_opponent`` "battle" a network opponent's simulated moves (``act``), and
        under ``leaf_value`` "critic", once every searchable slot is simulated, every leaf's
        score in one request (``value_leaves(rows (n, row_bytes) uint8, returns (n,), discounts
        (n,))``); only then are the moves chosen. Raises ValueError when "critic" has no
        ``learner``."""
        critic = self.spec.leaf_value == "critic"
        if critic and learner is None:
            raise ValueError("leaf_value 'critic' needs the learner (its LeafQuery) to value the leaves")
        t0 = time.perf_counter()
        steps0 = self.lookahead.stats.sim_steps
        k = candidates.shape[1]
        done, cands, picked, sims, chosen, refused = [], [], [], [], [], 0
        for slot, row, key in zip(np.asarray(slots, np.int64).tolist(), candidates, keys):
            n = int(np.count_nonzero(row >= 0))
            cand = np.asarray(row[:n], np.int64)
            if not self._searchable(battles, slot, cand):
                refused += 1
                continue
            battle, seat = battles[slot // 2], slot % 2
            seed, opponents = self.seed(battle, seat), self.opponents(battle, seat, learner)
            if critic:  # one playout a candidate, its leaf valued by the learner below
                sims.append(self.lookahead.simulate(battle.env, SEATS[seat], cand.tolist(),
                                                    opponents[seed % len(opponents)], seed, gamma=self.gamma,
                                                    leaves=True))
            else:  # the +search players' evaluation (one playout, raw board: exactly the one-playout scores)
                seen = seen_cards(battle.obs[SEATS[seat]], battle.env.obs_builder) if self.spec.redeal else None
                found = evaluate(self.lookahead, battle.env, SEATS[seat], cand.tolist(), opponents, seed,
                                 self.search_spec, seen=seen)
                sims.append(found.means)
                chosen.append(found.index)
            done.append(slot)
            cands.append(row)
            picked.append(key)
        if critic and sims:
            rows = self.codec.pack_many([o for p in sims for o in p.leaves])[0]
            leaf_q = learner.value_leaves(rows, np.concatenate([p.returns for p in sims]),
                                          np.concatenate([p.discounts for p in sims]))
            cuts = np.cumsum([len(p.board) for p in sims])[:-1]
            scores = [np.asarray(q, np.float32) for q in np.split(np.asarray(leaf_q, np.float32), cuts)]
        else:  # the scores as they travel (float32): the learner checks the move with the same numbers
            scores = [np.asarray(m, np.float64).astype(np.float32) for m in sims]
        if self.spec.stable():  # the players' rule: the best mean, the prior's own pick kept within keep
            moves = [int(row[i]) for row, i in zip(cands, chosen)]
        else:
            moves = [int(row[gumbel_move_index(key[: len(q)], q, c_scale=self.spec.c_scale)])
                     for row, key, q in zip(cands, picked, scores)]
        padded = [np.concatenate([q, np.zeros(k - len(q), np.float32)]) for q in scores]
        return SearchResult(slots=np.asarray(done, np.int16), candidates=np.asarray(cands, np.int16).reshape(-1, k),
                            q=np.asarray(padded, np.float32).reshape(-1, k), moves=np.asarray(moves, np.int16),
                            seconds=time.perf_counter() - t0, sim_steps=self.lookahead.stats.sim_steps - steps0,
                            refused=refused)
