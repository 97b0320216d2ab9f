"""What every generated Kubernetes object shares: the namespace, the labels, the images, the
container paths, the non-root user, and the ports (from ``shared.config.ServicesConfig``, the
same defaults ``royalefleet up`` and Compose use)."""

from __future__ import annotations

import pathlib

from royalefleet.launcher import LEARNER_STOP_GRACE_S
from shared.config import ServicesConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
"""The repository root: generated paths are relative to it."""

OUT = "deploy/k8s"
NAMESPACE = "royalefleet"
PART_OF = {"app.kubernetes.io/part-of": "royalefleet"}

LEARNER_IMAGE = "localhost/royalefleet-learner:latest"
ROLLOUT_IMAGE = "localhost/royalefleet-rollout:latest"
"""The images compose.yaml builds (``docker compose build``); docs/kubernetes.md says how to push
them to a registry and point an overlay's ``images:`` at it."""

IMAGE_UID = 10001
"""The images' user (Dockerfile): every pod runs as it, with it as fsGroup so the volumes and the
Secrets are readable and the run folders writable."""

RUNS_DIR = "/data/runs"
CONFIG_DIR = "/etc/royalefleet"
KEYS_DIR = "/keys"
CLIENTS_DIR = "/keys-clients"

CONFIG_MAP = "royalefleet-config"
"""Every file of deploy/config/ (the same files compose.yaml mounts at /etc/royalefleet)."""
CURVE_SECRET = "royalefleet-curve"
CLIENTS_SECRET = "royalefleet-curve-clients"


def curve_secret(role: str) -> str:
    """The Secret holding role ``role``'s keys (royalefleet/key_roles.py): only what it needs."""
    return f"{CURVE_SECRET}-{role}"


def clients_secret(server: str) -> str:
    """The Secret holding server ``server``'s allow-list."""
    return f"{CLIENTS_SECRET}-{server}"


HALT_SECRET = "royalefleet-halt"
HALT_SECRET_KEY = "token"

LEARNER_GRACE_S = int(LEARNER_STOP_GRACE_S)
"""terminationGracePeriodSeconds of the learner: what ``royalefleet up`` and compose.yaml give a
stopping learner to write its checkpoint (SIGTERM stops it at the next safe point)."""
OTHERS_GRACE_S = 30

_S = ServicesConfig()
ZMQ_PORTS = {"learner": _S.learner_port, "ladder": _S.ladder_port, "checkpoint": _S.checkpoint_port}
METRICS_PORTS = {"learner": _S.learner_metrics_port, "ladder": _S.ladder_metrics_port,
                 "checkpoint": _S.checkpoint_metrics_port, "rollout": _S.rollout_metrics_port,
                 "evaluator": _S.evaluator_metrics_port}
"""Every service's /metrics port. A rollout or evaluator pod is alone in its network namespace,
so each uses the first local port (``royalefleet up`` adds k for the k-th on one host)."""
HALT_PORT = _S.learner_halt_port


def labels(name: str) -> dict:
    """The labels of service ``name``'s objects (its pods are selected by the first)."""
    return {"app.kubernetes.io/name": name, **PART_OF}


def selector(name: str) -> dict:
    return {"app.kubernetes.io/name": name}


def meta(name: str, **extra) -> dict:
    return {"name": name, "labels": labels(name), **extra}


def tcp(service: str) -> str:
    """The ZeroMQ address of ``service`` by its Service name (a replaced pod keeps the name)."""
    return f"tcp://{service}:{ZMQ_PORTS[service]}"
