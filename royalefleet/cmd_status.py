"""``royalefleet status``: where a run stands, from its folder alone.

    royalefleet status                        the configured run (runs/default)
    royalefleet status --run-name myrun       another run under runs_dir
    royalefleet status --runs-dir /mnt/runs   a Compose run's volume, mounted or copied here

Read-only, and no service needs to be up: it reads the files the services write (docs/running.md,
"Where a run's outputs go") and prints one line per subject: progress (the last metric row and
how long ago it was written), the numbers of that row a trainer looks at first, the newest
checkpoint, whether the run is halted, the ladder's pool and gate, the newest strength measurement, the alarms, the purged
rows and the newest recorded games (``replays/index.json``, with the path of each page). A file that cannot be read is named on its line and the exit code is 1; otherwise 0.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from royalefleet.run_options import add_run_argument, add_run_options, run_config
from shared import run_dir as layout
from shared.run_dir import RunDir, last_metric_row

def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``status`` on an argparse subparsers object; the handler is ``args.func``."""
    sp = subparsers.add_parser(
        "status", help="print where a run stands: last iteration, checkpoint, halt, ladder, alarms",
        description="Read a run's folder (no service needs to be running) and print its progress, the last "
        "metric row's main numbers, the newest checkpoint (and the iterations past it a crash would roll back), "
        "a halt if any, the ladder's pool and gate in flight, the alarms fired and the rows a resume purged. "
        "Read-only. The run is run_name of the config (default 'default') under runs_dir (default 'runs'); the "
        "config is --config, else the run's own config.json, else the profile's defaults.")
    add_run_argument(sp)
    add_run_options(sp)
    sp.set_defaults(func=cmd_status)
    return sp


last_row = last_metric_row
"""The last whole metric row of a file (``shared.run_dir.last_metric_row``)."""


def ago(seconds: float) -> str:
    """``42 s``, ``7 min``, ``3.5 h``, ``2.1 days``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _fmt(row: dict, key: str, spec: str = ".3f") -> str | None:
    v = row.get(key)
    return None if v is None else format(v, spec)


def progress_lines(run: Path, row: dict | None, now: float) -> list[str]:
    """``row``: the last whole row of ``run``'s metrics.jsonl (``last_row``), None without one."""
    path = RunDir(run).metrics
    if not path.exists():
        return ["progress   no metric row yet (the first one is written when iteration 1 ends)"]
    if row is None:
        return ["progress   metrics.jsonl holds no whole row yet"]
    age = now - path.stat().st_mtime
    lines = [f"progress   iteration {row['run/iteration']:,}: {row.get('run/timesteps', 0):,} timesteps, "
             f"{row.get('run/env_steps', 0):,} env steps, {row.get('run/episodes', 0):,} episodes; "
             f"last row written {ago(age)} ago"
             + (f" (an iteration takes {row['time/iteration']:.0f} s)" if "time/iteration" in row else "")]
    parts = []
    for key, label in (("env/win_rate_scripted", "win rate vs scripted"), ("env/win_rate_pool", "vs pool")):
        if key in row:
            parts.append(f"{label} {row[key]:.2f}")
    for key, label, spec in (("ppo/kl", "KL", ".2g"), ("ppo/clip_fraction", "clip fraction", ".3f"),
                             ("ppo/entropy_normalised", "entropy (normalised)", ".3f"),
                             ("ppo/explained_variance", "explained variance", ".2f")):
        v = _fmt(row, key, spec)
        if v is not None:
            parts.append(f"{label} {v}")
    if "health/rollouts" in row:
        parts.append(f"{row['health/rollouts']} rollout(s)")
    if parts:
        lines.append("last row   " + "; ".join(parts))
    return lines


def checkpoint_line(run: Path, now: float, last: dict | None = None) -> str:
    """The newest checkpoint; with ``last`` (the last metric row), the iterations past it."""
    from services.checkpoint.store import CheckpointStore

    rd = RunDir(run)
    entries = CheckpointStore(rd.checkpoints).index().entries if rd.checkpoint_index.exists() else []
    if not entries:
        return "checkpoint none yet (written every checkpoint.every_iterations and at a clean stop)"
    newest = entries[-1]
    line = (f"checkpoint iteration {newest.iteration:,} (checkpoints/{newest.name}, written "
            f"{ago(now - newest.created_unix_ns / 1e9)} ago), the newest of {len(entries)}; "
            "`royalefleet checkpoints` verifies every file")
    if last is not None and last["run/iteration"] > newest.iteration:
        past = (f"iteration {last['run/iteration']}" if last["run/iteration"] == newest.iteration + 1
                else f"iterations {newest.iteration + 1}-{last['run/iteration']}")
        line += (f"\n           {past} past it: normal while training, but a resume after a crash starts from "
                 f"{newest.iteration} and trains {'it' if past.startswith('iteration ') else 'them'} again")
    return line


def halt_line(run: Path) -> str:
    what = RunDir(run).read_halt_mark()
    if what is None:
        return "halt       none"
    return (f"halt       HALTED {what}; every start refuses until `royalefleet resume --clear-halt` (read the "
            "bundle under bundles/ first)")


