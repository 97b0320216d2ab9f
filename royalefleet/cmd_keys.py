"""``royalefleet keys``: the CURVE keys that authenticate rollouts to the learner.

Writes (never overwriting a key that exists, so it is safe to run at every ``docker compose up``)
the folder that ``ROYALEFLEET_CURVE_DIR`` names (layout: ``shared/transport.py``)::

    server.key, server.key_secret     the servers' keypair (learner, ladder, checkpoint service)
    client.key, client.key_secret     this host's client keypair: its rollouts, and the learner as
                                      a client of the ladder and the checkpoint service
    clients/local.key                 the allow-list: this host's client ...
    clients/<host>.key                ... and each extra rollout host's
    hosts/<host>/                     what to copy to rollout host <host>: server.key and its own
                                      client.key, client.key_secret

A server admits a client only if its public key is a ``*.key`` file in ``clients/``; the
servers re-read that folder at each handshake, so adding or removing a host needs no restart.
Revoke a host by deleting ``clients/<host>.key`` (its open connection stays until it drops).

``--bundle HOST`` writes ``hosts/HOST/`` to standard output as a .tar.gz (creating the host's
keys if missing), which is how the keys leave a Compose volume::

    docker compose run --rm -T keys python -m royalefleet.cmd_keys --dir /keys --bundle box2 > box2-keys.tgz

Runs without torch (``python -m royalefleet.cmd_keys``, in the rollout image too).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import sys
import tarfile
import tempfile

import zmq
import zmq.auth

from shared.transport import (
    ALLOWED_CLIENTS, CLIENT_PUBLIC, CLIENT_SECRET, CURVE_DIR_ENV, SERVER_PUBLIC, SERVER_SECRET,
)

LOCAL = "local"
HOSTS = "hosts"
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
IMAGE_UID = 10001
"""The containers' user (Dockerfile): a bundle's files carry it, so ``sudo tar -x`` on a rollout
host leaves them readable inside the container."""


def _keypair(folder: str, name: str) -> bool:
    """Create ``folder/name.key`` and ``folder/name.key_secret`` unless the secret exists.
    Both are written to a temporary name and renamed, so a crash leaves no half pair."""
    secret = os.path.join(folder, name + ".key_secret")
    if os.path.exists(secret):
        return False
    os.makedirs(folder, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=folder, prefix=".new-")
    try:
        public_tmp, secret_tmp = zmq.auth.create_certificates(tmp, name)
        os.chmod(secret_tmp, 0o600)
        os.chmod(public_tmp, 0o644)
        os.replace(public_tmp, os.path.join(folder, name + ".key"))
        os.replace(secret_tmp, secret)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return True


def _copy_public(src: str, dst: str) -> bool:
    if os.path.exists(dst):
        with open(src, "rb") as a, open(dst, "rb") as b:
            if a.read() == b.read():
                return False
    tmp = dst + ".tmp"
    shutil.copyfile(src, tmp)
    os.chmod(tmp, 0o644)
    os.replace(tmp, dst)
    return True


def ensure_keys(folder: str, hosts: list[str] = ()) -> list[str]:
    """Create whatever of the layout is missing; returns the paths written."""
    if not zmq.has("curve"):
        raise SystemExit("this libzmq was built without CURVE support")
    written: list[str] = []
    os.makedirs(os.path.join(folder, ALLOWED_CLIENTS), exist_ok=True)
    if _keypair(folder, "server"):
        written += [os.path.join(folder, SERVER_PUBLIC), os.path.join(folder, SERVER_SECRET)]
    if _keypair(folder, "client"):
        written += [os.path.join(folder, CLIENT_PUBLIC), os.path.join(folder, CLIENT_SECRET)]
    allowed = os.path.join(folder, ALLOWED_CLIENTS, LOCAL + ".key")
    if _copy_public(os.path.join(folder, CLIENT_PUBLIC), allowed):
        written.append(allowed)
    for host in hosts:
        bundle = os.path.join(folder, HOSTS, host)
        if _keypair(bundle, "client"):
            written += [os.path.join(bundle, CLIENT_PUBLIC), os.path.join(bundle, CLIENT_SECRET)]
        for src, dst in ((os.path.join(folder, SERVER_PUBLIC), os.path.join(bundle, SERVER_PUBLIC)),
                         (os.path.join(bundle, CLIENT_PUBLIC), os.path.join(folder, ALLOWED_CLIENTS, host + ".key"))):
            if _copy_public(src, dst):
                written.append(dst)
    return written


def bundle_tar(folder: str, host: str) -> bytes:
    """``hosts/<host>/`` as a .tar.gz whose members are ``server.key``, ``client.key`` and
    ``client.key_secret`` (extract it into the rollout host's keys folder)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in (SERVER_PUBLIC, CLIENT_PUBLIC, CLIENT_SECRET):
            info = tar.gettarinfo(os.path.join(folder, HOSTS, host, name), arcname=name)
            info.uid = info.gid = IMAGE_UID
            info.uname = info.gname = ""
            info.mode = 0o600 if name == CLIENT_SECRET else 0o644
            with open(os.path.join(folder, HOSTS, host, name), "rb") as fh:
                tar.addfile(info, fh)
    return buf.getvalue()


def _host_name(text: str) -> str:
    if not HOST_NAME.match(text) or text == LOCAL:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a host name is letters, digits, '.', '_' or '-' (at most 63), and not {LOCAL!r}")
    return text


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``keys`` on the ``royalefleet`` command line."""
    p = subparsers.add_parser(
        "keys", help="generate the CURVE keys that authenticate rollouts to the learner",
        description="Generate the CURVE keys (ZeroMQ) that authenticate rollouts to the learner, ladder and "
        f"checkpoint service: the server keypair, this host's client keypair and one per extra rollout host, "
        f"into one folder; the services use it when {CURVE_DIR_ENV} names it. Existing keys are kept, so "
        "running it again only adds what is missing. See docs/compose.md.",
    )
    configure(p)
    return p


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", default="keys", metavar="FOLDER", help="keys folder (default: %(default)s)")
    p.add_argument("--hosts", type=int, default=0, metavar="N",
                   help="make sure extra rollout hosts host-1 .. host-N have keys (default: none)")
    p.add_argument("--host", action="append", type=_host_name, default=[], metavar="NAME",
                   help="make sure extra rollout host NAME has keys (repeatable)")
    p.add_argument("--bundle", type=_host_name, metavar="NAME",
                   help="write host NAME's keys (created if missing) to standard output as a .tar.gz "
                   "and nothing else there")
    p.add_argument("--k8s-secrets", action="store_true",
                   help="write the keys to standard output as two Kubernetes Secrets (JSON, for `kubectl apply -f -`; "
                        "docs/kubernetes.md) and nothing else there")
    p.add_argument("--namespace", default="royalefleet", help="the Secrets' namespace (default: %(default)s)")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.hosts < 0:
        print("royalefleet keys: --hosts must be >= 0", file=sys.stderr)
        return 2
    hosts = [f"host-{k}" for k in range(1, args.hosts + 1)] + list(args.host)
    if args.bundle:
        hosts.append(args.bundle)
    if args.bundle and args.k8s_secrets:
        print("royalefleet keys: --bundle and --k8s-secrets both write to standard output; give one", file=sys.stderr)
        return 2
    hosts = list(dict.fromkeys(hosts))
    folder = args.dir
    written = ensure_keys(folder, hosts)
    # With --bundle or --k8s-secrets the output owns standard output; the report goes to standard error.
    out = sys.stderr if args.bundle or args.k8s_secrets else sys.stdout

    def say(text: str = "") -> None:
        print(text, file=out, flush=True)

    say(f"keys in {os.path.abspath(folder)}: " + (f"wrote {len(written)} file(s)" if written else "all present, nothing written"))
    for path in written:
        say(f"  + {path}")
    allowed = sorted(n[:-4] for n in os.listdir(os.path.join(folder, ALLOWED_CLIENTS)) if n.endswith(".key"))
    say(f"allowed clients ({ALLOWED_CLIENTS}/): {', '.join(allowed)}")
    say()
    say(f"On the learner host: set {CURVE_DIR_ENV}={folder} for every service (Compose mounts the keys volume")
    say(f"  at /keys and sets it). {SERVER_SECRET} and {CLIENT_SECRET} stay on this host.")
    extra = sorted(os.listdir(os.path.join(folder, HOSTS))) if os.path.isdir(os.path.join(folder, HOSTS)) else []
    for host in extra:
        say(f"On rollout host {host}: copy {os.path.join(folder, HOSTS, host)}/ ({SERVER_PUBLIC}, {CLIENT_PUBLIC}, "
            f"{CLIENT_SECRET}) into its keys folder (compose.rollout.yaml: ./keys), then delete the copy here.")
    if not extra:
        say("Extra rollout hosts: add one with --host NAME (or --bundle NAME to get its keys as a .tar.gz).")
    say("Revoke a host: delete its clients/<name>.key (no restart needed).")
    if args.k8s_secrets:
        from royalefleet.k8s.secrets import key_secrets_json

        sys.stdout.write(key_secrets_json(folder, args.namespace))
        sys.stdout.flush()
    if args.bundle:
        sys.stdout.buffer.write(bundle_tar(folder, args.bundle))
        sys.stdout.buffer.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m royalefleet.cmd_keys",
                                description="Generate royalefleet's CURVE keys; the same as `royalefleet keys`.")
    configure(p)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
