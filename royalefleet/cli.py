"""``royalefleet``: the one command-line entry point.

    royalefleet up       start the whole stack on this machine and train (Ctrl-C stops cleanly)
    royalefleet config   write a fully populated config for a profile
    royalefleet bench    measure bare RoyaleGym speed against the stack's, and the wire bytes
    royalefleet resume / verify-resume / identity / checkpoints   runs that stop and continue
    royalefleet status   where a run stands, from its folder (no service needed)
    royalefleet snapshots  a run's snapshots: the snap:<id> to eval or play, its pool role and rating
    royalefleet rate     refit the ratings from a result log
    royalefleet eval     play a paired evaluation between two players (snapshots or anchors)
    royalefleet gate     re-run a logged gate decision and compare its numbers
    royalefleet play     two players play full matches, each written as a trace and an HTML page
    royalefleet replay   re-simulate an episode of the result log, verify it, write it as HTML
    royalefleet demos    record a teacher's battles as demonstrations (demos record / demos list)
    royalefleet clone    train the run's network to copy demonstrations; writes a snapshot
    royalefleet doctor   check this machine against a config before a run (ok / warn / FAIL)
    royalefleet keys     CURVE keys for authenticated cross-host traffic
    royalefleet k8s      write (or --check) the Kubernetes manifests in deploy/k8s/
    royalefleet chaos    a tiny stack under kills, faults and hostile messages; checks that it held
"""

from __future__ import annotations

import argparse
import os
import sys

# Pin BLAS threads before numpy loads anywhere in this process (run-exactness needs a fixed
# count, and the launcher itself never needs more than one).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from shared.config import ConfigError, dump_config, load_config  # noqa: E402
from royalefleet.trust_options import add_trust_options, apply_trust_options  # noqa: E402
from shared.run_dir import RunDir  # noqa: E402


def _algorithm_choices() -> tuple[str, ...]:
    """``learner.algorithm``'s values, from the algorithms' table (shared/algorithms.py: one source
    of truth with the config's Literal and the learner's registry, which tests/services/learner
    checks against it)."""
    from shared.algorithms import algorithm_names

    return algorithm_names()


def _algorithm_help() -> str:
    """``--algorithm``'s help: each declared algorithm with its summary, in table order."""
    from shared.algorithms import ALGORITHMS

    named = [spec.name + (f" ({spec.summary})" if spec.summary else "") for spec in ALGORITHMS]
    listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + ", or " + named[-1]
    return "the learner (overrides learner.algorithm; in the run identity): " + listed


def _load(args) -> object:
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
    return load_config(args.config, profile_name=args.profile, overrides=overrides or None)


def cmd_up(args) -> int:
    from royalefleet.launcher import Stack
    from royalefleet.start_config import IdentityChangeRefused, start_config

    if args.old_battles is not None:
        print(f"royalefleet {args.command}: --battles {args.old_battles}: the battles each rollout steps at once "
              f"are --battles-per-rollout {args.old_battles} now (--battles is a total of battles played, as in "
              "demos record)", file=sys.stderr)
        return 2
    try:
        if getattr(args, "require_checkpoint", False):
            _resume_needs_a_run(args)
        elif not args.new_run and _up_near_miss(args):
            return 2
        if args.config is not None and not _bring_clones(args):
            return 2
        cfg = start_config(args, args.command)
    except IdentityChangeRefused as exc:
        print(exc.code, file=sys.stderr)
        return 2
    print(f"royalefleet up: profile {cfg.profile}, run {cfg.run_name!r}, "
          f"{cfg.local.rollouts} rollout(s) x {cfg.rollout.battles} battles, "
          f"{cfg.ppo.timesteps_per_iteration:,} timesteps an iteration"
          + (f", stopping at iteration {args.iterations} (a total)" if args.iterations else "")
          + (f", stopping at {cfg.timestep_limit:,} learner timesteps (a total)" if cfg.timestep_limit else ""),
          flush=True)
    if getattr(args, "require_checkpoint", False):
        from services.checkpoint.store import CheckpointStore

        store = CheckpointStore(RunDir.of(cfg.runs_dir, cfg.run_name).checkpoints)
        if not os.path.exists(store.root) or not store.index().entries:
            print(f"royalefleet resume: run {cfg.run_name!r} has no checkpoint under {store.root}; "
                  "start it with `royalefleet up`", file=sys.stderr)
            return 2
    if not getattr(args, "no_doctor", False) and doctor_refuses(cfg):
        return 2
    if getattr(args, "checkpoint", None) is not None and not set_aside_later(cfg, args.checkpoint):
        return 2
    learner_env = {}
    if args.allow_identity_drift:
        learner_env["ROYALEFLEET_ALLOW_IDENTITY_DRIFT"] = "1"
    if args.clear_halt:
        learner_env["ROYALEFLEET_CLEAR_HALT"] = "1"
    if args.start_fresh:
        learner_env["ROYALEFLEET_START_FRESH"] = "1"
    learner_env = learner_env or None
    return Stack(cfg, iterations=args.iterations, say=lambda s: print(s, flush=True),
                 echo_all=args.verbose, learner_env=learner_env, config_changes_said=True).run()