def ladder_lines(cfg, run: Path) -> list[str]:
    from services.ladder.gate_runner import GateInFlight
    from services.ladder.pool import PoolState

    rd = RunDir(run)
    if not rd.pool.exists():
        return ["ladder     no pool yet (the first snapshot comes at ladder.pool.candidate_every_env_steps, "
                f"{cfg.ladder.pool.candidate_every_env_steps:,} env steps)"]
    pool = PoolState.for_run(cfg.runs_dir, cfg.run_name, cfg.ladder)
    lines = [f"ladder     pool {len(pool.members)} member(s), champion {pool.champion or 'none'} "
             f"({len(pool.champions)} so far), {len(pool.pending)} candidate(s) pending; gates {pool.gates_run} run, "
             f"{pool.gates_passed} passed, {pool.consecutive_gate_failures} failed in a row"]
    path = rd.gate_in_flight
    if path.exists():
        import msgspec

        j = msgspec.json.decode(path.read_bytes(), type=GateInFlight)
        what = f"{j.candidate} vs {j.champion}" if j.kind == "gate" else f"anchor record of {j.champion}"
        lines.append(f"gate       in flight: {what}, phase {j.phase}, {len(j.jobs)} job(s) planned so far")
    return lines


def strength_lines(cfg) -> list[str]:
    """The newest strength measurement (``royalefleet strength`` has them all)."""
    from royalefleet.cmd_strength import strength_of_run

    st = cfg.evaluation.strength
    measured, pending = strength_of_run(cfg)
    if not measured:
        every = (f"every {st.every_iterations} iterations" if st.every_iterations
                 else "off: evaluation.strength.every_iterations is 0")
        return [f"strength   none measured yet ({pending} snapshot(s) pending; {every})"]
    m = measured[-1]
    scores = ", ".join(f"{a.anchor.removeprefix('scripted:')} {a.score:.2f} [{a.lo:.2f}, {a.hi:.2f}]" for a in m.anchors)
    return [f"strength   iteration {m.iteration}: rating {m.rating:.0f} +- {m.rating_se:.0f} Elo (noop = 0); {scores} "
            f"({len(measured)} measured, {pending} pending; `royalefleet strength` for the table)"]


def generation_lines(cfg) -> list[str]:
    """Each promoted generation's strength, the newest few (``royalefleet.generation_report``)."""
    from royalefleet.generation_report import status_lines as lines_of
    from services.ladder.generation_strength import generation_strength_of_run

    measured, pending = generation_strength_of_run(cfg)
    return lines_of(measured, pending, cfg.evaluation.strength.generations.active(cfg.learner.algorithm))


def alarm_lines(run: Path) -> list[str]:
    fired = RunDir(run).read_alarms()
    if not fired:
        return ["alarms     none fired"]
    last = fired[-1]
    halts = sum(a.get("severity") == "halt" for a in fired)
    return [f"alarms     {len(fired)} fired ({halts} halting); last: iteration {last.get('iteration')} "
            f"[{last.get('severity')}] {last.get('alarm')} (docs/alarms.md)"]


def purged_line(run: Path) -> str | None:
    n = RunDir(run).purged_rows()
    if n is None:
        return None
    return f"purged     {n} row(s) a resume moved out of {layout.METRICS} ({layout.PURGED})"


NEWEST_REPLAYS = 3
"""Recorded games named by ``status``, newest first."""


def replay_lines(run: Path) -> list[str]:
    """The newest recorded games of ``<run>/replays/index.json`` (shared/replays.py), with the
    path of each page."""
    from shared.replays import read_index

    folder = RunDir(run).replays
    entries = read_index(folder).entries
    if not entries:
        return ["replays    no recorded game yet (the evaluators record evaluation.replays_per_gate games of each "
                "gate); `royalefleet play` plays some now"]
    lines = [f"replays    recorded games: {len(entries)} in {folder} (index.json); newest:"]
    for e in reversed(entries[-NEWEST_REPLAYS:]):
        lines.append(f"             {e.blue} (blue) vs {e.red} (red), {e.kind}, job {e.job}: {e.winner} "
                     f"{e.crowns[0]}-{e.crowns[1]}, {e.written}: {run / e.html}")
    return lines


def status_lines(cfg, now: float | None = None) -> tuple[list[str], bool]:
    """The lines ``royalefleet status`` prints and whether every file read; each subject is read
    on its own, so one unreadable file costs only its line."""
    now = time.time() if now is None else now
    run = Path(cfg.runs_dir) / cfg.run_name
    rd = RunDir(run)
    lines, ok = [f"run {cfg.run_name!r} in {run}"], True
    metrics = RunDir(run).metrics
    try:
        row = last_row(metrics) if metrics.exists() else None
    except OSError as exc:
        row, ok = None, False
        lines.append(f"  cannot read {layout.METRICS}: {type(exc).__name__}: {exc}")
    subjects = [
        (rd.metrics, lambda: progress_lines(run, row, now) if ok else []),
        (rd.checkpoint_index, lambda: checkpoint_line(run, now, row).split("\n")),
        (rd.halted, lambda: [halt_line(run)]),
        (rd.pool, lambda: ladder_lines(cfg, run)),
        (rd.strength, lambda: strength_lines(cfg)),
        (rd.strength.with_name("generation_strength.json"), lambda: generation_lines(cfg)),
        (rd.alarms, lambda: alarm_lines(run)),
        (rd.purged, lambda: [x for x in [purged_line(run)] if x]),
        (rd.replays_index, lambda: replay_lines(run)),
    ]
    for path, read in subjects:
        name = path.relative_to(run).as_posix()
        try:
            lines += ["  " + x for x in read()]
        except Exception as exc:  # noqa: BLE001 - any unreadable file is reported on its own line
            ok = False
            lines.append(f"  cannot read {name}: {type(exc).__name__}: {exc}")
    return lines, ok


def cmd_status(args) -> int:
    cfg = run_config(args, must_exist=True)  # the run's own config.json when there is one: its ladder settings
    lines, ok = status_lines(cfg)
    print("\n".join(lines))
    return 0 if ok else 1
