#!/usr/bin/env python3
"""Runs podman's container healthchecks on their intervals.

Podman 4.3 schedules healthchecks with systemd transient timers; on a host without systemd
nothing runs them, every container stays "(starting)" and Compose's
`depends_on: condition: service_healthy` waits forever. This loop does what the timers would:
`podman healthcheck run <container>` every `interval` of that container's healthcheck
(podman itself applies start_period, retries and timeout, and updates the status).

    health_ticker.py [--while-alive PID]     # exits when PID (the API service) is gone

Started and stopped by deploy/podman/service.sh (CONTAINERS_CONF in its environment).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

POLL_S = 1.0


def podman(*args: str, timeout: float = 30.0) -> str:
    try:
        return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout).stdout
    except (subprocess.TimeoutExpired, OSError):
        return ""


def alive(pid: int | None) -> bool:
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def main(argv: list[str]) -> int:
    watch = int(argv[argv.index("--while-alive") + 1]) if "--while-alive" in argv else None
    interval: dict[str, float] = {}   # container id -> healthcheck interval (s)
    due: dict[str, float] = {}        # container id -> next run (monotonic)
    running: dict[str, subprocess.Popen] = {}
    while alive(watch):
        now = time.monotonic()
        for cid, proc in list(running.items()):
            if proc.poll() is not None:
                del running[cid]
        checked = set()
        for line in podman("ps", "--format", "{{.ID}}\t{{.Status}}").splitlines():
            cid, _, status = line.partition("\t")
            if not status.endswith(("(starting)", "(healthy)", "(unhealthy)")):
                continue
            checked.add(cid)
            if cid not in interval:
                out = podman("inspect", "--format", "{{.Config.Healthcheck.Interval.Seconds}}", cid).strip()
                try:
                    interval[cid] = max(float(out), 0.5) if float(out) > 0 else 30.0
                except ValueError:
                    continue
                due[cid] = now
            if now >= due[cid] and cid not in running:
                running[cid] = subprocess.Popen(["podman", "healthcheck", "run", cid], stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
                due[cid] = now + interval[cid]
        for cid in set(interval) - checked:
            interval.pop(cid, None)
            due.pop(cid, None)
        time.sleep(POLL_S)
    for proc in running.values():
        proc.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
