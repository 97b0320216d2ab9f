"""``royalefleet``: the one command-line entry point.

    royalefleet up       start the whole stack on this machine and train (Ctrl-C stops cleanly)
    royalefleet config   write a fully populated config for a profile
    royalefleet bench    measure bare RoyaleGym speed against the stack's, and the wire bytes
"""

from __future__ import annotations

import argparse
import os
import sys

# Pin BLAS threads before numpy loads anywhere in this process (run-exactness needs a fixed
# count, and the launcher itself never needs more than one).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from shared.config import PROFILES, ConfigError, default_profile_name, dump_config, load_config  # noqa: E402


def _load(args) -> object:
    overrides: dict = {}
    if getattr(args, "run_name", None):
        overrides["run_name"] = args.run_name
    if getattr(args, "runs_dir", None):
        overrides["runs_dir"] = args.runs_dir
    if getattr(args, "rollouts", None) is not None:
        overrides.setdefault("local", {})["rollouts"] = args.rollouts
    if getattr(args, "battles", None) is not None:
        overrides.setdefault("rollout", {})["battles"] = args.battles
    return load_config(args.config, profile_name=args.profile, overrides=overrides or None)


def cmd_up(args) -> int:
    from royalefleet.launcher import Stack

    cfg = _load(args)
    print(f"royalefleet up: profile {cfg.profile}, run {cfg.run_name!r}, "
          f"{cfg.local.rollouts} rollout(s) x {cfg.rollout.battles} battles, "
          f"{cfg.ppo.timesteps_per_iteration:,} timesteps an iteration"
          + (f", stopping after {args.iterations} iteration(s)" if args.iterations else ""), flush=True)
    return Stack(cfg, iterations=args.iterations, say=lambda s: print(s, flush=True),
                 echo_all=args.verbose).run()


def cmd_config(args) -> int:
    cfg = _load(args)
    data = dump_config(cfg)
    if args.output in (None, "-"):
        sys.stdout.write(data.decode())
    else:
        with open(args.output, "wb") as fh:
            fh.write(data)
        print(f"wrote {args.output} (profile {cfg.profile}); edit it and pass it with --config", file=sys.stderr)
    return 0


def cmd_bench(args) -> int:
    from royalefleet.bench import run_bench

    return run_bench(_load(args), seconds=args.seconds, iterations=args.iterations)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="royalefleet",
        description="Self-play PPO training for RoyaleGym agents as rollout, learner, ladder and checkpoint "
        "services over ZeroMQ.",
        epilog="Run `royalefleet <command> --help` for a command's options. README.md explains the outputs.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="command")

    def common(sp):
        sp.add_argument("--config", metavar="FILE",
                        help="a JSON config: {\"profile\": ..., overrides...} (write one with `royalefleet config`)")
        sp.add_argument("--profile", choices=sorted(PROFILES),
                        help=f"machine class when the config names none (default here: {default_profile_name()})")
        sp.add_argument("--run-name", help="run folder name under runs_dir (overrides the config)")
        sp.add_argument("--runs-dir", help="where run folders live (overrides the config)")

    up = sub.add_parser("up", help="start the local stack and train; Ctrl-C stops it and writes a checkpoint",
                        description="Start checkpoint, ladder, learner and rollout services on loopback and train. "
                        "A run folder that holds a checkpoint is resumed.")
    common(up)
    up.add_argument("--iterations", type=int, default=0,
                    help="stop cleanly after this many iterations (default 0: until Ctrl-C)")
    up.add_argument("--rollouts", type=int, help="rollout processes to start (overrides local.rollouts)")
    up.add_argument("--battles", type=int, help="battles per rollout (overrides rollout.battles)")
    up.add_argument("--verbose", action="store_true", help="echo every service's output, not only the learner's")
    up.set_defaults(func=cmd_up)

    cf = sub.add_parser("config", help="print or write a fully populated config",
                        description="Write the complete config of a profile (with --config: of that file on top "
                        "of its profile), every field filled in.")
    common(cf)
    cf.add_argument("-o", "--output", help="file to write (default: standard output)")
    cf.set_defaults(func=cmd_config)

    bn = sub.add_parser("bench", help="measure env speed, stack speed and wire bytes per row",
                        description="Prints bare RoyaleGym decisions/s with random-legal play on the same battles, "
                        "the stack's collected rows/s, their ratio, and the wire bytes per observation row.")
    common(bn)
    bn.add_argument("--seconds", type=float, default=20.0, help="seconds of bare env stepping (default 20)")
    bn.add_argument("--iterations", type=int, default=2, help="stack iterations to time (default 2)")
    bn.set_defaults(func=cmd_bench)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"royalefleet {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
