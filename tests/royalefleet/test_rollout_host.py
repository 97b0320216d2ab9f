"""deploy/rollout_host.py (``make rollout-host``): one archive holding a rollout host's keys and
its .env, made with ``royalefleet keys`` as it is (in the keys container under Compose, a fake
``docker`` here; on ./keys for a ``make run`` learner), and the Prometheus target file."""

from __future__ import annotations

import importlib.util
import io
import json
import re
import stat
import sys
import tarfile
from pathlib import Path

import pytest

from tests.royalefleet.test_compose import compose, interpolate, read_env_file

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("rollout_host", ROOT / "deploy" / "rollout_host.py")
rh = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rh)


def fake_docker(tmp_path: Path) -> str:
    """A ``docker`` that runs ``compose run ... keys python -m royalefleet.cmd_keys ARGS`` as
    this Python on ``tmp_path/volume`` (the keys volume), and logs every call."""
    path = tmp_path / "docker"
    (tmp_path / "volume").mkdir()
    path.write_text(f"""#!{sys.executable}
import subprocess, sys
open({str(tmp_path / 'calls')!r}, "a").write(" ".join(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
if "royalefleet.cmd_keys" in args:
    rest = args[args.index("royalefleet.cmd_keys") + 1:]
    rest[rest.index("--dir") + 1] = {str(tmp_path / 'volume')!r}
    sys.exit(subprocess.run([sys.executable, "-m", "royalefleet.cmd_keys", *rest], cwd={str(ROOT)!r}).returncode)
""")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def members(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_a_compose_learner_host_makes_the_whole_host_in_one_archive(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path(".env").write_text("FLEET_CLASS=laptop\nFLEET_BATTLES=32\nFLEET_SHARDS=2\n")
    said = []
    code = rh.main(["box2", "--address", "10.0.0.7", "--rollouts", "64", "--learner", "10.0.0.5",
                    "--docker", fake_docker(tmp_path)], say=said.append)
    assert code == 0, said
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0] == "compose up -d learner"  # published beyond loopback first
    assert "FLEET_LEARNER_PUBLISH=10.0.0.5:5555\n" in Path(".env").read_text()
    out = tmp_path / "box2-rollout-host.tgz"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    got = members(out)
    assert sorted(got) == [".env", "keys/client.key", "keys/client.key_secret", "keys/server.key"]
    assert got["keys/client.key_secret"].mode & 0o077 == 0 and got[".env"].uid == 0
    with tarfile.open(out) as tar:
        env_text = tar.extractfile(".env").read().decode()
        secret = tar.extractfile("keys/client.key_secret").read()
    (tmp_path / "host.env").write_text(env_text)
    env = read_env_file(tmp_path / "host.env")
    assert env == {"COMPOSE_FILE": "compose.rollout.yaml", "ROYALEFLEET_LEARNER": "tcp://10.0.0.5:5555",
                   "FLEET_BATTLES": "32", "FLEET_SHARDS": "2", "FLEET_HOST_ROLLOUTS": "64",
                   "FLEET_METRICS_PUBLISH": "10.0.0.7:9110-9173"}
    # the host's key, the one the learner's allow-list now holds
    assert secret == (tmp_path / "volume" / "hosts" / "box2" / "client.key_secret").read_bytes()
    # on the learner's allow-list and in the learner role's own keys (per-server allow-lists, issue 38)
    assert (tmp_path / "volume" / "clients" / "learner" / "box2.key").exists()
    assert (tmp_path / "volume" / "roles" / "learner" / "clients" / "box2.key").exists()
    assert not (tmp_path / "volume" / "clients" / "ladder" / "box2.key").exists()
    targets = json.loads((tmp_path / "prometheus" / "targets" / "box2.json").read_text())
    assert len(targets[0]["targets"]) == 64 and targets[0]["labels"]["host"] == "box2"
    # what compose.rollout.yaml makes of that .env: 64 replicas, one metrics port each
    rollout = interpolate(compose("compose.rollout.yaml"), env)["services"]["rollout"]
    assert rollout["deploy"]["replicas"] == "64" and rollout["ports"] == ["10.0.0.7:9110-9173:9110"]
    assert said[-1] == "  sudo tar -xzf box2-rollout-host.tgz && docker compose up -d"


def test_a_learner_on_loopback_is_refused_naming_the_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert rh.main(["box2", "--address", "10.0.0.7", "--docker", fake_docker(tmp_path)], say=lambda s: None) == 2
    assert capsys.readouterr().err == (
        "rollout_host: the learner is published on 127.0.0.1:5555 (FLEET_LEARNER_PUBLISH in .env), which a rollout "
        "host cannot name: give LEARNER=<this host's LAN address> (--learner)\n")
    assert not (tmp_path / "box2-rollout-host.tgz").exists()
    for argv, says in ((["bad name!", "--address", "x"], "host name 'bad name!'"),
                       (["box2", "--address", "x", "--rollouts", "65"], "ROLLOUTS=65: 1 to 64 on one host")):
        assert rh.main(argv, say=lambda s: None) == 2
        assert says in capsys.readouterr().err


def test_a_make_run_learner_binds_where_the_host_reaches_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "default"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"profile": "cpu", "rollout": {"battles": 16, "shards": 2},
                                                 "services": {"host": "127.0.0.1", "learner_port": 5555}}))
    said = []
    code = rh.main(["box3", "--address", "10.0.0.8", "--local", "--learner", "10.0.0.5", "--python", sys.executable],
                   say=said.append)
    assert code == 0, said
    assert json.loads((run / "config.json").read_text())["services"]["host"] == "10.0.0.5"
    assert "start the local stack again with CURVE on: ROYALEFLEET_CURVE_DIR=keys make run" in said
    assert (tmp_path / "keys" / "clients" / "learner" / "box3.key").exists()
    assert (tmp_path / "keys" / "roles" / "learner" / "clients" / "box3.key").exists()
    with tarfile.open(tmp_path / "box3-rollout-host.tgz") as tar:
        env = tar.extractfile(".env").read().decode()
    assert "ROYALEFLEET_LEARNER=tcp://10.0.0.5:5555\n" in env and "FLEET_BATTLES=16\n" in env
    assert not (tmp_path / "prometheus").exists()  # no Prometheus under make run


