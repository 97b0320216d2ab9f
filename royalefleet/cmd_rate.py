"""``royalefleet rate``: refit the ratings from a run's result log and print the table.

    royalefleet rate                          the configured run's runs/<run>/ladder/results.jsonl
    royalefleet rate myrun                    another run under runs_dir (or --run-name myrun)
    royalefleet rate --log FILE               any result log
    royalefleet rate --kind train             fit the training games instead (biased: PFSP chose them)

Read-only: nothing is written. The fit is ``services.ladder.rating.fit``, the same pure
function the ladder uses, with the run config's ``ladder.rater`` settings unless overridden.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from services.ladder.rating import KINDS, extract_games, fit
from services.ladder.results import ResultLog, result_log_path
from royalefleet.run_options import add_run_argument, add_run_options, run_config


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``rate`` on an argparse subparsers object; the handler is ``args.func``."""
    rp = subparsers.add_parser(
        "rate", help="refit the ratings from a run's result log and print them",
        description="Fit the Bradley-Terry-Davidson ratings of every player in a result log (only evaluation "
        "games by default) and print player, rating, +-1 SE and games, then the draw model and the "
        "transitivity residual. Read-only.")
    add_run_argument(rp)
    add_run_options(rp)
    rp.add_argument("--log", metavar="FILE", help="read this result log instead of the run's")
    rp.add_argument("--kind", action="append", choices=KINDS,
                    help="game kinds to fit (repeatable; default: eval). 'train' games are chosen by PFSP and "
                    "bias the fit; 'probe' players exist for one moment")
    rp.add_argument("--draws", choices=("davidson", "half_win"), help="draw model (default: the config's)")
    rp.add_argument("--anchor", help="the player pinned at 0 Elo (default: the config's)")
    rp.add_argument("--prior-sd", type=float, help="prior SD of every rating in Elo (default: the config's)")
    rp.add_argument("--min-pair-games", type=int, help="games a pair needs to count toward the transitivity "
                    "residual (default: the config's)")
    rp.add_argument("--json", action="store_true", help="print the whole RatingTable as JSON instead")
    rp.set_defaults(func=cmd_rate)
    return rp


def _config(args):
    """The run's config (its rater settings; run_options.run_config); a run named that has no
    folder is refused unless ``--log`` names the file to read."""
    return run_config(args, must_exist=not args.log)


def _games(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def cmd_rate(args, out=None) -> int:
    out = out or sys.stdout
    cfg = _config(args)
    rater = cfg.ladder.rater
    path = Path(args.log) if args.log else result_log_path(cfg.runs_dir, cfg.run_name)
    if not path.exists():
        print(f"royalefleet rate: no result log at {path} (train a run first, or pass --log FILE)", file=sys.stderr)
        return 1
    read = ResultLog(path).read()
    kinds = tuple(args.kind or ("eval",))
    extraction = extract_games(read.records, kinds=kinds)
    table = fit(extraction.games,
                anchor=args.anchor or rater.anchor,
                prior_sd=args.prior_sd if args.prior_sd is not None else rater.prior_sd,
                draws=args.draws or rater.draws,
                min_pair_games=args.min_pair_games if args.min_pair_games is not None else rater.min_pair_games)
    if args.json:
        out.write(msgspec.json.encode(table).decode() + "\n")
        return 0

    w = out.write
    dropped = ", ".join(f"{n} {why}" for why, n in sorted(extraction.dropped.items())) or "none"
    w(f"{path}: {len(read.lines)} records ({read.n_set_aside} lines set aside); "
      f"{len(extraction.games)} {'+'.join(kinds)} games fitted; dropped: {dropped}\n")
    if not extraction.games:
        w(f"no {'/'.join(kinds)} games to fit" + ("" if "train" in kinds else
          " (the log's training games are not fitted by default: --kind train fits them, biased by PFSP)") + "\n")
    width = max([len("player")] + [len(p) for p in table.players])
    w(f"\n{'player':<{width}}  {'rating':>8}  {'+-SE':>6}  {'games':>7}\n")
    for p in sorted(table.players, key=lambda p: (-table.ratings[p], p)):
        se = "anchor" if p == table.anchor else f"{table.se[p]:.0f}"
        w(f"{p:<{width}}  {table.ratings[p]:>8.1f}  {se:>6}  {_games(table.games_by_player[p]):>7}\n")
    w("\n")
    if table.draw_model == "davidson":
        w(f"draw model: davidson, nu {table.nu:.3f} (ln nu +- {table.ln_nu_se:.3f}); "
          f"observed draw rate {100 * table.draw_rate:.1f} %\n")
    else:
        rate = f"; observed draw rate {100 * table.draw_rate:.1f} %" if (
            table.draw_model_reason == "requested" and table.draw_rate is not None) else ""
        w(f"draw model: half_win ({table.draw_model_reason}){rate}\n")
    swept = f"; {table.pairs_swept} swept pair(s) not tested" if table.pairs_swept else ""
    if table.transitivity_residual is None:
        w(f"transitivity residual: absent (no pair that is not a sweep has >= {table.min_pair_games} games{swept})\n")
    else:
        w(f"transitivity residual: {table.transitivity_residual:.3f} ({table.pairs_off} of {table.pairs_tested} "
          f"pairs with >= {table.min_pair_games} games off the fit by > 2 SE{swept})\n")
    thin = [p for p in table.players if p != table.anchor and 0 < table.games_by_player[p] < 30]
    if thin:
        w(f"{len(thin)} player(s) with under 30 games: their intervals are wide, and their ratings mostly prior\n")
    return 0
