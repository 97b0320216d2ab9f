"""The shipped configs, one function per machine class, differing only in numbers
(``PROFILES``); a config document names one and overrides what it likes on top of it
(shared/config_load.py). README's profile table gives each one's size."""

from __future__ import annotations

from shared.config_schema import (
    CheckpointConfig, ConfigError, DeterminismConfig, EnvConfig, EvaluationConfig, GateConfig, LadderConfig,
    GenerationStrengthConfig, LocalConfig, NetConfig, PoolConfig, PPOConfig, RolloutConfig, RunConfig, StrengthConfig,
)


CPU_CANDIDATE_EVERY = 100_000
"""The cpu profile's ``ladder.pool.candidate_every_env_steps``: a default cpu run averaged 55
env steps/s (93,024 env steps by iteration 34, 28 minutes), so 4,000,000 would give its first
snapshot after about 20 hours; 100,000 gives it after about 30 minutes."""


CPU_GATE = {"champion_games": 200, "anchor_games": 100, "stratified_snapshots": 4, "stratified_games": 40}
"""The cpu profile's ``ladder.gate``: a gate of at most 200 + 2 x 100 + 4 x 40 = 560 full
matches. In the two-hour cpu run of 2026-12-02 (docs/learning.md) the one evaluator played
2.24 s a match (1,716 matches, load 6-10) and spent about 40 % of its time on the strength
measurement, so the default gate's up to 2,200 matches (about 82 minutes) outlasted the
candidate cadence (37 iterations, about 50 minutes there): the second candidate waited out
the run and the pool stayed at one member. 560 matches is about 21 minutes at that rate. The
cost is a weaker gate: at 200 battles the Wilson lower bound reaches 0.52 at a score rate of
0.59 (0.551 at 1,000)."""


def cpu() -> RunConfig:
    """A 2-core CPU machine, no GPU (this project's development machine): the default when
    torch sees no GPU. Sized so an iteration finishes in about a minute (measured in
    docs/throughput.md): a 32-channel one-block trunk, 4,096 timesteps per iteration. A pool
    candidate every 100,000 env steps (about 30 minutes at the ~55 env steps/s measured here),
    so the pool, its opponents and the gate engage within the first hour, and a gate one
    evaluator finishes before the next candidate comes (``CPU_GATE``; docs/ladder.md)."""
    return RunConfig(profile="cpu", ladder=LadderConfig(pool=PoolConfig(candidate_every_env_steps=CPU_CANDIDATE_EVERY),
                                                        gate=GateConfig(**CPU_GATE)))


def laptop() -> RunConfig:
    """8 GB RAM, a 4 GB GPU, 8 threads: the reference's laptop class."""
    return RunConfig(
        profile="laptop",
        rollout=RolloutConfig(battles=32, shards=2),
        local=LocalConfig(rollouts=3),
        net=NetConfig(channels=64, blocks=4),
        ppo=PPOConfig(timesteps_per_iteration=32768, batch_size=4096, minibatch_size=256),
        determinism=DeterminismConfig(torch_threads=4),
    )


def workstation() -> RunConfig:
    """32 GB RAM, a 12 GB GPU, 16 threads."""
    return RunConfig(
        profile="workstation",
        rollout=RolloutConfig(battles=32, shards=2),
        local=LocalConfig(rollouts=12),
        net=NetConfig(channels=96, blocks=8),
        ppo=PPOConfig(timesteps_per_iteration=131072, batch_size=16384, minibatch_size=2048),
        determinism=DeterminismConfig(torch_threads=4),
    )


def many_core() -> RunConfig:
    """64 GB RAM, a 24 GB GPU, 64 threads."""
    return RunConfig(
        profile="many_core",
        rollout=RolloutConfig(battles=32, shards=2),
        local=LocalConfig(rollouts=48),
        net=NetConfig(channels=128, blocks=12),
        ppo=PPOConfig(timesteps_per_iteration=262144, batch_size=32768, minibatch_size=8192),
        determinism=DeterminismConfig(torch_threads=8),
    )


def tiny() -> RunConfig:
    """The test suite's size: seconds per iteration on one core, real RoyaleGym battles."""
    return RunConfig(
        profile="tiny",
        env=EnvConfig(max_steps=40),
        rollout=RolloutConfig(battles=4, shards=2, round_timeout_s=10.0, heartbeat_s=0.5),
        net=NetConfig(channels=8, blocks=1, norm_groups=4, vector_embed=8, value_hidden=32),
        ppo=PPOConfig(timesteps_per_iteration=192, batch_size=64, minibatch_size=32, n_epochs=2),
        checkpoint=CheckpointConfig(every_iterations=1, keep=3),
        determinism=DeterminismConfig(torch_threads=1),
        # Off in the test suite's size (a test turns it on): its games would compete with the gates'.
        # So is each generation's (an expert-iteration stack test would otherwise play searched games).
        evaluation=EvaluationConfig(strength=StrengthConfig(every_iterations=0, games_per_anchor=2,
                                                            generations=GenerationStrengthConfig(enabled=False))),
    )


PROFILES = {"cpu": cpu, "laptop": laptop, "workstation": workstation, "many_core": many_core, "tiny": tiny}


def default_profile_name() -> str:
    """``laptop`` when torch sees a CUDA device, ``cpu`` otherwise."""
    try:
        import torch

        if torch.cuda.is_available():
            return "laptop"
    except ImportError:
        pass
    return "cpu"


def profile(name: str) -> RunConfig:
    """The shipped config for one machine class. Raises ConfigError for an unknown name."""
    if name not in PROFILES:
        raise ConfigError([f"profile: unknown profile {name!r}; choose one of {', '.join(PROFILES)}"])
    return PROFILES[name]()
