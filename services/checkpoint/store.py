"""One run's checkpoint folder: atomic writes, verified reads, an index, pruning.

Layout of ``<runs_dir>/<run_name>/checkpoints/`` (the ``root``)::

    index.json                  CheckpointIndex: every checkpoint, newest (most recently written) last
    00000012/                   one checkpoint, named by its iteration (``{iteration:08d}``)
        manifest.json           Manifest: iteration, meta, sha256 and size of every other file
        actor/model.safetensors the files, as sent by the learner (names may hold folders)
        ...
    00000013.partial/           a write in progress, or the leftover of a crash: never read

How a write survives a crash at any instant (the pattern of Prometheus TSDB ``writeMetaFile``,
etcd's WAL creation and google/renameio): everything goes into ``<name>.partial/`` and is
fsynced there; ``os.replace`` publishes the folder under its final name in one step; the root
is fsynced so the rename itself is durable; only then is ``index.json`` replaced (temp file,
fsync, ``os.replace``, fsync). ``latest`` reads only the index, never folder names, so a
crash before the index update leaves the previous checkpoint as the latest one, and a stray
file or folder in the root can never be mistaken for a checkpoint.

No pickle anywhere: the manifest and the index are msgspec JSON; the files are opaque bytes.

One process writes a given root at a time (the checkpoint service is single-threaded):
``prune`` removes every ``*.partial`` folder it finds, including one another writer would
still be filling.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct

from shared.durable import fsync_dir, replace_file, write_file

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
INDEX = "index.json"
MAX_NAME_CHARS = 200
PARTIAL_SUFFIX = ".partial"
ASIDE_SUFFIX = ".old"
"""A checkpoint being replaced by a rewrite of its iteration is renamed to ``<name>.old``
for the instant between the two renames; a crash there leaves one for ``prune`` to remove."""


# ----------------------------------------------------------------------------- on-disk structs


class FileEntry(Struct, forbid_unknown_fields=True):
    sha256: str
    """Lower-case hex digest of the file's bytes."""
    bytes: int
    """The file's size in bytes."""


class Manifest(Struct, forbid_unknown_fields=True, kw_only=True):
    """``manifest.json`` of one checkpoint. It is not listed in its own ``files``."""

    format_version: int
    iteration: int
    created_unix_ns: int
    meta: msgspec.Raw
    """The learner's JSON document (``SaveCheckpoint.meta``), embedded byte for byte: it is
    never decoded and re-encoded, so the learner reads back exactly what it wrote."""
    files: dict[str, FileEntry]
    """Relative name -> digest and size, in the order the files were given."""


class IndexEntry(Struct, forbid_unknown_fields=True):
    iteration: int
    name: str
    """The checkpoint's folder name under the root."""
    created_unix_ns: int


class CheckpointIndex(Struct, forbid_unknown_fields=True):
    """``index.json``: the only list of checkpoints anything reads. Newest (most recently
    written) last: a run resumed from an older iteration appends from there on, so a stale
    checkpoint of an abandoned future never outranks what the resumed run wrote."""

    entries: list[IndexEntry] = []


class EntryStatus(Struct, kw_only=True):
    """One index entry and whether it verifies (``list_entries``)."""

    iteration: int
    name: str
    created_unix_ns: int
    ok: bool
    problem: str | None = None
    """Why it does not verify; None when ``ok``."""
    bytes: int = 0
    """Sum of the file sizes the manifest lists (0 if the manifest is unreadable)."""


class _VersionOnly(Struct):
    format_version: int = -1


NEXT_OLDER = "; trying the next older checkpoint"
"""The tail of ``latest``'s line about a checkpoint it skipped."""


class CheckpointCorrupt(Exception):
    """A checkpoint (or the index) that does not verify.

    ``checkpoint`` is the folder name (``index.json`` for the index), ``file`` the first file
    that failed (``manifest.json`` when the manifest itself is missing or unreadable) and
    ``problem`` what was wrong with it.
    """

    def __init__(self, root: Path, checkpoint: str, file: str, problem: str):
        self.checkpoint, self.file, self.problem = checkpoint, file, problem
        where = root / checkpoint
        super().__init__(
            f"checkpoint {where}: {file}: {problem}"
            if checkpoint != INDEX
            else f"{where}: {problem}"
        )