def set_aside_later(cfg, iteration: int) -> bool:
    """``resume --checkpoint N``: verify checkpoint N and set the later ones aside
    (``royalefleet/checkpoint_choice.py``), saying what moved; False (said) when N is refused."""
    from royalefleet.checkpoint_choice import ChoiceRefused, set_aside_after

    run = RunDir.of(cfg.runs_dir, cfg.run_name)
    try:
        folder, moved = set_aside_after(run.checkpoints, iteration, run.metrics)
    except (ChoiceRefused, OSError) as exc:
        print(f"royalefleet resume: {exc}", file=sys.stderr)
        return False
    if not moved:
        print(f"royalefleet resume: checkpoint {iteration} verifies and is the run's newest; nothing to set aside",
              flush=True)
    else:
        print(f"royalefleet resume: checkpoint {iteration} verifies; the later checkpoint(s) "
              f"{', '.join(map(str, moved))} set aside in {folder} (kept, not deleted; its index.json lists them); "
              f"the metric rows past iteration {iteration} move to metrics.purged.jsonl as the learner resumes",
              flush=True)
    return True


def _bring_clones(args) -> bool:
    """A ``--config`` whose warm start or KL anchor names a clone of another run
    (``<run>:snap:<id>``) or an exported folder: the clone verified and copied into this run, and
    ``args.config`` the document naming it ``snap:<id>`` (royalefleet/clone_import.py). False
    (said) when refused; a file that does not read as JSON is left to load_config's refusal."""
    import msgspec

    from royalefleet.clone_import import CloneImportRefused, bring_clones
    from royalefleet.run_options import run_name_of

    if isinstance(args.config, dict):
        doc = args.config
    else:
        try:
            with open(args.config, "rb") as fh:
                doc = msgspec.json.decode(fh.read())
        except (OSError, msgspec.DecodeError):
            return True
    if not isinstance(doc, dict):
        return True
    defaults = load_config(None, profile_name="cpu")
    runs_dir = args.runs_dir or doc.get("runs_dir") or defaults.runs_dir
    run_name = run_name_of(args) or doc.get("run_name") or defaults.run_name
    try:
        brought = bring_clones(doc, runs_dir, run_name, lambda s: print(f"royalefleet {args.command}: {s}"))
    except CloneImportRefused as exc:
        print(f"royalefleet {args.command}: {exc}", file=sys.stderr)
        return False
    if brought != doc:
        args.config = brought
    return True


def _up_near_miss(args) -> bool:
    """``up RUN`` of a new run named like an existing one (``defualt`` beside ``default``): said
    (``run_options.refuse_near_miss``) and True, unless ``--new-run``."""
    from royalefleet.run_options import refuse_near_miss
    from royalefleet.start_config import _where, flag_overrides

    refusal = refuse_near_miss(*_where(args, flag_overrides(args)))
    if refusal:
        print(refusal, file=sys.stderr)
    return refusal is not None


def _resume_needs_a_run(args) -> None:
    """``resume RUN`` of a run with no folder: the refusal every command gives (RunNotFound)."""
    from royalefleet.run_options import check_run_exists
    from royalefleet.start_config import _where, flag_overrides

    runs_dir, run_name = _where(args, flag_overrides(args))
    check_run_exists(runs_dir, run_name)


