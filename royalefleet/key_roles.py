"""Which keys each role holds (least privilege): the one table ``royalefleet keys`` (Compose's
per-role volumes), ``royalefleet keys --k8s-secrets`` (one Secret per role) and the tests read.

The learner host's keys folder (``royalefleet keys --dir FOLDER``)::

    server.key, server.key_secret       the servers' keypair (learner, ladder, checkpoint service)
    client.key, client.key_secret       this host's rollouts' client keypair
    learner.key, learner.key_secret     the learner's client keypair (to the ladder and the checkpoint service)
    evaluator.key, evaluator.key_secret the evaluators' client keypair (to the ladder and the checkpoint service)
    clients/learner/local.key           the learner's allow-list: this host's rollouts ...
    clients/learner/<host>.key          ... and each extra rollout host's
    clients/ladder/{learner,evaluator}.key       the ladder's allow-list
    clients/checkpoint/{learner,evaluator}.key   the checkpoint service's allow-list (writes need the
                                        learner's writer token besides: shared/writer_token.py)
    hosts/<host>/                       what to copy to rollout host <host>
    roles/<role>/                       each role's own keys folder (``role_files``), what that role's
                                        ROYALEFLEET_CURVE_DIR names; Compose copies them to per-role
                                        volumes (ROYALEFLEET_KEYS_ROLES_DIR), Kubernetes makes them Secrets

A role's folder holds only what it needs:

    role        server.key  server.key_secret  client.key (+secret)  clients/ (allow-list)   token
    learner     yes         yes                learner's             rollouts, hosts         (derives)
    ladder      yes         yes                -                     learner, evaluator      (derives)
    checkpoint  yes         yes                -                     learner, evaluator      (derives)
    rollout     yes         -                  this host's rollouts  -                       -
    evaluator   yes         -                  evaluators'           -                       ladder-evaluator.token

So a rollout's key opens the learner only; an evaluator's the ladder and the checkpoint service's
loads (its token opens the ladder's evaluation writes, not the learner's); only the learner
holds the writer token's key and the learner's ladder token.
"""

from __future__ import annotations

import os

from shared.transport import ALLOWED_CLIENTS, CLIENT_PUBLIC, CLIENT_SECRET, SERVER_PUBLIC, SERVER_SECRET
from shared.writer_token import derive, ladder_purpose, token_file

SERVERS = ("learner", "ladder", "checkpoint")
CLIENTS = ("rollout", "evaluator")
ROLES = SERVERS + CLIENTS
LOCAL = "local"
"""The allow-list entry of this host's rollouts (``clients/learner/local.key``)."""
KEYPAIR_OF = {"rollout": "client", "learner": "learner", "evaluator": "evaluator"}
"""Role -> the base name of its client keypair in the keys folder."""
ADMITS = {"learner": {LOCAL: "client"}, "ladder": {"learner": "learner", "evaluator": "evaluator"},
          "checkpoint": {"learner": "learner", "evaluator": "evaluator"}}
"""Server -> its allow-list's entries from this folder (entry name -> keypair base name); the
learner also admits every extra rollout host (``clients/learner/<host>.key``)."""
TOKEN_ROLES = {"evaluator": "evaluator"}
"""Role -> the ladder role whose token file it holds (a role without the servers' secret)."""
ROLES_DIR = "roles"
ROLES_DIR_ENV = "ROYALEFLEET_KEYS_ROLES_DIR"
"""Where ``royalefleet keys`` writes the per-role folders when not ``<keys folder>/roles``
(Compose: /keys-roles, each role's volume mounted at /keys-roles/<role>)."""
PUBLIC_MODE, SECRET_MODE = 0o644, 0o600


