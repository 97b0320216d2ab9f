"""Start-up facts read off a real environment: the observation layout and the codec table.

The learner runs it before anything trains; the evaluator (services/evaluator/players.py) and
``royalefleet identity`` run it to decide the same table the run's learner decided (same env
config, same master seed, same stream), so it lives here, torch-free.

Builds one battle from the run's env config, reads its layout (``ObsSpec``) and engine build,
samples real observations from random-legal self-play (stream ``preflight/sample``), decides the
codec table from them, and takes the static planes, checking that both seats see the same ones
(each seat's observation is in its own frame, and the static planes are symmetric in it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import msgspec
import numpy as np

from shared.codec import MIN_TABLE_STATES, Codec, decide_table
from shared.config import EnvConfig
from shared.envs import ObsSpec, build_env, engine_build, obs_spec
from shared.messages import CodecTable, EngineBuild
from shared.seeding import stream


@dataclass
class Preflight:
    spec: ObsSpec
    engine: EngineBuild
    table: CodecTable
    statics: np.ndarray  # (n_static, H, W) float32
    codec: Codec
    seconds: float


class PreflightError(RuntimeError):
    pass


def run_preflight(env_cfg: EnvConfig, master_seed: int, min_states: int = MIN_TABLE_STATES, *,
                  frame_stack: int = 1) -> Preflight:
    """Raises PreflightError if the environment breaks an assumption the codec relies on.
    ``frame_stack`` (``obs.frame_stack``) goes into the spec (``ObsSpec.frame_stack``); the
    codec and its sample do not depend on it."""
    from royalegym import RandomLegalOpponent

    t0 = time.perf_counter()
    env = build_env(env_cfg)
    spec = obs_spec(env)
    build = engine_build(env)
    rng = stream(master_seed, "preflight/sample")
    player = RandomLegalOpponent(0.9)
    samples, statics = [], None
    static_idx = [spec.plane_names.index(n) for n in spec.static_planes]
    obs, _ = env.reset(seed=int(rng.integers(2**62)))
    while len(samples) < min_states:
        for seat in ("blue", "red"):
            samples.append(obs[seat]["spatial"])
            if statics is None:
                statics = obs[seat]["spatial"][static_idx].copy()
            elif not np.array_equal(obs[seat]["spatial"][static_idx], statics):
                raise PreflightError(
                    f"planes {spec.static_planes} are declared static but differ between seats or states; "
                    "the codec cannot store them once"
                )
        actions = {s: player.act(obs[s], obs[s]["action_mask"], rng) for s in ("blue", "red")}
        obs, _, term, trunc, _ = env.step(actions)
        if term["blue"] or trunc["blue"]:
            obs, _ = env.reset(seed=int(rng.integers(2**62)))
    high = env.observation_space("blue")["spatial"].high.reshape(len(spec.plane_names), -1).max(axis=1)
    table = decide_table(spec, high, np.stack(samples))
    assert statics is not None
    if frame_stack != 1:
        spec = msgspec.structs.replace(spec, frame_stack=int(frame_stack))
    return Preflight(spec, build, table, statics, Codec(table, statics), time.perf_counter() - t0)
