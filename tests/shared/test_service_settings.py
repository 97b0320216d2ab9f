"""shared/service_settings.py: every service declares its settings once; flags win over
environment variables, which win over defaults; --help is generated from the declaration."""

from dataclasses import dataclass, fields

import pytest

from shared.service_settings import option, parse_settings, port


@dataclass(frozen=True)
class Demo:
    bind: str = option("tcp://127.0.0.1:1", env="DEMO_BIND", help="where it binds")
    metrics_port: int = option(9000, env="DEMO_PORT", parse=port, help="a port")
    count: int = option(3, env="DEMO_COUNT", help="how many")
    config: str | None = option(None, env="DEMO_CONFIG", default_text="the profile", help="a file")
    clear: bool = option(False, env="DEMO_CLEAR", help="a switch")


def parse(argv, env):
    return parse_settings(Demo, argv, env, prog="demo", description="a demo service")


def test_flag_wins_over_variable_which_wins_over_default():
    assert parse([], {}) == Demo()
    env = {"DEMO_COUNT": "5", "DEMO_BIND": "tcp://x:2", "DEMO_CLEAR": "1"}
    assert parse(["--count", "7"], env) == Demo(bind="tcp://x:2", count=7, clear=True)
    assert parse(["--clear"], {"DEMO_CLEAR": "0"}).clear is True
    assert parse([], {"DEMO_CLEAR": "0"}).clear is False
    assert parse([], {"DEMO_CLEAR": ""}).clear is False
    assert parse([], {"DEMO_PORT": "0"}).metrics_port == 0


def test_a_bad_value_exits_2_naming_the_variable_or_the_flag(capsys):
    with pytest.raises(SystemExit) as info:
        parse([], {"DEMO_COUNT": "ten"})
    assert info.value.code == 2
    assert "environment variable DEMO_COUNT='ten': not a whole number" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        parse(["--metrics-port", "70000"], {})
    assert info.value.code == 2
    assert "argument --metrics-port: '70000': 70000 is not a port (0..65535)" in capsys.readouterr().err


def test_help_shows_every_option_its_variable_and_default(capsys):
    with pytest.raises(SystemExit) as info:
        parse(["--help"], {})
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "[env DEMO_BIND; default tcp://127.0.0.1:1]" in out
    assert "[env DEMO_CONFIG; default the profile]" in out
    assert "[env DEMO_CLEAR=1; default off]" in out


def test_a_field_that_is_not_an_option_is_refused_naming_it():
    @dataclass(frozen=True)
    class Bad:
        bind: str = "x"

    with pytest.raises(TypeError, match="Bad.bind is not an option"):
        parse_settings(Bad, [], {}, prog="bad", description="")


def service_settings():
    from services.checkpoint.main import Settings as Checkpoint
    from services.evaluator.main import Settings as Evaluator
    from services.ladder.main import Settings as Ladder
    from services.learner.main import Settings as Learner
    from services.rollout.main import Settings as Rollout

    return {"checkpoint": Checkpoint, "evaluator": Evaluator, "ladder": Ladder, "learner": Learner, "rollout": Rollout}


@pytest.mark.parametrize("name", ["checkpoint", "evaluator", "ladder", "learner", "rollout"])
def test_every_service_declares_its_settings_as_options_with_royalefleet_variables(name):
    cls = service_settings()[name]
    assert parse_settings(cls, [], {}, prog=name, description="") == cls()
    for f in fields(cls):
        assert f.metadata["option"].env.startswith("ROYALEFLEET_"), f.name
        assert f.metadata["option"].help, f.name


ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_every_main_is_a_few_lines_and_no_service_builds_its_own_argparse():
    for main in sorted((ROOT / "services").glob("*/__main__.py")):
        code = [x for x in main.read_text().splitlines() if x.strip() and not x.startswith(('"""', "#"))]
        assert len(code) <= 4, f"{main.relative_to(ROOT)}: {len(code)} lines of code; put the service in its own module"
    for path in sorted((ROOT / "services").rglob("*.py")):
        assert "argparse" not in path.read_text(), f"{path.relative_to(ROOT)}: settings go through shared.service_settings"


def test_every_service_declares_its_metrics_options_once_through_the_shared_helpers(capsys):
    """settings_parser and the metrics options (the service skeleton's duplicate, issue 29): the
    parser reads --metrics-port, then ROYALEFLEET_METRICS_PORT, then the service's own default,
    refuses a bad port naming the flag or the variable, and every service's --help shows the same
    two lines."""
    from dataclasses import dataclass

    from shared.service_settings import (
        METRICS_HOST_HELP, METRICS_PORT_HELP, metrics_host_option, metrics_port_option, settings_parser,
    )

    @dataclass(frozen=True)
    class S:
        metrics_port: int = metrics_port_option(9123)
        metrics_host: str = metrics_host_option()

    parse = settings_parser(S, prog="python -m services.example", description="an example")
    assert parse([], environ={}) == S(9123, "127.0.0.1")
    assert parse([], environ={"ROYALEFLEET_METRICS_PORT": "0", "ROYALEFLEET_METRICS_HOST": "0.0.0.0"}) == S(0, "0.0.0.0")
    assert parse(["--metrics-port", "9200"], environ={"ROYALEFLEET_METRICS_PORT": "0"}).metrics_port == 9200
    with pytest.raises(SystemExit) as exc:
        parse(["--metrics-port", "70000"], environ={})
    assert exc.value.code == 2 and "70000 is not a port (0..65535)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse([], environ={"ROYALEFLEET_METRICS_PORT": "abc"})
    assert "environment variable ROYALEFLEET_METRICS_PORT='abc': not a whole number" in capsys.readouterr().err
    import importlib

    for name in ("checkpoint", "evaluator", "ladder", "learner", "rollout"):
        main = importlib.import_module(f"services.{name}.main")
        with pytest.raises(SystemExit):
            main.parse_settings(["--help"], environ={})
        shown = " ".join(capsys.readouterr().out.split())
        assert METRICS_PORT_HELP in shown and METRICS_HOST_HELP in shown, name
