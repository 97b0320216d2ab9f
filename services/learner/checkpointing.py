"""The learner's side of a checkpoint: one component per folder, each owning its save and load;
``capture`` and ``restore`` over them, ``save_checkpoint`` to the checkpoint service.

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
battle_states       ``battle_states/{states.msgpack,index.json}``   every battle's exact state
                                                                    at the boundary (services/
                                                                    learner/battle_states.py);
                                                                    optional: a checkpoint
                                                                    without it resumes with
                                                                    every episode afresh
frame_history       ``frame_history/carry.msgpack``                 each seat's last k - 1 rows
                                                                    at the boundary (obs.
                                                                    frame_stack; services/
                                                                    learner/frame_history.py);
                                                                    optional
codec               ``codec/table.json``                            the codec table
config              ``config/config.json``                          the resolved config
identity            ``identity/identity.json``                      the RunIdentity
metric row          ``metric_row/row.json``                         the metric row of the
                                                                    checkpoint's iteration
                                                                    (``ROW_FILE``), as appended
                                                                    to ``metrics.jsonl``
==================  ==============================================  =========================

The metric row is part of a checkpoint's promise (the row describes the state, the state is
kept): a resume that finds the row of its iteration missing from ``metrics.jsonl`` (a line torn
by a crash or a full disk) writes it back from here. It loads nothing into the learner, and
a checkpoint written before it existed lacks it and still resumes.

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
import time
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from services.learner import battle_states, extension_hooks, frame_history
from services.learner.checkpoint_types import CheckpointMeta, Component, Counters, ResumeRefused, Snapshot
from services.learner.metric_log import described, state_digests_of  # noqa: F401 - described: the resume's check, importable here
from shared import transport
from shared.messages import CodecTable, SaveCheckpoint, Saved
from shared.nn.statefiles import (
    bytes_to_module, bytes_to_optimizer, module_to_bytes, optimizer_to_bytes, set_torch_rng_state,
    torch_rng_state,
)

if TYPE_CHECKING:
    from services.learner.parts import IterationState, LearnerParts

STATE_FILES = ("actor/", "critic/", "optimizers/", "update_state/")
"""The generic components whose files describe the trainable state (``state_digest``); an
algorithm's own components add theirs (``Component.state``)."""
ROW_FILE = "metric_row/row.json"

__all__ = ["COMPONENTS", "CheckpointMeta", "Component", "Counters", "ROW_FILE", "ResumeRefused", "STATE_FILES",
           "Snapshot", "attach_row", "capture", "components_of", "described", "missing_row", "restore",
           "save_checkpoint", "state_digest"]


def state_digest(files: dict[str, bytes], prefixes: tuple[str, ...] = STATE_FILES) -> str:
    """sha256 (16 hex digits) over the files whose names start with one of ``prefixes`` (the
    state components' folders), in name order."""
    h = hashlib.sha256()
    for name in sorted(files):
        if name.startswith(prefixes):
            h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()[:16]


def _json(value) -> bytes:
    return msgspec.json.encode(value)


def update_state(parts: LearnerParts) -> dict:
    """State of the update that lives outside the optimizers (return scaler, LR backoff, and
    the extensions' own under ``extensions`` when the run has any)."""
    out = {"return_scaler": parts.return_scaler.state(), "lr_backoff": parts.lr_backoff.state()}
    if parts.extensions:
        out["extensions"] = extension_hooks.states(parts.extensions)
    return out


def load_update_state(parts: LearnerParts, state: dict) -> None:
    parts.return_scaler.load_state(state["return_scaler"])
    parts.lr_backoff.load_state(state["lr_backoff"])
    extension_hooks.load_states(parts.extensions, state.get("extensions", {}))


def counters(state: IterationState) -> Counters:
    return Counters(iteration=state.iteration, timesteps=state.timesteps, env_steps=state.env_steps,
                    episodes=state.episodes)


def _save_optimizers(parts: LearnerParts, state: IterationState) -> dict[str, bytes]:
    out = {}
    for name, opt in (("actor", parts.opt_actor), ("critic", parts.opt_critic)):
        out[f"optimizers/{name}.safetensors"], out[f"optimizers/{name}.json"] = optimizer_to_bytes(opt)
    return out


def _load_optimizers(parts: LearnerParts, state: IterationState, f) -> None:
    bytes_to_optimizer(parts.opt_actor, f["optimizers/actor.safetensors"], f["optimizers/actor.json"])
    bytes_to_optimizer(parts.opt_critic, f["optimizers/critic.safetensors"], f["optimizers/critic.json"])


def _load_counters(parts: LearnerParts, state: IterationState, f) -> None:
    c = msgspec.json.decode(f["counters/counters.json"], type=Counters)
    state.iteration, state.timesteps, state.env_steps, state.episodes = c.iteration, c.timesteps, c.env_steps, c.episodes


