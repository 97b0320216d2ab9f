"""The search in the rollout (services/rollout/search.py): at the slots a Step names it tries the
learner's candidates in a copy of the battle, plays Gumbel AlphaZero's move and ships scores and
moves with the next round. Before the step the real battle is untouched (its saved state,
engine, observation memory, scripted stream and episode bookkeeping byte for byte); slots that
are not learner seats, or candidates that are not distinct legal actions, are refused and play
the Step's action; the scores are a pure function of the saved battle and the master seed (a
battle restored from its state searches the same) and the move follows the rule by hand."""

from __future__ import annotations

import numpy as np
import pytest

from services.rollout import battle_state
from services.rollout.battles import Shard
from services.rollout.search import ShardSearch
from shared.config import load_config
from shared.envs import make_scripted
from shared.messages import Assignment
from shared.round_arrays import SEARCH, RoundArrays
from shared.search.spec import RolloutSearch
from shared.search.targets import gumbel_move_index

SEED = 11
NOOP_PROB = 0.7
SPEC = RolloutSearch(candidates=4, depth=3, c_scale=0.1)


@pytest.fixture(scope="module")
def pf():
    from shared.preflight import run_preflight

    return run_preflight(load_config({"profile": "tiny"}).env, SEED)


def _shard(pf, ids, search=True):
    cfg = load_config({"profile": "tiny"})
    s = ShardSearch(SPEC, cfg.env, SEED, lambda o: make_scripted(o, NOOP_PROB), pf.codec) if search else None
    shard = Shard(0, cfg.env, len(ids), pf.codec, SEED, NOOP_PROB, True, s)
    for b in ids:
        for k in range(4):
            shard.table[(b, k)] = (Assignment(b, k, "mirror", "learner", -1) if b % 2 == 0
                                   else Assignment(b, k, "scripted", "scripted:random_legal", 1))
    shard.set_gamma(0.99)
    shard.start(ids, [0] * len(ids))
    return shard


def _advance(shard, rng, steps):
    for _ in range(steps):
        out = np.zeros(shard.n_slots, np.int16)
        for i, b in enumerate(shard.battles):
            for seat, name in enumerate(("blue", "red")):
                legal = np.flatnonzero(b.obs[name]["action_mask"])
                out[2 * i + seat] = legal[rng.integers(len(legal))] if rng.random() < 0.2 else 0
        shard.step(out)


def _request(shard, rng):
    """Candidates for every learner choice slot: the no-op and up to 3 legal plays, random keys;
    plus a scripted slot (3) and an illegal candidate row, which must be refused."""
    slots, cands, keys = [], [], []
    for i, b in enumerate(shard.battles):
        for seat, name in enumerate(("blue", "red")):
            legal = np.flatnonzero(b.obs[name]["action_mask"])
            if b.groups[seat] != 0 or len(legal) <= 1:
                continue
            plays = rng.permutation(legal[legal != 0])[:3]
            row = np.full(4, -1, np.int16)
            row[: 1 + len(plays)] = [0, *plays]
            slots.append(2 * i + seat)
            cands.append(row)
            keys.append(rng.normal(size=4).astype(np.float32))
    good = len(slots)
    slots += [3, slots[0]]
    cands += [np.array([0, 1, -1, -1], np.int16), np.array([0, 0, -1, -1], np.int16)]  # scripted seat; repeated id
    keys += [np.zeros(4, np.float32)] * 2
    return good, {"search_slots": np.array(slots, np.int16), "search_candidates": np.array(cands),
                  "search_keys": np.array(keys)}


@pytest.mark.slow
def test_search_leaves_the_battle_untouched_and_is_a_pure_function_of_its_state(pf):
    ids = [0, 1]
    shard = _shard(pf, ids)
    assert not any(b.env._mask_only for b in shard.battles)  # a searched shard keeps every seat's memory
    _advance(shard, np.random.default_rng(3), 12)
    good, req = _request(shard, np.random.default_rng(5))
    assert good >= 1
    before = [battle_state.save(b, pf.engine) for b in shard.battles]
    first = shard.search.run(shard.battles, req["search_slots"], req["search_candidates"], req["search_keys"])
    assert [battle_state.save(b, pf.engine) for b in shard.battles] == before  # engine, memory, rng, bookkeeping
    assert first.slots.tolist() == req["search_slots"][:good].tolist() and first.refused == 2
    np.testing.assert_array_equal(first.candidates, req["search_candidates"][:good])
    for n in range(good):
        k = int(np.count_nonzero(first.candidates[n] >= 0))
        want = first.candidates[n][gumbel_move_index(req["search_keys"][n][:k], first.q[n][:k], c_scale=0.1)]
        assert first.moves[n] == want
        assert (first.q[n][k:] == 0).all()
    assert 0 < first.sim_steps <= int((first.candidates >= 0).sum()) * (SPEC.depth + 1)
    again = shard.search.run(shard.battles, req["search_slots"], req["search_candidates"], req["search_keys"])
    np.testing.assert_array_equal(again.q, first.q)
    other = _shard(pf, ids)  # a battle restored from its saved state, in a shard built afresh, searches the same
    for battle, blob, bid in zip(other.battles, before, ids):
        battle_state.restore(battle, blob, battle_id=bid, engine_build=pf.engine,
                             make_scripted=lambda o: make_scripted(o, NOOP_PROB))
    restored = other.search.run(other.battles, req["search_slots"], req["search_candidates"], req["search_keys"])
    np.testing.assert_array_equal(restored.q, first.q)
    np.testing.assert_array_equal(restored.moves, first.moves)


