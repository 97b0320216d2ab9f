"""One CLI grammar (royalefleet/run_options.py): a positional RUN with --run-name as its synonym,
one help text for --config, --profile, --run-name and --runs-dir, no --run, --rollouts one
number of rollout processes wherever it is taken, and one refusal for a run that does not exist
from every command that reads a run."""

from __future__ import annotations

import argparse
import re

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
    "resume": ["resume", "defualt", "--no-doctor"], "eval": ["eval", "defualt"], "play": ["play", "defualt"],
    "eval --run-name": ["eval", "--run-name", "defualt"], "play A B": ["play", "defualt", "latest", "scripted:noop"],
    "export": ["export", "defualt", "latest", "out"], "status --run-name": ["status", "--run-name", "defualt"],
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


def every_parser() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser, nested ones (demos record) under their full name."""
    found = {}
    for name, sp in subparsers().items():
        nested = [a for a in sp._actions if isinstance(a, argparse._SubParsersAction)]
        found.update({f"{name} {n}": p for a in nested for n, p in a.choices.items()} if nested else {name: sp})
    return found


def test_every_command_that_takes_run_name_takes_the_run_as_a_positional_too():
    parsers = every_parser()
    takes = {name for name, sp in parsers.items()
             if any(not a.option_strings and (a.dest == "run" or (a.dest == "words" and "[RUN]" in a.metavar))
                    for a in sp._actions)}
    named = {name for name, sp in parsers.items() if any("--run-name" in a.option_strings for a in sp._actions)}
    assert named == takes
    assert {"up", "resume", "verify-resume", "checkpoints", "status", "snapshots", "strength", "report", "rate",
            "gate", "replay", "eval", "play", "export", "doctor", "config", "bench", "identity", "clone",
            "demos record", "demos list"} <= takes


SECOND_SPELLING = re.compile(r"^(-r|--?run|--?run[-_]?name|--?run_name|--name-of-run|--run[-_]?dir|--rundir)$")


def test_no_parser_has_a_second_spelling_of_the_run_option():
    for name, sp in every_parser().items():
        spellings = [o for a in sp._actions for o in a.option_strings if a.dest in ("run", "run_name")]
        assert spellings in ([], ["--run-name"]), (name, spellings)
        others = [o for a in sp._actions for o in a.option_strings if SECOND_SPELLING.match(o) and o != "--run-name"]
        assert others == [], (name, others)


def test_the_run_and_the_players_are_told_apart_by_the_players_closed_form(runs):
    parsers = subparsers()
    assert parsers["eval"].format_usage().rstrip().endswith("[RUN] [A] [B]")
    assert parsers["export"].format_usage().rstrip().endswith("[RUN] PLAYER OUT")
    parse = cli.build_parser().parse_args
    from royalefleet.player_words import take_words

    cases = [
        (["eval", "default"], None, "default", ("latest", "scripted:random_legal")),
        (["eval", "latest+search:8", "scripted:defend"], None, None, ("latest+search:8", "scripted:defend")),
        (["eval", "default", "snap:0123456789abcdef"], None, "default", ("snap:0123456789abcdef", "scripted:random_legal")),
        (["play", "0123456789abcdef", "champion"], None, None, ("0123456789abcdef", "champion")),
        (["eval", "latest", "latest", "scripted:noop"], None, "latest", ("latest", "scripted:noop")),  # all 3: RUN first
        (["export", "latest+search:8", "mybot"], "export", None, ("latest+search:8", "mybot")),
        (["export", "default", "champion", "mybot"], "export", "default", ("champion", "mybot")),
    ]
    for argv, kind, run, pair in cases:
        args = parse([*argv, "--runs-dir", str(runs)])
        names = ("player", "out") if kind else ("a", "b")
        take_words(args, names, 2 if kind else 0, argv[0], players=1 if kind else None)
        assert (args.run, tuple(getattr(args, n) for n in names)) == (run, pair), argv


TYPOS = {
    "eval defualt": (["eval", "defualt"], "(did you mean 'default'?)"),
    "eval scripted:defnd": (["eval", "latest", "scripted:defnd"], "(did you mean 'scripted:defend'?)"),
    "eval defend": (["eval", "latest", "defend"], "(did you mean 'scripted:defend'?)"),
    "play lates": (["play", "lates"], "no player (did you mean the player 'latest'?)"),
    "export lates": (["export", "default", "lates", "out"], "(did you mean 'latest'?)"),
    "demos scripted:defnd": (["demos", "record", "default", "--teacher", "scripted:defnd", "--battles", "2"],
                             "(did you mean 'scripted:defend'?)"),
    "gate --run": (["gate", "snap:0123456789abcdef", "--run", "default"],
                   "--run (did you mean RUN (a positional) or --run-name?)"),
    "snapshot": (["snapshot", "default"], "(did you mean 'snapshots'?)"),
    "--profil": (["status", "default", "--profil", "cpu"], "--profil (did you mean --profile?)"),
    "--profile cpuu": (["status", "default", "--profile", "cpuu"], "(did you mean 'cpu'?)"),
    "--gams": (["eval", "default", "--gams", "4"], "--gams (did you mean --games?)"),
    "up defualt": (["up", "defualt", "--no-doctor"], "(did you mean 'default'?)"),
    "doctor defualt": (["doctor", "defualt", "--fast"], "use royalefleet up defualt --new-run"),
    "demos lst": (["demos", "lst", "default"], "(did you mean 'list'?)"),
}


@pytest.mark.parametrize("argv, said", TYPOS.values(), ids=TYPOS.keys())
def test_every_typo_exits_2_saying_did_you_mean(runs, capsys, argv, said):
    try:
        code = cli.main([*argv, "--runs-dir", str(runs)])
    except SystemExit as exc:  # argparse's refusals
        code = exc.code
    assert code == 2
    assert said in capsys.readouterr().err


def test_up_of_a_near_miss_is_refused_naming_the_run_and_the_flag_that_starts_it(runs, capsys):
    assert cli.main(["up", "defualt", "--runs-dir", str(runs), "--no-doctor"]) == 2
    assert capsys.readouterr().err == (
        f"royalefleet up: no run 'defualt' under {runs}, but there is 'default' (did you mean 'default'?): "
        "`royalefleet up default` continues it; to start a new run named 'defualt' beside it, add --new-run\n")
    assert not (runs / "defualt").exists()
    from royalefleet.run_options import near_miss_run

    assert [near_miss_run(runs, n) for n in ("defualt", "default", "default2", "mine", "dfault")] == [
        "default", None, "default", None, "default"]


def test_one_name_one_meaning_battles_and_out(capsys):
    parsers = every_parser()
    assert cli.main(["up", "x", "--battles", "8"]) == 2
    assert capsys.readouterr().err == (
        "royalefleet up: --battles 8: the battles each rollout steps at once are --battles-per-rollout 8 now "
        "(--battles is a total of battles played, as in demos record)\n")
    assert cli.build_parser().parse_args(["up", "--battles-per-rollout", "8"]).battles == 8
    for name, sp in parsers.items():
        for a in sp._actions:
            if "--battles" in a.option_strings and a.help != argparse.SUPPRESS:
                assert "total" in a.help or "battles to play" in a.help, name
            if "--out" in a.option_strings and a.help != argparse.SUPPRESS:
                assert "folder" in a.help, name
            if "--output" in a.option_strings:
                assert a.metavar == "FILE" or "file" in a.help, name


def test_version_is_the_packages(capsys):
    import tomllib
    from pathlib import Path

    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    want = tomllib.loads((Path(cli.__file__).parent.parent / "pyproject.toml").read_text())["project"]["version"]
    assert exc.value.code == 0 and capsys.readouterr().out == f"royalefleet {want}\n"


@pytest.mark.parametrize("argv", [["snapshots"], ["strength"], ["checkpoints"], ["demos", "list"]])
def test_an_empty_listing_exits_1_from_every_listing_command(runs, capsys, argv):
    from royalefleet.run_options import EMPTY_LISTING

    assert EMPTY_LISTING == 1
    assert cli.main([*argv, "default", "--runs-dir", str(runs)]) == 1
    assert capsys.readouterr().out.strip()  # the listing says why it is empty


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