def _ordinals(parts: LearnerParts, state: IterationState) -> dict:
    """Each battle's episode ordinal at the boundary the checkpoint describes: the one the
    learner kept there (``boundary_ordinals``) while an overlapped collection moves
    ``fleet.ordinal`` on, else ``fleet.ordinal``."""
    return state.boundary_ordinals or parts.fleet.ordinal


def _load_ordinals(parts: LearnerParts, state: IterationState, f) -> None:
    parts.fleet.ordinal = {int(k): int(v) for k, v in msgspec.json.decode(f["ladder_position/ordinals.json"]).items()}


def _load_codec(parts: LearnerParts, state: IterationState, f) -> None:
    if msgspec.json.decode(f["codec/table.json"], type=CodecTable) != parts.pf.table:
        raise ResumeRefused("the checkpoint's codec table differs from this run's: the observation layout changed")


COMPONENTS = (
    Component("actor", ("actor/model.safetensors",),
              lambda p, s: {"actor/model.safetensors": module_to_bytes(p.model.actor)},
              lambda p, s, f: bytes_to_module(p.model.actor, f["actor/model.safetensors"]), state=True),
    Component("critic", ("critic/model.safetensors",),
              lambda p, s: {"critic/model.safetensors": module_to_bytes(p.model.critic)},
              lambda p, s, f: bytes_to_module(p.model.critic, f["critic/model.safetensors"]), state=True),
    Component("optimizers", ("optimizers/actor.safetensors", "optimizers/actor.json",
                             "optimizers/critic.safetensors", "optimizers/critic.json"),
              _save_optimizers, _load_optimizers, state=True),
    Component("update_state", ("update_state/state.json",),
              lambda p, s: {"update_state/state.json": _json(update_state(p))},
              lambda p, s, f: load_update_state(p, msgspec.json.decode(f["update_state/state.json"])), state=True),
    Component("rng", ("rng/torch_cpu.safetensors",),
              lambda p, s: {"rng/torch_cpu.safetensors": torch_rng_state()},
              lambda p, s, f: set_torch_rng_state(f["rng/torch_cpu.safetensors"])),
    Component("counters", ("counters/counters.json",),
              lambda p, s: {"counters/counters.json": _json(counters(s))}, _load_counters),
    Component("ladder_position", ("ladder_position/ordinals.json",),
              lambda p, s: {"ladder_position/ordinals.json": _json({str(k): v for k, v in sorted(_ordinals(p, s).items())})},
              _load_ordinals),
    Component("battle_states", battle_states.FILES, lambda p, s: p.battle_states.files(),
              lambda p, s, f: p.battle_states.load(f), optional=True),
    Component("frame_history", frame_history.FILES, lambda p, s: p.frame_history.files(),
              lambda p, s, f: p.frame_history.load(f), optional=True),
    # (here: the algorithm's own components, ``components_of``)
    Component("codec", ("codec/table.json",), lambda p, s: {"codec/table.json": _json(p.pf.table)}, _load_codec),
    # Read by people and, through the manifest's meta, by the resume's identity check; a load
    # keeps the run's own config and identity, so these two load nothing.
    Component("config", ("config/config.json",), lambda p, s: {"config/config.json": _json(p.cfg)}, lambda p, s, f: None),
    Component("identity", ("identity/identity.json",),
              lambda p, s: {"identity/identity.json": _json(p.identity)}, lambda p, s, f: None),
)
ALGORITHM_AT = 9
"""Where in ``COMPONENTS`` an algorithm's own components go (after the frame history): the
order of a checkpoint's files, and so of its manifest, is the same for every run of an
algorithm."""


def components_of(parts: LearnerParts) -> tuple[Component, ...]:
    """The run's checkpoint components: the generic ones with its algorithm's inserted."""
    return COMPONENTS[:ALGORITHM_AT] + tuple(parts.algorithm.components) + COMPONENTS[ALGORITHM_AT:]


def capture(parts: LearnerParts, state: IterationState) -> Snapshot:
    """Everything a resume needs, as file bytes, for the state the current row describes."""
    files: dict[str, bytes] = {}
    components = components_of(parts)
    for component in components:
        written = component.save(parts, state)
        if component.optional and not written:
            continue  # a component this run does not have (no frame history at frame_stack 1)
        if set(written) != set(component.files):
            raise RuntimeError(f"component {component.name} wrote {sorted(written)}, declares {component.files}")
        files.update(written)
    digest = state_digest(files, tuple(c.name + "/" for c in components if c.state))
    meta = CheckpointMeta(iteration=state.iteration, run_id=parts.run_id, state_digest=digest,
                          counters=counters(state), identity=parts.identity, config=parts.cfg)
    return Snapshot(state.iteration, files, _json(meta), digest)


