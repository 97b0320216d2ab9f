"""The CURVE keys as Kubernetes Secrets (``royalefleet keys --k8s-secrets``).

Two Secrets, because a Secret volume is one flat folder: ``royalefleet-curve`` holds the
servers' keypair and the local client keypair (mounted at /keys; a rollout or evaluator pod
gets only ``server.key``, ``client.key`` and ``client.key_secret`` of it), and
``royalefleet-curve-clients`` the allow-list, one ``<host>.key`` per admitted client (mounted
at /keys-clients, named by ``ROYALEFLEET_CURVE_CLIENTS_DIR``). Kubernetes updates a mounted
Secret in place, and the servers read the allow-list again at each handshake: admitting or
revoking a rollout host is ``royalefleet keys --host NAME --k8s-secrets | kubectl apply -f -``,
with no restart. Written as JSON (a ``v1`` ``List``), which kubectl reads, so the command needs
no YAML library (it runs in the rollout image too).
"""

from __future__ import annotations

import base64
import json
import os

from royalefleet.k8s.common import CLIENTS_SECRET, CURVE_SECRET, NAMESPACE, PART_OF
from shared.transport import ALLOWED_CLIENTS, CLIENT_PUBLIC, CLIENT_SECRET, SERVER_PUBLIC, SERVER_SECRET

KEY_FILES = (SERVER_PUBLIC, SERVER_SECRET, CLIENT_PUBLIC, CLIENT_SECRET)


def _b64(path: str) -> str:
    with open(path, "rb") as fh:
        return base64.b64encode(fh.read()).decode()


def _secret(name: str, data: dict[str, str], namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(PART_OF)}, "data": data}


def key_secrets(folder: str, namespace: str = NAMESPACE) -> dict:
    """The two Secrets of keys folder ``folder`` (``royalefleet keys`` layout) as a ``v1`` List.
    Raises FileNotFoundError naming a missing key file."""
    keys = {name: _b64(os.path.join(folder, name)) for name in KEY_FILES}
    clients_dir = os.path.join(folder, ALLOWED_CLIENTS)
    clients = {n: _b64(os.path.join(clients_dir, n)) for n in sorted(os.listdir(clients_dir)) if n.endswith(".key")}
    return {"apiVersion": "v1", "kind": "List",
            "items": [_secret(CURVE_SECRET, keys, namespace), _secret(CLIENTS_SECRET, clients, namespace)]}


def key_secrets_json(folder: str, namespace: str = NAMESPACE) -> str:
    return json.dumps(key_secrets(folder, namespace), indent=2) + "\n"
