"""The Compose files, the images' requirements and the machine-class env files.

* compose.yaml, compose.rollout.yaml and compose.gpu.yaml validate against the Compose
  Specification's JSON schema (the copy check-jsonschema ships), as written and after Compose's
  variable interpolation with each machine-class env file.
* One code path: each training service's command is ``python -m services.<name>``
  (``launcher.module_of``) and its environment is exactly what ``launcher.service_environments``
  gives it for the same config (addresses aside: 0.0.0.0 to bind, service names to connect),
  plus ROYALEFLEET_CURVE_DIR; every command runs.
* Scaling: no container_name or published port on the rollout (a port range on a rollout host).
* Safer defaults (issue 28): the learner's port on loopback unless FLEET_LEARNER_PUBLISH says
  otherwise; Prometheus, Alertmanager and Grafana in the ``monitoring`` profile; Grafana's
  healthcheck; the rollout's environment written once (compose.rollout.yaml extends it).
* The images: pins agree with pyproject.toml; the rollout's have no torch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path
from urllib.parse import urlparse

import pytest

from royalefleet.launcher import module_of, service_environments
from shared.config import load_config
from shared.transport import CURVE_DIR_ENV

# check-jsonschema (a dev dependency) brings the Compose schema, jsonschema and ruamel.yaml.
pytest.importorskip("check_jsonschema", reason="needs check-jsonschema (pip install check-jsonschema==0.39.0)")

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILES = ["compose.yaml", "compose.rollout.yaml", "compose.gpu.yaml", "compose.viser.yaml"]
ENV_FILES = sorted(p.name for p in (ROOT / "deploy" / "env").glob("*.env"))
TRAINING = ("checkpoint", "ladder", "learner", "rollout")
ROLLOUT_HOST_ENV = {"ROYALEFLEET_LEARNER": "tcp://learner-host.example:5555"}


# ----------------------------------------------------------------------------- helpers


class Reset(dict):
    """Compose's ``!reset`` tag (2.24+): the extended service's value is dropped. An empty
    mapping to the schema."""


class Override(list):
    """Compose's ``!override`` tag (2.24.4+) on a sequence: it replaces the extended service's
    value instead of being merged with it."""


def load_yaml(path: Path):
    from ruamel.yaml import YAML  # check-jsonschema's YAML parser

    yaml = YAML(typ="safe", pure=True)
    yaml.constructor.add_constructor("!reset", lambda loader, node: Reset())
    yaml.constructor.add_constructor("!override", lambda loader, node: Override(loader.construct_sequence(node, deep=True)))
    return yaml.load(path.read_text())


def _merge(base: dict, over: dict) -> dict:
    """Compose's merge of a service over the one it extends (compose-spec 13-merge.md, the keys
    these files use): mappings merged key by key, volumes by their target, ports appended,
    ``!reset`` dropping the base's value, anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Reset):
            out.pop(key, None)
        elif isinstance(value, Override):
            out[key] = list(value)
        elif key == "volumes":
            by_target = {v.split(":")[1]: v for v in base.get(key, [])} | {v.split(":")[1]: v for v in value}
            out[key] = list(by_target.values())
        elif key == "ports":
            out[key] = list(base.get(key, [])) + list(value)
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = base[key] | value
        else:
            out[key] = value
    return out


def resolve_extends(doc: dict) -> dict:
    """``doc`` with every ``extends: {file, service}`` replaced by the merged service, as Compose
    loads it (each file as written; interpolation comes after)."""
    services = {}
    for name, spec in doc.get("services", {}).items():
        ext = spec.get("extends")
        if ext:
            base = resolve_extends(load_yaml(ROOT / ext["file"]))["services"][ext["service"]]
            spec = _merge(base, {k: v for k, v in spec.items() if k != "extends"})
        services[name] = spec
    return doc | {"services": services}


