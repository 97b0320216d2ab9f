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

from services.learner import battle_states, frame_history
from services.learner.metric_log import described, state_digests_of  # noqa: F401 - described: the resume's check, importable here
from shared import transport
from shared.config import RunConfig
from shared.identity import RunIdentity
from shared.messages import CodecTable, SaveCheckpoint, Saved
from shared.nn.statefiles import (
    bytes_to_module, bytes_to_optimizer, module_to_bytes, optimizer_to_bytes, set_torch_rng_state,
    torch_rng_state,
)

if TYPE_CHECKING:
    from services.learner.service import Learner

STATE_FILES = ("actor/", "critic/", "optimizers/", "update_state/", "dqn/")
ROW_FILE = "metric_row/row.json"


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


class Component:
    """One folder of a checkpoint: its files, and the pair of functions that write and read
    them. Adding state to a checkpoint is adding a Component to COMPONENTS."""

    def __init__(self, name: str, files: tuple[str, ...], save, load, optional: bool = False):
        self.name, self.files, self.save, self.load = name, files, save, load
        self.optional = optional
        """A checkpoint written before the component existed lacks it and still resumes."""


def _json(value) -> bytes:
    return msgspec.json.encode(value)


def _save_optimizers(learner: Learner) -> dict[str, bytes]:
    out = {}
    for name, opt in (("actor", learner.parts.opt_actor), ("critic", learner.parts.opt_critic)):
        out[f"optimizers/{name}.safetensors"], out[f"optimizers/{name}.json"] = optimizer_to_bytes(opt)
    return out


def _load_optimizers(learner: Learner, f) -> None:
    bytes_to_optimizer(learner.parts.opt_actor, f["optimizers/actor.safetensors"], f["optimizers/actor.json"])
    bytes_to_optimizer(learner.parts.opt_critic, f["optimizers/critic.safetensors"], f["optimizers/critic.json"])


def _load_counters(learner: Learner, f) -> None:
    c = msgspec.json.decode(f["counters/counters.json"], type=Counters)
    learner.state.iteration, learner.state.timesteps, learner.state.env_steps, learner.state.episodes = (
        c.iteration, c.timesteps, c.env_steps, c.episodes)


def _ordinals(learner: Learner) -> dict:
    """Each battle's episode ordinal at the boundary the checkpoint describes: the one the
    learner kept there (``boundary_ordinals``) while an overlapped collection moves
    ``fleet.ordinal`` on, else ``fleet.ordinal``."""
    return learner.state.boundary_ordinals or learner.parts.fleet.ordinal


def _load_ordinals(learner: Learner, f) -> None:
    learner.parts.fleet.ordinal = {int(k): int(v) for k, v in msgspec.json.decode(f["ladder_position/ordinals.json"]).items()}


def _load_codec(learner: Learner, f) -> None:
    if msgspec.json.decode(f["codec/table.json"], type=CodecTable) != learner.parts.pf.table:
        raise ResumeRefused("the checkpoint's codec table differs from this run's: the observation layout changed")


def _dqn_files() -> tuple[str, ...]:
    from services.learner.dqn.learner import FILES

    return FILES


COMPONENTS = (
    Component("actor", ("actor/model.safetensors",),
              lambda L: {"actor/model.safetensors": module_to_bytes(L.parts.model.actor)},
              lambda L, f: bytes_to_module(L.parts.model.actor, f["actor/model.safetensors"])),
    Component("critic", ("critic/model.safetensors",),
              lambda L: {"critic/model.safetensors": module_to_bytes(L.parts.model.critic)},
              lambda L, f: bytes_to_module(L.parts.model.critic, f["critic/model.safetensors"])),
    Component("optimizers", ("optimizers/actor.safetensors", "optimizers/actor.json",
                             "optimizers/critic.safetensors", "optimizers/critic.json"),
              _save_optimizers, _load_optimizers),
    Component("update_state", ("update_state/state.json",),
              lambda L: {"update_state/state.json": _json(L.update_state())},
              lambda L, f: L.load_update_state(msgspec.json.decode(f["update_state/state.json"]))),
    Component("rng", ("rng/torch_cpu.safetensors",),
              lambda L: {"rng/torch_cpu.safetensors": torch_rng_state()},
              lambda L, f: set_torch_rng_state(f["rng/torch_cpu.safetensors"])),
    Component("counters", ("counters/counters.json",),
              lambda L: {"counters/counters.json": _json(L.counters())}, _load_counters),
    Component("ladder_position", ("ladder_position/ordinals.json",),
              lambda L: {"ladder_position/ordinals.json": _json({str(k): v for k, v in sorted(_ordinals(L).items())})},
              _load_ordinals),
    Component("battle_states", battle_states.FILES, lambda L: L.parts.battle_states.files(),
              lambda L, f: L.parts.battle_states.load(f), optional=True),
    Component("frame_history", frame_history.FILES, lambda L: L.parts.frame_history.files(),
              lambda L, f: L.parts.frame_history.load(f), optional=True),
    # The DQN learner's target network, optimizer, replay and open windows; absent from a PPO
    # run's checkpoint (services/learner/dqn/learner.py).
    Component("dqn", _dqn_files(), lambda L: L.parts.dqn.checkpoint_files() if L.parts.dqn else {},
              lambda L, f: L.parts.dqn.load_checkpoint_files(f) if L.parts.dqn else None, optional=True),
    Component("codec", ("codec/table.json",), lambda L: {"codec/table.json": _json(L.parts.pf.table)}, _load_codec),
    # Read by people and, through the manifest's meta, by the resume's identity check; a load
    # keeps the run's own config and identity, so these two load nothing.
    Component("config", ("config/config.json",), lambda L: {"config/config.json": _json(L.parts.cfg)}, lambda L, f: None),
    Component("identity", ("identity/identity.json",),
              lambda L: {"identity/identity.json": _json(L.parts.identity)}, lambda L, f: None),
)