def allow_list_dir(folder: str, server: str) -> str:
    return os.path.join(folder, ALLOWED_CLIENTS, server)


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def role_files(folder: str, role: str) -> dict[str, bytes]:
    """Relative path -> content of role ``role``'s keys folder, from the keys folder ``folder``
    (module docstring). Raises OSError naming a missing file, ValueError for an unknown role."""
    import zmq.auth

    if role not in ROLES:
        raise ValueError(f"role {role!r}: the roles are {', '.join(ROLES)}")
    out = {SERVER_PUBLIC: _read(os.path.join(folder, SERVER_PUBLIC))}
    if role in SERVERS:
        out[SERVER_SECRET] = _read(os.path.join(folder, SERVER_SECRET))
        clients = allow_list_dir(folder, role)
        for name in sorted(os.listdir(clients)):
            if name.endswith(".key") and os.path.isfile(os.path.join(clients, name)):
                out[f"{ALLOWED_CLIENTS}/{name}"] = _read(os.path.join(clients, name))
    if role in KEYPAIR_OF:
        base = os.path.join(folder, KEYPAIR_OF[role])
        out[CLIENT_PUBLIC] = _read(base + ".key")
        out[CLIENT_SECRET] = _read(base + ".key_secret")
    if role in TOKEN_ROLES:
        _, secret = zmq.auth.load_certificate(os.path.join(folder, SERVER_SECRET))
        assert secret is not None
        ladder_role = TOKEN_ROLES[role]
        out[token_file(ladder_role)] = (derive(secret, ladder_purpose(ladder_role)) + "\n").encode()
    return out


def is_secret(name: str) -> bool:
    return name.endswith(".key_secret") or name.endswith(".token")


def write_role(target: str, files: dict[str, bytes]) -> list[str]:
    """Make folder ``target`` hold exactly ``files`` (module docstring's modes; each written to a
    temporary name and renamed, so a service reading it never sees half a key); a file of an
    earlier layout or a revoked host's key is removed. Returns the paths written or removed."""
    changed = []
    for sub in sorted({""} | {os.path.dirname(n) for n in files}):
        os.makedirs(os.path.join(target, sub), mode=0o700, exist_ok=True)
        os.chmod(os.path.join(target, sub), 0o700)
    for name, data in files.items():
        path = os.path.join(target, name)
        try:
            if _read(path) == data:
                continue
        except OSError:
            pass
        tmp = os.path.join(os.path.dirname(path), ".new-" + os.path.basename(path))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, SECRET_MODE)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, SECRET_MODE if is_secret(name) else PUBLIC_MODE)
        os.replace(tmp, path)
        changed.append(path)
    for sub in ("", ALLOWED_CLIENTS):
        here = os.path.join(target, sub)
        if not os.path.isdir(here):
            continue
        for entry in os.scandir(here):
            rel = os.path.join(sub, entry.name) if sub else entry.name
            if entry.is_file(follow_symlinks=False) and rel not in files:
                os.remove(entry.path)
                changed.append(entry.path)
    return changed


def roles_dir(folder: str, environ=None) -> str:
    env = os.environ if environ is None else environ
    return env.get(ROLES_DIR_ENV, "") or os.path.join(folder, ROLES_DIR)


def export_roles(folder: str, target: str) -> list[str]:
    """Every role's folder written under ``target/<role>/`` (``write_role``); returns what changed."""
    changed = []
    for role in ROLES:
        changed += write_role(os.path.join(target, role), role_files(folder, role))
    return changed


def role_of(service: str) -> str:
    """The role of a launcher service name (``rollout-3`` -> ``rollout``)."""
    return service.split("-", 1)[0]


def curve_dir_for(folder: str, role: str) -> str:
    """The keys folder role ``role`` uses when ``ROYALEFLEET_CURVE_DIR`` names ``folder``: its
    own folder under ``roles/`` when ``folder`` is a learner host's keys folder, else ``folder``
    itself (already one role's folder, e.g. a rollout host's bundle)."""
    own = os.path.join(roles_dir(folder), role)
    return own if os.path.isdir(own) else folder
