"""The records of a checkpoint, apart from how the learner fills them (``checkpointing.py``):
the counters, the meta the checkpoint service embeds, the in-memory snapshot, the refusal, and
``Component``, one folder of a checkpoint with its save and load (an algorithm declares its
own: ``algorithm.Algorithm.components``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from shared.config import RunConfig
from shared.identity import RunIdentity


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


Save = Callable[[Any, Any], dict]
"""(parts: LearnerParts, state: IterationState) -> the component's files."""
Load = Callable[[Any, Any, dict], None]
"""(parts, state, files) -> None: the files loaded into the parts or the state."""


class Component:
    """One folder of a checkpoint: its files, and the pair of functions that write and read
    them (``save(parts, state) -> files``, ``load(parts, state, files)``). Adding state to a
    checkpoint is adding a Component to COMPONENTS, or, for one algorithm's state, to its
    ``components`` (``algorithm.Algorithm``)."""

    def __init__(self, name: str, files: tuple[str, ...], save: Save, load: Load, optional: bool = False,
                 state: bool = False, owner: str = ""):
        self.name, self.files, self.save, self.load = name, files, save, load
        self.optional = optional
        """A checkpoint written before the component existed lacks it and still resumes."""
        self.state = state
        """Its files describe the trainable state (counted in ``state_digest``)."""
        self.owner = owner
        """The ``learner.algorithm`` whose component it is ("": every run's)."""
