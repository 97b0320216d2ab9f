"""The learner's side of a checkpoint: one component per folder, each owning its save and load.

==================  ==============================================  =========================
component           files                                           what
==================  ==============================================  =========================
actor, critic       ``<name>/model.safetensors``                    weights
optimizers          ``optimizers/{actor,critic}.{safetensors,json}`` Adam moments, steps, lrs
update_state        ``update_state/state.json``                     return scaler, LR backoff
rng                 ``rng/torch_cpu.safetensors``                   torch's CPU generator (every
                                                                    draw we make is name-
                                                                    addressed; this is for the
                                                                    few that are not)
counters            ``counters/counters.json``                      iteration, timesteps, ...
ladder_position     ``ladder_position/ordinals.json``               each battle's episode ordinal
codec               ``codec/table.json``                            the codec table
config              ``config/config.json``                          the resolved config
identity            ``identity/identity.json``                      the RunIdentity
==================  ==============================================  =========================

The checkpoint service adds ``manifest.json`` with the sha256 of every file and this module's
``meta`` (iteration, run id, identity, config, state digest) verbatim. No pickle anywhere:
safetensors for tensors, msgspec JSON for the rest.

``state_digest`` is a sha256 over every file that describes the learner's trainable state (the
weights, both optimizers, the update state), logged in every metric row as
``run/state_digest``: two runs whose digests agree hold the same learner, and a checkpoint whose
digest no row of its iteration carries holds weights the run's record does not describe.
"""

from __future__ import annotations

import hashlib

import msgspec

from services.learner.statefiles import (
    bytes_to_module, bytes_to_optimizer, module_to_bytes, optimizer_to_bytes, set_torch_rng_state,
    torch_rng_state,
)
from shared.config import RunConfig
from shared.identity import RunIdentity
from shared.messages import CodecTable

STATE_FILES = ("actor/", "critic/", "optimizers/", "update_state/")
COMPONENTS = ("actor", "critic", "optimizers", "update_state", "rng", "counters", "ladder_position",
              "codec", "config", "identity")


class Counters(msgspec.Struct, forbid_unknown_fields=True):
    iteration: int
    timesteps: int
    env_steps: int
    episodes: int


class CheckpointMeta(msgspec.Struct, forbid_unknown_fields=True):
    """What the checkpoint service embeds in the manifest verbatim."""

    iteration: int
    run_id: str
    state_digest: str
    counters: Counters
    identity: RunIdentity
    config: RunConfig


class Snapshot(msgspec.Struct):
    iteration: int
    files: dict[str, bytes]
    meta: bytes
    state_digest: str


class ResumeRefused(RuntimeError):
    pass


def state_digest(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        if name.startswith(STATE_FILES):
            h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()[:16]


def capture(learner) -> Snapshot:
    """Everything a resume needs, as file bytes, for the state the current row describes."""
    enc = msgspec.json.encode
    files = {
        "actor/model.safetensors": module_to_bytes(learner.model.actor),
        "critic/model.safetensors": module_to_bytes(learner.model.critic),
        "update_state/state.json": enc(learner.update_state()),
        "rng/torch_cpu.safetensors": torch_rng_state(),
        "counters/counters.json": enc(learner.counters()),
        "ladder_position/ordinals.json": enc({str(k): v for k, v in sorted(learner.fleet.ordinal.items())}),
        "codec/table.json": enc(learner.pf.table),
        "config/config.json": enc(learner.cfg),
        "identity/identity.json": enc(learner.identity),
    }
    for name, opt in (("actor", learner.opt_actor), ("critic", learner.opt_critic)):
        tensors, meta = optimizer_to_bytes(opt)
        files[f"optimizers/{name}.safetensors"] = tensors
        files[f"optimizers/{name}.json"] = meta
    digest = state_digest(files)
    meta = CheckpointMeta(iteration=learner.iteration, run_id=learner.run_id, state_digest=digest,
                          counters=learner.counters(), identity=learner.identity, config=learner.cfg)
    return Snapshot(learner.iteration, files, enc(meta), digest)


def restore(learner, files: dict[str, bytes], *, skip: tuple[str, ...] = ()) -> None:
    """Load every component. A missing file is a refusal naming it (strict load).

    ``skip`` names components NOT to load: a deliberately perturbed resume, used only by the
    verify-resume test to show that the comparison catches a resume that lost state."""
    dec = msgspec.json.decode
    missing = [n for n in _expected_files() if n not in files]
    if missing:
        raise ResumeRefused(f"checkpoint lacks {', '.join(missing)}; it cannot be resumed strictly")
    if "actor" not in skip:
        bytes_to_module(learner.model.actor, files["actor/model.safetensors"])
    if "critic" not in skip:
        bytes_to_module(learner.model.critic, files["critic/model.safetensors"])
    if "optimizers" not in skip:
        bytes_to_optimizer(learner.opt_actor, files["optimizers/actor.safetensors"], files["optimizers/actor.json"])
        bytes_to_optimizer(learner.opt_critic, files["optimizers/critic.safetensors"], files["optimizers/critic.json"])
    if "update_state" not in skip:
        learner.load_update_state(dec(files["update_state/state.json"]))
    if "rng" not in skip:
        set_torch_rng_state(files["rng/torch_cpu.safetensors"])
    c = dec(files["counters/counters.json"], type=Counters)
    learner.iteration, learner.timesteps, learner.env_steps, learner.episodes = (
        c.iteration, c.timesteps, c.env_steps, c.episodes)
    if "ladder_position" not in skip:
        learner.fleet.ordinal = {int(k): int(v) for k, v in dec(files["ladder_position/ordinals.json"]).items()}
    table = dec(files["codec/table.json"], type=CodecTable)
    if table != learner.pf.table:
        raise ResumeRefused("the checkpoint's codec table differs from this run's: the observation layout changed")


def _expected_files() -> list[str]:
    return ["actor/model.safetensors", "critic/model.safetensors", "optimizers/actor.safetensors",
            "optimizers/actor.json", "optimizers/critic.safetensors", "optimizers/critic.json",
            "update_state/state.json", "rng/torch_cpu.safetensors", "counters/counters.json",
            "ladder_position/ordinals.json", "codec/table.json", "config/config.json", "identity/identity.json"]


def described(meta: CheckpointMeta, metrics_path: str) -> tuple[bool, str]:
    """Whether a metric row of the checkpoint's iteration carries its state digest.

    (True, note) when it does, or when nothing can be compared (no file, no row of that
    iteration, iteration 0); (False, reason) when rows of that iteration exist and none carries
    the digest: the checkpoint holds weights the run's record does not describe."""
    import json
    import os

    if meta.iteration == 0 or not os.path.exists(metrics_path):
        return True, "no metric rows to compare the checkpoint with"
    digests = []
    with open(metrics_path, "rb") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line torn by a crash says nothing about the weights
            if row.get("run/iteration") == meta.iteration and "run/state_digest" in row:
                digests.append(row["run/state_digest"])
    if not digests:
        return True, f"no metric row of iteration {meta.iteration} to compare the checkpoint with"
    if meta.state_digest in digests:
        return True, ""
    return False, (f"checkpoint of iteration {meta.iteration} holds state {meta.state_digest}, but the metric "
                   f"rows of that iteration describe {', '.join(sorted(set(digests)))}")
