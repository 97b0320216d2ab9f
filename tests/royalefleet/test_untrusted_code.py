"""Data never names code (issue 38), tried as an attacker would: a bot folder or a run folder
someone hands over whose config.json names ``os.system``, or a package whose mere import does
harm, is refused before anything is imported or called, naming the module and how to allow it
locally; only this machine's settings (ROYALEFLEET_ALLOW_MODULES, --allow-module) or the user's
explicit trust (trust_code=True, --trust-code) widen what a config may import."""

from __future__ import annotations

import sys
import uuid

import msgspec
import pytest

from royalefleet.bot import ACTOR_FILE, BOT_FILE, CONFIG_FILE, SPEC_FILE, BotRefused, load_bot
from shared import components
from shared.config import ConfigError, load_config


@pytest.fixture(autouse=True)
def fresh_allow_list(monkeypatch):
    """No local allowance leaks in from the shell or out to the next test."""
    monkeypatch.delenv(components.ALLOW_ENV, raising=False)
    monkeypatch.delenv(components.USER_PACKAGES_ENV, raising=False)
    monkeypatch.setattr(components, "_LOCAL", set())
    monkeypatch.setattr(components, "_TRUST", [False])


@pytest.fixture
def evil(tmp_path, monkeypatch):
    """(package name, marker): an importable package whose import, or whose ``system(command)``,
    creates the marker file; forgotten afterwards."""
    name = "evil_" + uuid.uuid4().hex[:8]
    marker = tmp_path / "ran"
    (tmp_path / "src" / name).mkdir(parents=True)
    (tmp_path / "src" / name / "__init__.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\n"
        "def system(command):\n    Path(command).touch()\n    return 0\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    yield name, marker
    sys.modules.pop(name, None)


def hostile_config(modules, cls, command) -> dict:
    doc = msgspec.to_builtins(load_config({"profile": "tiny", "run_name": "t"}))
    doc["env"]["extra_component_modules"] = modules
    doc["env"]["obs_builder"] = {"cls": cls, "kwargs": {"command": command}}
    return doc


def bot_folder(folder, doc):
    folder.mkdir(parents=True)
    (folder / CONFIG_FILE).write_bytes(msgspec.json.encode(doc))
    (folder / ACTOR_FILE).write_bytes(b"not weights")
    (folder / SPEC_FILE).write_bytes(b"{}")
    (folder / BOT_FILE).write_bytes(msgspec.json.encode({
        "format": 1, "player": "snap:0123456789abcdef", "run_name": "t", "iteration": 1, "env_steps": 1,
        "actor_sha256": "0" * 64, "engine": {}}))
    return folder


def test_a_bot_folder_naming_os_system_runs_nothing_and_the_refusal_names_the_module(tmp_path):
    marker = tmp_path / "x"
    folder = bot_folder(tmp_path / "bot", hostile_config(["os"], "os.system", f"touch {marker}"))
    with pytest.raises(BotRefused) as err:
        load_bot(folder)
    assert not marker.exists()
    assert str(err.value) == (
        f"bot folder {folder} names code of modules ['os'] (env.extra_component_modules), which this machine does "
        "not allow: a folder's config never decides what is imported; if you trust that code, allow it here: "
        "ROYALEFLEET_ALLOW_MODULES=os (or --allow-module os), or for a bot or run folder you trust, "
        "load_bot(..., trust_code=True) / --trust-code")


def test_a_bot_folder_naming_a_package_is_refused_before_the_package_is_imported(tmp_path, evil):
    name, marker = evil
    folder = bot_folder(tmp_path / "bot", hostile_config([name], f"{name}.system", str(marker)))
    with pytest.raises(BotRefused, match=rf"names code of modules \['{name}'\].*ROYALEFLEET_ALLOW_MODULES={name}"):
        load_bot(folder)
    assert not marker.exists() and name not in sys.modules


def test_a_run_folder_naming_os_system_runs_nothing_from_load_bot_or_the_command_line(tmp_path, capsys):
    from royalefleet.cli import main

    marker = tmp_path / "x"
    (tmp_path / "runs" / "t").mkdir(parents=True)
    (tmp_path / "runs" / "t" / CONFIG_FILE).write_bytes(msgspec.json.encode(
        hostile_config(["os"], "os.system", f"touch {marker}")))
    with pytest.raises(BotRefused, match=r"run 't' \(.*config.json\) names code of modules \['os'\]"):
        load_bot("latest", run="t", runs_dir=tmp_path / "runs")
    assert main(["identity", "t", "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "env.extra_component_modules: ['os'] are not allowed on this machine" in err and "--trust-code" in err
    assert not marker.exists()


def test_a_config_not_in_a_folder_cannot_widen_the_list_either(evil):
    name, marker = evil
    with pytest.raises(ConfigError, match=rf"\['{name}'\] are not allowed on this machine"):
        load_config(hostile_config([name], f"{name}.system", str(marker)))
    assert not marker.exists() and name not in sys.modules


def test_trust_code_and_the_local_settings_allow_a_package_and_only_those_do(tmp_path, evil, monkeypatch):
    name, marker = evil
    folder = bot_folder(tmp_path / "bot", hostile_config([name], f"{name}.system", str(tmp_path / "y")))
    # trusted: the code check passes, the package is imported (as the user asked) and the load goes
    # on to the weights (which are not the manifest's)
    with pytest.raises(BotRefused, match="is not the manifest's"):
        load_bot(folder, trust_code=True)
    assert marker.exists() and components.local_modules() == [name]
    monkeypatch.setattr(components, "_LOCAL", set())
    monkeypatch.delenv(components.ALLOW_ENV)
    assert components.foreign_modules([name]) == [name]
    monkeypatch.setenv(components.ALLOW_ENV, f"other, {name}")
    assert components.foreign_modules([name, f"{name}.sub", "shared", "elsewhere"]) == ["elsewhere"]


def test_a_shipped_function_that_is_no_component_or_a_re_exported_call_is_refused(tmp_path, evil, monkeypatch):
    name, marker = evil
    doc = hostile_config(["shared"], "shared.durable.replace_file", "x")
    doc["env"]["obs_builder"]["kwargs"] = {"path": str(marker), "data": "00"}
    with pytest.raises(ConfigError, match="'shared.durable.replace_file' is no component"):
        load_config(doc)
    # the user's own package, allowed here, that merely imports os.system: not its code, refused
    (tmp_path / "src" / name / "calls.py").write_text("from os import system\n")
    monkeypatch.setenv(components.ALLOW_ENV, name)
    with pytest.raises(ConfigError, match=rf"'{name}.calls.system' is defined in 'posix', a module not allowed here"):
        load_config(hostile_config([name], f"{name}.calls.system", f"touch {marker}"))
    assert not (tmp_path / "x").exists()


def test_allow_module_on_the_command_line_is_a_local_setting_and_refuses_a_non_name(monkeypatch):
    from royalefleet.cli import build_parser
    from royalefleet.trust_options import apply_trust_options

    apply_trust_options(build_parser().parse_args(["identity", "--allow-module", "mybot,mybot2", "--trust-code"]))
    assert components.local_modules() == ["mybot", "mybot2"] and components.trusting()
    with pytest.raises(SystemExit, match=r"--allow-module: allow: \['os; rm'\] are not module names"):
        apply_trust_options(build_parser().parse_args(["identity", "--allow-module", "os; rm"]))
