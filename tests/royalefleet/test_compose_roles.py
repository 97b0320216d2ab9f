"""compose.yaml and compose.rollout.yaml give each role only the keys it needs, harden every
container, and require what must not have a default (issue 38; docs/reliability.md "Least
privilege by role")."""

from __future__ import annotations

import pytest

from royalefleet import key_roles
import subprocess

from tests.royalefleet.test_compose import ROLLOUT_HOST_ENV, ROOT, compose, load_yaml

ROLE_SERVICES = {"learner": "learner", "ladder": "ladder", "checkpoint": "checkpoint", "rollout": "rollout",
                 "evaluator": "evaluator"}


def key_mounts(spec: dict) -> list[str]:
    return [v for v in spec.get("volumes", []) if v.split(":")[0].startswith("keys") or ":/keys" in v]


def test_each_role_mounts_its_own_keys_volume_and_nothing_else_of_the_keys():
    services = compose("compose.yaml", {})["services"]
    for service, role in ROLE_SERVICES.items():
        assert key_mounts(services[service]) == [f"keys-{role}:/keys:ro"], service
    # only the one-shot keys service mounts the keys folder with every secret, and it fills the role volumes
    keys = services["keys"]
    assert sorted(keys["volumes"]) == sorted(["keys:/keys"] + [f"keys-{r}:/keys-roles/{r}" for r in key_roles.ROLES])
    assert keys["environment"][key_roles.ROLES_DIR_ENV] == "/keys-roles"
    for name, spec in services.items():
        if name != "keys":
            assert not any(v.split(":")[0] == "keys" for v in spec.get("volumes", [])), name
    volumes = compose("compose.yaml")["volumes"]
    assert {f"keys-{r}" for r in key_roles.ROLES} <= set(volumes)


def test_a_rollout_container_sees_no_server_secret_and_no_other_hosts_key(tmp_path):
    """What the rollout's volume holds, as `royalefleet keys` fills it with the keys service's
    settings: the server's public key and its own keypair."""
    from royalefleet import cmd_keys

    cmd_keys.ensure_keys(str(tmp_path / "keys"), ["box2", "box3"], roles_dir=str(tmp_path / "roles"))
    for role in ("rollout", "evaluator"):
        seen = {p.relative_to(tmp_path / "roles" / role).as_posix() for p in (tmp_path / "roles" / role).rglob("*")}
        assert "server.key_secret" not in seen and not any("box" in n for n in seen), (role, seen)


def test_the_rollout_host_file_mounts_only_the_hosts_three_key_files():
    raw = load_yaml(ROOT / "compose.rollout.yaml")["services"]["rollout"]
    remote = compose("compose.rollout.yaml", ROLLOUT_HOST_ENV)["services"]["rollout"]
    mounts = [v for v in remote["volumes"] if v.endswith(":ro")]
    assert mounts == [f"./keys/{name}:/keys/{name}:ro" for name in ("server.key", "client.key", "client.key_secret")]
    assert not any(v.startswith("keys") for v in remote["volumes"])  # no named keys volume of compose.yaml's
    assert type(raw["volumes"]).__name__ == "Override"


HARDENED = ("keys", "checkpoint", "ladder", "learner", "rollout", "evaluator", "prometheus", "alertmanager")


@pytest.mark.parametrize("name", ["compose.yaml", "compose.rollout.yaml"])
def test_every_container_is_hardened(name):
    services = compose(name, ROLLOUT_HOST_ENV)["services"]
    for svc, spec in services.items():
        assert spec["cap_drop"] == ["ALL"], svc
        assert spec["security_opt"] == ["no-new-privileges:true"], svc
        assert int(spec["pids_limit"]) > 0 and spec["mem_limit"], svc
        if svc in HARDENED:
            assert spec["read_only"] is True and spec["tmpfs"] == ["/tmp"], svc
    # the variables move the limits
    learner = compose("compose.yaml", {"FLEET_LEARNER_MEMORY": "48g", "FLEET_PIDS_LIMIT": "900"})["services"]["learner"]
    assert learner["mem_limit"] == "48g" and learner["pids_limit"] == "900"


def test_grafana_refuses_to_start_without_an_admin_password_and_is_not_anonymous_by_default(tmp_path):
    grafana = compose("compose.yaml", {})["services"]["grafana"]
    env = grafana["environment"]
    assert env["GF_SECURITY_ADMIN_PASSWORD"] == "" and env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert compose("compose.yaml", {"GRAFANA_ADMIN_PASSWORD": "pw"})["services"]["grafana"]["environment"][
        "GF_SECURITY_ADMIN_PASSWORD"] == "pw"
    on = compose("compose.yaml", {"GRAFANA_ANONYMOUS": "true"})["services"]["grafana"]["environment"]
    assert on["GF_AUTH_ANONYMOUS_ENABLED"] == "true" and on["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    # The entrypoint, run for real by sh (Compose turns $$ into $): no password, exit 2 naming the
    # variable, before Grafana's own entrypoint; with one, it hands over to /run.sh with the arguments.
    argv = [a.replace("$$", "$") for a in grafana["entrypoint"]]
    assert argv[:2] == ["/bin/sh", "-c"]
    refused = subprocess.run(argv + ["--flag"], env={"PATH": "/usr/bin:/bin", "GF_SECURITY_ADMIN_PASSWORD": ""},
                             capture_output=True, text=True, timeout=10)
    assert refused.returncode == 2 and "set GRAFANA_ADMIN_PASSWORD" in refused.stderr
    script = argv[2].replace("exec /run.sh", f"exec {tmp_path}/run.sh")
    (tmp_path / "run.sh").write_text('#!/bin/sh\necho "grafana started with $*"\n')
    (tmp_path / "run.sh").chmod(0o755)
    ran = subprocess.run(argv[:2] + [script] + argv[3:] + ["--flag"], capture_output=True, text=True, timeout=10,
                         env={"PATH": "/usr/bin:/bin", "GF_SECURITY_ADMIN_PASSWORD": "pw"})
    assert ran.returncode == 0 and ran.stdout == "grafana started with --flag\n"


def test_alertmanager_is_published_on_loopback_only():
    for env in ({}, {"ALERTMANAGER_PORT": "19093"}):
        (published,) = compose("compose.yaml", env)["services"]["alertmanager"]["ports"]
        assert published.startswith("127.0.0.1:") and published.endswith(":9093"), published
