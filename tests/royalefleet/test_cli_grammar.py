"""One CLI grammar (royalefleet/run_options.py): a positional RUN with --run-name as its synonym,
one help text for --config, --profile, --run-name and --runs-dir, no --run, --rollouts one
number of rollout processes wherever it is taken, and one refusal for a run that does not exist
from every command that reads a run."""

from __future__ import annotations

import argparse

import pytest

from royalefleet import cli
from royalefleet.run_options import CONFIG_HELP, PROFILE_HELP, RUN_HELP, RUN_NAME_HELP, RUNS_DIR_HELP
from shared.config import dump_config, load_config


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.fixture
def runs(tmp_path):
    """A runs folder holding one run, 'default', as `royalefleet up` leaves it."""
    runs = tmp_path / "runs"
    (runs / "default").mkdir(parents=True)
    cfg = load_config({"profile": "tiny", "runs_dir": str(runs)})
    (runs / "default" / "config.json").write_bytes(dump_config(cfg))
    return runs


READERS = {
    "status": ["status", "defualt"], "snapshots": ["snapshots", "defualt"], "strength": ["strength", "defualt"],
    "report": ["report", "defualt"], "rate": ["rate", "defualt"], "checkpoints": ["checkpoints", "defualt"],
    "gate": ["gate", "snap:0123456789abcdef", "defualt"], "replay": ["replay", "defualt", "1"],
    "resume": ["resume", "defualt", "--no-doctor"], "eval": ["eval", "--run-name", "defualt"],
    "play": ["play", "--run-name", "defualt"], "status --run-name": ["status", "--run-name", "defualt"],
}


@pytest.mark.parametrize("argv", READERS.values(), ids=READERS.keys())
def test_a_misspelled_run_gets_the_same_refusal_from_every_command(runs, capsys, argv):
    assert cli.main([*argv, "--runs-dir", str(runs)]) == 2
    assert capsys.readouterr().err == (
        f"royalefleet {argv[0]}: no run 'defualt': there is no folder {runs / 'defualt'}; runs in {runs}: default "
        "(did you mean 'default'?). Name the run as RUN or --run-name, and its folder's parent with --runs-dir; "
        "`royalefleet up RUN` starts a new one\n")


def test_replay_takes_the_run_from_run_name_and_the_lone_number_as_the_episode(runs, capsys):
    # README's form: the 3 is the episode, not a run named "3" (the refusal names the run looked for)
    assert cli.main(["replay", "--run-name", "nosuch", "3", "--runs-dir", str(runs)]) == 2
    assert "no run 'nosuch'" in capsys.readouterr().err
    from royalefleet.cmd_replay import episode_as_run

    args = cli.build_parser().parse_args(["replay", "--run-name", "default", "3"])
    episode_as_run(args)
    assert (args.run, args.run_name, args.episode) == (None, "default", 3)


def test_every_run_option_has_one_help_text_and_no_command_takes_run():
    helps = {"--config": CONFIG_HELP, "--profile": PROFILE_HELP, "--run-name": RUN_NAME_HELP, "--runs-dir": RUNS_DIR_HELP}
    seen = set()
    for name, sp in subparsers().items():
        for action in sp._actions:
            assert "--run" not in action.option_strings, name
            for opt in set(action.option_strings) & set(helps):
                assert action.help == helps[opt], (name, opt)
                seen.add(name)
            if action.dest == "run" and not action.option_strings:
                assert action.help == RUN_HELP and action.metavar == "RUN", name
    assert {"up", "resume", "status", "eval", "play", "doctor", "rate", "gate", "replay", "bench", "config"} <= seen


def test_every_command_that_works_on_one_run_takes_it_as_RUN():
    takes = {name for name, sp in subparsers().items()
             if any(a.dest == "run" and not a.option_strings for a in sp._actions)}
    assert {"up", "resume", "checkpoints", "status", "snapshots", "strength", "report", "rate", "gate",
            "replay"} <= takes


def test_rollouts_means_rollout_processes_and_the_bench_fleet_sizes_are_fleet_sizes(capsys):
    parsers = subparsers()
    for name in ("up", "resume", "verify-resume"):
        action = next(a for a in parsers[name]._actions if "--rollouts" in a.option_strings)
        assert action.type is int and "rollout processes" in action.help, name
    assert cli.main(["bench", "--rollouts", "1,2,4"]) == 2
    assert capsys.readouterr().err == (
        "royalefleet bench: --rollouts 1,2,4: the fleet sizes are --fleet-sizes 1,2,4 now (--rollouts is one "
        "number of rollout processes in up, resume and verify-resume)\n")
    assert cli.build_parser().parse_args(["bench", "--fleet-sizes", "1,2"]).fleet_sizes == "1,2"