def doctor_refuses(cfg) -> bool:
    """Run ``royalefleet doctor --fast`` on ``cfg`` in a child process (the launcher stays free of
    torch, which the checks import), echoing its lines; True when a check failed (exit 2)."""
    import subprocess
    import tempfile

    print("royalefleet up: checking this machine first (royalefleet doctor --fast; --no-doctor skips it)", flush=True)
    with tempfile.NamedTemporaryFile(suffix=".json") as fh:
        fh.write(dump_config(cfg))
        fh.flush()
        code = subprocess.run([sys.executable, "-m", "royalefleet", "doctor", "--fast", "--config", fh.name],
                              timeout=600).returncode
    if code == 2:
        print("royalefleet up: not started: a check failed (its FAIL line above says how to fix it; "
              "`royalefleet doctor` runs every check)", file=sys.stderr)
        return True
    return False


def cmd_config(args) -> int:
    if args.explain is not None:
        from shared.config_docs import UnknownField, explain

        try:
            sys.stdout.write(explain(args.explain))
        except UnknownField as exc:
            print(f"royalefleet config --explain: {exc}", file=sys.stderr)
            return 2
        return 0
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

    if args.old_rollouts is not None:
        print(f"royalefleet bench: --rollouts {args.old_rollouts}: the fleet sizes are --fleet-sizes "
              f"{args.old_rollouts} now (--rollouts is one number of rollout processes in up, resume and "
              "verify-resume)", file=sys.stderr)
        return 2

    if args.capacity:
        from royalefleet.bench.scale import run_capacity_bench

        return run_capacity_bench(_load(args))
    if args.overlap:
        from royalefleet.bench.scale import run_overlap_bench

        return run_overlap_bench(_load(args), iterations=args.iterations)
    if args.fleet_sizes:
        from royalefleet.bench.scale import parse_fleet_sizes, run_rollouts_bench

        try:
            sizes = parse_fleet_sizes(args.fleet_sizes)
        except ValueError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
        return run_rollouts_bench(_load(args), sizes, iterations=args.iterations)
    if args.synthetic:
        from royalefleet.bench.scale import parse_fleet_sizes
        from royalefleet.bench.synthetic import run_synthetic_bench

        try:
            sizes = parse_fleet_sizes(args.synthetic, "--synthetic")
        except ValueError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
        return run_synthetic_bench(_load(args), sizes, iterations=args.iterations)
    if args.wire or args.wire_codec_only:
        from royalefleet.bench.wire import run_wire_bench

        return run_wire_bench(_load(args), iterations=args.iterations, repeats=args.wire_repeats,
                              stack=not args.wire_codec_only)
    return run_bench(_load(args), seconds=args.seconds, iterations=args.iterations, update_only=args.update_only,
                     update_batches=args.update_batches, reference=args.reference)


def cmd_verify_resume(args) -> int:
    from royalefleet.verify_resume import verify_resume

    cfg = _load(args)
    problems = verify_resume(cfg, iterations=args.iterations, split=args.split, rollouts=args.rollouts,
                             keep_dir=args.keep, say=lambda s: print(s, flush=True))
    return 1 if problems else 0


def cmd_identity(args) -> int:
    import msgspec

    from royalefleet.identity_cmd import identity_for
    from royalefleet.start_config import _where, flag_overrides
    from shared.recorded_config import recorded_doc

    doc = None
    if args.config is None and args.profile is None:  # an existing run: its own config, not the machine's
        overrides = flag_overrides(args)
        doc = recorded_doc(*_where(args, overrides))
    cfg = load_config(doc, overrides=flag_overrides(args) or None) if doc is not None else _load(args)
    ident, rid = identity_for(cfg)
    print(msgspec.json.format(msgspec.json.encode(ident), indent=2).decode())
    print(f"run_id {rid}")
    return 0


def cmd_checkpoints(args) -> int:
    from royalefleet.run_options import EMPTY_LISTING, run_config
    from services.checkpoint.store import CheckpointStore

    cfg = run_config(args, must_exist=True)
    root = str(RunDir.of(cfg.runs_dir, cfg.run_name).checkpoints)
    if not os.path.isdir(root):
        print(f"run {cfg.run_name!r} has no checkpoints under {root}")
        return EMPTY_LISTING
    entries = CheckpointStore(root).list_entries()
    if not entries:
        print(f"run {cfg.run_name!r}: the index under {root} lists no checkpoint")
        return EMPTY_LISTING
    print(f"{'iteration':>9}  {'name':<10} {'MB':>7}  status")
    for e in entries:
        status = "ok (every file verifies)" if e.ok else f"CORRUPT: {e.problem}"
        print(f"{e.iteration:>9}  {e.name:<10} {e.bytes / 1e6:>7.2f}  {status}")
    from royalefleet.checkpoint_choice import set_aside_folders

    for folder, its in set_aside_folders(root):
        print(f"set aside by resume --checkpoint: {folder} (iterations {', '.join(map(str, its)) or 'unlisted'})")
    return 0 if all(e.ok for e in entries) else 1


