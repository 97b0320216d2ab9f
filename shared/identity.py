"""What a run IS, as sixteen hex characters.

The identity holds everything that can change a number the run produces, and nothing that
cannot. Two runs with one identity produce the same metric rows under ``determinism.tier =
"run_exact"`` on the same device class; two with different identities are different
experiments. A resume compares identities field by field and refuses a difference, naming every
differing field (``identity_differences``); ``--allow-identity-drift`` records instead.

In it, and why:

=====================  =================================================================
master_seed            every stream descends from it
determinism_tier,      the byte stream of the learner (kernels, reduction order)
torch_threads,
device_kind,
torch_version
engine                 the game itself: engine class, calibration and build digests, the
                       compiled binary's sha256, the card catalogue digest
env_spec_digest        the env config by value (decision clock, truncation, reward and its
                       weights)
obs_digest,            what the policy sees and can do (read off the built env)
action_digest
frame_stack            the trunk's input width
arch_digest            the network (NetConfig without the device and the autocast setting)
codec_version,         how a row is stored (the table) and sent (``services.wire_codec``: 1
codec_table_digest     packed rows, 2 zstd frames; shared/codec.py). Codec 2 is lossless, so
                       it cannot change a number; it is in the identity all the same so that
                       a resume keeps the codec its run was started with (issue 14), and a
                       run with codec 1 keeps the identity it had before codec 2 existed
algo_digest            PPO, GAE, schedules, reward scaling, LR backoff, CUDA autocast; with
                       ``learner.algorithm = "dqn"`` the algorithm and the ``dqn`` section
rollout_digest         battles and shards per rollout, local rollouts, mask-only scripted seats
ladder_digest          who the learner plays: mix, scripted opponents, pool, gate, rater
=====================  =================================================================

Not in it (recorded, diffed and printed on resume, never refused): run_name, runs_dir,
services (addresses, ports, timeouts; its wire_codec is codec_version), checkpoint cadence and keep, alarm thresholds, round
timeout and heartbeat timings, restart policy. An alarm can stop a run; it cannot alter a number.
"""

from __future__ import annotations

import hashlib
import platform
from typing import Any

import msgspec

from shared.config import RunConfig
from shared.messages import EngineBuild

IDENTITY_VERSION = 1


class RunIdentity(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    identity_version: int = IDENTITY_VERSION
    master_seed: int
    determinism_tier: str
    torch_threads: int
    device_kind: str
    torch_version: str
    engine: EngineBuild
    env_spec_digest: str
    obs_digest: str
    action_digest: str
    frame_stack: int
    arch_digest: str
    codec_version: int
    codec_table_digest: str
    algo_digest: str
    rollout_digest: str
    ladder_digest: str


def digest(value: Any) -> str:
    """sha256 (16 hex) of a value's canonical msgspec JSON (struct fields in declaration order,
    dict keys sorted), so a reformat of the same value is the same digest."""
    return hashlib.sha256(msgspec.json.encode(value, order="sorted")).hexdigest()[:16]


def _without(struct, *names: str) -> dict:
    data = msgspec.to_builtins(struct)
    for n in names:
        data.pop(n, None)
    return data


def config_digests(cfg: RunConfig) -> dict[str, str]:
    """The identity digests that depend on the config alone."""
    return {
        "env_spec_digest": digest(cfg.env),
        "arch_digest": digest(_without(cfg.net, "device", "autocast")),
        # PPO runs keep the digest they had before the DQN learner existed; a DQN run adds its own.
        "algo_digest": digest({"ppo": cfg.ppo, "advantage": cfg.advantage, "autocast": cfg.net.autocast,
                               **({"algorithm": cfg.learner.algorithm, "dqn": cfg.dqn} if cfg.learner.algorithm != "ppo" else {})}),
        "rollout_digest": digest({"battles": cfg.rollout.battles, "shards": cfg.rollout.shards,
                                  "local_rollouts": cfg.local.rollouts,
                                  "mask_only_scripted": cfg.rollout.mask_only_scripted}),
        "ladder_digest": digest(cfg.ladder),
    }


def config_identity(cfg: RunConfig) -> dict[str, Any]:
    """The identity fields the config alone decides (the rest come from the built environment
    and the learner's device): field -> value. ``compute_identity`` takes these as they are;
    ``royalefleet config --explain`` changes one config field at a time to say which of them it
    moves."""
    return {"master_seed": cfg.master_seed, "determinism_tier": cfg.determinism.tier,
            "torch_threads": cfg.determinism.torch_threads, "codec_version": cfg.services.wire_codec,
            **config_digests(cfg)}


def describe_device(device: str) -> str:
    """``cuda:<name>:sm_<cc>`` or ``cpu:<machine>``: run-exactness is promised within a device
    class, and a different GPU is a different set of kernels."""
    if device.startswith("cuda"):
        import torch

        idx = torch.device(device).index or 0
        major, minor = torch.cuda.get_device_capability(idx)
        return f"cuda:{torch.cuda.get_device_name(idx)}:sm_{major}{minor}"
    return f"cpu:{platform.machine()}"


def compute_identity(cfg: RunConfig, *, engine: EngineBuild, obs_digest: str, action_digest: str,
                     codec_table_digest: str, device_kind: str, torch_version: str) -> RunIdentity:
    """The identity of the run ``cfg`` describes against the environment that was built. The
    facts only a built environment and the learner's device know are passed in, so the function
    is pure and a test can vary one field at a time."""
    return RunIdentity(
        device_kind=device_kind,
        torch_version=torch_version,
        engine=engine,
        obs_digest=obs_digest,
        action_digest=action_digest,
        frame_stack=1,
        codec_table_digest=codec_table_digest,
        **config_identity(cfg),
    )


def run_id(identity: RunIdentity) -> str:
    """The first sixteen hex characters of the sha256 of the identity's canonical JSON."""
    return hashlib.sha256(msgspec.json.encode(identity, order="sorted")).hexdigest()[:16]


def identity_differences(a: RunIdentity, b: RunIdentity) -> dict[str, tuple[Any, Any]]:
    """Every field in which two identities differ: field -> (a's, b's)."""
    out = {}
    for f in msgspec.structs.fields(RunIdentity):
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if isinstance(va, msgspec.Struct):
            for g in msgspec.structs.fields(type(va)):
                x, y = getattr(va, g.name), getattr(vb, g.name)
                if x != y:
                    out[f"{f.name}.{g.name}"] = (x, y)
        elif va != vb:
            out[f.name] = (va, vb)
    return out


def action_digest_of(spec) -> str:
    """What the policy can do: the action space's size and layout and the decision clock."""
    return digest({"n_actions": spec.n_actions, "hand_slots": spec.hand_slots, "height": spec.height,
                   "width": spec.width, "decision_ms": spec.decision_ms, "parser": "TileActionParser"})
