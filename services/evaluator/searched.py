"""A player that searches at its choice decisions: ``<player>+search:N[:D]`` (``shared.search``).

``SearchedPlayer`` wraps a base player (a ``ScriptedPlayer`` or a ``SnapshotPlayer``) and, seated
in a game (``bind``), sees the battle's env: at every decision where more than the no-op is
legal it draws N candidates from its base (a snapshot: Gumbel-top-k of its policy, the first
being a policy sample; a scripted bot: its own choice, then random legal plays), always with
the no-op among them, and plays the one whose simulation scores best
(``shared.search.lookahead.Lookahead``). Forced decisions are the base's own (a snapshot still
draws its one uniform there, as unsearched).

Stream discipline: one uint64 is drawn from the seat's stream at every choice decision, before
anything else; the candidates and the simulations are drawn from generators seeded by it. So a
searched game is a pure function of the same things as an unsearched one.

In the simulations the other seat plays as the battle's opponent does: its own player when that
keeps no state between decisions (scripted bots, snapshots), a searching opponent's base
player (a search is not simulated inside a search), and RoyaleGym's ``random`` otherwise.
"""

from __future__ import annotations

import numpy as np

from shared.search.halving import evaluate
from shared.search.hidden import seen_cards
from shared.search.lookahead import Lookahead, SearchStats, candidates_with_noop, gumbel_top_k, mode_first
from shared.search.models import continuation, opponent_set
from shared.search.plans import plan_candidates
from shared.search.spec import SearchSpec

SIM_RANDOM_LEGAL_NOOP_PROB = 0.9
"""``scripted:random_legal``'s no-op probability when a search simulates it (``cont``, ``opp``):
the config's default ``ladder.random_legal_noop_prob``."""


class SearchRefused(ValueError):
    """A base player this search cannot run on; the text says which and why."""


class SearchedPlayer:
    """``base`` searching with ``spec`` on battles of env config ``env_cfg`` (the evaluation
    env's: the simulations are built from it). ``player_id`` is the full id, suffix included.
    Raises SearchRefused for a frame-stacked snapshot (its history is not simulated)."""

    scripted_seat = False
    stateless = False

    def __init__(self, player_id: str, base, spec: SearchSpec, env_cfg,
                 random_legal_noop_prob: float = SIM_RANDOM_LEGAL_NOOP_PROB):
        policy = getattr(base, "policy", None)
        if policy is not None and policy.frame_stack != 1:
            raise SearchRefused(f"player {player_id!r}: search needs a snapshot without frame stacking "
                                f"(this one stacks {policy.frame_stack} decisions); play {base.id!r} unsearched")
        self.id, self.base, self.spec = player_id, base, spec
        self.noop_prob = random_legal_noop_prob
        playout, needs_obs = continuation(spec, base, random_legal_noop_prob)
        self.lookahead = Lookahead(env_cfg, spec.depth, _playout=playout, playout_obs=needs_obs)
        self.last = None
        """The last searched decision's ``shared.search.halving.Evaluation`` (with its candidates
        as ``last_candidates``), for a recorder that keeps the search's scores."""
        self.last_candidates: list[int] = []

    @property
    def stats(self) -> SearchStats:
        """What this player's search has spent so far, over every game it played."""
        return self.lookahead.stats

    searches = True

    def bind(self, env, seat: str, opponent) -> "SearchedSeat":
        """This player on ``seat`` of one game played on ``env`` against ``opponent`` (the other
        seat's player, as seated)."""
        return SearchedSeat(self, env, seat, opponent_set(self.spec, opponent_model(opponent), self.noop_prob))


def opponent_model(opponent):
    """What plays the other seat in a simulation: the opponent itself when it keeps no state
    between decisions, a searching opponent's base (no search inside a search), else
    RoyaleGym's ``random`` (``scripted:random``)."""
    if getattr(opponent, "stateless", False):
        return opponent
    base = getattr(opponent, "base", None)
    if base is not None and getattr(base, "stateless", False):
        return base
    from services.evaluator.players import ScriptedPlayer

    return ScriptedPlayer("scripted:random", 0.9)


class SearchedSeat:
    """A ``SearchedPlayer`` seated in one game: ``act(obs, rng)`` like every player."""

    scripted_seat = False
    saves_battle = True
    """The game must keep every seat's observation (no ``mask_only`` seat): a search saves the
    battle with ``env.snapshot()``, which needs both seats' memory of the match."""

    def __init__(self, player: SearchedPlayer, env, seat: str, opponents: list):
        self.player, self.env, self.seat, self.opponents = player, env, seat, opponents
        self.id = player.id
        self._seen = None

    def act(self, obs: dict, rng: np.random.Generator) -> int:
        mask = obs["action_mask"]
        n_legal = int(np.count_nonzero(mask))
        if self.player.spec.redeal:  # what the seat has seen of the enemy's cards: the rest is redealt
            self._seen = seen_cards(obs, self.env.obs_builder)
        base = self.player.base
        if n_legal <= 1:
            return int(base.act(obs, rng))
        seed = int(rng.integers(0, 2**63 - 1))
        draw = np.random.default_rng((seed, 0))
        k = min(self.player.spec.candidates, n_legal)
        snapshot = getattr(base, "policy", None) is not None
        argmax = snapshot and self.player.spec.own == "argmax"
        if snapshot and self.player.spec.cand != "plans":
            log_probs = base.log_probs(obs)
            drawn = gumbel_top_k(log_probs, k, draw)
            if argmax:
                drawn = mode_first(drawn, log_probs, k)
        else:
            # a snapshot's own pick is a sample of its policy (the Gumbel draw's first) or with
            # own=argmax its mode; a scripted one's its move
            if argmax:
                own = int(np.argmax(base.log_probs(obs)))
            else:
                own = int(gumbel_top_k(base.log_probs(obs), 1, draw)[0]) if snapshot else int(base.act(obs, draw))
            legal = np.flatnonzero(mask)
            if self.player.spec.cand == "plans":
                return self._search(plan_candidates(own, obs["mask_planes"], legal, k, draw), seed)
            others = draw.permutation(legal[legal != own])
            drawn = np.concatenate([[own], [0] if own else [], others[others != 0]]).astype(np.int64)
        return self._search(candidates_with_noop(drawn, k), seed)

    def _search(self, candidates: list[int], seed: int) -> int:
        result = evaluate(self.player.lookahead, self.env, self.seat, candidates, self.opponents, seed,
                          self.player.spec, seen=self._seen)
        self.player.last, self.player.last_candidates = result, candidates
        return int(candidates[result.index])
