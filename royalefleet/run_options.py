"""The options that name a run and its config, defined once for every command.

One grammar (docs/running.md, "Where a run's outputs go"): a command that works on one run takes it as an optional
positional ``RUN`` (``royalefleet status myrun``) and as ``--run-name`` (its synonym; both given
must agree), ``--runs-dir`` for run folders elsewhere, ``--config`` and ``--profile`` with one help
text each (``add_run_options``). Commands whose positionals are players (``eval``, ``play``,
``export``) take ``RUN`` as their first word, told from a player by the player's closed form
(``royalefleet/player_words.py``). A run named that has no folder gets one refusal from every command
(``RunNotFound``, exit 2), naming the runs that do exist."""

from __future__ import annotations

import difflib
from pathlib import Path

from shared.config import PROFILES, ConfigError, load_config
from shared.run_dir import RunDir

EMPTY_LISTING = 1
"""The exit code of a listing with nothing to list (``snapshots``, ``strength``, ``checkpoints``,
``demos list`` of a run that has none yet): the listing's message is printed as usual, and a
script tells "none yet" (1) from a listing (0) and from a refusal (2)."""

CONFIG_HELP = ("a JSON config: a profile and overrides (write one with `royalefleet config`); default: the run's "
               "own runs_dir/RUN/config.json when the run exists, else the profile")
PROFILE_HELP = ("the machine class when neither the run's config.json nor --config names one; default: laptop "
                "when torch sees a GPU, else cpu (commands that only read a run: cpu)")
RUN_HELP = "the run: its folder under --runs-dir (default: the config's run_name, 'default')"
RUN_NAME_HELP = "the run, the same as RUN: its folder under --runs-dir (overrides the config's run_name)"
RUNS_DIR_HELP = "the folder that holds the run folders (overrides the config's runs_dir, default 'runs')"


def add_run_options(sp, _purpose: str | None = None) -> None:
    """``--config``, ``--profile``, ``--run-name`` and ``--runs-dir``, each with its one help text.
    (``_purpose`` is ignored: one help text for every command.)"""
    sp.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    sp.add_argument("--profile", choices=sorted(PROFILES), help=PROFILE_HELP)
    sp.add_argument("--run-name", metavar="RUN", help=RUN_NAME_HELP)
    sp.add_argument("--runs-dir", metavar="FOLDER", help=RUNS_DIR_HELP)


def add_run_argument(sp) -> None:
    """The optional positional ``RUN`` (the same as ``--run-name``)."""
    sp.add_argument("run", nargs="?", metavar="RUN", help=RUN_HELP)


class TwoRuns(SystemExit):
    """RUN and --run-name both given, naming two runs (``royalefleet.cli.main``: exit 2, said)."""


def run_name_of(args) -> str | None:
    """The run named by the positional ``RUN`` or ``--run-name`` (None: the config's). Raises
    TwoRuns (a SystemExit carrying the message) when both are given and differ."""
    positional, flag = getattr(args, "run", None), getattr(args, "run_name", None)
    if positional and flag and positional != flag:
        raise TwoRuns(f"RUN {positional!r} and --run-name {flag!r} name two runs; give one")
    return positional or flag


class RunNotFound(ConfigError):
    """A run that has no folder: the message names it, the folder looked at, the runs there are
    and the closest name."""

    def __init__(self, runs_dir: str | Path, run_name: str):
        folder = Path(runs_dir) / run_name
        try:
            there = sorted(p.name for p in Path(runs_dir).iterdir() if p.is_dir())
        except OSError:
            there = []
        close = difflib.get_close_matches(run_name, there, n=1)
        message = (f"no run {run_name!r}: there is no folder {folder}"
                   + (f"; runs in {runs_dir}: {', '.join(there)}" if there else f"; {runs_dir} holds no run")
                   + (f" (did you mean {close[0]!r}?)" if close else "")
                   + ". Name the run as RUN or --run-name, and its folder's parent with --runs-dir; "
                   "`royalefleet up RUN` starts a new one")
        self.problems = [message]
        ValueError.__init__(self, message)


def check_run_exists(runs_dir: str | Path, run_name: str) -> None:
    """Raise RunNotFound when ``<runs_dir>/<run_name>`` is not a folder."""
    if not RunDir.of(runs_dir, run_name).root.is_dir():
        raise RunNotFound(runs_dir, run_name)


def run_config(args, must_exist: bool = False):
    """The config: ``--config``, else the run's own ``config.json`` (written at every start by
    ``royalefleet up``), else the profile (default cpu: it never imports torch to look for a
    GPU). The run (``RUN`` or ``--run-name``, ``run_name_of``) and ``--runs-dir`` override what
    it says. ``must_exist``: refuse a run without a folder (``RunNotFound``). Raises ConfigError
    for a config that does not load, SystemExit for two run names."""
    overrides: dict = {}
    run_name = run_name_of(args)
    if run_name:
        overrides["run_name"] = run_name
    if args.runs_dir:
        overrides["runs_dir"] = args.runs_dir
    source = args.config
    if source is None:
        base = load_config(None, profile_name=args.profile or "cpu", overrides=overrides or None)
        if must_exist:
            check_run_exists(base.runs_dir, base.run_name)
        saved = RunDir(Path(base.runs_dir) / base.run_name).config
        if not saved.exists():
            return base
        source = str(saved)
        # The folder read is the run, whatever its config.json says: a folder copied, renamed or
        # mounted elsewhere (Compose's volumes under /tmp/runs) keeps its recorded run_name/runs_dir.
        overrides = {**overrides, "run_name": base.run_name, "runs_dir": base.runs_dir}
    cfg = load_config(source, profile_name=args.profile or "cpu", overrides=overrides or None)
    if must_exist:
        check_run_exists(cfg.runs_dir, cfg.run_name)
    return cfg


def near_miss_run(runs_dir: str | Path, run_name: str) -> str | None:
    """The existing run that ``run_name`` (a run with no folder yet) most likely misspells
    (``defualt`` beside ``default``), or None: a folder under ``runs_dir`` other than the name
    itself, within difflib's 0.8 similarity."""
    root = Path(runs_dir)
    if (root / run_name).is_dir():
        return None
    try:
        there = sorted(p.name for p in root.iterdir() if p.is_dir())
    except OSError:
        return None
    close = difflib.get_close_matches(run_name, there, n=1, cutoff=0.8)
    return close[0] if close else None


def refuse_near_miss(runs_dir: str | Path, run_name: str, command: str = "up") -> str | None:
    """The refusal of ``up RUN`` (or ``doctor RUN``) for a new run whose name is a near-miss of
    an existing one (exit 2 in the CLI; ``up --new-run`` starts it anyway), None when the name is
    not one."""
    close = near_miss_run(runs_dir, run_name)
    if close is None:
        return None
    own = "continues it" if command == "up" else "checks it"
    return (f"royalefleet {command}: no run {run_name!r} under {runs_dir}, but there is {close!r} (did you mean "
            f"{close!r}?): `royalefleet {command} {close}` {own}; to start a new run named {run_name!r} beside it, "
            f"{'add --new-run' if command == 'up' else f'use royalefleet up {run_name} --new-run'}")
