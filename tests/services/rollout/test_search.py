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
    s = ShardSearch(SPEC, cfg.env, SEED, lambda o: make_scripted(o, NOOP_PROB)) if search else None
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
