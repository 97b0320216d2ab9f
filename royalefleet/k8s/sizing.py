"""Resource requests and limits, and the run folder's volume sizes, from a profile.

Memory is what ``royalefleet doctor`` measured for each profile on this project's 2-core
machine (2026-12-03, CPU torch): the learner's resting set after ``import torch`` and the
network (816-825 MiB for every profile), one minibatch's peak over it, and the iteration's
rectangle; a rollout process is 103 MiB after its first battle plus 6.5 MiB for each further
battle (``cmd_doctor.rollout_process_bytes``, 6.4-6.5 MiB in every profile). A request is the
measured need with ``HEADROOM`` on top, rounded up to ``ROUND_MIB``; the limit is
``LIMIT_FACTOR`` times the request (a learner killed at its limit loses the iteration in
flight; a limit at the request would do that on the first larger rectangle).

CPU: the learner requests its ``determinism.torch_threads`` (the BLAS threads it is pinned to)
and may burst one core above for its serving and ZeroMQ threads; a rollout is one Python
process stepping its shards in turn: one core.
"""

from __future__ import annotations

import math

from shared.config import RunConfig

LEARNER_MEASURED_MIB = {"tiny": (824, 7, 6), "cpu": (816, 254, 120), "laptop": (825, 861, 961),
                        "workstation": (855, 18073, 3844)}
"""``royalefleet doctor``'s learner figures per profile, MiB: (resting set, one minibatch's peak
over it, the iteration's rectangle), measured on the CPU as the module docstring says. On a GPU
the minibatch's forward and backward run in device memory (``services/learner/vram.py`` checks
that it fits at start), so a learner with a GPU requests the resting set and the rectangle only:
derived, not measured on a GPU host."""
ROLLOUT_PROCESS_MIB = 103.0
ROLLOUT_BATTLE_MIB = 6.5
EVALUATOR_NEED_MIB = 900
"""An evaluator loads torch and a snapshot to play it (the learner's resting set, ~820 MiB)."""
SMALL_SERVICE_MIB = 128
"""The ladder and the checkpoint service: no torch (measured 40 MiB after import), a result
log or a checkpoint in flight on top."""
HEADROOM = 1.25
ROUND_MIB = 128
LIMIT_FACTOR = 2

RUNS_GI = 10
"""The learner's volume: metrics.jsonl (a few kB an iteration), alarm bundles, TensorBoard files."""
RESULTS_GI = 10
"""The ladder's volume: the result log and the recorded games (a few hundred kB a game page)."""
CHECKPOINT_SNAPSHOT_FACTOR = 4
"""The checkpoint volume holds ``checkpoint.keep`` + 1 checkpoints (weights and Adam's two
moments) and the pool's snapshots (weights only, but up to ``ladder.pool`` members and the
archive): at least this many times the checkpoints' bytes, and never under ``MIN_CHECKPOINTS_GI``."""
MIN_CHECKPOINTS_GI = 10
CHECKPOINT_MIB = {"tiny": 0.6, "cpu": 3.2, "laptop": 10.6, "workstation": 35.5}
"""One checkpoint's size per profile (``royalefleet doctor``'s disk check: parameters x 3 x 4 B)."""


def _mib(need: float) -> int:
    return int(math.ceil(need * HEADROOM / ROUND_MIB) * ROUND_MIB)


def memory(need_mib: float) -> dict:
    """``{"requests": ..., "limits": ...}`` memory of a container that needs ``need_mib`` MiB."""
    request = _mib(need_mib)
    return {"requests": f"{request}Mi", "limits": f"{request * LIMIT_FACTOR}Mi"}


def _need(table: dict, cfg: RunConfig) -> float:
    if cfg.profile not in table:
        raise KeyError(f"royalefleet/k8s/sizing.py has no measured figure for profile {cfg.profile!r}: run "
                       f"`royalefleet doctor --profile {cfg.profile}` and add its learner and disk figures")
    return table[cfg.profile]


def learner_resources(cfg: RunConfig, gpu: bool = False) -> dict:
    """The learner's requests and limits; ``gpu``: its update runs on a GPU (``sizing`` docstring)."""
    threads = cfg.determinism.torch_threads
    resting, minibatch, rectangle = _need(LEARNER_MEASURED_MIB, cfg)
    mem = memory(resting + rectangle + (0 if gpu else minibatch))
    return {"requests": {"cpu": str(threads), "memory": mem["requests"]},
            "limits": {"cpu": str(threads + 1), "memory": mem["limits"]}}


def rollout_resources(cfg: RunConfig) -> dict:
    mem = memory(ROLLOUT_PROCESS_MIB + ROLLOUT_BATTLE_MIB * (cfg.rollout.battles - 1))
    return {"requests": {"cpu": "1", "memory": mem["requests"]}, "limits": {"cpu": "1", "memory": mem["limits"]}}


def evaluator_resources(cfg: RunConfig) -> dict:
    mem = memory(EVALUATOR_NEED_MIB)
    return {"requests": {"cpu": "500m", "memory": mem["requests"]}, "limits": {"cpu": "1", "memory": mem["limits"]}}


def small_resources(cfg: RunConfig) -> dict:
    mem = memory(SMALL_SERVICE_MIB)
    return {"requests": {"cpu": "250m", "memory": mem["requests"]}, "limits": {"cpu": "1", "memory": mem["limits"]}}


def checkpoints_gi(cfg: RunConfig) -> int:
    need = _need(CHECKPOINT_MIB, cfg) * (cfg.checkpoint.keep + 1) * CHECKPOINT_SNAPSHOT_FACTOR / 1024
    return max(MIN_CHECKPOINTS_GI, math.ceil(need))
