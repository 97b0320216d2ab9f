"""The snapshot store: frozen actors for the pool, apart from checkpoints and never pruned.

``<runs_dir>/<run>/snapshots/<id>/`` holds ``actor.safetensors`` (the actor's weights in fp16,
no critic, no optimizer) and ``spec.json`` (architecture, observation and codec digests, the env
step and iteration it was taken at, the run id): what a player needs to load it and what a
rating needs to know whose weights they are. ``id`` is the first 16 hex of the sha256 of
``actor.safetensors``: content-addressed, so the same weights are one snapshot, and a read
verifies the bytes against the name. A rating means nothing without the player it rated, so
nothing here is ever removed; eviction removes a member from the sampler, not from this store.
Written atomically (temporary folder, fsync each file, rename, fsync the parent).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import msgspec

from services.checkpoint.store import check_folder_name
from shared.durable import fsync_dir, write_file

ACTOR = "actor.safetensors"
SPEC = "spec.json"


class SnapshotCorrupt(Exception):
    pass


def snapshot_id(actor_bytes: bytes) -> str:
    return hashlib.sha256(actor_bytes).hexdigest()[:16]


class SnapshotStore:
    def __init__(self, root: Path | str):
        self.root = Path(root)

    def write(self, actor: bytes, spec: bytes) -> tuple[str, Path, bool]:
        """(id, folder, created). Writing weights already stored is a no-op (created False).
        Raises ValueError if ``spec`` is not a JSON object."""
        doc = msgspec.json.decode(spec)
        if not isinstance(doc, dict):
            raise ValueError("snapshot spec must be a JSON object")
        sid = snapshot_id(actor)
        final = self.root / sid
        if final.exists():
            self.read(sid)  # verify what is there; raises if it is not these bytes
            return sid, final, False
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f"{sid}.partial"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        write_file(tmp / ACTOR, actor)
        write_file(tmp / SPEC, spec)
        fsync_dir(tmp)
        os.replace(tmp, final)
        fsync_dir(self.root)
        return sid, final, True

    def read(self, sid: str) -> tuple[bytes, bytes]:
        """(actor bytes, spec bytes), verified against the id. Raises SnapshotCorrupt or
        FileNotFoundError naming the snapshot."""
        check_folder_name(sid, "snapshot id")
        folder = self.root / sid
        actor = (folder / ACTOR).read_bytes()
        spec = (folder / SPEC).read_bytes()
        if snapshot_id(actor) != sid:
            raise SnapshotCorrupt(f"snapshot {sid}: {ACTOR} hashes to {snapshot_id(actor)}, not its name")
        return actor, spec

    def ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.endswith(".partial"))