_manifest_encoder = msgspec.json.Encoder()
_manifest_decoder = msgspec.json.Decoder(Manifest)
_version_decoder = msgspec.json.Decoder(_VersionOnly)
_index_decoder = msgspec.json.Decoder(CheckpointIndex)


# ----------------------------------------------------------------------------- name rules


def check_file_name(name: object) -> str:
    """Return ``name`` if it is a safe relative file name inside a checkpoint, else raise
    ValueError saying what is wrong. Names come from the network, so anything that could
    leave the checkpoint folder, collide with the manifest or depend on the platform is
    refused: absolute paths, ``.``/``..``/empty components, backslashes, NUL, more than
    MAX_NAME_CHARS characters, and ``manifest.json`` itself."""
    if not isinstance(name, str):
        raise ValueError(f"checkpoint file name {name!r} is a {type(name).__name__}; send a str")
    if not name:
        raise ValueError("checkpoint file name is empty; give every file a relative name such as 'actor/model.safetensors'")
    if len(name) > MAX_NAME_CHARS:
        raise ValueError(
            f"checkpoint file name {name[:40]!r}... is {len(name)} characters; the limit is {MAX_NAME_CHARS}"
        )
    if "\\" in name:
        raise ValueError(f"checkpoint file name {name!r} contains a backslash; separate folders with '/'")
    if "\0" in name:
        raise ValueError(f"checkpoint file name {name!r} contains a NUL character")
    if name.startswith("/"):
        raise ValueError(f"checkpoint file name {name!r} is absolute; give a path relative to the checkpoint folder")
    for part in name.split("/"):
        if part == "":
            raise ValueError(f"checkpoint file name {name!r} has an empty component ('//' or a trailing '/')")
        if part in (".", ".."):
            raise ValueError(f"checkpoint file name {name!r} has a {part!r} component; names must stay inside the checkpoint")
    if name == MANIFEST:
        raise ValueError(f"checkpoint file name {name!r} is reserved for the checkpoint's own manifest; rename the file")
    return name


def check_file_names(names: Iterable[object]) -> list[str]:
    """Every name checked by ``check_file_name``, plus the rules between names: no duplicate
    (also none differing only in case, which collide on case-insensitive filesystems) and no
    name that is both a file and a folder (``a`` and ``a/b``). Raises ValueError."""
    out: list[str] = []
    seen: dict[str, str] = {}
    for raw in names:
        name = check_file_name(raw)
        key = name.casefold()
        if key in seen:
            other = seen[key]
            what = "is given twice" if other == name else f"differs only in case from {other!r}"
            raise ValueError(f"checkpoint file name {name!r} {what}; every file needs its own name")
        seen[key] = name
        out.append(name)
    folders = {}
    for name in out:
        parts = name.casefold().split("/")
        for i in range(1, len(parts)):
            folders.setdefault("/".join(parts[:i]), name)
    for name in out:
        if name.casefold() in folders:
            raise ValueError(
                f"checkpoint file name {name!r} is also a folder of {folders[name.casefold()]!r}; rename one of them"
            )
    return out


def check_folder_name(name: object, what: str = "checkpoint name") -> str:
    """A single path component: non-empty, no '/', '\\' or NUL, not '.' or '..'. Raises ValueError."""
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..")
        or any(c in name for c in "/\\\0")
        or len(name) > MAX_NAME_CHARS
    ):
        raise ValueError(f"{what} {name!r} is not a plain folder name (no slashes, not '.' or '..')")
    return name


def checkpoint_name(iteration: int) -> str:
    """The folder name of an iteration's checkpoint: ``00000012``."""
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        raise ValueError(f"checkpoint iteration {iteration!r} must be an int >= 0")
    return f"{iteration:08d}"


