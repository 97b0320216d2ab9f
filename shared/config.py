"""The whole configuration of a run, as one tree of msgspec structs: import it from here.

One source of truth: every number a service reads comes from this tree. It lives in three
modules, re-exported here so that ``from shared.config import X`` is the one way in:

- ``shared/config_schema.py``: the structs, every field with its documentation under it, and
  each struct's cross-field rules (``problems()``) beside its fields; ``ConfigError``.
- ``shared/config_profiles.py``: the profiles, one function per machine class, differing only
  in numbers (``PROFILES``, ``profile``, ``default_profile_name``).
- ``shared/config_load.py``: a JSON document applied on top of the profile it names
  (``load_config``), every problem reported at once (``check_consistency``) before any process
  starts; ``dump_config``, ``config_hash``, ``config_differences``.

``royalefleet config --explain [FIELD]`` prints a field's documentation beside its type, range,
defaults per profile and whether it is in the run identity (shared/config_docs.py).
"""

from __future__ import annotations

from shared.config_load import (
    check_consistency, config_differences, config_hash, dump_config, load_config, load_service_config,
)
from shared.config_profiles import (
    CPU_CANDIDATE_EVERY, CPU_GATE, PROFILES, cpu, default_profile_name, laptop, many_core, profile, tiny, workstation,
)
from shared.config_schema import (
    FORMAT_VERSION, SEAT_DECKS_RESERVED, SHA256_HEX, AdvantageConfig, AlarmConfig, CheckpointConfig, ComponentSpec,
    AlphaZeroConfig, ConfigError, DeterminismConfig, DqnConfig, EnvConfig, EvaluationConfig, Fraction01, GateConfig, LadderConfig,
    LearnerConfig, LocalConfig, LrBackoffConfig, NetConfig, NonNegFloat, NonNegInt, ObsConfig, PoolConfig, Port,
    PosFloat, PosInt, PPOConfig, RaterConfig, RewardWeights, RolloutConfig, RunConfig, ScriptedId, SeatDecks,
    SeedSnapshot, ServicesConfig, StrengthConfig, env_component_problems, seed_snapshot_problems,
)

__all__ = [
    # schema
    "FORMAT_VERSION", "SEAT_DECKS_RESERVED", "SHA256_HEX", "AdvantageConfig", "AlarmConfig", "CheckpointConfig",
    "AlphaZeroConfig", "ComponentSpec", "ConfigError", "DeterminismConfig", "DqnConfig", "EnvConfig", "EvaluationConfig", "Fraction01",
    "GateConfig", "LadderConfig", "LearnerConfig", "LocalConfig", "LrBackoffConfig", "NetConfig", "NonNegFloat",
    "NonNegInt", "ObsConfig", "PoolConfig", "Port", "PosFloat", "PosInt", "PPOConfig", "RaterConfig",
    "RewardWeights", "RolloutConfig", "RunConfig", "ScriptedId", "SeatDecks", "SeedSnapshot", "ServicesConfig",
    "StrengthConfig", "env_component_problems", "seed_snapshot_problems",
    # profiles
    "CPU_CANDIDATE_EVERY", "CPU_GATE", "PROFILES", "cpu", "default_profile_name", "laptop", "many_core", "profile",
    "tiny", "workstation",
    # loading
    "check_consistency", "config_differences", "config_hash", "dump_config", "load_config", "load_service_config",
]
