"""``royalefleet strength [RUN]``: the run's standing strength measurement as a table.

    royalefleet strength myrun
    royalefleet strength --run-name myrun --runs-dir /mnt/runs --json

Read-only, from the run's folder alone (no service needs to be up): the ladder's strength plan
``<run>/ladder/strength.json`` and the result log ``<run>/ladder/results.jsonl``, measured
exactly as the ladder does (``services.ladder.strength.measure``). One line per measured
snapshot, oldest first: the learner iteration, env steps and timesteps it was taken at, its
Bradley-Terry-Davidson rating in Elo (``scripted:noop`` = 0) with its standard error, and its
score against each anchor with the Wilson 95 % interval; with ``evaluation.strength.search``, the
same snapshot searching at each budget on the line below (``+search:N`` where the iteration
stands). A snapshot whose games are not all in the log yet is listed as pending, never with a
partial score. When the run measures its generations (``evaluation.strength.generations``,
services/ladder/generation_strength.py), their table follows (``royalefleet.generation_report``).
"""

from __future__ import annotations

import argparse
import sys

import msgspec

from royalefleet.run_options import EMPTY_LISTING, add_run_argument, add_run_options, run_config
from shared.search.spec import split_search


def add_parser(subparsers) -> argparse.ArgumentParser:
    sp = subparsers.add_parser(
        "strength", help="print the run's strength against the scripted anchors, snapshot by snapshot",
        description="Read <run>/ladder/strength.json and the result log and print, for every measured strength "
        "snapshot (evaluation.strength), its rating (Elo, scripted:noop = 0, +- standard error) and its score "
        "against each scripted anchor with the Wilson 95 % interval. Read-only; no service needs to run.")
    add_run_argument(sp)
    sp.add_argument("--json", action="store_true", help="print the measurements as JSON lines instead of a table")
    add_run_options(sp)
    sp.set_defaults(func=cmd_strength)
    return sp


def strength_of_run(cfg):
    """(measured snapshots, pending count) of a run (``services.ladder.strength.measure``).
    Raises ValueError for a plan that does not decode, OSError for an unreadable log."""
    from services.ladder.results import ResultLog
    from services.ladder.strength import measure, plan_path, read_plan

    plan = read_plan(plan_path(cfg.runs_dir, cfg.run_name))
    if not plan.entries:
        return [], 0
    measured = measure(plan, ResultLog.for_run(cfg.runs_dir, cfg.run_name).read().records, cfg.ladder.rater)
    return measured, len(plan.entries) - len(measured)


def table_lines(measured, pending: int) -> list[str]:
    """The table ``royalefleet strength`` prints (anchors as columns, in the first snapshot's order)."""
    if not measured:
        return [f"no strength snapshot measured yet ({pending} pending)"]
    anchors = [a.anchor for a in measured[0].anchors]
    head = f"{'iteration':>9} {'env_steps':>11} {'rating (Elo)':>14}  " + "  ".join(
        f"{a.removeprefix('scripted:'):>20}" for a in anchors)
    lines = [head, " " * 38 + "  ".join(f"{'score [Wilson 95 %]':>20}" for _ in anchors)]
    for m in measured:
        by = {a.anchor: a for a in m.anchors}
        cells = [f"{by[a].score:.2f} [{by[a].lo:.2f}, {by[a].hi:.2f}]" if a in by else "-" for a in anchors]
        _, search = split_search(m.snapshot)
        # a searched entry (evaluation.strength.search) names its budget where the iteration stands
        first = f"{m.iteration:>9} {m.env_steps:>11,}" if search is None else f"{search.suffix():>21}"
        lines.append(f"{first} {m.rating:>7.0f} +- {m.rating_se:<4.0f}  " + "  ".join(f"{c:>20}" for c in cells))
    games = sorted({a.games for m in measured for a in m.anchors})
    lines.append(f"{len(measured)} snapshot(s) measured, {pending} pending; games per anchor: "
                 f"{', '.join(map(str, games))}; rating: one Bradley-Terry-Davidson fit of every measured "
                 "snapshot's games, scripted:noop pinned at 0")
    return lines


def cmd_strength(args, out=None) -> int:
    from royalefleet import generation_report
    from services.ladder.generation_strength import generation_strength_of_run

    out = out or sys.stdout
    cfg = run_config(args, must_exist=True)
    try:
        measured, pending = strength_of_run(cfg)
        generations, gen_pending = generation_strength_of_run(cfg)
    except (OSError, ValueError) as exc:
        print(f"royalefleet strength: {exc}", file=sys.stderr)
        return 2
    if args.json:
        for m in measured + generations:
            out.write(msgspec.json.encode(m).decode() + "\n")
        return 0 if measured or generations else EMPTY_LISTING
    out.write("\n".join(table_lines(measured, pending)) + "\n")
    if generations or gen_pending:
        out.write("\n".join(["", "each generation:"] + generation_report.table_lines(generations, gen_pending)) + "\n")
    return 0 if measured or generations else EMPTY_LISTING
