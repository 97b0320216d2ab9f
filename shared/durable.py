"""Durable file writes, one implementation for every service: the checkpoint store, the
ladder's pool, resident set, gate records and result log, the learner's halt marker.

A file written and renamed into place is durable only once its data AND its folder's entry
are on disk: after a crash a renamed file that was never fsynced may legitimately be empty
(renameio, quoting Ts'o), and a new name that was never fsynced may vanish."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any


def fsync_dir(path: str | os.PathLike) -> None:
    """Make the entries of a directory (new names, renames) durable. POSIX only: Windows
    cannot open a directory for fsync, and NTFS journals renames itself. Raises OSError."""
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: str | os.PathLike, data: Any) -> None:
    """Create ``path`` (it must not exist: FileExistsError) with ``data`` (any bytes-like) and
    fsync it before returning."""
    with open(path, "xb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def replace_file(path: str | os.PathLike, data: bytes) -> None:
    """Atomically replace (or create) ``path`` with ``data``: a temporary file in the same
    folder (created if missing), fsync, ``os.replace``, fsync the folder. Readers see the old
    content or the new, never a mix; the temporary file is removed on any failure. Raises
    OSError if the disk refuses (the old file is then untouched)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)