@pytest.mark.parametrize("name", ["cpu", "laptop", "workstation", "many_core"])
def test_each_class_env_names_its_files_and_the_monitoring_profile(name):
    env = read_env_file(ROOT / "deploy" / "env" / f"{name}.env")
    assert env["FLEET_CLASS"] == name and env["COMPOSE_PROFILES"] == "monitoring"
    files = env["COMPOSE_FILE"].split(":")
    assert files == (["compose.yaml"] if name == "cpu" else ["compose.yaml", "compose.gpu.yaml"])
    assert all((ROOT / f).exists() for f in files)


@pytest.mark.skipif(__import__("shutil").which("make") is None, reason="no make")
def test_make_compose_writes_env_once_and_refuses_another_class(tmp_path):
    """`make compose CLASS=laptop`: .env from deploy/env/laptop.env the first time, the same
    .env kept after (the receiver line added to it survives), another class refused naming both."""
    import shutil
    import subprocess

    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copytree(ROOT / "deploy" / "env", tmp_path / "deploy" / "env")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "docker").write_text("#!/bin/sh\necho \"docker $*\" >> calls\n")
    (tmp_path / "bin" / "docker").chmod(0o755)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}

    def make(*args):
        return subprocess.run(["make", "-s", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)

    assert make("compose", "CLASS=laptop").returncode == 0
    written = (tmp_path / ".env").read_text()
    class_env = (ROOT / "deploy" / "env" / "laptop.env").read_text()
    # the class's file, then a random Grafana admin password (Grafana has no default one)
    assert written.startswith(class_env)
    password = written[len(class_env):]
    assert re.fullmatch(r"GRAFANA_ADMIN_PASSWORD=[A-Za-z0-9_-]{24}\n", password), password
    with open(tmp_path / ".env", "a") as fh:
        fh.write("ALERT_WEBHOOK_URL=https://ntfy.sh/t\n")
    assert make("compose", "CLASS=laptop").returncode == 0
    assert (tmp_path / ".env").read_text() == written + "ALERT_WEBHOOK_URL=https://ntfy.sh/t\n"  # kept, password too
    assert (tmp_path / "calls").read_text() == "docker compose up -d\n" * 2
    other = make("compose", "CLASS=cpu")
    assert other.returncode == 2 and ".env is of class 'laptop', not cpu" in other.stderr
    unknown = make("compose", "CLASS=laptpo")
    assert unknown.returncode == 2 and "NAME one of: cpu laptop many_core workstation" in unknown.stderr
