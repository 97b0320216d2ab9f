"""``royalefleet keys`` writes secrets privately (folders 0700, secret keys 0600, a bundle written
with ``--out`` 0600, an older folder tightened), and ``--metrics`` writes the central
Prometheus's scrape targets for a rollout host (issue 28)."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from royalefleet import cmd_keys

ROOT = Path(__file__).resolve().parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def keys(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "royalefleet.cmd_keys", *args], cwd=cwd, capture_output=True,
                          env=os.environ | {"PYTHONPATH": str(ROOT)}, timeout=60)


def test_folders_are_0700_secrets_0600_and_an_older_folder_is_tightened(tmp_path):
    folder = tmp_path / "keys"
    (folder / "clients").mkdir(parents=True, mode=0o755)
    os.chmod(folder, 0o755)
    os.chmod(folder / "clients", 0o755)
    out = keys("--dir", str(folder), "--host", "box2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    folders = [folder, folder / "clients", folder / "hosts", folder / "hosts" / "box2"]
    assert [oct(mode(f)) for f in folders] == ["0o700"] * 4
    secrets = sorted(folder.rglob("*.key_secret"))
    assert [p.relative_to(folder).as_posix() for p in secrets] == [
        "client.key_secret", "evaluator.key_secret", "hosts/box2/client.key_secret", "learner.key_secret",
        "roles/checkpoint/server.key_secret", "roles/evaluator/client.key_secret", "roles/ladder/server.key_secret",
        "roles/learner/client.key_secret", "roles/learner/server.key_secret", "roles/rollout/client.key_secret",
        "server.key_secret"]
    assert {mode(p) for p in secrets} == {0o600}
    assert mode(folder / "roles" / "evaluator" / "ladder-evaluator.token") == 0o600
    assert {mode(p) for p in folder.rglob("*.key")} == {0o644}  # public keys stay readable
    # A folder loosened later (an older layout, a careless chmod) is tightened by the next run.
    os.chmod(folder / "hosts" / "box2", 0o755)
    os.chmod(folder, 0o750)
    assert keys("--dir", str(folder), cwd=tmp_path).returncode == 0  # box2 not named this time
    assert [oct(mode(f)) for f in folders] == ["0o700"] * 4


def test_a_bundle_written_with_out_is_0600_and_holds_the_hosts_keys(tmp_path):
    out = keys("--dir", "keys", "--bundle", "box3", "--output", "box3-keys.tgz", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().startswith("keys in ")  # the report, not the archive, on standard output
    archive = tmp_path / "box3-keys.tgz"
    assert mode(archive) == 0o600
    with tarfile.open(fileobj=io.BytesIO(archive.read_bytes())) as tar:
        members = {m.name: m.mode for m in tar.getmembers()}
        secret = tar.extractfile("client.key_secret").read()
    assert members == {"server.key": 0o644, "client.key": 0o644, "client.key_secret": 0o600}
    assert secret == (tmp_path / "keys" / "hosts" / "box3" / "client.key_secret").read_bytes()
    refused = keys("--dir", "keys", "--output", "x.tgz", cwd=tmp_path)
    assert refused.returncode == 2 and b"give --bundle too" in refused.stderr


def test_metrics_writes_one_target_a_port_labelled_with_the_host(tmp_path):
    out = keys("--dir", "keys", "--metrics", "box2=10.0.0.7:9110-9112", "--metrics", "box3=box3.lan:9110",
               cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    targets = tmp_path / "prometheus" / "targets"
    assert json.loads((targets / "box2.json").read_text()) == [
        {"targets": ["10.0.0.7:9110", "10.0.0.7:9111", "10.0.0.7:9112"], "labels": {"host": "box2"}}]
    assert json.loads((targets / "box3.json").read_text()) == [
        {"targets": ["box3.lan:9110"], "labels": {"host": "box3"}}]
    printed = keys("--dir", "keys", "--metrics", "box2=10.0.0.7:9110", "--targets-dir", "-", cwd=tmp_path)
    assert json.loads(printed.stdout) == [{"targets": ["10.0.0.7:9110"], "labels": {"host": "box2"}}]


@pytest.mark.parametrize("address,says", [
    ("10.0.0.7", "write ADDRESS:PORT or ADDRESS:FIRST-LAST"),
    ("10.0.0.7:91x0", "are not PORT or FIRST-LAST"),
    ("10.0.0.7:9117-9110", "first <= last"),
    ("127.0.0.1:9110-9117", "127.0.0.1 is not an address the learner host's Prometheus can reach"),
])
def test_a_scrape_address_prometheus_cannot_use_is_refused_by_name(address, says):
    with pytest.raises(ValueError, match=says):
        cmd_keys.scrape_targets("box2", address)


def test_prometheus_reads_the_targets_file_where_keys_writes_it():
    from royalefleet import grafana as gen

    (job,) = [j for j in gen.prometheus_config()["scrape_configs"] if j["job_name"] == gen.ROLLOUT_HOSTS_JOB]
    (pattern,) = job["file_sd_configs"][0]["files"]
    # relative to prometheus.yml, which compose.yaml mounts from ./prometheus
    assert os.path.join("prometheus", pattern) == os.path.join(cmd_keys.TARGETS_DIR, "*.json")


def files_of(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_each_role_holds_only_its_own_keys(tmp_path):
    """The per-role table of royalefleet/key_roles.py, as written: no client role holds the
    servers' secret or another role's keypair; each server admits only its protocol's clients."""
    from royalefleet import key_roles

    folder = tmp_path / "keys"
    cmd_keys.ensure_keys(str(folder), ["box2"])
    roles = folder / "roles"
    assert files_of(roles / "rollout") == {"server.key", "client.key", "client.key_secret"}
    assert files_of(roles / "evaluator") == {"server.key", "client.key", "client.key_secret", "ladder-evaluator.token"}
    assert files_of(roles / "learner") == {"server.key", "server.key_secret", "client.key", "client.key_secret",
                                           "clients/local.key", "clients/box2.key"}
    for server in ("ladder", "checkpoint"):
        assert files_of(roles / server) == {"server.key", "server.key_secret", "clients/learner.key",
                                            "clients/evaluator.key"}
    # each role's client keypair is its own: a rollout's key is not the learner's or the evaluator's
    pub = {r: (roles / r / "client.key").read_bytes() for r in ("rollout", "learner", "evaluator")}
    assert len(set(pub.values())) == 3
    assert (roles / "learner" / "clients" / "local.key").read_bytes() == pub["rollout"]
    assert (roles / "ladder" / "clients" / "learner.key").read_bytes() == pub["learner"]
    assert (roles / "checkpoint" / "clients" / "evaluator.key").read_bytes() == pub["evaluator"]
    assert set(key_roles.ROLES) == {p.name for p in roles.iterdir()}
    # a revoked host disappears from the learner's own folder
    out = keys("--dir", str(folder), "--revoke", "box2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "(revoked)" in out.stdout.decode()
    assert files_of(roles / "learner") == {"server.key", "server.key_secret", "client.key", "client.key_secret",
                                           "clients/local.key"}
    assert not (folder / "hosts" / "box2").exists()


def test_roles_dir_variable_sends_the_role_folders_elsewhere(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "royalefleet.cmd_keys", "--dir", "keys"], cwd=tmp_path, capture_output=True,
        env=os.environ | {"PYTHONPATH": str(ROOT), "ROYALEFLEET_KEYS_ROLES_DIR": str(tmp_path / "vols")}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "keys" / "roles").exists()
    assert files_of(tmp_path / "vols" / "rollout") == {"server.key", "client.key", "client.key_secret"}


