"""The lean simulation step (shared/search/sim.py) plays the same battles as the env's own step:
exact scores on a fixed battle, pinned from the search before the lean step existed (commit
798c9c3), and the two paths side by side over many candidates and seeds."""

from __future__ import annotations

import numpy as np
import pytest

from services.evaluator.players import ScriptedPlayer
from services.evaluator.searched import SearchedPlayer
from shared.config import load_config
from shared.envs import build_env
from shared.evaluation import eval_env_config
from shared.search.lookahead import Lookahead, Playouts
from shared.search.spec import split_search

TEACHER = ("scripted:defend+search:8:20,p=2,sh=1,cont=defend,opp=defend/random_legal/first-affordable,"
           "vs=2000,keep=0.3")


@pytest.fixture(scope="module")
def battle():
    """The tiny profile's evaluation env at blue's first choice decision of env seed 11."""
    cfg = load_config({"profile": "tiny", "run_name": "t"})
    env_cfg = eval_env_config(cfg.env)
    env = build_env(env_cfg)
    obs, _ = env.reset(seed=11)
    while int(np.count_nonzero(obs["blue"]["action_mask"])) <= 1:
        obs, *_ = env.step({"blue": 0, "red": 0})
    return env_cfg, env, obs


def test_the_search_scores_a_fixed_battle_exactly_as_before_the_lean_step(battle):
    env_cfg, env, obs = battle
    defend = ScriptedPlayer("scripted:defend", 0.9)
    look = Lookahead(env_cfg, depth=20)
    candidates = [0, 148, 1262, 153, 1794, 844]
    assert look.scores(env, "blue", candidates, defend, seed=5).tolist() == [-578.0, -234.0, -578.0, -234.0, 0.0, 0.0]
    assert look.stats.sim_steps == 6 * 21
    pinned = {  # player -> (move, candidates, means, visits, simulated decisions), recorded at 798c9c3
        "scripted:defend+search:8": (1988, [153, 0, 1797, 1988, 239, 1737, 126, 1873],
                                     [-1889.0, 9.0, -234.0, 165.0, -1327.0, -715.0, 0.0, 67.0], [1] * 8, 248),
        TEACHER: (1988, [153, 0, 1797, 1988, 239, 1737, 126, 1873],
                  [-0.11491027410715844, -0.22982054821431688, 0.18632632217540407, 0.4718254328440634,
                   -0.22982054821431688, -0.22982054821431688, 0.0, 0.34197250621699093], [4, 1, 2, 4, 1, 1, 1, 2], 336),
    }
    for pid, (move, cands, means, visits, steps) in pinned.items():
        base, spec = split_search(pid)
        player = SearchedPlayer(pid, ScriptedPlayer(base, 0.9), spec, env_cfg)
        played = player.bind(env, "blue", defend).act(obs["blue"], np.random.default_rng(11))
        assert (played, player.last_candidates) == (move, cands)
        assert player.last.means.tolist() == means and player.last.visits.tolist() == visits
        assert player.stats.sim_steps == steps


def test_the_lean_step_and_the_envs_step_give_the_same_boards_over_many_seeds(battle):
    env_cfg, env, obs = battle
    look = Lookahead(env_cfg, depth=12)
    look.sim_envs(1)
    snap = env.snapshot()
    both = ["blue", "red"]
    for opp_name in ("scripted:defend", "scripted:random_legal"):
        opponent = ScriptedPlayer(opp_name, 0.9)

        def act_many(observations, rngs):
            return [opponent.act(o, r) for o, r in zip(observations, rngs)]

        for seed in range(6):
            me = seed % 2  # blue and red searching
            legal = np.flatnonzero(obs[both[me]]["action_mask"])
            group = [int(a) for a in np.random.default_rng(seed).choice(legal, 1)]
            slow, fast = Playouts(np.empty(1)), Playouts(np.empty(1))
            n_slow = look._play_group(look._sims[:1], snap, me, group, act_many, seed, both, None, slow, 0)
            hash_slow = look._sims[0].engine.state_hash()
            n_fast = look._play_fast(look._sims[:1], snap, me, group, act_many, seed, both, None, fast, 0)
            assert look._sims[0].engine.state_hash() == hash_slow  # the same battle at the leaf
            assert (n_fast, fast.board.tolist()) == (n_slow, slow.board.tolist())


def test_the_lean_step_ends_where_the_env_does_under_a_snapshots_tick_cap(battle):
    env_cfg, env, obs = battle
    look = Lookahead(env_cfg, depth=12)
    look.sim_envs(1)
    opponent = ScriptedPlayer("scripted:defend", 0.9)
    capped = env.snapshot(max_ticks=45)  # 5 decisions of 10 ticks: the cap ends the playout early

    def act_many(observations, rngs):
        return [opponent.act(o, r) for o, r in zip(observations, rngs)]

    both, group = ["blue", "red"], [int(np.flatnonzero(obs["blue"]["action_mask"])[-1])]
    slow, fast = Playouts(np.empty(1)), Playouts(np.empty(1))
    n_slow = look._play_group(look._sims[:1], capped, 0, group, act_many, 3, both, None, slow, 0)
    n_fast = look._play_fast(look._sims[:1], capped, 0, group, act_many, 3, both, None, fast, 0)
    assert n_slow == n_fast == 5 and fast.board.tolist() == slow.board.tolist()
