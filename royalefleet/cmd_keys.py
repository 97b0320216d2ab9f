"""``royalefleet keys``: the CURVE keys that authenticate rollouts to the learner.

Writes (never overwriting a key that exists, so it is safe to run at every ``docker compose up``)
the keys folder of the learner host, one keypair per client role and one allow-list per server
(layout and the per-role table: ``royalefleet/key_roles.py``), and each role's own folder under
``roles/`` (or ``ROYALEFLEET_KEYS_ROLES_DIR``), which is what that role's ``ROYALEFLEET_CURVE_DIR``
names: a rollout's holds the server's public key and its own keypair, never the servers' secret.

A server admits a client only if its public key is a ``*.key`` file in its own allow-list; the
servers re-read that folder at each handshake, so adding or removing a host needs no restart.
Revoke a host by deleting ``clients/learner/<host>.key`` and running ``keys`` again (its open
connection stays until it drops). A folder of the older layout (one ``clients/`` for every
server) is migrated at the next run (``migrate``).

Modes: every folder of the layout 0700 (set again at each run, so an older folder is tightened
too), secret keys 0600, public keys 0644; a bundle written with ``--output`` is 0600.

``--bundle HOST`` writes ``hosts/HOST/`` to standard output as a .tar.gz (creating the host's
keys if missing), which is how the keys leave a Compose volume::

    docker compose run --rm -T keys python -m royalefleet.cmd_keys --dir /keys --bundle box2 > box2-keys.tgz

(``--bundle NAME --out FILE`` writes the archive to FILE, mode 0600, instead.)

``--metrics NAME=ADDRESS:PORT[-PORT]`` writes the central Prometheus's scrape targets for host
NAME's rollouts (compose.rollout.yaml publishes their metrics on ``FLEET_METRICS_PUBLISH``): a
file-based service discovery file, ``<targets-dir>/NAME.json``, one target a port, labelled
``host=NAME``; ``--targets-dir -`` prints it instead (how it leaves a container)::

    docker compose run --rm -T --no-deps keys python -m royalefleet.cmd_keys --dir /keys \
        --metrics box2=10.0.0.7:9110-9117 --targets-dir - > prometheus/targets/box2.json

Runs without torch (``python -m royalefleet.cmd_keys``, in the rollout image too).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile

import zmq
import zmq.auth

from royalefleet import key_roles
from shared.transport import (
    ALLOWED_CLIENTS, CLIENT_PUBLIC, CLIENT_SECRET, CURVE_DIR_ENV, SERVER_PUBLIC, SERVER_SECRET,
)

LOCAL = key_roles.LOCAL
HOSTS = "hosts"
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
IMAGE_UID = 10001
"""The containers' user (Dockerfile): a bundle's files carry it, so ``sudo tar -x`` on a rollout
host leaves them readable inside the container."""
FOLDER_MODE = 0o700
SECRET_MODE = 0o600
TARGETS_DIR = os.path.join("prometheus", "targets")
"""Where ``--metrics`` writes by default: the folder prometheus/prometheus.yml's ``rollout-hosts``
job reads (``targets/*.json`` beside it)."""
MAX_PORTS = 256


def _private_dir(path: str) -> None:
    """``path`` and its missing parents created; ``path`` itself mode 0700 (also if it existed)."""
    os.makedirs(path, mode=FOLDER_MODE, exist_ok=True)
    os.chmod(path, FOLDER_MODE)


def _keypair(folder: str, name: str) -> bool:
    """Create ``folder/name.key`` and ``folder/name.key_secret`` unless the secret exists.
    Both are written to a temporary name and renamed, so a crash leaves no half pair."""
    secret = os.path.join(folder, name + ".key_secret")
    if os.path.exists(secret):
        return False
    _private_dir(folder)
    tmp = tempfile.mkdtemp(dir=folder, prefix=".new-")
    try:
        public_tmp, secret_tmp = zmq.auth.create_certificates(tmp, name)
        os.chmod(secret_tmp, SECRET_MODE)
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


def migrate(folder: str, say=None) -> list[str]:
    """Bring a keys folder of the older layout (one allow-list ``clients/*.key`` for every server)
    to the per-server one (``royalefleet/key_roles.py``): ``clients/local.key`` (this host's
    client key, which every server admitted) is dropped, and every other ``clients/<name>.key``
    (an extra rollout host) moves to ``clients/learner/``: hosts keep their keys and are admitted
    by the learner only. Returns the paths moved or removed; says each."""
    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    flat = os.path.join(folder, ALLOWED_CLIENTS)
    try:
        old = sorted(e.name for e in os.scandir(flat) if e.is_file() and e.name.endswith(".key"))
    except OSError:
        return []
    if not old:
        return []
    learner = key_roles.allow_list_dir(folder, "learner")
    _private_dir(learner)
    changed = []
    for name in old:
        src = os.path.join(flat, name)
        if name == LOCAL + ".key":
            os.remove(src)  # the learner admits client.key again as clients/learner/local.key
        else:
            os.replace(src, os.path.join(learner, name))
        changed.append(src)
    say(f"keys: {flat} was one allow-list for every server (the older layout); moved {len(old) - (LOCAL + '.key' in old)} "
        f"rollout host key(s) to {learner} (the learner admits them; the ladder and the checkpoint service do not) "
        f"and gave the learner and the evaluators keypairs of their own")
    return changed


def ensure_keys(folder: str, hosts: list[str] = (), roles_dir: str | None = None) -> list[str]:
    """Create whatever of the layout (``royalefleet/key_roles.py``) is missing, migrating an older
    folder first (``migrate``), and write each role's folder under ``roles_dir`` (default
    ``key_roles.roles_dir``). Returns the paths written."""
    if not zmq.has("curve"):
        raise SystemExit("this libzmq was built without CURVE support")
    written: list[str] = []
    _private_dir(folder)
    _private_dir(os.path.join(folder, ALLOWED_CLIENTS))
    written += migrate(folder)
    if os.path.isdir(os.path.join(folder, HOSTS)) or hosts:
        _private_dir(os.path.join(folder, HOSTS))
        for name in os.listdir(os.path.join(folder, HOSTS)):
            if os.path.isdir(os.path.join(folder, HOSTS, name)):
                _private_dir(os.path.join(folder, HOSTS, name))
    for base in ("server", *key_roles.KEYPAIR_OF.values()):
        if _keypair(folder, base):
            written += [os.path.join(folder, base + ".key"), os.path.join(folder, base + ".key_secret")]
    for server, entries in key_roles.ADMITS.items():
        _private_dir(key_roles.allow_list_dir(folder, server))
        for entry, base in entries.items():
            allowed = os.path.join(key_roles.allow_list_dir(folder, server), entry + ".key")
            if _copy_public(os.path.join(folder, base + ".key"), allowed):
                written.append(allowed)
    for host in hosts:
        bundle = os.path.join(folder, HOSTS, host)
        _private_dir(bundle)
        if _keypair(bundle, "client"):
            written += [os.path.join(bundle, CLIENT_PUBLIC), os.path.join(bundle, CLIENT_SECRET)]
        for src, dst in ((os.path.join(folder, SERVER_PUBLIC), os.path.join(bundle, SERVER_PUBLIC)),
                         (os.path.join(bundle, CLIENT_PUBLIC),
                          os.path.join(key_roles.allow_list_dir(folder, "learner"), host + ".key"))):
            if _copy_public(src, dst):
                written.append(dst)
    target = roles_dir or key_roles.roles_dir(folder)
    written += key_roles.export_roles(folder, target)
    return written


def revoke(folder: str, hosts: list[str]) -> list[str]:
    """Remove each host's allow-list entry (``clients/learner/<host>.key``) and keys folder
    (``hosts/<host>/``); ``ensure_keys`` then removes the entry from the learner's own folder.
    Returns what was removed."""
    removed = []
    for host in hosts:
        entry = os.path.join(key_roles.allow_list_dir(folder, "learner"), host + ".key")
        if os.path.exists(entry):
            os.remove(entry)
            removed.append(entry)
        bundle = os.path.join(folder, HOSTS, host)
        if os.path.isdir(bundle):
            shutil.rmtree(bundle)
            removed.append(bundle)
    return removed


def bundle_tar(folder: str, host: str) -> bytes:
    """``hosts/<host>/`` as a .tar.gz whose members are ``server.key``, ``client.key`` and
    ``client.key_secret`` (extract it into the rollout host's keys folder)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in (SERVER_PUBLIC, CLIENT_PUBLIC, CLIENT_SECRET):
            info = tar.gettarinfo(os.path.join(folder, HOSTS, host, name), arcname=name)
            info.uid = info.gid = IMAGE_UID
            info.uname = info.gname = ""
            info.mode = SECRET_MODE if name == CLIENT_SECRET else 0o644
            with open(os.path.join(folder, HOSTS, host, name), "rb") as fh:
                tar.addfile(info, fh)
    return buf.getvalue()


def write_private(path: str, data: bytes) -> None:
    """``data`` into ``path``, created mode 0600 (an existing file is replaced, not reused)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, SECRET_MODE)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, SECRET_MODE)
    os.replace(tmp, path)


def scrape_targets(host: str, address: str) -> list[dict]:
    """Prometheus's file_sd document for rollout host ``host`` whose metrics are published on
    ``address`` (``HOST:PORT`` or ``HOST:FIRST-LAST``, compose.rollout.yaml's
    ``FLEET_METRICS_PUBLISH``): one target a port, labelled ``host``. ValueError names the bad part."""
    where, sep, ports = address.rpartition(":")
    if not sep or not where:
        raise ValueError(f"{address!r}: write ADDRESS:PORT or ADDRESS:FIRST-LAST, e.g. 10.0.0.7:9110-9117")
    first, _, last = ports.partition("-")
    try:
        lo, hi = int(first), int(last or first)
    except ValueError:
        raise ValueError(f"{address!r}: the ports {ports!r} are not PORT or FIRST-LAST") from None
    if not 1 <= lo <= hi <= 65535 or hi - lo >= MAX_PORTS:
        raise ValueError(f"{address!r}: ports {lo}-{hi} must lie in 1-65535, first <= last, at most {MAX_PORTS}")
    if where in ("127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]"):
        raise ValueError(f"{address!r}: {where} is not an address the learner host's Prometheus can reach; give the "
                         "rollout host's own address (FLEET_METRICS_PUBLISH on that host must publish on it too)")
    return [{"targets": [f"{where}:{p}" for p in range(lo, hi + 1)], "labels": {"host": host}}]


def _metrics_arg(text: str) -> tuple[str, str]:
    name, sep, address = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: write NAME=ADDRESS:PORTS, e.g. box2=10.0.0.7:9110-9117")
    name = _host_name(name)
    try:
        scrape_targets(name, address)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name, address


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
    p.add_argument("--revoke", action="append", type=_host_name, default=[], metavar="NAME",
                   help="revoke extra rollout host NAME: its key leaves the learner's allow-list (new "
                   "connections are refused, no restart) and its keys folder is deleted (repeatable)")
    p.add_argument("--bundle", type=_host_name, metavar="NAME",
                   help="write host NAME's keys (created if missing) to standard output as a .tar.gz "
                   "and nothing else there")
    p.add_argument("--k8s-secrets", action="store_true",
                   help="write the keys to standard output as two Kubernetes Secrets (JSON, for `kubectl apply -f -`; "
                        "docs/kubernetes.md) and nothing else there")
    p.add_argument("--namespace", default="royalefleet", help="the Secrets' namespace (default: %(default)s)")
    p.add_argument("-o", "--output", dest="out", metavar="FILE",
                   help="with --bundle: write the .tar.gz to FILE (mode 0600) instead of standard output (--out, "
                   "elsewhere a folder, is refused here)")
    p.add_argument("--out", dest="old_out", help=argparse.SUPPRESS)
    p.add_argument("--metrics", action="append", type=_metrics_arg, default=[], metavar="NAME=ADDRESS:PORTS",
                   help="the central Prometheus scrapes rollout host NAME's rollouts at ADDRESS:PORT or "
                   "ADDRESS:FIRST-LAST (that host's FLEET_METRICS_PUBLISH): writes NAME.json into --targets-dir "
                   "(repeatable)")
    p.add_argument("--targets-dir", default=TARGETS_DIR, metavar="FOLDER",
                   help="where --metrics writes its files, the folder prometheus.yml's rollout-hosts job reads "
                   "(default: %(default)s); '-' prints the one --metrics file to standard output")
    p.set_defaults(func=run)


def write_targets(metrics: list[tuple[str, str]], targets_dir: str) -> list[str]:
    """The ``--metrics`` files (``-``: printed); returns the paths written."""
    if targets_dir == "-":
        (name, address), = metrics
        sys.stdout.write(json.dumps(scrape_targets(name, address), indent=2) + "\n")
        return []
    os.makedirs(targets_dir, exist_ok=True)
    written = []
    for name, address in metrics:
        path = os.path.join(targets_dir, name + ".json")
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(json.dumps(scrape_targets(name, address), indent=2) + "\n")
        os.replace(tmp, path)
        written.append(path)
    return written


def run(args) -> int:
    if args.hosts < 0:
        print("royalefleet keys: --hosts must be >= 0", file=sys.stderr)
        return 2
    if args.old_out is not None:
        print(f"royalefleet keys: --out {args.old_out}: the archive's file is -o/--output {args.old_out} (--out names "
              "a folder wherever it is taken)", file=sys.stderr)
        return 2
    if args.out and not args.bundle:
        print("royalefleet keys: --output names where --bundle NAME's archive goes; give --bundle too", file=sys.stderr)
        return 2
    if args.targets_dir == "-" and (len(args.metrics) != 1 or (args.bundle and not args.out) or args.k8s_secrets):
        print("royalefleet keys: --targets-dir - prints one --metrics file, and standard output is its only "
              "use (give exactly one --metrics, and --out with --bundle)", file=sys.stderr)
        return 2
    hosts = [f"host-{k}" for k in range(1, args.hosts + 1)] + list(args.host)
    if args.bundle:
        hosts.append(args.bundle)
    if args.bundle and args.k8s_secrets:
        print("royalefleet keys: --bundle and --k8s-secrets both write to standard output; give one", file=sys.stderr)
        return 2
    hosts = list(dict.fromkeys(hosts))
    folder = args.dir
    both = sorted(set(hosts) & set(args.revoke))
    if both:
        print(f"royalefleet keys: {', '.join(both)} both revoked and asked for; give one", file=sys.stderr)
        return 2
    revoked = revoke(folder, args.revoke)
    written = ensure_keys(folder, hosts)
    if args.metrics:
        written += write_targets(args.metrics, args.targets_dir)
    # With --bundle or --k8s-secrets the output owns standard output; the report goes to standard error.
    out = sys.stderr if (args.bundle and not args.out) or args.k8s_secrets or args.targets_dir == "-" else sys.stdout

    def say(text: str = "") -> None:
        print(text, file=out, flush=True)

    say(f"keys in {os.path.abspath(folder)}: " + (f"wrote {len(written)} file(s)" if written else "all present, nothing written"))
    for path in revoked:
        say(f"  - {path} (revoked)")
    for path in written:
        say(f"  + {path}")
    for server in key_roles.SERVERS:
        listed = key_roles.allow_list_dir(folder, server)
        allowed = sorted(n[:-4] for n in os.listdir(listed) if n.endswith(".key"))
        say(f"the {server} admits ({ALLOWED_CLIENTS}/{server}/): {', '.join(allowed)}")
    say()
    say(f"On the learner host: each service's {CURVE_DIR_ENV} names its own role's folder, "
        f"{key_roles.roles_dir(folder)}/<role> (Compose")
    say(f"  mounts each role's volume at /keys). {SERVER_SECRET} and the client secrets stay on this host.")
    extra = sorted(os.listdir(os.path.join(folder, HOSTS))) if os.path.isdir(os.path.join(folder, HOSTS)) else []
    for host in extra:
        say(f"On rollout host {host}: copy {os.path.join(folder, HOSTS, host)}/ ({SERVER_PUBLIC}, {CLIENT_PUBLIC}, "
            f"{CLIENT_SECRET}) into its keys folder (compose.rollout.yaml: ./keys), then delete the copy here.")
    if not extra:
        say("Extra rollout hosts: add one with --host NAME (or --bundle NAME to get its keys as a .tar.gz).")
    say("Revoke a host: --revoke NAME (no restart needed).")
    if args.k8s_secrets:
        from royalefleet.k8s.secrets import key_secrets_json

        sys.stdout.write(key_secrets_json(folder, args.namespace))
        sys.stdout.flush()
    if args.bundle and args.out:
        write_private(args.out, bundle_tar(folder, args.bundle))
        say(f"wrote {args.out} (mode 0600): host {args.bundle}'s keys; copy it to that host, then delete it here")
    elif args.bundle:
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
