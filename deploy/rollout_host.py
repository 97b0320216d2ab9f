"""Everything a rollout host needs, in one archive, made on the learner host:

    make rollout-host NAME=box2 ADDRESS=10.0.0.7 [ROLLOUTS=8] [LEARNER=10.0.0.5]      # Compose learner
    make rollout-host NAME=box2 ADDRESS=10.0.0.7 LEARNER=10.0.0.5 LOCAL=1 [RUN=...]   # a `make run` learner

(``python3 deploy/rollout_host.py NAME --address ADDRESS ...``: the standard library only, so a
learner host running Compose needs no Python environment). It writes ``NAME-rollout-host.tgz``
(mode 0600), which holds

- ``keys/``: host NAME's CURVE keys, from ``royalefleet keys --bundle NAME`` as it is (under
  Compose run in the ``keys`` container, on the keys volume; with ``--local`` on ``./keys``);
  the host's public key joins the learner's allow-list at once;
- ``.env``: ``COMPOSE_FILE=compose.rollout.yaml``, the learner's address, the run's battles and
  shards, the host's rollout count and ``FLEET_METRICS_PUBLISH=ADDRESS:9110-9173`` (64 ports:
  up to 64 rollout replicas on the host);

and, under Compose, the learner host's Prometheus target file ``prometheus/targets/NAME.json``
(``royalefleet keys --metrics``). On the rollout host, in a checkout of this repository:

    sudo tar -xzf box2-rollout-host.tgz && docker compose up -d

(``sudo``: the key files belong to the image's user, uid 10001, as ``royalefleet keys`` made
them; ``.env`` belongs to root, mode 0644.)

The learner must listen where the host reaches it. Under Compose, ``--learner ADDRESS`` (the
learner host's LAN address) appends ``FLEET_LEARNER_PUBLISH=ADDRESS:5555`` to ``.env`` when it
publishes on loopback and recreates the learner (``docker compose up -d learner``: it
checkpoints and resumes). With ``--local``, it sets ``services.host`` in the run's
``config.json`` to that address (every local service then binds there, CURVE on), and the local
stack must be started again with ``ROYALEFLEET_CURVE_DIR=keys make run``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tarfile

METRICS_PORT = 9110
HOST_PORTS = 64
"""Metrics ports a rollout host publishes (9110-9173): its replica cap."""
LEARNER_PORT = 5555
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
LOOPBACK = ("127.", "localhost", "[::1]", "::1")


class Refused(Exception):
    """A setting that cannot make a working host; the message names it and the fix."""


def read_env(path: str) -> dict[str, str]:
    """``KEY=value`` lines of a Compose ``.env`` file (``#`` lines skipped, the last one wins,
    surrounding quotes dropped); an absent file is empty."""
    out: dict[str, str] = {}
    if not os.path.exists(path):
        return out
    with open(path, errors="replace") as fh:
        for line in fh:
            key, sep, value = line.strip().removeprefix("export ").partition("=")
            if sep and key and not key.startswith("#"):
                value = value.strip()
                if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                    value = value[1:-1]
                out[key.strip()] = value
    return out


def host_env(name: str, learner: str, battles: int, shards: int, rollouts: int, address: str) -> str:
    """The rollout host's ``.env``."""
    return "\n".join([
        f"# Rollout host {name} (made on the learner host by deploy/rollout_host.py; docs/compose.md "
        "\"Adding a rollout host\")",
        "COMPOSE_FILE=compose.rollout.yaml",
        f"ROYALEFLEET_LEARNER={learner}",
        f"FLEET_BATTLES={battles}",
        f"FLEET_SHARDS={shards}",
        f"FLEET_HOST_ROLLOUTS={rollouts}",
        f"FLEET_METRICS_PUBLISH={address}:{METRICS_PORT}-{METRICS_PORT + HOST_PORTS - 1}",
        "",
    ])


