"""Startup, readiness and liveness probes.

Every service's ``/metrics`` answers once it has bound its ZeroMQ socket (the learner: its
ROUTER, ``services/learner/service.py``), so an HTTP GET of it is the readiness of all five: a
learner that is collecting, training or waiting for rollouts answers it and is ready, and its
Service sends rollouts to it only then. Liveness of the learner is more: ``royalefleet.k8s.alive``
fails when it has written no metric row for ``STALL_SECONDS`` (a wedged learner still answers
scrapes from its HTTP thread). The startup probes give each service what compose.yaml's
healthcheck ``start_period`` gives it (the learner imports torch and resumes first).
"""

from __future__ import annotations

from royalefleet.k8s.common import METRICS_PORTS
from shared.service_alerts import STALL_SECONDS

START_SECONDS = {"learner": 300, "ladder": 60, "checkpoint": 60, "rollout": 120, "evaluator": 60}
"""How long a service may take to answer /metrics after its start (compose.yaml's start_period)."""
STARTUP_PERIOD_S = 5
LIVENESS_PERIOD_S = 30


def http_metrics() -> dict:
    return {"httpGet": {"path": "/metrics", "port": "metrics"}, "timeoutSeconds": 5}


def probes(name: str) -> dict:
    """The container's ``startupProbe``, ``readinessProbe`` and ``livenessProbe``."""
    startup = {**http_metrics(), "periodSeconds": STARTUP_PERIOD_S,
               "failureThreshold": START_SECONDS[name] // STARTUP_PERIOD_S}
    ready = {**http_metrics(), "periodSeconds": 10, "failureThreshold": 3}
    if name == "learner":
        live = {"exec": {"command": ["python", "-m", "royalefleet.k8s.alive", "--port", str(METRICS_PORTS[name]),
                                     "--max-age", str(STALL_SECONDS)]},
                "timeoutSeconds": 20, "periodSeconds": LIVENESS_PERIOD_S, "failureThreshold": 2}
    else:
        live = {**http_metrics(), "periodSeconds": LIVENESS_PERIOD_S, "failureThreshold": 3}
    return {"startupProbe": startup, "readinessProbe": ready, "livenessProbe": live}