def capture(learner: Learner) -> Snapshot:
    """Everything a resume needs, as file bytes, for the state the current row describes."""
    files: dict[str, bytes] = {}
    for component in COMPONENTS:
        written = component.save(learner)
        if component.optional and not written:
            continue  # a component this learner does not have (dqn under PPO)
        if set(written) != set(component.files):
            raise RuntimeError(f"component {component.name} wrote {sorted(written)}, declares {component.files}")
        files.update(written)
    digest = state_digest(files)
    meta = CheckpointMeta(iteration=learner.state.iteration, run_id=learner.parts.run_id, state_digest=digest,
                          counters=learner.counters(), identity=learner.parts.identity, config=learner.parts.cfg)
    return Snapshot(learner.state.iteration, files, _json(meta), digest)


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


def restore(learner: Learner, files: dict[str, bytes], *, skip: tuple[str, ...] = ()) -> None:
    """Load every component. A missing file is a refusal naming it (strict load).

    ``skip`` names components NOT to load: a deliberately perturbed resume, used only by the
    verify-resume test to show that the comparison catches a resume that lost state."""
    missing = [n for c in COMPONENTS if not c.optional for n in c.files if n not in files]
    if missing:
        raise ResumeRefused(f"checkpoint lacks {', '.join(missing)}; it cannot be resumed strictly")
    unknown = sorted(set(skip) - {c.name for c in COMPONENTS})
    if unknown:
        raise ResumeRefused(f"unknown component(s) {unknown}; components: {', '.join(c.name for c in COMPONENTS)}")
    if learner.parts.dqn is not None:
        lacking = [n for n in _dqn_files() if n not in files]
        if lacking:
            raise ResumeRefused(f"checkpoint lacks the DQN learner's {', '.join(lacking)}: it was not written by a "
                                "DQN run (learner.algorithm)")
    for component in COMPONENTS:
        if component.optional and not all(n in files for n in component.files):
            continue  # written before the component existed (battle_states: every episode afresh)
        if component.name not in skip:
            component.load(learner, files)


def save_checkpoint(learner: Learner, snapshot: Snapshot, attempts: int = 3) -> bool:
    """Send ``snapshot`` to the checkpoint service (``attempts`` tries, a pause between them);
    True once saved. A failure is said and counted (``state.failed_saves``), never raised."""
    names = list(snapshot.files)
    for attempt in range(1, attempts + 1):
        try:
            req = SaveCheckpoint(request_id=learner.parts.ckpt.next_id(), run_name=learner.parts.cfg.run_name,
                                 iteration=snapshot.iteration, names=names, meta=snapshot.meta,
                                 token=learner.parts.ckpt_token)
            reply, _ = learner.parts.ckpt.request(req, {n: np.frombuffer(snapshot.files[n], np.uint8) for n in names})
            if isinstance(reply, Saved):
                learner.state.saved_iteration = snapshot.iteration
                learner.state.failed_saves = 0
                learner.parts.say(f"learner: checkpoint of iteration {snapshot.iteration} written to {reply.path}")
                return True
            learner.parts.say(f"learner: checkpoint service refused the save ({getattr(reply, 'reason', reply)}); "
                     f"attempt {attempt}/{attempts}")
        except transport.ServiceTimeout as exc:
            learner.parts.say(f"learner: checkpoint save failed ({exc}); attempt {attempt}/{attempts}, state kept in memory")
        if attempt < attempts:
            time.sleep(min(2.0 * attempt, 5.0))
    learner.parts.metrics.checkpoint_failures.inc()
    learner.state.failed_saves += 1
    learner.parts.say(f"learner: checkpoint of iteration {snapshot.iteration} NOT written after {attempts} attempts "
             f"({learner.state.failed_saves} failed save(s) in a row; the learner halts at "
             f"checkpoint.max_failed_saves = {learner.parts.cfg.checkpoint.max_failed_saves}); the state stays in memory")
    return False
