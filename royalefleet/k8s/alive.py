"""The learner's liveness check: ``python -m royalefleet.k8s.alive`` (the pod's exec probe).

Exit 0 while the learner's ``/metrics`` answers and its progress timestamp
(``royalefleet_learner_progress_timestamp_seconds``: its last metric row, or its start before
the first) is at most ``--max-age`` seconds old; exit 1 otherwise, with one line saying which.
A learner that answers scrapes but has written no row for that long is wedged (the
``training_stalled`` alert's condition, ``shared/service_alerts.py``); Kubernetes then
restarts it and it resumes from its newest checkpoint. Standard library only: it runs in the
learner's container every probe period and must cost nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.request

from shared.service_alerts import PROGRESS_METRIC, STALL_SECONDS


def progress_age(text: str, now: float, metric: str = PROGRESS_METRIC) -> float:
    """Seconds since the timestamp ``metric`` holds in a Prometheus text exposition. Raises
    ValueError naming the metric when it is absent."""
    for line in text.splitlines():
        if line.startswith(metric + " ") or line.startswith(metric + "{"):
            return now - float(line.rsplit(" ", 1)[1])
    raise ValueError(f"{metric} is not in the learner's /metrics")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m royalefleet.k8s.alive",
                                description="Liveness of the learner: its /metrics answers and its last metric row "
                                            "is recent. Exit 0 alive, 1 not.")
    p.add_argument("--port", type=int, required=True, help="the learner's /metrics port (ROYALEFLEET_METRICS_PORT)")
    p.add_argument("--max-age", type=float, default=float(STALL_SECONDS), metavar="SECONDS",
                   help="most seconds since the last metric row (default: %(default)s, the training_stalled "
                        "alert's STALL_SECONDS)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS", help="HTTP timeout (default: %(default)s)")
    a = p.parse_args(argv)
    url = f"http://127.0.0.1:{a.port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=a.timeout) as r:
            text = r.read().decode()
        age = progress_age(text, time.time())
    except (OSError, ValueError) as exc:
        print(f"learner not alive: {url}: {exc}", file=sys.stderr)
        return 1
    if age > a.max_age:
        print(f"learner wedged: no metric row for {age:.0f} s (more than {a.max_age:.0f} s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