@pytest.mark.slow
def test_a_searched_step_plays_the_moves_and_its_round_carries_the_search(pf):
    shard = _shard(pf, [0, 1])
    _advance(shard, np.random.default_rng(3), 12)
    good, req = _request(shard, np.random.default_rng(5))
    plain = _shard(pf, [0, 1], search=False)
    _advance(plain, np.random.default_rng(3), 12)
    found = shard.search.run(shard.battles, req["search_slots"], req["search_candidates"], req["search_keys"])
    actions = np.zeros(shard.n_slots, np.int16)
    moved = actions.copy()
    moved[found.slots.astype(np.int64)] = found.moves
    result = shard.step(actions, req)
    twin = plain.step(moved)  # the same battles stepped with the moves by hand: the same round
    np.testing.assert_array_equal(result.rows, twin.rows)
    np.testing.assert_array_equal(result.search_moves, found.moves)
    arrays = result.arrays()
    assert set(SEARCH) <= set(arrays) and not set(SEARCH) & set(twin.arrays())
    back = RoundArrays.of(arrays, step=True)
    np.testing.assert_array_equal(back.search_q, found.q)
    assert back.observation_half().search_q is None  # a held round's step half (its search) is not re-filed
    assert result.search_steps == found.sim_steps and result.search_seconds > 0
    with pytest.raises(KeyError, match="search arrays"):
        RoundArrays.of({k: v for k, v in arrays.items() if k != "search_q"}, step=True)


class StandInLearner:
    """Answers a step's mid-step queries as the learner would, recording them: each leaf scored
    by its index, reversed; a network opponent's every simulated move the no-op."""

    def __init__(self):
        self.leaves, self.acts = [], []

    def value_leaves(self, rows, returns, discounts):
        self.leaves.append((rows.copy(), returns.copy(), discounts.copy()))
        return np.arange(len(rows), 0, -1).astype(np.float32)

    def act(self, player, battle, ordinal, rows, uniforms):
        self.acts.append((player, battle, ordinal, rows.copy(), uniforms.copy()))
        return np.zeros(len(rows), np.int16)


def _critic_shard(pf, ids, gamma, leaf_value="critic", sim_opponent="random"):
    cfg = load_config({"profile": "tiny"})
    spec = RolloutSearch(candidates=4, depth=3, c_scale=0.1, leaf_value=leaf_value, sim_opponent=sim_opponent)
    shard = Shard(0, cfg.env, len(ids), pf.codec, SEED, NOOP_PROB, True,
                  ShardSearch(spec, cfg.env, SEED, lambda o: make_scripted(o, NOOP_PROB), pf.codec))
    for b in ids:
        for k in range(4):
            shard.table[(b, k)] = (Assignment(b, k, "mirror", "learner", -1) if b % 2 == 0
                                   else Assignment(b, k, "scripted", "scripted:random_legal", 1))
    shard.set_gamma(gamma)
    shard.start(ids, [0] * len(ids))
    return shard


@pytest.mark.slow
def test_critic_leaves_ask_once_per_step_and_the_moves_follow_the_answer(pf):
    """Under leaf_value "critic" a searched step simulates every searchable slot, asks the
    learner ONCE for all their leaves (rows of the seat's leaf observations, the discounted
    rewards along each path and gamma ** decisions), and chooses each move by the rule over the
    answer. Without the learner's answer (no value_leaves) it refuses to guess."""
    gamma = 0.9
    shard = _critic_shard(pf, [0, 1], gamma)
    _advance(shard, np.random.default_rng(3), 12)
    good, req = _request(shard, np.random.default_rng(5))
    with pytest.raises(ValueError, match="needs the learner"):
        shard.search.run(shard.battles, req["search_slots"], req["search_candidates"], req["search_keys"])
    learner = StandInLearner()
    before = [battle_state.save(b, pf.engine) for b in shard.battles]
    found = shard.search.run(shard.battles, req["search_slots"], req["search_candidates"], req["search_keys"],
                             learner)
    assert [battle_state.save(b, pf.engine) for b in shard.battles] == before
    assert len(learner.leaves) == 1 and learner.acts == []  # sim_opponent "random": no opponent asked
    rows, returns, discounts = learner.leaves[0]
    n = int((found.candidates >= 0).sum())
    assert rows.shape == (n, pf.codec.row_bytes) and rows.dtype == np.uint8
    # episodes here last longer than 4 decisions: every path ran candidate + depth 3 decisions
    np.testing.assert_array_equal(discounts, np.full(n, ((1.0 * gamma) * gamma * gamma) * gamma))
    assert np.isfinite(returns).all()
    answer = np.arange(n, 0, -1).astype(np.float32)
    at = 0
    for s in range(good):
        k = int(np.count_nonzero(found.candidates[s] >= 0))
        np.testing.assert_array_equal(found.q[s][:k], answer[at: at + k])
        assert found.moves[s] == found.candidates[s][gumbel_move_index(req["search_keys"][s][:k], answer[at: at + k],
                                                                       c_scale=0.1)]
        at += k


