"""Real RoyaleGym observations for the codec tests: random-legal self-play, both seats."""

import numpy as np

from shared.envs import build_env


def random_legal_observations(env_cfg, decisions: int, *, rng_seed: int, reset_seed: int, next_reset: int) -> list:
    """``2 * decisions`` seat-observations (blue then red at each decision), each copied, of
    RoyaleGym's ``RandomLegalOpponent(0.5)`` on both seats (no-op probability 0.5: far more cards
    played than the preflight's 0.9 sample). The first episode resets with ``reset_seed``, the one
    after decision ``t`` ends with ``next_reset + t``."""
    from royalegym import RandomLegalOpponent

    env = build_env(env_cfg)
    player = RandomLegalOpponent(0.5)
    rng = np.random.default_rng(rng_seed)
    obs, _ = env.reset(seed=reset_seed)
    out = []
    for step in range(decisions):
        for seat in ("blue", "red"):
            out.append({k: np.array(v, copy=True) for k, v in obs[seat].items()})
        actions = {s: player.act(obs[s], obs[s]["action_mask"], rng) for s in ("blue", "red")}
        obs, _, term, trunc, _ = env.step(actions)
        if term["blue"] or trunc["blue"]:
            obs, _ = env.reset(seed=next_reset + step)
    return out
