"""The config ``royalefleet up`` and ``royalefleet resume`` start a run with.

A run that exists (its folder holds ``config.json``, recorded at every start) is continued with
its own config unless told otherwise: the options given are applied on top of the record, and
what they change is shown. A change that moves the run identity (shared/identity.py: the seed,
the network, PPO, battles, rollouts, the wire codec, ...) is refused naming each field, unless
``--allow-identity-drift``; one that does not (``--timesteps``, ports, alarms) is accepted. A
``--profile`` other than the run's, or a ``--config`` file, counts as telling otherwise: the
config it gives is compared with the record the same way. So the default profile (``laptop``
when torch sees a GPU, else ``cpu``) is only looked for on a new run.
"""

from __future__ import annotations

from shared.config import RunConfig, load_config
from shared.recorded_config import (identity_changes, identity_fields_moved, load_recorded, recorded_doc,
                                    recorded_path)

FLAG_OF = {"local.rollouts": "--rollouts", "rollout.battles": "--battles-per-rollout", "learner.algorithm": "--algorithm",
           "timestep_limit": "--timesteps", "profile": "--profile"}
"""The option that sets a config field, named beside a change it makes."""


class IdentityChangeRefused(SystemExit):
    """A start whose options would change an existing run's identity (the message says which
    fields and the ways on)."""


def flag_overrides(args) -> dict:
    """The config overrides the start options give (``--rollouts``, ``--battles-per-rollout``,
    ``--algorithm``, ``--timesteps``, RUN/``--run-name``, ``--runs-dir``)."""
    from royalefleet.run_options import run_name_of

    overrides: dict = {}
    run_name = run_name_of(args)
    if run_name:
        overrides["run_name"] = run_name
    if getattr(args, "runs_dir", None):
        overrides["runs_dir"] = args.runs_dir
    if getattr(args, "rollouts", None) is not None:
        overrides.setdefault("local", {})["rollouts"] = args.rollouts
    if getattr(args, "battles", None) is not None:
        overrides.setdefault("rollout", {})["battles"] = args.battles
    if getattr(args, "algorithm", None) is not None:
        overrides.setdefault("learner", {})["algorithm"] = args.algorithm
    if getattr(args, "timesteps", None) is not None:
        overrides["timestep_limit"] = args.timesteps
    return overrides


def _where(args, overrides: dict) -> tuple[str, str]:
    """(runs_dir, run_name) of the run the options name, without looking for a GPU: the flags,
    else the ``--config`` file's, else the defaults (no profile changes either)."""
    if "run_name" in overrides and "runs_dir" in overrides:
        return overrides["runs_dir"], overrides["run_name"]
    named = load_config(args.config, profile_name=args.profile or "cpu",
                        overrides={k: v for k, v in overrides.items() if k in ("run_name", "runs_dir")} or None)
    return named.runs_dir, named.run_name


def _line(path: str, pair: tuple) -> str:
    flag = FLAG_OF.get(path)
    return f"  {path}: {pair[0]!r} -> {pair[1]!r}" + (f" ({flag})" if flag else "")


def start_config(args, command: str = "up", say=None) -> RunConfig:
    """The config to start with (module docstring). ``say`` gets the accepted changes' lines
    (default: standard output). Raises IdentityChangeRefused (exit 2, the message naming every
    field, its old and new value and the option that set it) and ConfigError."""
    say = say or (lambda text: print(text, flush=True))
    overrides = flag_overrides(args)
    runs_dir, run_name = _where(args, overrides)
    recorded = load_recorded(runs_dir, run_name)
    if recorded is None:
        return load_config(args.config, profile_name=args.profile, overrides=overrides or None)
    if args.config is not None:
        wanted = load_config(args.config, profile_name=args.profile or recorded.profile, overrides=overrides or None)
    elif args.profile is not None and args.profile != recorded.profile:
        wanted = load_config(None, profile_name=args.profile, overrides=overrides or None)
    else:
        wanted = load_config(recorded_doc(runs_dir, run_name), overrides=overrides or None)
    moving, rest = identity_changes(recorded, wanted)
    record = recorded_path(runs_dir, run_name)
    if moving and not getattr(args, "allow_identity_drift", False):
        raise IdentityChangeRefused(
            f"royalefleet {command}: refusing to start run {run_name!r} with options that change its run identity "
            f"(its own config is {record}; identity fields {', '.join(identity_fields_moved(recorded, wanted))}):\n"
            + "\n".join(_line(p, v) for p, v in moving.items())
            + f"\nThese change the numbers the run produces. Leave them out to continue the run as recorded "
            f"(`royalefleet resume {run_name}`), start a new run with another RUN, or pass --allow-identity-drift "
            "to record the drift and continue.")
    if moving or rest:
        say(f"royalefleet {command}: run {run_name!r} continues with its own config ({record}), changed by this start:\n"
            + "\n".join(_line(p, v) + (" (run identity: drift allowed)" if p in moving else "")
                        for p, v in {**moving, **rest}.items()))
    else:
        say(f"royalefleet {command}: run {run_name!r} continues with its own config ({record})")
    return wanted

