"""``royalefleet eval A B --games N``: a paired evaluation between two players, in this process.

    royalefleet eval scripted:random_legal scripted:noop --games 20
    royalefleet eval snap:0123456789abcdef scripted:noop --games 100 --run-name myrun
    royalefleet eval latest+search:8 latest --games 200      # what search adds to the newest snapshot

A player is a snapshot of the run (``snap:<snapshot_id>``, or the bare 16-hex id) read from
``<runs_dir>/<run>/snapshots/``, or a scripted player (``shared.scripted.SCRIPTED_PLAYERS``:
``scripted:noop``, ``scripted:random_legal`` and RoyaleGym's ladder bots ``scripted:random``,
``scripted:first-affordable``, ``scripted:defend``, ``scripted:push``, ``scripted:patient``); ``latest`` and
``champion`` name a snapshot (``royalefleet/players.py``); A and B default to ``latest`` and
``scripted:random_legal``. Any player followed by ``+search:N[:D]`` searches at its choice
decisions (``services/evaluator/searched.py``), and the search's cost is printed after the score.
``--record N`` writes the first N games as traces and pages (``<run>/replays/eval`` unless
``--out``), the evaluators' recorder: recording changes no action. The games are the evaluators' games
(``services.evaluator.games``): full matches on the first ceil(N / 2) seeds of the run's fixed
evaluation seed set, each seed with A blue then A red, actions from the streams of job
``--job`` (default 0). Prints A's score (a draw counts half) with its Wilson 95 % interval.
Writes nothing unless asked to record (``--record``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from royalefleet.players import DEFAULT_OPPONENT, LATEST, LocalPlayers, resolve
from royalefleet.player_words import WordRefused, add_words_argument, take_words
from royalefleet.run_options import add_run_options, run_config, run_name_of
from shared.scripted import SCRIPTED_PLAYERS


def add_parser(subparsers) -> argparse.ArgumentParser:
    ep = subparsers.add_parser(
        "eval", help="play a paired evaluation between two players and print the score",
        description="Play A against B on the run's fixed evaluation seeds, both sides of each seed, full matches, "
        "in this process, and print A's score with a Wilson 95 % interval. Players: snap:<snapshot_id> (a "
        "snapshot of the run), latest (its newest snapshot), champion (the pool's champion) or a scripted player ("
        + ", ".join(SCRIPTED_PLAYERS) + "); any of them followed by +search:N (or +search:N:D) searches N candidate "
        "actions at each of its choice decisions in a copy of the battle, D decisions deep (default 30), and plays "
        "the best (docs/search.md).")
    add_words_argument(ep, "[RUN] [A] [B]", "the run, then players A and B (default latest and scripted:random_legal)")
    ep.add_argument("--games", type=int, default=20, help="battles to play, both sides of ceil(N/2) seeds (default 20)")
    ep.add_argument("--job", type=int, default=0, help="job id naming the action streams (default 0)")
    ep.add_argument("--record", type=int, default=0, metavar="N",
                    help="write the first N games as RoyaleGym traces and HTML pages, as play does (default 0)")
    ep.add_argument("--out", type=Path, help="folder for the recorded games (default <run>/replays/eval)")
    add_run_options(ep)
    ep.set_defaults(func=cmd_eval, a=LATEST, b=DEFAULT_OPPONENT)
    return ep


def cmd_eval(args, out=None) -> int:
    from services.evaluator.games import play_job
    from shared.envs import build_env
    from shared.evaluation import eval_env_config, eval_seed_set, seeds_for_games, side_scores
    from shared.stats import wilson_interval

    out = out or sys.stdout
    try:
        take_words(args, ("a", "b"), 0, "eval")
    except WordRefused as exc:
        print(exc, file=sys.stderr)
        return 2
    cfg = run_config(args, must_exist=run_name_of(args) is not None)  # a run named must exist
    try:
        a, b = resolve(args.a, cfg), resolve(args.b, cfg)
    except ValueError as exc:
        print(f"royalefleet eval: {exc}", file=sys.stderr)
        return 2
    n_seeds = seeds_for_games(args.games) if args.games > 0 else 0
    count = cfg.ladder.pool.eval_seed_count
    if n_seeds < 1 or n_seeds > count:
        print(f"royalefleet eval: --games {args.games}: expected 1..{2 * count} (both sides of at most "
              f"ladder.pool.eval_seed_count={count} seeds)", file=sys.stderr)
        return 2
    try:
        players = LocalPlayers(cfg)
        loaded = {p: players.get(p) for p in (a, b)}
    except (ValueError, OSError) as exc:
        print(f"royalefleet eval: {exc}", file=sys.stderr)
        return 2
    env = build_env(eval_env_config(cfg.env))
    seeds = list(range(n_seeds))
    t0 = time.monotonic()
    step = max(1, (2 * n_seeds) // 10)

    def progress(done: int, total: int) -> None:
        if total >= 10 and (done % step == 0 or done == total):
            out.write(f"  {done}/{total} games, {time.monotonic() - t0:.0f} s\n")
            out.flush()

    traces: list = []
    records = play_job(env, loaded, job=args.job, a=a, b=b, seeds=seeds,
                       seed_set=eval_seed_set(cfg.master_seed, count), master_seed=cfg.master_seed,
                       decision_ms=cfg.env.decision_ms, on_game=progress, record_games=max(0, args.record),
                       traces=traces)
    sides = side_scores(records, a, b, seeds)
    n = sides.size
    total = float(sides.sum())
    lo, hi = wilson_interval(total, n)
    wins, draws = int((sides == 1.0).sum()), int((sides == 0.5).sum())
    out.write(f"{a} vs {b}: score {total / n:.4f} over {n} games ({wins} won, {draws} drawn, {n - wins - draws} lost; "
              f"{n_seeds} seeds x 2 sides), Wilson 95 % interval [{lo:.4f}, {hi:.4f}]\n")
    if traces:
        from shared.replays import replays_dir, write_game

        folder = args.out or replays_dir(cfg.runs_dir, cfg.run_name) / "eval"
        try:
            for seed, side, trace in traces:
                blue, red = (a, b) if side == 0 else (b, a)
                _, html = write_game(folder, f"job{args.job}-seed{seed}-{'a_blue' if side == 0 else 'a_red'}", trace,
                                     title=f"{blue} (blue) vs {red} (red), evaluation seed {seed}")
                out.write(f"  recorded seed {seed}, A {'blue' if side == 0 else 'red'}: {html}\n")
        except OSError as exc:
            print(f"royalefleet eval: cannot write the recorded games to {folder}: {exc}", file=sys.stderr)
            return 2
    elapsed = time.monotonic() - t0
    for p in dict.fromkeys((a, b)):
        line = search_line(loaded[p], n, elapsed)
        if line:
            out.write(line + "\n")
    return 0


def search_line(player, games: int, elapsed_s: float) -> str | None:
    """What a searching player spent over ``games`` games of ``elapsed_s`` seconds in all, or None
    for a player that does not search: searched decisions (a game's share), simulations and
    engine decisions simulated, seconds in search and searched decisions per second of search,
    and how often the search overruled the player's own pick (and, under ``confirm``, how many
    overrules fresh playouts did not repeat)."""
    stats = getattr(player, "stats", None)
    if stats is None or not stats.decisions:
        return None
    return (f"  {player.id}: {stats.decisions} searched decisions ({stats.decisions / games:.1f} a game), "
            f"{stats.simulations} simulations, {stats.sim_steps} simulated decisions; {stats.seconds:.0f} s of the "
            f"{elapsed_s:.0f} s in search ({stats.decisions / max(stats.seconds, 1e-9):.2f} searched decisions/s); "
            f"the search overruled the player's own pick at {stats.chose_other / stats.decisions:.0%} of them"
            + (f" ({stats.unconfirmed} more overrules not confirmed by fresh playouts)" if stats.unconfirmed else ""))
