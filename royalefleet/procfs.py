"""The direct children of a process, read from Linux's /proc (the launcher's services, for
``royalefleet chaos`` and the stack tests)."""

from __future__ import annotations

from pathlib import Path


def children_of(parent_pid: int) -> dict[int, tuple[str, list[bytes]]]:
    """pid -> (state letter as /proc/<pid>/stat gives it, ``Z`` for a zombie; argv) of every
    process whose parent is ``parent_pid``. Processes that end while being read are skipped."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) != parent_pid:
                continue
            out[int(d.name)] = (fields[0], (d / "cmdline").read_bytes().rstrip(b"\0").split(b"\0"))
        except (OSError, ValueError, IndexError):
            continue
    return out