@pytest.mark.slow
def test_a_critic_leaf_carries_the_paths_discounted_rewards_replayed_by_hand(pf):
    """The first searched slot's first candidate, replayed by hand from the saved battle with the
    documented streams ((seed, 1) for the seat's RoyaleGym ``random`` playout, (seed, 2) for the
    opponent's): its return is sum gamma^i r_i of the seat's rewards and its leaf row the seat's
    observation where the path stops."""
    from royalegym import RandomLegalOpponent

    from shared.envs import build_env
    from shared.rewards import set_gamma
    from shared.search.lookahead import PLAYOUT_NOOP_PROB

    gamma = 0.9
    shard = _critic_shard(pf, [0, 1], gamma)
    _advance(shard, np.random.default_rng(3), 12)
    good, req = _request(shard, np.random.default_rng(5))
    learner = StandInLearner()
    shard.search.run(shard.battles, req["search_slots"], req["search_candidates"], req["search_keys"], learner)
    slot = int(req["search_slots"][0])
    battle, seat = shard.battles[slot // 2], slot % 2
    me, other = ("blue", "red")[seat], ("blue", "red")[1 - seat]
    seed = shard.search.seed(battle, seat)
    opponent = shard.search.opponent_model(battle, seat)
    env = build_env(load_config({"profile": "tiny"}).env)
    set_gamma(env.reward_fn, gamma)
    obs, _ = env.reset(options={"snapshot": battle.env.snapshot(),
                                "mask_only": [other] if getattr(opponent, "scripted_seat", False) else []})
    own, opp, playout = np.random.default_rng((seed, 1)), np.random.default_rng((seed, 2)), RandomLegalOpponent(PLAYOUT_NOOP_PROB)
    total, weight, mine = 0.0, 1.0, int(req["search_candidates"][0][0])
    for d in range(4):
        if d:
            mine = int(playout.act(obs[me], obs[me]["action_mask"], own))
        obs, rew, term, trunc, _ = env.step({me: mine, other: int(opponent.act(obs[other], opp))})
        total += weight * float(rew[me])
        weight *= gamma
    rows, returns, _ = learner.leaves[0]
    assert returns[0] == total
    np.testing.assert_array_equal(rows[0], shard.codec.pack_many([obs[me]])[0][0])


@pytest.mark.slow
def test_a_network_opponent_plays_in_the_simulations_by_the_learners_answers(pf):
    """sim_opponent "battle": in a mirror battle the other seat is the learner, so every simulated
    decision of the searched slot asks the learner once for all its candidates' simulations side
    by side (SimActQuery), with the real battle's id and episode and each simulation's own
    opponent stream's next uniform (common random numbers: the same for every candidate); a
    scripted opponent is never asked for. Answered with the no-op, the scores equal those of a
    no-op opponent played in the rollout one candidate after another."""
    from services.rollout.search import _MaskBot

    shard = _critic_shard(pf, [0, 1], 0.99, leaf_value="board", sim_opponent="battle")
    _advance(shard, np.random.default_rng(3), 12)
    good, req = _request(shard, np.random.default_rng(5))
    mirror = [n for n in range(good) if int(req["search_slots"][n]) < 2]  # battle 0 is the mirror one
    assert mirror
    learner = StandInLearner()
    found = shard.search.run(shard.battles, req["search_slots"], req["search_candidates"], req["search_keys"],
                             learner)
    n = mirror[0]
    assert n == 0  # the first slot searched: the first queries are its
    slot = int(req["search_slots"][n])
    battle, seat = shard.battles[slot // 2], slot % 2
    k = int(np.count_nonzero(req["search_candidates"][n] >= 0))
    asked = [a for a in learner.acts if a[1] == battle.battle_id]
    # one query a simulated decision of each of the battle's searched seats (it does not end in 4)
    assert len(asked) == (SPEC.depth + 1) * len(mirror)
    draws = np.random.default_rng((shard.search.seed(battle, seat), 2)).random(SPEC.depth + 1)
    for d, (player, bid, ordinal, rows, uniforms) in enumerate(asked[:SPEC.depth + 1]):
        assert (player, ordinal) == ("learner", battle.ordinal) and rows.shape == (k, pf.codec.row_bytes)
        np.testing.assert_array_equal(uniforms, np.full(k, draws[d]))
    assert all(a[1] == battle.battle_id for a in learner.acts)  # battle 1's opponent is scripted: never asked
    cand = [int(x) for x in req["search_candidates"][n][:k]]
    alone = shard.search.lookahead.scores(battle.env, ("blue", "red")[seat], cand, _MaskBot(None),
                                          shard.search.seed(battle, seat))
    np.testing.assert_array_equal(found.q[list(found.slots).index(slot)][:k], alone.astype(np.float32))