# ----------------------------------------------------------------------------- helpers (durable writes: shared/durable.py)


def _byte_view(data: Any) -> memoryview:
    """A flat byte view of any buffer (bytes, bytearray, memoryview, a C-contiguous uint8
    numpy array as the service receives it) without copying."""
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- the store


class CheckpointStore:
    """The checkpoints of one run, in ``root`` (``<runs_dir>/<run_name>/checkpoints``).

    ``say`` receives one line of text per problem found along the way (a checkpoint that
    does not verify, a folder prune could not remove); it defaults to stderr.
    ``housekeeping_failures`` counts removals that failed (they are retried by the next prune).
    """

    def __init__(self, root: Path | str, *, say: Callable[[str], None] | None = None):
        self.root = Path(root)
        self.say = say or _stderr
        self.housekeeping_failures = 0

    # ------------------------------------------------------------------ index

    def index(self) -> CheckpointIndex:
        """The index; empty if there is none yet. Raises CheckpointCorrupt if it cannot be
        parsed (it is replaced atomically, so only a disk fault or a hand edit does that):
        restore it, or remove it to start the index afresh (folders are left as they are)."""
        try:
            data = (self.root / INDEX).read_bytes()
        except FileNotFoundError:
            return CheckpointIndex()
        try:
            idx = _index_decoder.decode(data)
            for entry in idx.entries:
                check_folder_name(entry.name, "index entry name")
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
            raise CheckpointCorrupt(
                self.root, INDEX, INDEX,
                f"unreadable ({exc}); restore it from a backup or delete it to start a new index "
                f"(checkpoint folders are not touched)",
            ) from None
        return idx

    def _write_index(self, idx: CheckpointIndex) -> None:
        replace_file(self.root / INDEX, msgspec.json.format(msgspec.json.encode(idx), indent=2) + b"\n")

    # ------------------------------------------------------------------ write

    def write(self, iteration: int, files: Mapping[str, Any], meta: bytes) -> Path:
        """Write one checkpoint atomically and add it to the index; return its folder.

        ``files``: relative name -> contents (bytes or any flat byte buffer, e.g. a 1-D uint8
        numpy array), written in the mapping's order. ``meta``: a JSON document, embedded in
        the manifest verbatim (surrounding whitespace stripped). An existing checkpoint of the
        same iteration (a resumed run rewriting it) is replaced.

        Raises ValueError for a refused name (see ``check_file_names``), a negative iteration
        or meta that is not JSON, and CheckpointCorrupt for an unreadable index, before
        anything is written; OSError if the disk refuses, in
        which case the previous checkpoints and the index are untouched and the ``.partial``
        folder is removed (or left for ``prune``).
        """
        name = checkpoint_name(iteration)
        names = check_file_names(files)
        meta = bytes(meta).strip()
        try:
            msgspec.json.decode(meta)
        except msgspec.DecodeError as exc:
            raise ValueError(f"checkpoint meta is not a JSON document ({exc}); send msgspec.json.encode(...) bytes") from None
        index = self.index()  # fail before writing if the index is unreadable

        fresh_root = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        if fresh_root:
            fsync_dir(self.root.parent)
        partial = self.root / (name + PARTIAL_SUFFIX)
        final = self.root / name
        if partial.exists():
            shutil.rmtree(partial)  # a crashed earlier attempt at this iteration
        partial.mkdir()
        aside: Path | None = None
        try:
            entries: dict[str, FileEntry] = {}
            folders = {partial}
            for rel in names:
                data = _byte_view(files[rel])
                path = partial / rel
                if path.parent not in folders:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    folders.update(path.parents)
                write_file(path, data)
                entries[rel] = FileEntry(hashlib.sha256(data).hexdigest(), data.nbytes)
            manifest = Manifest(
                format_version=FORMAT_VERSION,
                iteration=iteration,
                created_unix_ns=time.time_ns(),
                meta=msgspec.Raw(meta),
                files=entries,
            )
            write_file(partial / MANIFEST, _manifest_encoder.encode(manifest))
            # New names in every folder of the checkpoint, deepest first.
            for folder in sorted((f for f in folders if partial in f.parents or f == partial),
                                 key=lambda p: len(p.parts), reverse=True):
                fsync_dir(folder)
            if final.exists():
                # os.replace cannot put a folder over a non-empty one: move the old aside first.
                aside = self.root / (name + ASIDE_SUFFIX)
                if aside.exists():
                    shutil.rmtree(aside)
                os.replace(final, aside)
            os.replace(partial, final)
            fsync_dir(self.root)
        except BaseException:
            if aside is not None and aside.exists() and not final.exists():
                os.replace(aside, final)  # the new one never arrived: put the old one back
                aside = None
            self._remove(partial)
            raise
        if aside is not None:
            self._remove(aside)

        entries_out = [e for e in index.entries if e.name != name]
        entries_out.append(IndexEntry(iteration, name, manifest.created_unix_ns))
        self._write_index(CheckpointIndex(entries_out))
        return final

    # ------------------------------------------------------------------ read

    def _folder(self, name_or_iteration: str | int) -> tuple[str, Path]:
        if isinstance(name_or_iteration, int) and not isinstance(name_or_iteration, bool):
            name = checkpoint_name(name_or_iteration)
        else:
            name = check_folder_name(name_or_iteration)
        return name, self.root / name

    def read_manifest(self, name_or_iteration: str | int) -> Manifest:
        """The manifest of one checkpoint, without reading the files. Raises CheckpointCorrupt
        (file ``manifest.json``) if it is missing, unparseable, of a newer format, or lists a
        file name that ``check_file_name`` refuses."""
        name, folder = self._folder(name_or_iteration)

        def corrupt(problem: str) -> CheckpointCorrupt:
            return CheckpointCorrupt(self.root, name, MANIFEST, problem)

        try:
            data = (folder / MANIFEST).read_bytes()
        except FileNotFoundError:
            raise corrupt("missing" if folder.is_dir() else "missing (no such checkpoint folder)") from None
        except OSError as exc:
            raise corrupt(f"cannot be read ({exc.strerror})") from None
        try:
            version = _version_decoder.decode(data).format_version
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise corrupt(f"unparseable ({exc})") from None
        if version > FORMAT_VERSION:
            raise corrupt(
                f"format_version {version} is newer than this build reads ({FORMAT_VERSION}); "
                f"read it with the royalefleet version that wrote it"
            )
        try:
            manifest = _manifest_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise corrupt(f"unparseable ({exc})") from None
        try:
            check_file_names(manifest.files)
        except ValueError as exc:
            raise corrupt(f"lists a refused file name: {exc}") from None
        return manifest

    def read(self, name_or_iteration: str | int) -> tuple[Manifest, dict[str, bytes]]:
        """One checkpoint, verified: (manifest, {relative name: bytes}) in manifest order.

        ``name_or_iteration``: a folder name (``"00000012"``) or an iteration (12).
        Raises CheckpointCorrupt naming the FIRST file, in manifest order, that is missing or
        whose size or sha256 differs from the manifest (``manifest.json`` if the manifest
        itself is missing or unparseable). Files in the folder that the manifest does not
        list are ignored."""
        name, folder = self._folder(name_or_iteration)
        manifest = self.read_manifest(name)
        out: dict[str, bytes] = {}
        for rel, entry in manifest.files.items():
            try:
                data = (folder / rel).read_bytes()
            except FileNotFoundError:
                raise CheckpointCorrupt(self.root, name, rel, "missing") from None
            except OSError as exc:
                raise CheckpointCorrupt(self.root, name, rel, f"cannot be read ({exc.strerror})") from None
            if len(data) != entry.bytes:
                raise CheckpointCorrupt(
                    self.root, name, rel, f"{len(data)} bytes, the manifest says {entry.bytes} (truncated or overwritten)"
                )
            digest = hashlib.sha256(data).hexdigest()
            if digest != entry.sha256:
                raise CheckpointCorrupt(
                    self.root, name, rel, f"sha256 {digest} does not match the manifest's {entry.sha256}"
                )
            out[rel] = data
        return manifest, out

    def latest(self, problems: list[str] | None = None) -> tuple[Manifest, dict[str, bytes]] | None:
        """The newest index entry that verifies, as ``read`` returns it; None if no entry
        does (or there is none). Every entry skipped on the way is reported through ``say``
        and appended to ``problems`` (if given). Raises CheckpointCorrupt only for an
        unreadable index (see ``index``)."""
        for entry in reversed(self.index().entries):
            try:
                manifest, files = self.read(entry.name)
                if manifest.iteration != entry.iteration:
                    raise CheckpointCorrupt(
                        self.root, entry.name, MANIFEST,
                        f"holds iteration {manifest.iteration}, the index says {entry.iteration}",
                    )
            except CheckpointCorrupt as exc:
                text = f"{exc}{NEXT_OLDER}"
                self.say(text)
                if problems is not None:
                    problems.append(text)
                continue
            return manifest, files
        return None

    def list_entries(self) -> list[EntryStatus]:
        """Every index entry, oldest first, each verified (every file read and hashed).
        Raises CheckpointCorrupt only for an unreadable index."""
        out = []
        for entry in self.index().entries:
            status = EntryStatus(
                iteration=entry.iteration, name=entry.name, created_unix_ns=entry.created_unix_ns, ok=False
            )
            try:
                manifest, _ = self.read(entry.name)
                status.bytes = sum(f.bytes for f in manifest.files.values())
                if manifest.iteration != entry.iteration:
                    status.problem = f"manifest holds iteration {manifest.iteration}, the index says {entry.iteration}"
                else:
                    status.ok = True
            except CheckpointCorrupt as exc:
                status.problem = f"{exc.file}: {exc.problem}"
            out.append(status)
        return out

    # ------------------------------------------------------------------ housekeeping

    def _remove(self, folder: Path) -> bool:
        """Remove a folder; True if it is gone. A failure is counted and reported, never raised."""
        try:
            shutil.rmtree(folder)
        except FileNotFoundError:
            return True
        except Exception as exc:  # noqa: BLE001 - housekeeping must never take the service down
            self.housekeeping_failures += 1
            self.say(f"could not remove {folder}: {exc}; the next prune retries")
            return False
        return True

    def prune(self, keep: int) -> list[str]:
        """Remove every checkpoint but the newest ``keep`` index entries, and every leftover
        ``*.partial`` / ``*.old`` folder; return the names removed (oldest first).

        A checkpoint folder that cannot be removed stays in the index and is retried by the
        next prune. Never raises (a bad ``keep`` aside): every failure is counted in
        ``housekeeping_failures`` and reported through ``say``. Raises ValueError for keep < 1.
        """
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"prune keep={keep!r}: keep at least 1 checkpoint")
        removed: list[str] = []
        try:
            if not self.root.is_dir():
                return removed
            index = self.index()
            old, kept = index.entries[:-keep], index.entries[-keep:]
            stay = []
            for entry in old:
                # Folder first, index after: a crash in between leaves an entry whose folder
                # is gone, which latest() skips and the next prune drops.
                if self._remove(self.root / entry.name):
                    removed.append(entry.name)
                else:
                    stay.append(entry)
            if len(stay) != len(old):
                self._write_index(CheckpointIndex(stay + kept))
            for path in sorted(self.root.iterdir()):
                if path.name.endswith((PARTIAL_SUFFIX, ASIDE_SUFFIX)) and path.is_dir() and not path.is_symlink():
                    if self._remove(path):
                        removed.append(path.name)
        except Exception as exc:  # noqa: BLE001 - see docstring
            self.housekeeping_failures += 1
            self.say(f"prune of {self.root} failed: {exc}; the next prune retries")
        return removed