def attach_row(snapshot: Snapshot, line: bytes) -> None:
    """Keep the encoded metric row ``line`` (one JSON object and its newline) of the snapshot's
    iteration with the snapshot (``ROW_FILE``); raises ValueError when the row is of another
    iteration or describes another state."""
    import json

    row = json.loads(line)
    if row.get("run/iteration") != snapshot.iteration or row.get("run/state_digest") != snapshot.state_digest:
        raise ValueError(f"row of iteration {row.get('run/iteration')} (state {row.get('run/state_digest')}) "
                         f"attached to the snapshot of iteration {snapshot.iteration} ({snapshot.state_digest})")
    snapshot.files[ROW_FILE] = line


def missing_row(meta: CheckpointMeta, files: dict[str, bytes], metrics_path: str) -> bytes | None:
    """The checkpoint's own metric row (``ROW_FILE``) when ``metrics_path`` holds no whole row of
    the checkpoint's iteration (it was torn, or lost with the disk) and the checkpoint carries
    one that describes its state; None otherwise (the row is there, or the checkpoint predates
    ``ROW_FILE``). Call it after ``metric_log.purge_after``, which moves a torn line out."""
    import json

    line = files.get(ROW_FILE)
    if line is None or meta.iteration == 0 or state_digests_of(metrics_path, meta.iteration):
        return None
    try:
        row = json.loads(line)
    except ValueError:
        return None
    if row.get("run/iteration") != meta.iteration or row.get("run/state_digest") != meta.state_digest:
        return None
    return line if line.endswith(b"\n") else line + b"\n"


def restore(parts: LearnerParts, state: IterationState, files: dict[str, bytes], *, skip: tuple[str, ...] = ()) -> None:
    """Load every component. A missing file is a refusal naming it (strict load); one of the
    algorithm's components says which algorithm's state it is.

    ``skip`` names components NOT to load: a deliberately perturbed resume, used only by the
    verify-resume test to show that the comparison catches a resume that lost state."""
    components = components_of(parts)
    for c in components:
        lacking = [n for n in c.files if n not in files]
        if c.owner and lacking:
            raise ResumeRefused(f"checkpoint lacks the {c.owner} learner's {', '.join(lacking)}: it was not written by "
                                f"a {c.owner} run (learner.algorithm)")
    missing = [n for c in components if not c.optional for n in c.files if n not in files]
    if missing:
        raise ResumeRefused(f"checkpoint lacks {', '.join(missing)}; it cannot be resumed strictly")
    unknown = sorted(set(skip) - {c.name for c in components})
    if unknown:
        raise ResumeRefused(f"unknown component(s) {unknown}; components: {', '.join(c.name for c in components)}")
    for component in components:
        if component.optional and not all(n in files for n in component.files):
            continue  # written before the component existed (battle_states: every episode afresh)
        if component.name not in skip:
            component.load(parts, state, files)


def save_checkpoint(parts: LearnerParts, state: IterationState, snapshot: Snapshot, attempts: int = 3) -> bool:
    """Send ``snapshot`` to the checkpoint service (``attempts`` tries, a pause between them);
    True once saved. A failure is said and counted (``state.failed_saves``), never raised."""
    names = list(snapshot.files)
    for attempt in range(1, attempts + 1):
        try:
            req = SaveCheckpoint(request_id=parts.ckpt.next_id(), run_name=parts.cfg.run_name,
                                 iteration=snapshot.iteration, names=names, meta=snapshot.meta,
                                 token=parts.ckpt_token)
            reply, _ = parts.ckpt.request(req, {n: np.frombuffer(snapshot.files[n], np.uint8) for n in names})
            if isinstance(reply, Saved):
                state.saved_iteration = snapshot.iteration
                state.failed_saves = 0
                parts.say(f"learner: checkpoint of iteration {snapshot.iteration} written to {reply.path}")
                return True
            parts.say(f"learner: checkpoint service refused the save ({getattr(reply, 'reason', reply)}); "
                     f"attempt {attempt}/{attempts}")
        except transport.ServiceTimeout as exc:
            parts.say(f"learner: checkpoint save failed ({exc}); attempt {attempt}/{attempts}, state kept in memory")
        if attempt < attempts:
            time.sleep(min(2.0 * attempt, 5.0))
    parts.metrics.checkpoint_failures.inc()
    state.failed_saves += 1
    parts.say(f"learner: checkpoint of iteration {snapshot.iteration} NOT written after {attempts} attempts "
             f"({state.failed_saves} failed save(s) in a row; the learner halts at "
             f"checkpoint.max_failed_saves = {parts.cfg.checkpoint.max_failed_saves}); the state stays in memory")
    return False
