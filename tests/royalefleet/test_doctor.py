"""`royalefleet doctor`: every check made to fail on purpose, the exit codes, and `royalefleet up`
refusing to start on a failed check with the same lines."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
from importlib import metadata

import msgspec
import pytest

from royalefleet import cmd_doctor as doc
from royalefleet.cmd_doctor import FAIL, OK, WARN, Check, Measured
from shared.config import load_config
from tests.stack import REPO, tiny_config


@pytest.fixture
def cfg(tmp_path):
    return load_config(str(tiny_config(tmp_path / "runs")))


def test_python_older_than_3_12_fails():
    c = doc.check_python((3, 11, 9))
    assert (c.level, c.text) == (FAIL, "Python 3.11.9; royalegym needs 3.12 or newer")
    assert doc.check_python((3, 12, 1)).level == OK


def test_a_missing_package_fails_naming_it():
    def version_of(name):
        if name == "royalesim":
            raise metadata.PackageNotFoundError(name)
        return "1.0"

    c = doc.check_packages(version_of)
    assert c.level == FAIL and c.text.startswith("not installed: royalesim (found torch 1.0, royalegym 1.0")
    assert "pip install -e ." in c.fix
    assert doc.check_packages().level == OK


def test_an_engine_that_does_not_build_fails(monkeypatch):
    import royalegym

    def broken():
        raise RuntimeError("card table missing")

    monkeypatch.setattr(royalegym, "RustEngine", broken)
    c = doc.check_engine()
    assert (c.level, c.text) == (FAIL, "RustEngine() failed: RuntimeError: card table missing")


def test_cuda_asked_for_without_a_gpu_fails(cfg):
    gpu = msgspec.structs.replace(cfg, net=msgspec.structs.replace(cfg.net, device="cuda"))
    c = doc.check_cuda(gpu, cuda_available=False)
    assert c.level == FAIL and c.text.startswith("net.device is cuda but torch sees no CUDA device")
    assert doc.check_cuda(cfg, cuda_available=False).level == OK  # auto: the CPU


def measured(**kw) -> Measured:
    base = dict(minibatch_peak=300 << 20, learner_base=1 << 30, per_battle=7 << 20, rectangle=100 << 20,
                cuda_peak=0, seconds=1.0, process_base=100 << 20)
    return Measured(**(base | kw))


def test_a_config_too_big_for_the_memory_given_fails_and_a_tight_one_warns(cfg):
    m = measured()
    # learner 1024 + 300 + 100 MiB; 1 rollout x 4 battles: 4 x 7 + 100; 1 evaluator: 7 + 100 = 1659 MiB
    need = (1024 + 300 + 100 + 4 * 7 + 100 + 7 + 100) << 20
    c = doc.check_memory(cfg, m, have=need - 1)
    assert c.level == FAIL and c.text.startswith("needs 1.62 GiB of 1.62 GiB: learner 1.39")
    assert "lower rollout.battles" in c.fix
    assert doc.check_memory(cfg, m, have=need).level == WARN  # over 80 %
    assert doc.check_memory(cfg, m, have=int(need / 0.8) + 1).level == OK
    assert doc.check_vram(cfg, measured(cuda_peak=2 << 30), free=1 << 30).level == FAIL
    assert doc.check_vram(cfg, m) is None  # not on CUDA


@pytest.mark.slow
def test_doctor_measures_a_real_minibatch_and_fails_on_too_little_memory(tmp_path):
    config = tiny_config(tmp_path / "runs")
    out = subprocess.run([sys.executable, "-m", "royalefleet", "doctor", "--config", str(config), "--memory-gb",
                          "0.05"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    memory = next(line for line in lines if line.startswith("FAIL  memory"))
    assert "of 0.05 GiB: learner" in memory and "one minibatch of 32 rows forward and backward: peak +" in memory
    assert out.stdout.strip().endswith("9 checks: 1 failed, 0 warned -- fix the FAIL lines before a run")
    assert sum(line.startswith("ok    ") for line in lines) == 8


def test_too_little_disk_for_the_checkpoints_kept_fails(cfg):
    c = doc.check_disk(cfg, free=10 << 20, one=(4 << 20, "test"))
    # keep 3 (tiny) + 1 checkpoints of 4 MiB = 16 MiB > 10 MiB
    assert c.level == FAIL and "3 + 1 checkpoints of 4.0 MiB (test) need 0.02 GiB" in c.text
    assert doc.check_disk(cfg, free=20 << 20, one=(4 << 20, "test")).level == WARN
    assert doc.check_disk(cfg, free=40 << 20, one=(4 << 20, "test")).level == OK
    size, source = doc.checkpoint_bytes(cfg)  # no checkpoint yet: from the network's parameters
    assert source.endswith("parameters x 3 (weights, Adam's two moments) x 4 bytes")
    assert size == int(source.split()[0].replace(",", "")) * 12


def test_a_port_taken_fails_naming_it(cfg):
    with socket.socket() as held:
        held.bind((cfg.services.host, cfg.services.ladder_port))
        held.listen()
        c = doc.check_ports(cfg)
    assert c.level == FAIL and c.text == f"in use: ladder port {cfg.services.ladder_port} on 127.0.0.1"
    assert doc.check_ports(cfg).level == OK


def test_an_address_this_machine_lacks_is_named_as_such_not_as_ports_in_use(cfg):
    import msgspec

    # 192.0.2.1 (TEST-NET-1, RFC 5737) is never assigned to a machine: binding it fails with
    # EADDRNOTAVAIL, the case of a rollout host's LEARNER= mistyped into services.host
    away = msgspec.structs.replace(cfg, services=msgspec.structs.replace(cfg.services, host="192.0.2.1"))
    c = doc.check_ports(away)
    assert c.level == FAIL
    assert c.text.startswith("services.host 192.0.2.1 is not an address of this machine")
    assert "in use" not in c.text and "services.host in the run's config.json" in c.fix


def test_unreadable_or_missing_curve_keys_fail(tmp_path):
    from royalefleet.cmd_keys import ensure_keys

    keys = tmp_path / "keys"
    ensure_keys(str(keys))
    env = {"ROYALEFLEET_CURVE_DIR": str(keys)}
    assert doc.check_curve(env).level == OK
    assert doc.check_curve({}).text.startswith("off (ROYALEFLEET_CURVE_DIR unset")
    role = keys / "roles" / "learner"  # a learner host's keys folder: doctor reads the learner's own keys
    assert doc.check_curve({"ROYALEFLEET_CURVE_DIR": str(role)}).level == OK
    (role / "server.key_secret").write_text("not a certificate\n")
    (role / "client.key").unlink()
    c = doc.check_curve(env)
    assert c.level == FAIL
    assert f"CURVE key file {role}/server.key_secret" in c.text and f"CURVE key file {role}/client.key:" in c.text
    assert c.fix == f"make the keys with `royalefleet keys --dir {keys}`, readable by this user"
    for k in (role / "clients").iterdir():
        k.unlink()
    assert "holds no client key: no rollout could connect" in doc.check_curve(env).text


def test_an_action_encoding_that_disagrees_fails(cfg):
    from shared.envs import build_env

    env = build_env(cfg.env)
    assert doc.check_battles(cfg, decisions=40, env=env).level == OK
    real = env.action_parser.encode
    env.action_parser.encode = lambda slot, x, y: real(slot, y % 18, x) if x != y % 18 else real(slot, x, y)
    c = doc.check_battles(cfg, decisions=40, env=env)
    assert c.level == FAIL and "RoyaleGym's encode/decode say otherwise" in c.text


def test_a_no_op_that_is_not_legal_fails(cfg):
    from shared.envs import build_env

    env = build_env(cfg.env)
    real_step, real_reset = env.step, env.reset

    def without_noop(result):
        obs = result[0]
        obs["red"]["action_mask"] = obs["red"]["action_mask"].copy()
        obs["red"]["action_mask"][0] = 0
        return result

    env.reset = lambda *a, **k: without_noop(real_reset(*a, **k))
    env.step = lambda *a, **k: without_noop(real_step(*a, **k))
    c = doc.check_battles(cfg, decisions=5, env=env)
    assert c.level == FAIL and c.text.startswith("decision 0 red: the no-op (action 0) is not legal")


def fake_docker(tmp_path, code: int, said: str, plugin: bool = True) -> str:
    """A `docker` whose `compose version` succeeds when ``plugin`` (else docker's own refusal of an
    unknown command, exit 1) and whose every other call says ``said`` and exits ``code``."""
    path = tmp_path / "docker"
    version = "exit 0" if plugin else "echo \"docker: unknown command: docker compose\" >&2; exit 1"
    path.write_text(f"#!/bin/sh\nif [ \"$2\" = version ]; then {version}; fi\necho '{said}' >&2\nexit {code}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_docker_without_the_compose_plugin_is_named_not_blamed_on_the_file(tmp_path):
    c = doc.check_compose(docker=fake_docker(tmp_path, 125, "unknown shorthand flag: 'f' in -f", plugin=False))
    assert c.level == FAIL and c.text.endswith("compose` is not available here (no Compose v2 plugin)")
    assert "compose.yaml" not in c.text and c.fix.startswith("install the Docker Compose v2 plugin")


def test_compose_files_that_do_not_parse_fail(tmp_path):
    c = doc.check_compose(docker=fake_docker(tmp_path, 1, "services.learner.ports must be a list"))
    assert c.level == FAIL and c.text == "compose.yaml: ['services.learner.ports must be a list']"
    ok = doc.check_compose(docker=fake_docker(tmp_path, 0, ""))
    assert ok.level == OK and ok.text.startswith("docker compose config parses compose.yaml, compose.yaml + "
                                                 "compose.gpu.yaml, compose.rollout.yaml; CURVE on")
    if shutil.which("docker") is None:
        missing = doc.check_compose()
        assert missing.level == FAIL and missing.text == "no `docker` command on PATH"


def test_compose_without_an_alert_receiver_fails_naming_the_variable(tmp_path):
    c = doc.check_alert_receiver(tmp_path, environ={})
    assert c.level == FAIL and c.text == (f"ALERT_WEBHOOK_URL is not set (neither in the environment nor in "
                                          f"{tmp_path / '.env'}): Alertmanager would post every alert to a dead address")
    assert c.fix.startswith("echo ALERT_WEBHOOK_URL=https://ntfy.sh/<topic> >> .env")
    (tmp_path / ".env").write_text("PROFILE=cpu\nALERT_WEBHOOK_URL=\n")
    assert doc.check_alert_receiver(tmp_path, environ={}).level == FAIL  # empty is unset
    (tmp_path / ".env").write_text("# ALERT_WEBHOOK_URL=https://x\nALERT_WEBHOOK_URL='https://ntfy.sh/t?a=1'\n")
    ok = doc.check_alert_receiver(tmp_path, environ={})
    assert ok.level == OK and ok.text == f"ALERT_WEBHOOK_URL is set (from {tmp_path / '.env'}): alerts go to https://ntfy.sh/t"
    bad = doc.check_alert_receiver(tmp_path, environ={"ALERT_WEBHOOK_URL": "ntfy.sh/t"})  # the environment wins
    assert bad.level == FAIL and bad.text == "ALERT_WEBHOOK_URL='ntfy.sh/t' (from the environment) is not an http:// or https:// URL"
    assert [c.name for c in doc.run_checks(None, only=["alerts"], say=lambda s: None)] == ["alerts"]


def test_exit_codes_are_0_1_2():
    assert doc.exit_code([Check("a", OK, "")]) == 0
    assert doc.exit_code([Check("a", OK, ""), Check("b", WARN, "")]) == 1
    assert doc.exit_code([Check("a", WARN, ""), Check("b", FAIL, "")]) == 2


@pytest.mark.slow
def test_up_runs_the_fast_checks_first_and_refuses_on_a_failure(tmp_path):
    config = tiny_config(tmp_path / "runs")
    cfg = load_config(str(config))
    with socket.socket() as held:
        held.bind(("127.0.0.1", cfg.services.learner_port))
        held.listen()
        out = subprocess.run([sys.executable, "-m", "royalefleet", "up", "--config", str(config)], cwd=REPO,
                             capture_output=True, text=True, timeout=300, env=os.environ | {"ROYALEFLEET_CURVE_DIR": ""})
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"FAIL  ports     in use: learner port {cfg.services.learner_port} on 127.0.0.1" in out.stdout
    assert "ok    battles" in out.stdout and "memory" not in out.stdout  # the fast subset only
    assert "royalefleet up: not started: a check failed" in out.stderr
    assert not (tmp_path / "runs" / "default" / "logs").exists()  # nothing was started


def test_a_run_trained_on_another_engine_warns_before_a_resume(cfg):
    from royalefleet.identity_cmd import identity_for
    from services.checkpoint.store import CheckpointStore

    ident, _ = identity_for(cfg)
    store = CheckpointStore(f"{cfg.runs_dir}/{cfg.run_name}/checkpoints", say=lambda s: None)
    store.write(3, {"identity/identity.json": msgspec.json.encode(ident)}, b"{}")
    assert doc.check_engine(cfg).level == OK  # trained on this very engine
    other = msgspec.structs.replace(ident, engine=msgspec.structs.replace(ident.engine, build_digest="0" * 16))
    store.write(4, {"identity/identity.json": msgspec.json.encode(other)}, b"{}")
    c = doc.check_engine(cfg)
    assert c.level == WARN
    assert c.text.endswith(f"the run's checkpoint 00000004 was trained on another engine (build_digest: "
                           f"{'0' * 16} there, {ident.engine.build_digest} here): a resume refuses it")
    assert "--allow-identity-drift" in c.fix


def test_curve_off_beyond_loopback_fails_and_the_insecure_flag_is_shown():
    """Issue 38: plaintext stays on loopback, and doctor says where it would not."""
    assert doc.check_curve({}, host="127.0.0.1").level == OK
    off = doc.check_curve({}, host="0.0.0.0")
    assert off.level == FAIL and off.text.startswith("services.host 0.0.0.0 is not loopback and CURVE is off: the "
                                                     "services will refuse to bind it")
    shown = doc.check_curve({"ROYALEFLEET_INSECURE_PLAINTEXT": "1"}, host="0.0.0.0")
    assert shown.level == WARN and "serve PLAINTEXT to the network" in shown.text
    on_loopback = doc.check_curve({"ROYALEFLEET_INSECURE_PLAINTEXT": "1"}, host="127.0.0.1")
    assert on_loopback.level == WARN and on_loopback.text.startswith("ROYALEFLEET_INSECURE_PLAINTEXT=1 with services.host")


def test_doctor_compose_fails_on_curve_off_with_a_published_port(tmp_path, monkeypatch):
    from royalefleet.doctor_plaintext import compose_plaintext, compose_settings

    assert compose_plaintext({})[0] == "OK"
    published = compose_plaintext({"FLEET_CURVE_DIR": "", "FLEET_LEARNER_PUBLISH": "0.0.0.0:5555",
                                   "FLEET_INSECURE_PLAINTEXT": "1"})
    assert published[0] == "FAIL" and "published on 0.0.0.0:5555" in published[1]
    assert compose_plaintext({"FLEET_CURVE_DIR": "", "FLEET_LEARNER_PUBLISH": "5555"})[0] == "FAIL"
    assert "will refuse to start" in compose_plaintext({"FLEET_CURVE_DIR": ""})[1]
    assert compose_plaintext({"FLEET_CURVE_DIR": "", "FLEET_INSECURE_PLAINTEXT": "1"})[0] == "WARN"
    # the project's .env, as Compose reads it, under the environment
    (tmp_path / ".env").write_text("FLEET_CURVE_DIR=\nFLEET_LEARNER_PUBLISH='10.0.0.5:5555'\n")
    assert compose_settings(tmp_path, {}) == {"FLEET_CURVE_DIR": "", "FLEET_LEARNER_PUBLISH": "10.0.0.5:5555"}
    for f in ("compose.yaml", "compose.gpu.yaml", "compose.rollout.yaml"):
        (tmp_path / f).write_text("services: {}\n")
    monkeypatch.delenv("FLEET_CURVE_DIR", raising=False)
    monkeypatch.delenv("FLEET_LEARNER_PUBLISH", raising=False)
    c = doc.check_compose(root=tmp_path, docker=fake_docker(tmp_path, 0, ""))
    assert c.level == FAIL and c.text.startswith("CURVE is off (FLEET_CURVE_DIR=) and the learner's port is published "
                                                 "on 10.0.0.5:5555")