def test_an_older_folder_is_migrated_keeping_every_key(tmp_path):
    """The layout before per-server allow-lists: one clients/ folder (local.key and each host's)
    that every server admitted. The next run keeps every key and admits hosts to the learner only."""
    import zmq.auth

    folder = tmp_path / "keys"
    (folder / "clients").mkdir(parents=True)
    (folder / "hosts" / "box2").mkdir(parents=True)
    zmq.auth.create_certificates(str(folder), "server")
    zmq.auth.create_certificates(str(folder), "client")
    zmq.auth.create_certificates(str(folder / "hosts" / "box2"), "client")
    (folder / "clients" / "local.key").write_bytes((folder / "client.key").read_bytes())
    (folder / "clients" / "box2.key").write_bytes((folder / "hosts" / "box2" / "client.key").read_bytes())
    before = {n: (folder / n).read_bytes() for n in ("server.key_secret", "client.key_secret",
                                                     "hosts/box2/client.key_secret")}
    out = keys("--dir", str(folder), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "older layout" in out.stderr.decode() and "moved 1 rollout host key(s)" in out.stderr.decode()
    assert {n: (folder / n).read_bytes() for n in before} == before
    assert not list((folder / "clients").glob("*.key"))  # no flat allow-list left for any server
    assert (folder / "clients" / "learner" / "box2.key").read_bytes() == (
        folder / "hosts" / "box2" / "client.key").read_bytes()
    assert files_of(folder / "roles" / "ladder") == {"server.key", "server.key_secret", "clients/learner.key",
                                                     "clients/evaluator.key"}
