"""The CURVE keys as Kubernetes Secrets (``royalefleet keys --k8s-secrets``).

One Secret per role, ``royalefleet-curve-<role>``, holding exactly that role's keys folder
(``royalefleet/key_roles.py``: a rollout's has ``server.key``, ``client.key`` and
``client.key_secret``, never the servers' secret), mounted at /keys; and one allow-list Secret
per server, ``royalefleet-curve-clients-<server>``, one ``<name>.key`` per admitted client,
mounted at /keys-clients (named by ``ROYALEFLEET_CURVE_CLIENTS_DIR``), because a Secret volume
is one flat folder. Kubernetes updates a mounted Secret in place, and the servers read the
allow-list again at each handshake: admitting or revoking a rollout host is
``royalefleet keys --host NAME --k8s-secrets | kubectl apply -f -``, with no restart. Written as
JSON (a ``v1`` ``List``), which kubectl reads, so the command needs no YAML library (it runs in
the rollout image too).
"""

from __future__ import annotations

import base64
import json

from royalefleet import key_roles
from royalefleet.k8s.common import NAMESPACE, PART_OF, clients_secret, curve_secret
from shared.transport import ALLOWED_CLIENTS


def _secret(name: str, data: dict[str, bytes], namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(PART_OF)},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


def key_secrets(folder: str, namespace: str = NAMESPACE) -> dict:
    """The Secrets of keys folder ``folder`` (``royalefleet keys`` layout) as a ``v1`` List: each
    role's keys, then each server's allow-list. Raises OSError naming a missing key file."""
    items, lists = [], []
    prefix = ALLOWED_CLIENTS + "/"
    for role in key_roles.ROLES:
        files = key_roles.role_files(folder, role)
        items.append(_secret(curve_secret(role), {k: v for k, v in files.items() if "/" not in k}, namespace))
        if role in key_roles.SERVERS:
            lists.append(_secret(clients_secret(role), {k[len(prefix):]: v for k, v in files.items()
                                                        if k.startswith(prefix)}, namespace))
    return {"apiVersion": "v1", "kind": "List", "items": items + lists}


def key_secrets_json(folder: str, namespace: str = NAMESPACE) -> str:
    return json.dumps(key_secrets(folder, namespace), indent=2) + "\n"