def archive(keys_tgz: bytes, env_text: str) -> bytes:
    """``keys/<file>`` for every file of the keys bundle (owner and mode kept) and ``.env``."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(keys_tgz), mode="r:gz") as keys, \
            tarfile.open(fileobj=out, mode="w:gz") as tar:
        names = keys.getnames()
        if not names:
            raise Refused("the keys bundle is empty: `royalefleet keys --bundle` wrote nothing")
        for member in keys.getmembers():
            if not member.isfile() or "/" in member.name or member.name.startswith("."):
                raise Refused(f"unexpected member {member.name!r} in the keys bundle")
            data = keys.extractfile(member)
            member.name = "keys/" + member.name
            tar.addfile(member, data)
        info = tarfile.TarInfo(".env")
        raw = env_text.encode()
        info.size, info.mode, info.uid, info.gid = len(raw), 0o644, 0, 0
        tar.addfile(info, io.BytesIO(raw))
    return out.getvalue()


def _run(cmd: list[str], what: str) -> bytes:
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Refused(f"{what}: `{' '.join(cmd[:3])} ...` did not run: {exc}") from exc
    if done.returncode != 0:
        raise Refused(f"{what}: `{' '.join(cmd)}` exited {done.returncode}: "
                      f"{done.stderr.decode(errors='replace').strip()[-400:]}")
    return done.stdout


def compose_side(args, say) -> tuple[str, int, int, bytes]:
    """Under Compose: the learner's address, the run's battles and shards, the keys bundle; the
    Prometheus target file written, the learner published on ``--learner`` when asked."""
    env = read_env(args.env_file)
    publish = env.get("FLEET_LEARNER_PUBLISH", f"127.0.0.1:{LEARNER_PORT}")
    if args.learner and publish.startswith(LOOPBACK):
        publish = f"{args.learner}:{LEARNER_PORT}"
        with open(args.env_file, "a") as fh:
            fh.write(f"FLEET_LEARNER_PUBLISH={publish}\n")
        say(f"appended FLEET_LEARNER_PUBLISH={publish} to {args.env_file}; recreating the learner to publish there")
        _run([args.docker, "compose", "up", "-d", "learner"], "publishing the learner")
    host, _, port = publish.rpartition(":")
    if host in ("0.0.0.0", "[::]") and args.learner:
        host = args.learner  # published on every address: the one the rollout host reaches
    if publish.startswith(LOOPBACK) or host in ("0.0.0.0", "", "[::]"):
        raise Refused(f"the learner is published on {publish} (FLEET_LEARNER_PUBLISH in {args.env_file}), which a "
                      f"rollout host cannot name: give LEARNER=<this host's LAN address> (--learner)")
    keys = [args.docker, "compose", "run", "--rm", "-T", "--no-deps", "keys", "python", "-m", "royalefleet.cmd_keys",
            "--dir", "/keys"]
    bundle = _run(keys + ["--bundle", args.name], "making the host's keys")
    targets = _run(keys + ["--metrics", f"{args.name}={args.address}:{METRICS_PORT}-{METRICS_PORT + HOST_PORTS - 1}",
                           "--targets-dir", "-"], "writing the Prometheus target file")
    path = os.path.join(args.targets_dir, args.name + ".json")
    os.makedirs(args.targets_dir, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(targets)
    say(f"wrote {path}: the learner host's Prometheus scrapes {args.name}'s rollouts within a minute")
    return (f"tcp://{host}:{port}", int(env.get("FLEET_BATTLES", 16)), int(env.get("FLEET_SHARDS", 2)), bundle)


def local_side(args, say) -> tuple[str, int, int, bytes]:
    """With ``--local`` (a ``make run`` learner): the run's config gives battles, shards and the
    learner port; ``services.host`` is set to ``--learner``; the keys are made in ``./keys``."""
    if not args.learner:
        raise Refused("--local needs LEARNER=<this host's LAN address> (--learner): the local stack listens on "
                      "loopback until told otherwise")
    path = os.path.join(args.runs_dir, args.run, "config.json")
    if not os.path.exists(path):
        raise Refused(f"no run config {path}: start the run once (`make run`), or name it with RUN= (--run)")
    with open(path) as fh:
        cfg = json.load(fh)
    services = cfg.setdefault("services", {})
    if services.get("host") != args.learner:
        services["host"] = args.learner
        with open(path + ".tmp", "w") as fh:
            json.dump(cfg, fh, indent=2)
        os.replace(path + ".tmp", path)
        say(f"set services.host = {args.learner} in {path}: every local service binds there from the next start")
    bundle = _run([args.python, "-m", "royalefleet.cmd_keys", "--dir", "keys", "--bundle", args.name],
                  "making the host's keys")
    rollout = cfg.get("rollout", {})
    run = os.path.basename(os.path.dirname(path))
    again = "make run" if run == "default" else f"royalefleet resume {run}"
    say(f"start the local stack again with CURVE on: ROYALEFLEET_CURVE_DIR=keys {again}")
    return (f"tcp://{args.learner}:{services.get('learner_port', LEARNER_PORT)}", int(rollout.get("battles", 16)),
            int(rollout.get("shards", 2)), bundle)


def main(argv: list[str] | None = None, say=print) -> int:
    p = argparse.ArgumentParser(prog="deploy/rollout_host.py", description=__doc__.split("\n\n")[0])
    p.add_argument("name", help="the host's name (its keys' name, its Prometheus target file's)")
    p.add_argument("--address", required=True, help="the rollout host's address, where Prometheus scrapes it")
    p.add_argument("--rollouts", type=int, default=1, help=f"its rollout replicas, 1-{HOST_PORTS} (default 1)")
    p.add_argument("--learner", help="this (the learner) host's LAN address, when the learner is not yet published")
    p.add_argument("--local", action="store_true", help="the learner is a `make run` stack on this host")
    p.add_argument("--run", default="default", help="with --local: the run (default: default)")
    p.add_argument("--runs-dir", default="runs", help="with --local: the runs folder (default: runs)")
    p.add_argument("--python", default=os.path.join(".venv", "bin", "python"), help="with --local: the venv's python")
    p.add_argument("--env-file", default=".env", help="the learner host's Compose .env (default: .env)")
    p.add_argument("--targets-dir", default=os.path.join("prometheus", "targets"))
    p.add_argument("--docker", default="docker")
    p.add_argument("--out", help="the archive (default: NAME-rollout-host.tgz)")
    args = p.parse_args(argv)
    try:
        if not NAME.match(args.name):
            raise Refused(f"host name {args.name!r}: letters, digits, '.', '_', '-', at most 63, e.g. box2")
        if not 1 <= args.rollouts <= HOST_PORTS:
            raise Refused(f"ROLLOUTS={args.rollouts}: 1 to {HOST_PORTS} on one host (its metrics ports "
                          f"{METRICS_PORT}-{METRICS_PORT + HOST_PORTS - 1}); more: a second host")
        learner, battles, shards, bundle = (local_side if args.local else compose_side)(args, say)
        data = archive(bundle, host_env(args.name, learner, battles, shards, args.rollouts, args.address))
    except (Refused, ValueError, OSError, tarfile.TarError) as exc:
        print(f"rollout_host: {exc}", file=sys.stderr)
        return 2
    out = args.out or f"{args.name}-rollout-host.tgz"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(out, 0o600)
    say(f"wrote {out} (keys/ and .env: learner {learner}, {battles} battles in {shards} shards, {args.rollouts} "
        f"rollout(s)). On {args.name}, in a checkout of this repository:")
    say(f"  sudo tar -xzf {os.path.basename(out)} && docker compose up -d")
    return 0


if __name__ == "__main__":
    sys.exit(main())