def compose_schema() -> dict:
    # check-jsonschema (PyPI) vendors the Compose Specification's schema, compose-spec.json.
    ref = resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    return json.loads(ref.read_text())


def schema_errors(doc) -> list[str]:
    import jsonschema

    schema = compose_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return [f"{'/'.join(map(str, e.absolute_path)) or '<top>'}: {e.message}"
            for e in sorted(cls(schema).iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]


def read_env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


_VAR = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def interpolate(value, env: dict[str, str]):
    """Compose's interpolation of every string value: $VAR, ${VAR}, ${VAR:-d}, ${VAR-d},
    ${VAR:?msg}, ${VAR?msg}, ${VAR:+alt}, ${VAR+alt}, $$ (compose-spec 12-interpolation.md)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m):
        if m.group(1):
            return "$"
        name = m.group(2) or m.group(5)
        op, arg = m.group(3), m.group(4) or ""
        have, val = name in env, env.get(name, "")
        if op in (":-", "-"):
            return val if (have and (val or op == "-")) else arg
        if op in (":?", "?"):
            if not have or (op == ":?" and not val):
                raise KeyError(f"required variable {name}: {arg}")
            return val
        if op in (":+", "+"):
            return arg if (have and (val or op == "+")) else ""
        return val

    return _VAR.sub(one, value)


def compose(name: str, env: dict[str, str] | None = None) -> dict:
    """A Compose file with its ``extends`` resolved, interpolated with ``env`` unless None."""
    doc = resolve_extends(load_yaml(ROOT / name))
    return doc if env is None else interpolate(doc, env)


def env_list(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def launcher_envs(settings: dict[str, str]) -> dict[str, dict[str, str]]:
    """What ``royalefleet up`` gives each service for the config Compose starts them with."""
    config_file = settings.get("FLEET_CONFIG", "cpu.json")
    cfg = load_config(str(ROOT / "deploy" / "config" / config_file))
    rollouts = int(settings.get("FLEET_ROLLOUTS", "1"))
    envs = service_environments(cfg, f"/etc/royalefleet/{config_file}", "/data/runs", iterations=0,
                                rollouts=rollouts)
    envs["rollout"] = envs["rollout-0"]
    return envs


def host_port(address: str) -> tuple[str, int]:
    u = urlparse(address)
    assert u.scheme == "tcp", address
    return u.hostname, u.port


# ----------------------------------------------------------------------------- the schema


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_the_compose_file_validates_against_the_compose_specification_as_written(name):
    assert schema_errors(load_yaml(ROOT / name)) == []
    assert schema_errors(compose(name)) == []


@pytest.mark.parametrize("env_file", [None, *ENV_FILES])
@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_the_compose_file_validates_after_interpolation(name, env_file):
    settings = read_env_file(ROOT / "deploy" / "env" / env_file) if env_file else {}
    doc = compose(name, settings | ROLLOUT_HOST_ENV)
    assert schema_errors(doc) == []


def test_the_schema_check_is_not_vacuous():
    doc = compose("compose.yaml")
    doc["services"]["rollout"]["deploy"]["replicas"] = [3]
    doc["services"]["learner"]["healtcheck"] = {}
    errors = schema_errors(doc)
    assert any("replicas" in e for e in errors) and any("healtcheck" in e for e in errors), errors


def test_the_rollout_host_file_needs_the_learner_address():
    with pytest.raises(KeyError, match="ROYALEFLEET_LEARNER"):
        compose("compose.rollout.yaml", {})


def test_docker_compose_config_accepts_the_files_when_compose_is_installed(tmp_path):
    """`docker compose config` (Compose's own loader) where a compose binary is available."""
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("no `docker compose` here")
    for files in (["compose.yaml"], ["compose.yaml", "compose.gpu.yaml"], ["compose.rollout.yaml"]):
        args = [docker, "compose", "--project-directory", str(ROOT)]
        for f in files:
            args += ["-f", str(ROOT / f)]
        out = subprocess.run(args + ["config", "-q"], capture_output=True, text=True, cwd=ROOT,
                             env=os.environ | ROLLOUT_HOST_ENV, timeout=60)
        assert out.returncode == 0, (files, out.stderr)


# ----------------------------------------------------------------------------- one code path


def test_every_training_service_runs_its_module_as_the_launcher_does():
    for name in ("compose.yaml", "compose.rollout.yaml"):
        services = compose(name, ROLLOUT_HOST_ENV)["services"]
        for svc in TRAINING:
            if svc in services:
                assert services[svc]["command"] == ["python", "-m", module_of(svc)], (name, svc)
    assert set(TRAINING) <= set(compose("compose.yaml")["services"])


@pytest.mark.parametrize("env_file", [None, *ENV_FILES])
def test_compose_gives_each_service_the_launchers_environment(env_file):
    """The same variables with the same values as `royalefleet up` for the same config, except
    that servers bind 0.0.0.0 and clients name the service; plus the CURVE switch."""
    settings = read_env_file(ROOT / "deploy" / "env" / env_file) if env_file else {}
    services = compose("compose.yaml", settings)["services"]
    expected = launcher_envs(settings)
    for svc in TRAINING:
        got = env_list(services[svc])
        want = expected[svc]
        # Secrets come from the operator's environment, never from a config: the CURVE key folder,
        # and the learner's halt-endpoint token (Grafana's contact point carries the same one).
        # Secrets and the operator's explicit plaintext switch (issue 38) likewise: the checkpoint
        # writer token (empty: derived from the CURVE server key), ROYALEFLEET_INSECURE_PLAINTEXT.
        secrets = ({CURVE_DIR_ENV, "ROYALEFLEET_INSECURE_PLAINTEXT"} | ({"ROYALEFLEET_HALT_TOKEN"} if svc == "learner" else set())
                   | ({"ROYALEFLEET_CHECKPOINT_TOKEN"} if svc in ("learner", "checkpoint") else set()))
        # Decisions for one start (royalefleet up's --allow-identity-drift / --clear-halt /
        # --start-fresh): off unless the operator sets FLEET_ALLOW_IDENTITY_DRIFT /
        # FLEET_CLEAR_HALT / FLEET_START_FRESH for one `up`.
        switches = ({"ROYALEFLEET_ALLOW_IDENTITY_DRIFT", "ROYALEFLEET_CLEAR_HALT", "ROYALEFLEET_START_FRESH"}
                    if svc == "learner" else set())
        assert all(got[k] == "0" for k in switches), (svc, {k: got[k] for k in switches})
        assert set(got) - secrets - switches == set(want), (svc, sorted(set(got) ^ set(want)))
        assert got[CURVE_DIR_ENV] == "/keys"
        for key, value in want.items():
            if key.endswith("_BIND"):
                assert got[key] == "tcp://0.0.0.0:%d" % host_port(value)[1], (svc, key)
            elif key in ("ROYALEFLEET_LEARNER", "ROYALEFLEET_LADDER", "ROYALEFLEET_CHECKPOINT"):
                target = key.removeprefix("ROYALEFLEET_").lower()
                assert host_port(got[key]) == (target, host_port(value)[1]), (svc, key)
            else:
                assert got[key] == value, (svc, key, got[key], value)
    # Each service's address is the one its clients use.
    for svc, var in (("learner", "ROYALEFLEET_LEARNER_BIND"), ("ladder", "ROYALEFLEET_LADDER_BIND"),
                     ("checkpoint", "ROYALEFLEET_CHECKPOINT_BIND")):
        port = host_port(env_list(services[svc])[var])[1]
        clients = [env_list(services[c]) for c in ("learner", "rollout")]
        assert any(host_port(c[k]) == (svc, port) for c in clients for k in c if k == "ROYALEFLEET_" + svc.upper())


def test_the_rollout_host_file_runs_the_same_rollout():
    """compose.rollout.yaml extends compose.yaml's rollout: the environment is written once, and
    only the learner's address, the keys folder, the replica count, the metrics ports and the
    dependencies differ."""
    raw = load_yaml(ROOT / "compose.rollout.yaml")["services"]["rollout"]
    assert raw["extends"] == {"file": "compose.yaml", "service": "rollout"}
    assert set(raw) == {"extends", "environment", "volumes", "ports", "deploy", "depends_on"}
    assert set(raw["environment"]) == {"ROYALEFLEET_LEARNER"} and isinstance(raw["depends_on"], Reset)
    text = (ROOT / "compose.yaml").read_text()
    assert "x-rollout-env: &rollout-env" in text and "    environment: *rollout-env\n" in text
    local_spec, remote_spec = compose("compose.yaml")["services"]["rollout"], compose("compose.rollout.yaml")["services"]["rollout"]
    assert "depends_on" not in remote_spec and local_spec["depends_on"]["learner"]["condition"] == "service_healthy"
    for key in ("image", "build", "command", "healthcheck", "init", "restart"):
        assert remote_spec[key] == local_spec[key], key
    local = env_list(local_spec)
    remote = env_list(remote_spec)
    assert set(local) == set(remote)
    assert {k: v for k, v in remote.items() if k != "ROYALEFLEET_LEARNER"} == \
        {k: v for k, v in local.items() if k != "ROYALEFLEET_LEARNER"}
    assert interpolate(remote["ROYALEFLEET_LEARNER"], ROLLOUT_HOST_ENV) == ROLLOUT_HOST_ENV["ROYALEFLEET_LEARNER"]


def test_the_viser_file_forwards_royalefleet_viser_to_the_learner_and_the_evaluator():
    """compose.viser.yaml: both services read ROYALEFLEET_VISER as under `royalefleet up`, the
    evaluator's stream on 9870 and the learner's status on 9871 (port + 1) published on loopback."""
    from services.evaluator.main import parse_settings as evaluator_settings
    from services.learner.main import parse_settings as learner_settings

    services = compose("compose.viser.yaml")["services"]
    assert set(services) == {"learner", "evaluator"}
    for svc, parse in (("learner", learner_settings), ("evaluator", evaluator_settings)):
        env = env_list(services[svc])
        assert env == {"ROYALEFLEET_VISER": "0.0.0.0:9870"}
        assert parse([], environ=env).viser == "0.0.0.0:9870"
    assert services["evaluator"]["ports"] == ["127.0.0.1:9870:9870/udp"]
    assert services["learner"]["ports"] == ["127.0.0.1:9871:9871/udp"]
    base = compose("compose.yaml")["services"]
    assert "ROYALEFLEET_VISER" not in env_list(base["learner"]) | env_list(base["evaluator"])  # off by default


def test_the_env_files_match_their_machine_class():
    assert ENV_FILES == ["cpu.env", "laptop.env", "many_core.env", "workstation.env"]
    for name in ENV_FILES:
        settings = read_env_file(ROOT / "deploy" / "env" / name)
        cfg = load_config(str(ROOT / "deploy" / "config" / settings["FLEET_CONFIG"]))
        assert cfg.profile == name.removesuffix(".env")
        assert int(settings["FLEET_ROLLOUTS"]) == cfg.local.rollouts
        assert int(settings["FLEET_BATTLES"]) == cfg.rollout.battles
        assert int(settings["FLEET_SHARDS"]) == cfg.rollout.shards
        assert int(settings["FLEET_LEARNER_THREADS"]) == cfg.determinism.torch_threads


def _compose_commands() -> list[tuple[str, str, list[str], dict[str, str]]]:
    out = []
    for name in ("compose.yaml", "compose.rollout.yaml"):
        for svc, spec in compose(name, ROLLOUT_HOST_ENV)["services"].items():
            cmd = spec.get("command")
            if cmd and cmd[0] == "python":
                out.append((name, svc, cmd, env_list(spec)))
    return out


@pytest.mark.parametrize("name,svc,cmd,env", _compose_commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_service_command_in_the_compose_files_runs(name, svc, cmd, env, tmp_path):
    """Each command as Compose runs it, with its environment: the services parse their
    settings and print their help; the key generator runs for real into a scratch folder."""
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("ROYALEFLEET_")} | env
    run_env["PYTHONPATH"] = str(ROOT)
    argv = [sys.executable, *cmd[1:]]
    if "royalefleet.cmd_keys" in cmd:
        argv = [str(tmp_path / "keys") if a == "/keys" else a for a in argv]
    else:
        argv.append("--help")
    out = subprocess.run(argv, env=run_env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (name, svc, out.stdout[-2000:], out.stderr[-2000:])
    if "royalefleet.cmd_keys" in cmd:
        assert (tmp_path / "keys" / "server.key_secret").exists()
    else:
        assert "usage: python -m " + module_of(svc) in out.stdout


# ----------------------------------------------------------------------------- scaling, podman


def test_the_rollout_scales():
    for name in ("compose.yaml", "compose.rollout.yaml"):
        rollout = compose(name)["services"]["rollout"]
        assert "container_name" not in rollout and "hostname" not in rollout
        assert rollout["deploy"]["mode"] == "replicated"  # podman-compose ignores replicas without it
    local, remote = compose("compose.yaml")["services"]["rollout"], compose("compose.rollout.yaml")["services"]["rollout"]
    assert "ports" not in local and local["deploy"]["replicas"] == "${FLEET_ROLLOUTS:-1}"
    # A rollout host's own count, apart from the learner host's FLEET_ROLLOUTS and the run's battles.
    assert remote["deploy"]["replicas"] == "${FLEET_HOST_ROLLOUTS:-1}"
    # Its metrics: a host port a replica from a range, on loopback unless the host says otherwise.
    assert remote["ports"] == ["${FLEET_METRICS_PUBLISH:-127.0.0.1:9110-9173}:9110"]  # 64 replicas
    (published,) = interpolate(remote["ports"], {})
    assert published == "127.0.0.1:9110-9173:9110"
    assert interpolate(remote["deploy"], {"FLEET_ROLLOUTS": "12"})["replicas"] == "1"
    services = compose("compose.yaml")["services"]
    assert services["learner"]["environment"]["ROYALEFLEET_MIN_ROLLOUTS"] == "${FLEET_ROLLOUTS:-1}"


def test_the_files_keep_to_what_podman_runs():
    for name in ("compose.yaml", "compose.rollout.yaml"):
        for svc, spec in compose(name)["services"].items():
            assert "ulimits" not in spec, (name, svc)
            test = (spec.get("healthcheck") or {}).get("test", [])
            assert all(" " not in arg for arg in test), (name, svc, test)  # podman 4.3 splits on spaces
            if (spec.get("command") or [""])[0] == "python":
                assert spec.get("init") is True, (name, svc)  # SIGTERM reaches Python
    learner = compose("compose.yaml")["services"]["learner"]
    assert learner["shm_size"] and learner["stop_grace_period"] == "180s"


def test_health_and_order():
    services = compose("compose.yaml")["services"]
    for svc in TRAINING:
        assert services[svc]["depends_on"]["keys"]["condition"] == "service_completed_successfully"
        assert services[svc]["healthcheck"]["test"][0] == "CMD"
    assert services["learner"]["depends_on"]["ladder"]["condition"] == "service_healthy"
    assert services["learner"]["depends_on"]["checkpoint"]["condition"] == "service_healthy"
    assert services["rollout"]["depends_on"]["learner"]["condition"] == "service_healthy"
    for svc, port in (("learner", "9100"), ("ladder", "9101"), ("checkpoint", "9102"), ("rollout", "9110")):
        assert services[svc]["environment"]["ROYALEFLEET_METRICS_PORT"] == port
        assert f"127.0.0.1:{port}/metrics" in services[svc]["healthcheck"]["test"][-1]
    volumes = compose("compose.yaml")["volumes"]
    assert {"runs", "checkpoints", "results", "keys"} <= set(volumes)


def test_prometheus_scrapes_every_service_on_its_metrics_port():
    """Each scrape target names a compose.yaml service and the port that service exports on; a
    scaled service (deploy.replicas) is found by DNS, one target per replica, never statically."""
    try:
        from royalefleet import grafana as gen
    except ImportError:
        pytest.skip("royalefleet.grafana is not here")
    services = compose("compose.yaml")["services"]
    targets = {}
    for job in gen.prometheus_config()["scrape_configs"]:
        if "file_sd_configs" in job:  # rollouts on other hosts: royalefleet keys --metrics writes the files
            assert job["job_name"] == "rollout-hosts" and job["file_sd_configs"][0]["files"] == ["targets/*.json"]
            continue
        if "dns_sd_configs" in job:
            (sd,) = job["dns_sd_configs"]
            (name,) = sd["names"]
            assert sd["type"] == "A" and "replicas" in services[name]["deploy"], job
            targets[name] = str(sd["port"])
        else:
            ((host_port,),) = [c["targets"] for c in job["static_configs"]]
            name, _, port = host_port.partition(":")
            assert "replicas" not in services[name].get("deploy", {}), job
            targets[name] = port
    exporting = {name: svc["environment"]["ROYALEFLEET_METRICS_PORT"] for name, svc in services.items()
                 if "ROYALEFLEET_METRICS_PORT" in (svc.get("environment") or {})}
    assert targets == exporting
    assert targets["evaluator"] == "9200" and targets["rollout"] == "9110"


def test_the_learners_port_is_published_on_loopback_unless_a_rollout_host_needs_it():
    (port,) = compose("compose.yaml")["services"]["learner"]["ports"]
    assert port == "${FLEET_LEARNER_PUBLISH:-127.0.0.1:5555}:5555"
    assert interpolate(port, {}) == "127.0.0.1:5555:5555"
    assert interpolate(port, {"FLEET_LEARNER_PUBLISH": "10.0.0.5:5555"}) == "10.0.0.5:5555:5555"
    # every published port of compose.yaml is on loopback by default
    for svc, spec in compose("compose.yaml", {})["services"].items():
        for published in spec.get("ports", []):
            assert published.startswith("127.0.0.1:"), (svc, published)


MONITORING = {"prometheus", "alertmanager", "grafana"}
TOOLS = {"resume-checkpoint"}
"""One-shots `docker compose run` starts by name, never `up`."""


def test_monitoring_is_a_profile_and_training_runs_without_it():
    services = compose("compose.yaml")["services"]
    assert {name for name, spec in services.items() if spec.get("profiles")} == MONITORING | TOOLS
    assert all(services[name]["profiles"] == ["monitoring"] for name in MONITORING)
    assert all(services[name]["profiles"] == ["tools"] for name in TOOLS)
    # nothing of the training stack waits for a monitoring service
    for name, spec in services.items():
        if name not in MONITORING:
            assert not set(spec.get("depends_on") or {}) & MONITORING, name


def test_grafana_has_a_healthcheck_podman_can_run():
    check = compose("compose.yaml")["services"]["grafana"]["healthcheck"]
    assert check["test"][0] == "CMD" and "http://127.0.0.1:3000/api/health" in check["test"]
    assert all(" " not in arg for arg in check["test"])
    assert check["start_period"] and check["retries"] >= 3


def test_alertmanager_is_fed_by_prometheus_and_posts_to_the_one_webhook_setting():
    from royalefleet import grafana as gen

    services = compose("compose.yaml")["services"]
    am = services["alertmanager"]
    host, _, port = gen.ALERTMANAGER_TARGET.partition(":")
    assert host == "alertmanager" and gen.prometheus_config()["alerting"]["alertmanagers"] == [
        {"static_configs": [{"targets": ["alertmanager:9093"]}]}]
    assert f"http://127.0.0.1:{port}/-/ready" in am["healthcheck"]["test"]
    assert interpolate(am["ports"], {}) == [f"127.0.0.1:{port}:{port}"]
    # the generated file and its entrypoint, mounted; the data folder the entrypoint writes to
    assert "./alertmanager:/etc/alertmanager:ro" in am["volumes"] and "alertmanager-data:/alertmanager" in am["volumes"]
    assert am["entrypoint"] == ["/bin/sh", "/etc/alertmanager/start.sh", "/alertmanager"]
    assert (ROOT / "alertmanager" / "start.sh").exists() and (ROOT / "alertmanager" / "alertmanager.yml").exists()
    assert am["image"] == services["prometheus"]["image"]  # Debian's prometheus-alertmanager is in that image
    assert "prometheus-alertmanager" in _dockerfile_stage("prometheus")
    assert "--cluster.listen-address=" in am["command"]  # one instance: no gossip port
    # Alertmanager alone posts to the person (a dead default doctor --compose refuses); Grafana
    # sends its own rules' alerts to Alertmanager
    value = am["environment"]["ALERT_WEBHOOK_URL"]
    assert value == "${ALERT_WEBHOOK_URL:-" + gen.ALERT_WEBHOOK_UNSET + "}"
    assert interpolate(value, {"ALERT_WEBHOOK_URL": "https://ntfy.sh/t"}) == "https://ntfy.sh/t"
    grafana_env = services["grafana"]["environment"]
    assert "ALERT_WEBHOOK_URL" not in grafana_env
    assert interpolate(grafana_env["ALERTMANAGER_URL"], {}) == f"http://{gen.ALERTMANAGER_TARGET}"
    assert "alertmanager-data" in compose("compose.yaml")["volumes"]


def test_keys_and_key_bundles_are_ignored_by_git():
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    paths = ["keys/server.key_secret", "keys/hosts/box2/client.key_secret", "box2-keys.tgz",
             "prometheus/targets/box2.json"]
    out = subprocess.run([git, "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.split() == paths
    kept = subprocess.run([git, "check-ignore", "--no-index", "prometheus/targets/README.md", "deploy/env/cpu.env"],
                          cwd=ROOT, capture_output=True, text=True)
    assert kept.stdout == ""


def test_monitoring_mounts_and_grafana_variables():
    services = compose("compose.yaml")["services"]
    assert "./prometheus:/etc/prometheus:ro" in services["prometheus"]["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in services["prometheus"]["command"]
    grafana = services["grafana"]
    assert {"./grafana/provisioning:/etc/grafana/provisioning:ro",
            "./grafana/dashboards:/var/lib/grafana/dashboards:ro"} <= set(grafana["volumes"])
    try:
        from royalefleet.grafana import ENV_VARS
    except ImportError:
        pytest.skip("royalefleet.grafana is not here")
    assert set(ENV_VARS) <= set(grafana["environment"])
    settled = env_list(compose("compose.yaml", {})["services"]["grafana"])
    assert settled["PROMETHEUS_URL"] == "http://prometheus:9090" and settled["LEARNER_HALT_URL"]


# ----------------------------------------------------------------------------- images


def _pins(path: Path) -> dict[str, str]:
    """{name: version} of a hash-pinned file (make lock's; tests/test_lock.py checks its hashes)."""
    pins = {}
    for line in re.sub(r"\\\n", " ", path.read_text()).splitlines():
        line = line.split("#", 1)[0].strip().split(" --hash=")[0].strip()
        if not line:
            continue
        assert "==" in line, f"{path.name}: {line!r} is not pinned with =="
        name, version = line.split("==")
        pins[_norm(name).split("[")[0]] = version
    return pins


def _norm(requirement_name: str) -> str:
    """Distribution name, normalised, with its extras: 'royalegym[sim]' stays distinct."""
    base, _, extras = requirement_name.partition("[")
    base = re.sub(r"[-_.]+", "-", base.strip().lower())
    return base + ("[" + extras if extras else "")


def test_the_image_requirements_agree_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    declared = {}
    for dep in project:
        name, version = dep.split("==")
        declared[_norm(name).split("[")[0]] = version
    rollout = _pins(ROOT / "docker" / "requirements-rollout.txt")
    learner = _pins(ROOT / "docker" / "requirements-learner.txt")
    for name, version in declared.items():
        assert learner.get(name) == version, f"requirements-learner.txt: {name} should be =={version}"
        if name in ("torch", "safetensors"):
            assert name not in rollout
        else:
            assert rollout.get(name) == version, f"requirements-rollout.txt: {name} should be =={version}"
    assert rollout.items() <= learner.items()


def test_the_rollout_image_has_no_torch():
    rollout = _pins(ROOT / "docker" / "requirements-rollout.txt")
    heavy = {"torch", "triton", "royalelearn", "safetensors"}
    assert not [n for n in rollout if n.split("[")[0] in heavy or n.startswith("nvidia-")]
    stage = _dockerfile_stage("rollout")
    assert "requirements-rollout.txt" in stage and "requirements-learner.txt" not in stage
    assert "pip install --no-deps" in stage  # the project's own metadata names torch
    assert "find_spec(\"torch\")" in stage  # and the build checks


def _dockerfile_stage(target: str) -> str:
    text = (ROOT / "Dockerfile").read_text()
    parts = re.split(r"^FROM ", text, flags=re.M)
    for part in parts[1:]:
        if re.match(rf"\S+ AS {target}\s", part):
            return part
    raise AssertionError(f"no stage {target}")


def test_the_dockerfile_targets():
    text = (ROOT / "Dockerfile").read_text()
    m = re.search(r"^ARG BASE_IMAGE=(\S+)", text, flags=re.M)
    assert m and re.search(r"python:3\.12[.\d]*-slim", m.group(1))
    for target in ("rollout", "learner"):
        stage = _dockerfile_stage(target)
        assert re.search(r"^USER royalefleet$", stage, flags=re.M), target
    assert "requirements-learner.txt" in _dockerfile_stage("learner")
    assert "pip check" in _dockerfile_stage("learner")
    services = compose("compose.yaml")["services"]
    assert services["rollout"]["build"]["target"] == "rollout"
    for svc in ("learner", "ladder", "checkpoint"):
        assert services[svc]["build"]["target"] == "learner"
        assert services[svc]["image"] == services["learner"]["image"]
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignore and "!README.md" in ignore  # the package's readme is in the context


def test_the_dqn_config_under_compose_is_the_cpu_config_with_the_dqn_learner():
    """`FLEET_CONFIG=cpu-dqn.json docker compose up` runs the DQN learner: the learner and the
    ladder read the same file; nothing else differs from cpu.json (so compose.yaml needs no
    variable of its own), and its replay fits its memory budget."""
    import msgspec

    from services.learner.dqn.replay import record_bytes

    cpu = load_config(str(ROOT / "deploy" / "config" / "cpu.json"))
    dqn = load_config(str(ROOT / "deploy" / "config" / "cpu-dqn.json"))
    assert dqn.learner.algorithm == "dqn"
    assert msgspec.structs.replace(dqn, learner=cpu.learner) == cpu
    assert dqn.dqn.replay_capacity * record_bytes(15_375, dqn.dqn.heads) <= dqn.dqn.replay_memory_mb * 2**20
