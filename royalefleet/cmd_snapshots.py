"""``royalefleet snapshots [RUN]``: every snapshot a run has written, with the id to play it by.

    royalefleet snapshots myrun
    royalefleet snapshots myrun --json

Read-only, from the run's folder alone (no service needs to be up): the snapshot store
``<run>/snapshots/<id>/spec.json`` (the learner iteration and env steps it was taken at), the
ladder's pool ``<run>/ladder/pool.json`` (what the ladder made of it) and the strength plan with
the result log (its measured rating). One line per snapshot, oldest first:

* ``player``: what ``royalefleet eval``, ``play`` and ``ladder.pool.seed_snapshots`` take,
  ``snap:<id>``;
* ``role``: ``champion``, ``pool`` (a member PFSP draws), ``pool, seed`` (a seed snapshot),
  ``pending gate`` (a candidate waiting for its gate), ``archived`` (admitted once, since
  evicted from the working set), ``discarded`` (a candidate its gate turned down),
  ``strength only`` (taken for the standing strength measurement, never a candidate), or
  ``clone`` (written by ``royalefleet clone``, not yet in the pool);
* ``rating``: its Bradley-Terry-Davidson rating in Elo (``scripted:noop`` = 0) from the strength
  measurement (``royalefleet strength``: one fit of the strength games alone), when it was
  measured. ``royalefleet rate`` fits every evaluation game (gates and anchor records too), so
  its number for the same snapshot differs.
"""

from __future__ import annotations

import argparse
import json
import sys

import msgspec

from royalefleet.run_options import EMPTY_LISTING, add_run_argument, add_run_options, run_config
from shared.run_dir import RunDir


def add_parser(subparsers) -> argparse.ArgumentParser:
    sp = subparsers.add_parser("snapshots",  # the command's name, not a path (RunDir.snapshots is)
        help="list a run's snapshots: the snap:<id> to eval or play, iteration, pool role, rating",
        description="Read <run>/snapshots/, the ladder's pool and the strength measurement and print every "
        "snapshot the run has written, oldest first: its player id (snap:<id>, what `royalefleet eval` and "
        "`play` take), the learner iteration and env steps it was taken at, its role in the pool (champion, "
        "pool, pending gate, archived, discarded, strength only) and its strength rating when measured. "
        "Read-only; no service needs to run.")
    add_run_argument(sp)
    sp.add_argument("--json", action="store_true", help="print one JSON object a snapshot instead of the table")
    add_run_options(sp)
    sp.set_defaults(func=cmd_snapshots)
    return sp


class SnapshotLine(msgspec.Struct, kw_only=True):
    """One snapshot of a run (module docstring). ``iteration``/``env_steps`` are None for a
    snapshot whose ``spec.json`` is unreadable; ``rating``/``rating_se`` None until measured."""

    player: str
    iteration: int | None
    env_steps: int | None
    role: str
    rating: float | None = None
    rating_se: float | None = None


def _bare(player: str) -> str:
    return player.removeprefix("snap:")


def snapshot_lines(cfg) -> list[SnapshotLine]:
    """Every snapshot under ``<run>/snapshots/``, oldest first (by iteration, then id). Raises
    ValueError for a pool or strength plan that does not decode."""
    from royalefleet.cmd_strength import strength_of_run
    from services.checkpoint.snapshots import SPEC, SnapshotStore
    from services.ladder.pool import PoolState

    rd = RunDir.of(cfg.runs_dir, cfg.run_name)
    pool = PoolState.for_run(cfg.runs_dir, cfg.run_name, cfg.ladder) if rd.pool.exists() else None
    measured, _ = strength_of_run(cfg)
    rating = {_bare(m.snapshot): (m.rating, m.rating_se) for m in measured}
    out = []
    for sid in SnapshotStore(rd.snapshots).ids():  # a half-written ``<id>.partial`` is not one
        spec = {}
        try:
            spec = json.loads((rd.snapshots / sid / SPEC).read_text())
            iteration, env_steps = int(spec["iteration"]), int(spec["env_steps"])
        except (OSError, ValueError, KeyError, TypeError):
            iteration = env_steps = None
        r, se = rating.get(sid, (None, None))
        role = _role(pool, f"snap:{sid}")
        if role == "strength only" and isinstance(spec, dict) and isinstance(spec.get("clone"), dict):
            role = "clone"  # written by royalefleet clone, not by the learner
        out.append(SnapshotLine(player=f"snap:{sid}", iteration=iteration, env_steps=env_steps,
                                role=role, rating=r, rating_se=se))
    return sorted(out, key=lambda s: (s.iteration is None, s.iteration or 0, s.player))


def _role(pool, player: str) -> str:
    if pool is None:
        return "strength only"
    if player == pool.champion:
        return "champion"
    if player in pool.members:
        return "pool, seed" if player in pool.seeds else "pool"
    if player in [c.id for c in pool.pending]:
        return "pending gate"
    if player in pool.archive:
        return "archived"
    if player in pool.discarded:
        return "discarded"
    return "strength only"


def table_lines(lines: list[SnapshotLine], run_name: str, runs_dir: str | None = None) -> list[str]:
    """The table ``royalefleet snapshots`` prints; its last line is an ``eval`` command for the
    newest snapshot that names the run as this one was named (``runs_dir`` when given)."""
    if not lines:
        return [f"run {run_name!r} has no snapshot yet (the learner writes one at ladder.pool."
                "candidate_every_env_steps and every evaluation.strength.every_iterations)"]
    out = [f"{'player':<22} {'iteration':>9} {'env_steps':>11}  {'role':<13}  strength rating (Elo, noop = 0)"]
    for s in lines:
        it = "?" if s.iteration is None else f"{s.iteration}"
        steps = "?" if s.env_steps is None else f"{s.env_steps:,}"
        rating = "-" if s.rating is None else f"{s.rating:.0f} +- {s.rating_se:.0f}"
        out.append(f"{s.player:<22} {it:>9} {steps:>11}  {s.role:<13}  {rating}")
    where = f" --runs-dir {runs_dir}" if runs_dir else ""
    out.append(f"{len(lines)} snapshot(s); evaluate the newest with `royalefleet eval {lines[-1].player} "
               f"scripted:random_legal --run-name {run_name}{where}` (or `eval latest ...`)")
    return out


def cmd_snapshots(args, out=None) -> int:
    out = out or sys.stdout
    cfg = run_config(args, must_exist=True)
    try:
        lines = snapshot_lines(cfg)
    except (OSError, ValueError) as exc:
        print(f"royalefleet snapshots: {exc}", file=sys.stderr)
        return 2
    if args.json:
        for s in lines:
            print(msgspec.json.encode(s).decode(), file=out)
    else:
        print("\n".join(table_lines(lines, cfg.run_name, args.runs_dir)), file=out)
    return 0 if lines else EMPTY_LISTING
