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
                       weights, deck; ``env.ability_buttons`` only while on)
obs_digest,            what the policy sees and can do (read off the built env; the
action_digest          action digest holds the ability buttons' count, ``n_buttons``)
frame_stack            the trunk's input width (``obs.frame_stack``)
arch_digest            the network (NetConfig without the device and the autocast setting,
                       with obs.frame_stack when it is not 1)
codec_version,         how a row is stored (the table) and sent (``services.wire_codec``: 1
codec_table_digest     packed rows, 2 zstd frames; shared/codec.py). Codec 2 is lossless, so
                       it cannot change a number; it is in the identity all the same so that
                       a resume keeps the codec its run was started with (issue 14), and a
                       run with codec 1 keeps the identity it had before codec 2 existed
algo_digest            PPO, GAE, schedules, reward scaling, LR backoff, CUDA autocast; with
                       ``learner.algorithm = "dqn"`` the algorithm and the ``dqn`` section
rollout_digest         battles and shards per rollout, local rollouts, mask-only scripted seats
ladder_digest          who the learner plays: mix, scripted opponents, pool, gate, rater
user_code              the user's own packages the env's components come from, by content:
                       {top-level package: sha256 of its .py files} (shared/components.py);
                       an edit to ``mybot/rewards.py`` is another run. None: no user code
extensions             each extension section the run uses: its digest by value and the
                       distribution and version providing it (shared/extensions.py). None:
                       none used
=====================  =================================================================

``env.extra_component_modules`` (the allow-list) and ``timestep_limit`` are not in it: listing a
module, or stopping sooner, cannot change a number the run writes. user_code and extensions are
left out of the canonical encoding when None (``run_id``), so a run without them keeps the
run id it had before either field existed.

Not in it (recorded, diffed and printed on resume, never refused): run_name, runs_dir,
services (addresses, ports, timeouts; its wire_codec is codec_version), checkpoint cadence and keep, alarm thresholds, round
timeout and heartbeat timings, restart policy. An alarm can stop a run; it cannot alter a number.
"""

from __future__ import annotations

import hashlib
import platform
from typing import Any

import msgspec

from shared.algorithms import identity_part
from shared.components import user_code as user_code_of
from shared.config import RunConfig
from shared.config_schema import CARD_ID_EMBED
from shared.extensions import ExtensionRecord, extension_records
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
    user_code: dict[str, str] | None = None
    extensions: list[ExtensionRecord] | None = None


# New EnvConfig fields left out of env_spec_digest while unset, so every env that does not use
# them keeps the digest (and so the run id) it had before they existed.
_ENV_OPTIONAL = ("reward_fn", "obs_builder", "action_parser", "seat_decks", "state_mutator", "done_condition")


def env_spec_digest_of(env) -> str:
    """The env config by value, without the allow-list (``extra_component_modules``: listing
    cannot move a number), without the component fields that are unset, and without
    ``ability_buttons`` while it is off."""
    data = msgspec.to_builtins(env)
    data.pop("extra_component_modules", None)
    if not data.get("ability_buttons"):
        # recorded while on (the action digest has n_buttons too); left out while off, so a run
        # without buttons keeps the identity it had before the field existed
        data.pop("ability_buttons", None)
    for name in _ENV_OPTIONAL:
        if data.get(name) is None:
            data.pop(name, None)
    return digest(data)


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
        "env_spec_digest": env_spec_digest_of(cfg.env),
        # frame_stack widens the trunk's input; recorded only when stacking, so a run without
        # it keeps the arch digest it had before the field existed
        # (and slot_index only when on: a network without it keeps its digest)
        # (card_id_embed only when not its default: it changes nothing without card identity)
        "arch_digest": digest(_without(cfg.net, "device", "autocast", *(() if cfg.net.slot_index else ("slot_index",)),
                                       *(("card_id_embed",) if cfg.net.card_id_embed == CARD_ID_EMBED else ()))
                              | ({"frame_stack": cfg.obs.frame_stack} if cfg.obs.frame_stack != 1 else {})),
        # PPO runs keep the digest they had before the DQN learner existed; another algorithm adds
        # its declaration's part (shared/algorithms.py: its name and sections)
        "algo_digest": digest({"ppo": cfg.ppo, "advantage": cfg.advantage, "autocast": cfg.net.autocast,
                               **identity_part(cfg)}),
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
            "frame_stack": cfg.obs.frame_stack, **config_digests(cfg)}


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
        codec_table_digest=codec_table_digest,
        user_code=user_code_of(cfg.env) or None,
        extensions=extension_records(cfg.extensions),
        **config_identity(cfg),
    )


def run_id(identity: RunIdentity) -> str:
    """The first sixteen hex characters of the sha256 of the identity's canonical JSON."""
    data = msgspec.to_builtins(identity)
    for name in ("user_code", "extensions"):
        if data.get(name) is None:
            data.pop(name, None)
    return hashlib.sha256(msgspec.json.encode(data, order="sorted")).hexdigest()[:16]


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


def action_digest_of(spec, parser: str = "TileActionParser") -> str:
    """What the policy can do: the action space's size and layout, the decision clock, the
    parser (``TileActionParser``, RoyaleGym's default, or the ``env.action_parser`` path), and
    the ability buttons after the grid (``n_buttons``, recorded only when not 0 so a run without
    buttons keeps the digest it had before they existed)."""
    value = {"n_actions": spec.n_actions, "hand_slots": spec.hand_slots, "height": spec.height,
             "width": spec.width, "decision_ms": spec.decision_ms, "parser": parser}
    if getattr(spec, "n_buttons", 0):
        value["n_buttons"] = spec.n_buttons
    return digest(value)
