"""The search in the rollout (services/rollout/search.py): at a learner seat's choice decision
it tries the no-op and random legal plays in a copy of the battle and ships their scores; the
real battle is untouched (its saved state, engine, observation memory, scripted stream and
episode bookkeeping byte for byte), forced seats and non-learner seats are never searched, the
scores are a pure function of the saved battle and the master seed (a battle restored from its
state searches the same), and the round carries the arrays and the engine steps spent."""

from __future__ import annotations

import numpy as np
import pytest

from services.rollout import battle_state
from services.rollout.battles import Shard
from services.rollout.search import ShardSearch, draw_candidates
from shared.config import load_config
from shared.envs import make_scripted
from shared.messages import Assignment
from shared.round_arrays import SEARCH, RoundArrays
from shared.search.spec import RolloutSearch

SEED = 11
NOOP_PROB = 0.7
SPEC = RolloutSearch(candidates=4, depth=3)


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


def _step_to_choice(shard, rng, steps):
    for _ in range(steps):
        out = np.zeros(shard.n_slots, np.int16)
        for i, b in enumerate(shard.battles):
            for seat, name in enumerate(("blue", "red")):
                legal = np.flatnonzero(b.obs[name]["action_mask"])
                out[2 * i + seat] = legal[rng.integers(len(legal))] if rng.random() < 0.2 else 0
        shard.search, saved = None, shard.search  # step without searching on the way
        shard.step(out)
        shard.search = saved


def test_draw_candidates_noop_first_distinct_legal():
    mask = np.zeros(50, bool)
    mask[[0, 3, 7, 9, 20]] = True
    got = draw_candidates(mask, 4, np.random.default_rng(0))
    assert got[0] == 0 and len(got) == 4 and len(set(got)) == 4 and all(mask[got])
    assert sorted(draw_candidates(mask, 8, np.random.default_rng(0))) == [0, 3, 7, 9, 20]  # fewer legal than k


@pytest.mark.slow
def test_search_leaves_the_battle_untouched_and_is_a_pure_function_of_its_state(pf):
    ids = [0, 1]
    shard = _shard(pf, ids)
    assert not any(b.env._mask_only for b in shard.battles)  # a searched shard keeps every seat's memory
    _step_to_choice(shard, np.random.default_rng(3), 12)
    before = [battle_state.save(b, pf.engine) for b in shard.battles]
    hashes = [int(b.env.engine.state_hash()) for b in shard.battles]
    first = shard.search.run(shard.battles)
    assert [battle_state.save(b, pf.engine) for b in shard.battles] == before  # engine, memory, rng, bookkeeping
    assert [int(b.env.engine.state_hash()) for b in shard.battles] == hashes
    # which slots: learner seats (both of battle 0, blue of battle 1) with more than the no-op legal
    want = [2 * i + s for i, b in enumerate(shard.battles) for s in (0, 1)
            if b.groups[s] == 0 and np.count_nonzero(b.obs[("blue", "red")[s]]["action_mask"]) > 1]
    assert first.slots.tolist() == want and len(want) >= 1
    assert 3 not in want  # battle 1's red seat is the scripted opponent's
    assert first.candidates.shape == first.q.shape == (len(want), SPEC.candidates)
    assert (first.candidates[:, 0] == 0).all()
    assert first.sim_steps > 0 and first.sim_steps <= len(want) * SPEC.candidates * (SPEC.depth + 1)
    again = shard.search.run(shard.battles)
    np.testing.assert_array_equal(again.candidates, first.candidates)
    np.testing.assert_array_equal(again.q, first.q)
    # a battle restored from its saved state, in a shard built afresh, searches the same
    other = _shard(pf, ids)
    for battle, blob, bid in zip(other.battles, before, ids):
        battle_state.restore(battle, blob, battle_id=bid, engine_build=pf.engine,
                             make_scripted=lambda o: make_scripted(o, NOOP_PROB))
    restored = other.search.run(other.battles)
    np.testing.assert_array_equal(restored.candidates, first.candidates)
    np.testing.assert_array_equal(restored.q, first.q)


@pytest.mark.slow
def test_a_searched_round_carries_the_search(pf):
    shard = _shard(pf, [0, 1])
    _step_to_choice(shard, np.random.default_rng(3), 12)
    result = shard.observe()
    arrays = result.arrays()
    assert set(SEARCH) <= set(arrays)
    back = RoundArrays.of(arrays, step=True)
    np.testing.assert_array_equal(back.search_q, result.search_q)
    held = back.observation_half()
    np.testing.assert_array_equal(held.search_candidates, result.search_candidates)
    assert result.search_steps > 0 and result.search_seconds > 0
    plain = _shard(pf, [0, 1], search=False)
    assert not set(SEARCH) & set(plain.observe().arrays())
    with pytest.raises(KeyError, match="search arrays"):
        RoundArrays.of({k: v for k, v in arrays.items() if k != "search_q"}, step=True)