def stack_options(sp) -> None:
    """The options of the commands that start the local stack (up, resume)."""
    sp.add_argument("--iterations", type=int, default=0, metavar="N",
                    help="stop cleanly once the run has reached iteration N, a total over every start: a run "
                    "resumed at iteration 4 with --iterations 10 trains 6 more, and a learner restarted after a "
                    "crash stops at the same row (default 0: until Ctrl-C)")
    sp.add_argument("--timesteps", type=int, metavar="N",
                    help="stop cleanly at the first iteration boundary at or past N learner timesteps, a total over "
                    "every start (sets timestep_limit; not in the run identity; 0: no limit)")
    sp.add_argument("--rollouts", type=int, metavar="N",
                    help="rollout processes to start (overrides local.rollouts; in the run identity)")
    sp.add_argument("--battles-per-rollout", dest="battles", type=int, metavar="N",
                    help="battles each rollout steps at once (overrides rollout.battles; in the run identity); "
                    "--battles is a total of battles played wherever it is taken (demos record)")
    sp.add_argument("--battles", dest="old_battles", help=argparse.SUPPRESS)
    sp.add_argument("--algorithm", choices=_algorithm_choices(), help=_algorithm_help())
    sp.add_argument("--verbose", action="store_true", help="echo every service's output, not only the learner's")
    sp.add_argument("--allow-identity-drift", action="store_true",
                    help="resume a checkpoint whose run identity differs, recording the drift (drift.json)")
    sp.add_argument("--no-doctor", action="store_true",
                    help="skip the machine checks (royalefleet doctor's fast subset) run before anything starts")
    sp.add_argument("--clear-halt", action="store_true",
                    help="continue a run that an alarm or an operator halted (removes runs/<name>/halted.json; "
                    "read its bundle first)")
    sp.add_argument("--start-fresh", action="store_true",
                    help="start the run over when it has checkpoints and none verifies (a start is refused "
                    "otherwise); its metric rows move to metrics.purged.jsonl")


IDENTITY_EPILOG = """\
An existing run (runs_dir/RUN/config.json) continues with its own config: its profile, not
this machine's default. Options that change the run identity (the numbers it produces) are
refused on an existing run, naming each field, unless --allow-identity-drift:
  --rollouts, --battles-per-rollout, --algorithm, --profile other than the run's, and a --config file's
  seed, env, obs, net, ppo, advantage, rollout battles/shards, ladder, determinism,
  services.wire_codec, learner, dqn and extension sections.
Options that do not are accepted and shown: --iterations, --timesteps, --verbose, --no-doctor,
--clear-halt, --start-fresh, --runs-dir, and a --config file's ports, timeouts, checkpoint,
alarms and evaluation settings. `royalefleet config --explain FIELD` says whether a field is
in the identity; docs/running.md, "What a resume checks, and the run identity", lists it."""


