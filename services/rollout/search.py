"""The search in the rollout (``Welcome.search``, ``learner.algorithm = "alphazero"``): at every
choice decision of a learner seat (more than the no-op legal; forced decisions, ~93 %, are never
searched) the rollout tries candidate actions in a copy of the battle and ships their scores
with the round; the learner turns them, with the prior it infers for the same row, into the
policy target and the move (``shared.search.targets``).

Per searched slot: ``candidates`` = the no-op, then ``k - 1`` legal plays in a random order
drawn from ``search/battle/{b}/ordinal/{k}/tick/{t}/seat/{s}``; each is scored by
``shared.search.lookahead.Lookahead.scores`` (the battle saved with ``env.snapshot()``, loaded
into a second env, the candidate then ``depth`` decisions of RoyaleGym's ``random`` playout,
the leaf by ``board_value``). The other seat plays in the simulation as the battle's opponent
does when the rollout holds that player (a scripted bot, stateless); a pool snapshot's or the
learner's seat (inferred centrally, not here) is played by RoyaleGym's ``random``
(docs/design.md, "Search in the rollouts").

Exactness: the real battle is only read (``env.snapshot()`` and its ``battle_state``); its
engine, RNG streams, observation memory and episode bookkeeping are untouched, and every draw
of the search comes from the named stream above, so the scores are a pure function of the saved
battle and the master seed, and exact resume stays exact.

Torch-free, like the rest of the rollout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from shared.messages import GROUP_LEARNER, GROUP_SCRIPTED, SEATS
from shared.search.lookahead import Lookahead
from shared.search.spec import RolloutSearch
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
    """One shard's search for one round: ``slots`` int16 (s,) local slots searched;
    ``candidates`` int16 (s, k) their candidates (-1 pads a row with fewer legal actions than k);
    ``q`` float32 (s, k) the scores (0 in padding); ``seconds`` wall time; ``sim_steps`` engine
    decisions stepped in simulations."""

    slots: np.ndarray
    candidates: np.ndarray
    q: np.ndarray
    seconds: float
    sim_steps: int


def draw_candidates(mask: np.ndarray, k: int, rng: np.random.Generator) -> list[int]:
    """The no-op, then up to ``k - 1`` distinct legal plays in a random order (``mask`` (A,) bool)."""
    plays = np.flatnonzero(mask)
    plays = plays[plays != 0]
    return [0] + [int(a) for a in rng.permutation(plays)[: k - 1]]


class ShardSearch:
    """The search of one rollout (one ``Lookahead``, its simulation env built on first use)."""

    def __init__(self, spec: RolloutSearch, env_cfg, master_seed: int, make_scripted):
        self.spec, self.master_seed = spec, master_seed
        self.lookahead = Lookahead(env_cfg, spec.depth)
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

    def run(self, battles) -> SearchResult:
        """Search every learner seat of ``battles`` (a shard's, local slot 2 i + seat) at a
        choice decision, as the battles stand (between two decisions)."""
        t0 = time.perf_counter()
        steps0 = self.lookahead.stats.sim_steps
        k = self.spec.candidates
        slots, cands, scores = [], [], []
        for i, battle in enumerate(battles):
            for seat in (0, 1):
                if battle.groups[seat] != GROUP_LEARNER:
                    continue
                mask = battle.obs[SEATS[seat]]["action_mask"]
                if np.count_nonzero(mask) <= 1:
                    continue
                seed = self.seed(battle, seat)
                cand = draw_candidates(mask, k, np.random.default_rng((seed, 0)))
                q = self.lookahead.scores(battle.env, SEATS[seat], cand, self.opponent_model(battle, seat), seed)
                slots.append(2 * i + seat)
                cands.append(cand + [-1] * (k - len(cand)))
                scores.append(np.concatenate([q, np.zeros(k - len(cand))]))
        return SearchResult(slots=np.asarray(slots, np.int16), candidates=np.asarray(cands, np.int16).reshape(-1, k),
                            q=np.asarray(scores, np.float32).reshape(-1, k), seconds=time.perf_counter() - t0,
                            sim_steps=self.lookahead.stats.sim_steps - steps0)
