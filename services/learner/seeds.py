"""Seed snapshots at a learner's fresh start: read each of ``ladder.pool.seed_snapshots``, check
it, store it in the run's snapshot store and admit it to the pool as a seed (seed 004,
SeedSnapshot; royalelearn-facts 6.2, 6.3).

A seed snapshot is a frozen actor the user supplies: a folder with ``actor.safetensors`` (fp16
actor weights) and ``spec.json``, e.g. another run's ``runs/<run>/snapshots/<id>/``. The pool
holds it from the run's first iteration and never evicts it; its PFSP weight is multiplied by
its configured ``weight`` (services/ladder/resident.py ``seed_weights``).

At a fresh start (no checkpoint), before the first plan:

1. ``read_seeds``: every seed's files are read; the sha256 of actor.safetensors must be the
   configured one, the spec's digests the run's (``shared.nn.snapshot.check_spec``), and, given
   a ``build``, the weights must load into the run's actor. Every problem of every seed is
   collected, then refused at once (``SeedRefused``).
2. ``admit_seeds``: each is stored through the checkpoint service (``SaveSnapshot``:
   content-addressed, so storing it again is a no-op) and admitted with
   ``AdmitCandidate(seed=True, env_steps=0, iteration=0)``. ``admitted_seed`` and ``duplicate``
   (a restart before the first checkpoint) are both fine; anything else refuses the start.

A resumed learner does not send them again: the pool already holds them (pool.json), and
a re-send would be a ``duplicate`` anyway.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import msgspec
import numpy as np

from shared import transport
from shared.messages import AdmitCandidate, Admitted, SaveSnapshot, SnapshotSaved
from shared.nn.snapshot import SnapshotSpecError, SnapshotWeightsError, check_spec

ACTOR = "actor.safetensors"
SPEC = "spec.json"


class SeedRefused(Exception):
    """A seed snapshot the run cannot start with; the text names every seed's path, what is
    wrong (the digests expected and found, the spec field) and the fix."""


class SeedFiles(msgspec.Struct, frozen=True):
    """One checked seed: its snapshot id (``sha256[:16]``), the two files' bytes, its weight."""

    path: str
    snapshot_id: str
    actor: bytes
    spec: bytes
    weight: float


def read_seed(index: int, seed, expected: dict[str, str], build: Callable[[], object] | None = None) -> SeedFiles:
    """Read and check ``seed`` (a ``shared.config.SeedSnapshot``, entry ``index`` of
    ``ladder.pool.seed_snapshots``) against the run's digests ``expected`` (the fields of
    ``shared.nn.snapshot.SPEC_DIGESTS``).

    Raises SeedRefused naming the path and: a file that cannot be read; a sha256 mismatch
    (``expected <configured>, found <actual>``); a spec field that differs from the run's; with
    ``build``, weights that do not load into the run's actor."""
    where = f"seed snapshot {seed.path} (ladder.pool.seed_snapshots[{index}])"
    folder = Path(seed.path)
    try:
        actor = (folder / ACTOR).read_bytes()
        spec = (folder / SPEC).read_bytes()
    except OSError as exc:
        raise SeedRefused(f"{where}: cannot read it ({exc.strerror}: {exc.filename}); the folder must hold "
                          f"{ACTOR} and {SPEC} (a relative path is read from the folder the learner runs in)") from None
    found = hashlib.sha256(actor).hexdigest()
    if found != seed.sha256:
        raise SeedRefused(f"{where}: {ACTOR} has sha256 {found}, the config expects {seed.sha256}; these are "
                          "other weights: point path at the folder the digest was taken of, or (if you mean "
                          "these weights) set sha256 to the found digest, which is another run")
    sid = found[:16]
    try:
        check_spec(sid, spec, expected)
    except SnapshotSpecError as exc:
        fields = ", ".join(exc.fields) if exc.fields else "spec.json"
        raise SeedRefused(f"{where}: does not fit this run ({fields}): {exc}; a seed must be an actor of this "
                          "run's architecture, observation layout and codec table") from None
    if build is not None:
        from shared.nn.snapshot import load_frozen_actor

        try:
            load_frozen_actor(sid, actor, build)
        except SnapshotWeightsError as exc:
            raise SeedRefused(f"{where}: {exc}") from None
    return SeedFiles(path=seed.path, snapshot_id=sid, actor=actor, spec=spec, weight=float(seed.weight))


def read_seeds(seeds, expected: dict[str, str], build: Callable[[], object] | None = None) -> list[SeedFiles]:
    """``read_seed`` for every entry; raises one SeedRefused listing every seed's problem."""
    out, problems = [], []
    for i, seed in enumerate(seeds):
        try:
            out.append(read_seed(i, seed, expected, build))
        except SeedRefused as exc:
            problems.append(str(exc))
    if problems:
        raise SeedRefused("\n".join(problems))
    return out


def admit_seeds(seeds: list[SeedFiles], run_name: str, ckpt, ladder, say: Callable[[str], None] = print,
                token: str = "") -> list[str]:
    """Store each checked seed (``SaveSnapshot``) and admit it as a seed (``AdmitCandidate``,
    ``seed=True``). ``ckpt`` and ``ladder`` are ``shared.transport.Client``s (each request has
    their deadline); ``token`` is the run's checkpoint writer token (shared/writer_token.py). Returns the statuses in order (``admitted_seed`` or ``duplicate``).

    Raises SeedRefused naming the seed when a service does not answer in time, refuses, or the
    store names another id than the seed's."""
    statuses: list[str] = []
    for s in seeds:
        member = f"snap:{s.snapshot_id}"
        try:
            reply, _ = ckpt.request(SaveSnapshot(request_id=ckpt.next_id(), run_name=run_name, spec=s.spec, token=token),
                                    {"actor": np.frombuffer(s.actor, np.uint8)})
        except transport.ServiceTimeout as exc:
            raise SeedRefused(f"seed snapshot {s.path}: not stored: {exc}") from None
        if not isinstance(reply, SnapshotSaved):
            raise SeedRefused(f"seed snapshot {s.path}: the checkpoint service refused it: "
                              f"{getattr(reply, 'reason', reply)}")
        if reply.snapshot_id != s.snapshot_id:
            raise SeedRefused(f"seed snapshot {s.path}: stored as {reply.snapshot_id}, expected {s.snapshot_id}")
        try:
            reply, _ = ladder.request(AdmitCandidate(request_id=ladder.next_id(), run_name=run_name,
                                                     snapshot_id=s.snapshot_id, env_steps=0, iteration=0, seed=True))
        except transport.ServiceTimeout as exc:
            raise SeedRefused(f"seed snapshot {s.path}: {member} not admitted to the pool: {exc}") from None
        if not isinstance(reply, Admitted) or reply.status not in ("admitted_seed", "duplicate"):
            raise SeedRefused(f"seed snapshot {s.path}: the ladder did not admit {member} as a seed: "
                              f"{getattr(reply, 'reason', None) or getattr(reply, 'status', reply)}")
        say(f"learner: seed snapshot {member} from {s.path} (PFSP weight x{s.weight:g}): "
            + ("admitted to the pool" if reply.status == "admitted_seed" else "already in the pool"))
        statuses.append(reply.status)
    return statuses
