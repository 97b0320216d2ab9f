"""Lower a process's CPU priority, so that work off the learner's clock (the evaluators' games)
takes only the cores the learner and rollouts leave idle.

Why both calls: ``os.nice`` orders the threads of one scheduling group, but on a Linux kernel
with autogroups (``/proc/sys/kernel/sched_autogroup_enabled``) every session is a group of its
own, and ``royalefleet up`` starts each service in its own session (``start_new_session``), so
the groups share the CPU equally whatever their members' nice values. The group's own nice
value is written to ``/proc/self/autogroup`` (sched(7), "The autogroup feature"); raising it
needs no privilege. In a container the container's cgroup is the group, and its weight is the
deployment's to set (Compose ``cpu_shares``, docs/compose.md).

Measured (docs/learning.md, "Strength measurement cost"): on the 2-core development machine an
evaluator playing strength games at the default priority made the `cpu` profile's PPO update
3x slower (23 s to 72-83 s).
"""

from __future__ import annotations

import os
from pathlib import Path

AUTOGROUP = Path("/proc/self/autogroup")
MAX_NICE = 19


def nice_value(text: str) -> int:
    """A nice value for ``--nice``: a whole number 0..19 (0 leaves the priority as it is).
    Raises ValueError naming the value."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError("not a whole number") from None
    if not 0 <= value <= MAX_NICE:
        raise ValueError(f"{value} is not a nice value 0..{MAX_NICE} (0 keeps the priority, 19 is the lowest)")
    return value


def lower_cpu_priority(nice: int, *, autogroup: Path = AUTOGROUP) -> list[str]:
    """Raise this process's nice value by ``nice`` (0..19; 0 does nothing) and, where the kernel
    groups by session, its autogroup's nice value to ``nice``. Never raises: a refusal (a
    container's read-only /proc, a kernel without autogroups) is returned as a sentence, one per
    call that did not take, for the service to print. Returns the sentences (empty: both took or
    nothing was asked)."""
    if not 0 <= nice <= MAX_NICE:
        raise ValueError(f"nice {nice} is not 0..{MAX_NICE}")
    if nice == 0:
        return []
    problems = []
    try:
        os.nice(nice)
    except OSError as exc:
        problems.append(f"could not raise the process's nice value by {nice}: {exc}")
    if autogroup.exists():
        try:
            autogroup.write_text(f"{nice}\n")
        except OSError as exc:
            problems.append(f"could not set the autogroup's nice value ({autogroup}) to {nice}: {exc}")
    return problems


def autogroup_nice(autogroup: Path = AUTOGROUP) -> int | None:
    """This process's autogroup nice value (``/autogroup-N nice K`` -> K), None without one."""
    try:
        return int(autogroup.read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None
