"""The options that name a run folder, and the config they give, for the read-only commands
that work on a run's files (``eval``, ``gate``, ``status``, ``strength``, ...). Every command
that reads one run takes it as an optional positional ``RUN`` and as ``--run-name``."""

from __future__ import annotations

from pathlib import Path

from shared.config import PROFILES, load_config
from shared.run_dir import RunDir


def add_run_options(sp, run_help: str = "the run to read (overrides the config)") -> None:
    """``--config``, ``--profile``, ``--run-name`` (help ``run_help``) and ``--runs-dir``."""
    sp.add_argument("--config", metavar="FILE", help="a JSON config (default: the run's config.json if it exists)")
    sp.add_argument("--profile", choices=sorted(PROFILES), help="profile when no config names one (default: cpu)")
    sp.add_argument("--run-name", help=run_help)
    sp.add_argument("--runs-dir", help="where run folders live (overrides the config)")


def add_run_argument(sp) -> None:
    """The optional positional ``RUN`` every read-only command takes (``royalefleet status
    myrun``), the same as ``--run-name``."""
    sp.add_argument("run", nargs="?", metavar="RUN", help="the run's name, its folder under runs_dir (the same as --run-name)")


def run_name_of(args) -> str | None:
    """The run named by the positional ``RUN`` or ``--run-name`` (None: the config's). Raises
    SystemExit with a message when both are given and differ."""
    positional, flag = getattr(args, "run", None), getattr(args, "run_name", None)
    if positional and flag and positional != flag:
        raise SystemExit(f"error: RUN {positional!r} and --run-name {flag!r} name two runs; give one")
    return positional or flag


def run_config(args):
    """The config: ``--config``, else the run's own ``config.json`` (written at every start by
    ``royalefleet up``), else the profile (default cpu: it never imports torch to look for a
    GPU). The run (``RUN`` or ``--run-name``, ``run_name_of``) and ``--runs-dir`` override what
    it says. Raises ConfigError for a config that does not load, SystemExit for two run names."""
    overrides: dict = {}
    run_name = run_name_of(args)
    if run_name:
        overrides["run_name"] = run_name
    if args.runs_dir:
        overrides["runs_dir"] = args.runs_dir
    source = args.config
    if source is None:
        base = load_config(None, profile_name=args.profile or "cpu", overrides=overrides or None)
        saved = RunDir(Path(base.runs_dir) / base.run_name).config
        if not saved.exists():
            return base
        source = str(saved)
    return load_config(source, profile_name=args.profile or "cpu", overrides=overrides or None)
