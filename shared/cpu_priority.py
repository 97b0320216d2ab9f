"""Lower a process's CPU priority, so that work off the learner's clock (the evaluators' games)
takes only the cores the learner and rollouts leave idle.

Why two settings: the nice value orders the threads of one scheduling group, but on a Linux
kernel with autogroups (``/proc/sys/kernel/sched_autogroup_enabled``) every session is a group
of its own, and ``royalefleet up`` starts each service in its own session
(``start_new_session``), so the groups share the CPU equally whatever their members' nice
values. The group's own nice value is written to ``/proc/self/autogroup`` (sched(7), "The
autogroup feature"). In a container the container's cgroup is the group, and its weight is the
deployment's to set (Compose ``cpu_shares``, docs/compose.md).

Measured (docs/learning.md, "Strength measurement cost"): on the 2-core development machine an
evaluator playing strength games at full priority made the `cpu` profile's PPO update 3.5x
slower (its update 23.3 s to 81.5 s).
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

from shared.service_settings import whole

AUTOGROUP = Path("/proc/self/autogroup")
MAX_NICE = 19
AUTOGROUP_TRIES = 5  # the kernel takes one unprivileged autogroup write per 100 ms, machine-wide (EAGAIN)


def nice_value(text: str) -> int:
    """A nice value for ``--nice``: a whole number 0..19 (0 leaves the priority as it is).
    Raises ValueError naming the value."""
    value = whole(text)
    if not 0 <= value <= MAX_NICE:
        raise ValueError(f"{value} is not a nice value 0..{MAX_NICE} (0 keeps the priority, 19 is the lowest)")
    return value


def lower_cpu_priority(nice: int, *, autogroup: Path = AUTOGROUP, session_leader: bool | None = None) -> list[str]:
    """Run this process at nice value ``nice`` (0..19; 0 does nothing; a process already nicer
    keeps its value) and, when it leads its own session (as under ``royalefleet up``), give its
    autogroup the same nice value. A process started from a shell shares the shell's autogroup,
    which it leaves alone: lowering it would lower the shell and everything started from it.

    Call it before any thread starts: Linux keeps a nice value per thread, and threads inherit
    it when they are created. ``session_leader`` None: ``os.getsid(0) == os.getpid()``.

    Raises ValueError for a ``nice`` outside 0..19. A setting that does not take (a container's
    read-only /proc, a kernel that refuses) is returned as a sentence for the service to print;
    a kernel without autogroups (no ``autogroup`` file) needs nothing and says nothing. Returns
    the sentences (empty: everything asked for took)."""
    if not 0 <= nice <= MAX_NICE:
        raise ValueError(f"nice {nice} is not 0..{MAX_NICE}")
    if nice == 0:
        return []
    problems = []
    try:
        current = os.getpriority(os.PRIO_PROCESS, 0)
        if current < nice:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError as exc:
        problems.append(f"could not set the process's nice value to {nice}: {exc}")
    if session_leader is None:
        session_leader = os.getsid(0) == os.getpid()
    if session_leader and autogroup.exists():
        for attempt in range(AUTOGROUP_TRIES):
            try:
                autogroup.write_text(f"{nice}\n")
                break
            except OSError as exc:
                if exc.errno == errno.EAGAIN and attempt + 1 < AUTOGROUP_TRIES:
                    time.sleep(0.11)
                    continue
                problems.append(f"could not set the autogroup's nice value ({autogroup}) to {nice}: {exc}")
                break
    return problems


def autogroup_nice(autogroup: Path = AUTOGROUP) -> int | None:
    """This process's autogroup nice value (``/autogroup-N nice K`` -> K), None without one."""
    try:
        return int(autogroup.read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None
