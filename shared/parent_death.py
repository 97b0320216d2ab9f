"""Child processes that do not outlive their parent.

A spawned worker whose parent dies without stopping it (SIGKILL, an OOM kill, a SIGTERM the parent
does not handle) would otherwise run to the end of its job as an orphan, on cores the user
believes are free. Linux's ``prctl(PR_SET_PDEATHSIG)`` asks the kernel to signal the child when
its parent exits; the launcher's services and ``royalefleet demos record``'s workers both set it."""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1
"""prctl option number (linux/prctl.h)."""


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Have the kernel send ``sig`` to this process when its parent exits (Linux only; a no-op
    where libc or prctl is missing). Takes no required argument, so it can be a ``preexec_fn``."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig))
    except (OSError, AttributeError):
        pass


def parent_gone(parent_pid: int) -> bool:
    """True when this process's parent is no longer ``parent_pid`` (it died and the process was
    re-parented), the race ``die_with_parent`` cannot see: a parent that died before the call.
    ``parent_pid`` 0: unknown, never gone."""
    return parent_pid > 0 and os.getppid() != parent_pid