def package_version() -> str:
    """The installed royalefleet's version (pyproject.toml's, as pip recorded it), or the tree's
    own pyproject.toml's when it runs uninstalled from a checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("royalefleet")
    except PackageNotFoundError:
        import tomllib
        from pathlib import Path

        with open(Path(__file__).resolve().parent.parent / "pyproject.toml", "rb") as fh:
            return tomllib.load(fh)["project"]["version"]


def build_parser() -> argparse.ArgumentParser:
    from royalefleet.cli_parser import Parser

    p = Parser(
        prog="royalefleet",
        description="Self-play training (PPO, n-step Double DQN or AlphaZero) for RoyaleGym agents as rollout, learner, "
        "ladder, checkpoint and evaluator services over ZeroMQ.",
        epilog="Run `royalefleet <command> --help` for a command's options. README.md explains the outputs.",
    )
    p.add_argument("--version", action="version", version=f"royalefleet {package_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="command")
    # The order of the add_*_commands calls is the order `royalefleet --help` lists the commands in.
    add_run_commands(sub)
    add_module_commands(sub)
    add_config_command(sub)
    add_bench_command(sub)
    add_trust_options(sub)  # --allow-module, --trust-code on every command (royalefleet/trust_options.py)
    return p


def add_run_commands(sub) -> None:
    """The commands that start, resume, identify or list a run: up, resume, verify-resume, identity, checkpoints."""
    from royalefleet.run_options import add_run_options as common  # one help text each (run_options.py)

    from royalefleet.run_options import add_run_argument

    up = sub.add_parser("up", help="start the local stack and train; Ctrl-C stops it and writes a checkpoint",
                        description="Start checkpoint, ladder, learner, rollout and evaluator services on loopback and train. "
                        "A run folder that holds a checkpoint is resumed.", epilog=IDENTITY_EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_argument(up)
    common(up)
    stack_options(up)
    up.add_argument("--new-run", action="store_true",
                    help="start RUN even when its name is a near-miss of an existing run's (without it, `up "
                    "defualt` beside `default` is refused with exit 2 as a likely typo)")
    up.set_defaults(func=cmd_up)

    rs = sub.add_parser("resume", help="like up, but refuse to start when the run has no checkpoint",
                        description="Resume a run from its newest checkpoint that verifies, or from checkpoint N "
                        "(--checkpoint N; same options as up).",
                        epilog=IDENTITY_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_argument(rs)
    common(rs)
    stack_options(rs)
    rs.add_argument("--checkpoint", type=int, metavar="N",
                    help="resume from checkpoint N (of iteration N; `royalefleet checkpoints RUN` lists them) "
                    "instead of the newest: N must verify; the later checkpoints are moved, not deleted, to "
                    "checkpoints/set-aside-<UTC time>/ and the metric rows past N to metrics.purged.jsonl")
    rs.set_defaults(func=cmd_up, require_checkpoint=True, new_run=False)

    vr = sub.add_parser("verify-resume", help="prove that a stopped and resumed run continues row for row",
                        description="Train K iterations straight; train j, stop, resume in a fresh learner and "
                        "finish; compare every metric row field by field (wall-clock fields excluded).")
    add_run_argument(vr)
    common(vr)
    vr.add_argument("--iterations", type=int, default=3, metavar="K",
                    help="the iteration each scratch run stops at, a total as for up (default 3)")
    vr.add_argument("--split", type=int, default=1, help="j, the iteration after which to stop (default 1)")
    vr.add_argument("--rollouts", type=int, default=2, metavar="N",
                    help="rollout processes to start, as for up (default 2)")
    vr.add_argument("--keep", metavar="DIR", help="keep the two run folders in DIR (default: a temporary folder)")
    vr.set_defaults(func=cmd_verify_resume)

    idp = sub.add_parser("identity", help="print the run identity and run id a config gives on this machine",
                         description="Builds one battle to read the engine build and the observation layout, "
                         "decides the codec table, and prints the RunIdentity and its run id: of RUN's own "
                         "config.json when the run exists and neither --config nor --profile is given.")
    add_run_argument(idp)
    common(idp)
    idp.set_defaults(func=cmd_identity)

    ck = sub.add_parser("checkpoints", help="list a run's checkpoints with their verification status")
    add_run_argument(ck)
    common(ck)
    ck.set_defaults(func=cmd_checkpoints)


def add_module_commands(sub) -> None:
    """The commands whose parser lives beside their code, in royalefleet/cmd_*.py and chaos.py (each add_parser)."""
    from royalefleet import chaos, cmd_doctor, cmd_eval, cmd_gate, cmd_keys, cmd_play, cmd_rate, cmd_replay, cmd_status
    from royalefleet import cmd_clone, cmd_demos, cmd_export, cmd_k8s, cmd_report, cmd_snapshots, cmd_strength

    cmd_doctor.add_parser(sub)
    cmd_status.add_parser(sub)
    cmd_snapshots.add_parser(sub)
    cmd_strength.add_parser(sub)
    cmd_report.add_parser(sub)
    cmd_rate.add_parser(sub)
    cmd_eval.add_parser(sub)
    cmd_gate.add_parser(sub)
    cmd_play.add_parser(sub)
    cmd_export.add_parser(sub)
    cmd_replay.add_parser(sub)
    cmd_demos.add_parser(sub)
    cmd_clone.add_parser(sub)
    cmd_keys.add_parser(sub)
    cmd_k8s.add_parser(sub)
    chaos.add_parser(sub)
    from royalefleet import cmd_alerts

    cmd_alerts.add_parser(sub)


def add_config_command(sub) -> None:
    """`royalefleet config`: print or write a fully populated config, or explain its fields."""
    from royalefleet.run_options import add_run_argument, add_run_options as common

    cf = sub.add_parser("config", help="print or write a fully populated config",
                        description="Write the complete config of a profile (with --config: of that file on top "
                        "of its profile), every field filled in.")
    add_run_argument(cf)
    common(cf)
    cf.add_argument("-o", "--output", help="file to write (default: standard output)")
    cf.add_argument("--explain", nargs="?", const="", metavar="FIELD",
                    help="print what FIELD means (a dotted path such as ppo.clip_range, or a section such as ppo): "
                    "its type and range, default per profile, whether it is in the run identity, and its "
                    "documentation; with no FIELD, every field, the extension sections (warm_start, imitation and any "
                    "an installed package declares) included")
    cf.set_defaults(func=cmd_config)


def add_bench_command(sub) -> None:
    """`royalefleet bench`: env, stack, wire, update, overlap, capacity and fleet-size measurements."""
    from royalefleet.run_options import add_run_argument, add_run_options as common

    bn = sub.add_parser("bench", help="measure env speed, stack speed, wire bytes per row and update speed",
                        description="Prints bare RoyaleGym decisions/s with random-legal play on the same battles, "
                        "the stack's collected rows/s, their ratio, the wire bytes per observation row, and the PPO "
                        "update's rows/s beside the reference's on the same batch (docs/throughput.md).")
    add_run_argument(bn)
    common(bn)
    bn.add_argument("--seconds", type=float, default=20.0, help="seconds of bare env stepping (default 20)")
    bn.add_argument("--iterations", type=int, default=2, metavar="N",
                    help="the iteration each scratch stack stops at, a total as for up (default 2)")
    bn.add_argument("--update-only", action="store_true",
                    help="only the PPO update on a synthetic iteration of real observations, ours beside the "
                    "reference's (royalelearn, when installed) on the same batch")
    bn.add_argument("--update-batches", type=int, default=1, choices=range(1, 65), metavar="K",
                    help="the update benchmark's rows: K x ppo.batch_size (default 1)")
    bn.add_argument("--reference", choices=("our-size", "all", "none"), default="our-size",
                    help="the reference's update beside ours: at our network's size (default), also with its own "
                    "default network (all: minutes more), or none")
    bn.add_argument("--wire", action="store_true",
                    help="only the wire codecs: codec 2 (zstd) against codec 1 on real rounds (bytes per row, "
                    "encode/decode us per row), then the stack's collection rate on each, interleaved")
    bn.add_argument("--wire-codec-only", action="store_true", help="--wire without the stacks (seconds)")
    bn.add_argument("--wire-repeats", type=int, default=1, choices=range(1, 11), metavar="N",
                    help="--wire: stacks per codec, run 1, 2, 1, 2, ... (default 1)")
    bn.add_argument("--overlap", action="store_true",
                    help="sync against overlapped collection, side by side on the same battles (throughput tier): "
                    "whole-run rows/s, rollout idle fraction, update seconds (bench/scale.py)")
    bn.add_argument("--capacity", action="store_true",
                    help="the learner's central inference alone on real rounds, as 1, 2, 4, 8 rollouts answering "
                    "at once: rows/s per round and batched (seconds)")
    bn.add_argument("--fleet-sizes", dest="fleet_sizes", metavar="N,N,...",
                    help="one stack per fleet size (e.g. 1,2,4): collection rows/s and scaling efficiency "
                    "(rows/s per rollout relative to one); named --rollouts before 2026-12-03, which in "
                    "every other command is one number of rollout processes")
    bn.add_argument("--rollouts", dest="old_rollouts", help=argparse.SUPPRESS)
    bn.add_argument("--synthetic", metavar="N,N,...",
                    help="the learner's serving capacity alone: one real rollout records --iterations of its "
                    "rounds, then per fleet size (e.g. 1,2,4,8) the real learner serves that many synthetic "
                    "rollouts replaying them over the protocol with no env cost; one table of learner rows/s "
                    "and mean inference batch beside the real rollout's (every battle a mirror, throughput tier; "
                    "royalefleet/synthetic.py, docs/throughput.md)")
    bn.set_defaults(func=cmd_bench)


def main(argv=None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # an unknown option: refused with the closest one of the command (exit 2)
        from royalefleet.cli_parser import unknown_words

        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
        sub.error(unknown_words(extra, sub))
    from royalefleet.run_options import TwoRuns

    try:
        apply_trust_options(args)
        return args.func(args)
    except (ConfigError, TwoRuns) as exc:
        print(f"royalefleet {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
