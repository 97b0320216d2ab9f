"""The rollouts' search with the ``+search`` players' options (``alphazero.playouts``, ``halving``,
``continuation``, ``sim_opponents``, ``value_scale``, ``keep``; services/rollout/search.py): on the
same battle, candidates and seed, ``ShardSearch`` scores the candidates and picks the move exactly
as a ``SearchedPlayer`` with the same options does (one implementation,
``shared.search.halving.evaluate``); with every option at its default the scores are the
one-playout search's own (``Lookahead.scores``) and the move Gumbel AlphaZero's; the learner's
check accepts the players' rule and refuses a move it cannot have picked."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from services.evaluator.players import ScriptedPlayer
from services.evaluator.searched import SIM_RANDOM_LEGAL_NOOP_PROB, SearchedPlayer
from services.learner.alphazero.book import move_agrees
from services.rollout.battles import Shard
from services.rollout.search import SIM_RANDOM_LEGAL_NOOP_PROB as ROLLOUT_NOOP_PROB
from services.rollout.search import ShardSearch
from shared.config import load_config
from shared.envs import make_scripted
from shared.messages import Assignment
from shared.search.lookahead import Lookahead
from shared.search.spec import RolloutSearch, split_search
from shared.search.targets import gumbel_move_index

SEED = 11
NOOP_PROB = 0.7
OPTIONS = "+search:4:20,p=3,sh=1,cont=defend,opp=random_legal/defend,vs=500,keep=0.01"


@pytest.fixture(scope="module")
def pf():
    from shared.preflight import run_preflight

    return run_preflight(load_config({"profile": "tiny"}).env, SEED)


def _shard(pf, spec: RolloutSearch):
    cfg = load_config({"profile": "tiny"})
    search = ShardSearch(spec, cfg.env, SEED, lambda o: make_scripted(o, NOOP_PROB), pf.codec, ROLLOUT_NOOP_PROB)
    shard = Shard(0, cfg.env, 2, pf.codec, SEED, NOOP_PROB, True, search)
    for b in (0, 1):
        for k in range(4):
            shard.table[(b, k)] = Assignment(b, k, "scripted", "scripted:random_legal", 0)
    shard.set_gamma(0.99)
    shard.start([0, 1], [0, 0])
    rng = np.random.default_rng(3)
    for _ in range(14):  # a few decisions in, so that cards are in hand
        out = np.zeros(shard.n_slots, np.int16)
        for i, battle in enumerate(shard.battles):
            for seat, name in enumerate(("blue", "red")):
                legal = np.flatnonzero(battle.obs[name]["action_mask"])
                out[2 * i + seat] = legal[rng.integers(len(legal))] if rng.random() < 0.2 else 0
        shard.step(out)
    return cfg, shard


def _choice_slots(shard) -> list[int]:
    return [2 * i for i, b in enumerate(shard.battles)
            if b.groups[0] == 0 and np.count_nonzero(b.obs["blue"]["action_mask"]) > 1]


def test_the_rollout_and_the_players_use_the_same_noop_probability_for_simulated_random_legal():
    assert ROLLOUT_NOOP_PROB == SIM_RANDOM_LEGAL_NOOP_PROB


@pytest.mark.slow
def test_a_rollout_search_with_the_options_picks_as_the_searched_player_with_the_same_options(pf):
    base, spec = split_search("scripted:defend" + OPTIONS)
    assert spec is not None
    wire = RolloutSearch(candidates=4, depth=20, playouts=3, halving=True, cont="defend",
                         opponents=("random_legal", "defend"), value_scale=500.0, keep=0.01)
    assert wire.spec() == spec and wire.stable()
    cfg, shard = _shard(pf, wire)
    slots = _choice_slots(shard)
    assert slots, "no learner choice decision in the constructed battles"
    player = SearchedPlayer(base + OPTIONS, ScriptedPlayer(base, SIM_RANDOM_LEGAL_NOOP_PROB), spec, cfg.env)
    compared, other = 0, 0
    for draw in range(6):  # several player draws (candidates and seeds) per battle
        for slot in slots:
            battle = shard.battles[slot // 2]
            seat = player.bind(battle.env, "blue", None)
            rng = np.random.default_rng((draw, slot))
            seed = int(copy.deepcopy(rng).integers(0, 2**63 - 1))  # the seed act draws first
            move = seat.act(battle.obs["blue"], rng)
            cands = np.asarray(player.last_candidates, np.int16)
            shard.search.seed = lambda b, s, seed=seed: seed  # the player's seed in place of the named stream
            found = shard.search.run(shard.battles, np.array([slot], np.int16), cands[None, :],
                                     np.zeros((1, len(cands)), np.float32))
            assert found.slots.tolist() == [slot] and found.refused == 0
            assert int(found.moves[0]) == move
            np.testing.assert_array_equal(found.q[0], player.last.means.astype(np.float32))
            assert move_agrees(player.last.index, found.q[0], np.zeros(len(cands)), 0.1, spec.keep)
            compared += 1
            other += move != int(cands[0])
    assert compared >= 6
    assert 0 < other < compared  # the comparison covers moves that keep the own pick and moves that leave it
    # halving spent the budget unevenly: the survivors were played out more than the first cut
    assert player.last.visits.max() > player.last.visits.min()


@pytest.mark.slow
def test_with_the_options_at_their_defaults_the_scores_and_move_are_the_one_playout_search(pf):
    wire = RolloutSearch(candidates=4, depth=3)
    assert not wire.stable() and wire.spec().options() == ""
    cfg, shard = _shard(pf, wire)
    slot = _choice_slots(shard)[0]
    battle = shard.battles[slot // 2]
    legal = np.flatnonzero(battle.obs["blue"]["action_mask"])
    cands = np.array([legal[-1], 0, *legal[1:3]], np.int16)[:4]
    keys = np.array([0.3, -0.2, 0.1, 0.0], np.float32)
    found = shard.search.run(shard.battles, np.array([slot], np.int16), cands[None, :], keys[None, :])
    seed = shard.search.seed(battle, 0)
    alone = Lookahead(cfg.env, 3).scores(battle.env, "blue", cands.astype(np.int64).tolist(),
                                         shard.search.opponent_model(battle, 0), seed)
    np.testing.assert_array_equal(found.q[0], alone.astype(np.float32))
    assert int(found.moves[0]) == int(cands[gumbel_move_index(keys, found.q[0], c_scale=0.1)])


def test_the_learner_checks_the_players_rule_and_gumbels():
    q = np.array([0.10, 0.35, 0.05, 0.20], np.float32)
    keys = np.array([2.0, 0.0, 0.0, 0.0])
    assert move_agrees(0, q, keys, 0.1, 0.3)  # the own pick is always a move the rule may play
    assert move_agrees(1, q, keys, 0.1, 0.2)  # 0.35 beats 0.10 by more than 0.2
    assert not move_agrees(1, q, keys, 0.1, 0.3)  # ... but not by more than 0.3
    assert not move_agrees(2, q, keys, 0.1, 0.0)  # below the own pick: never played
    # without a keep (the Gumbel rule), exactly gumbel_move_index's choice passes
    want = gumbel_move_index(keys, q, c_scale=0.1)
    assert [move_agrees(i, q, keys, 0.1, None) for i in range(4)] == [i == want for i in range(4)]


def test_a_search_spec_with_critic_leaves_and_the_players_rule_is_refused_by_the_rollout():
    cfg = load_config({"profile": "tiny"})
    with pytest.raises(ValueError, match="leaf_value 'critic' cannot score the players' move rule"):
        ShardSearch(RolloutSearch(candidates=4, playouts=2, leaf_value="critic"), cfg.env, SEED,
                    lambda o: make_scripted(o, NOOP_PROB))
