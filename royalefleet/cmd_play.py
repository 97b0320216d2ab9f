"""``royalefleet play A B [--seed S] [--games N]``: two players play full matches, each written
as a RoyaleGym trace and its HTML page, and A's score is printed.

    royalefleet play latest scripted:random_legal --run-name myrun --games 4
    royalefleet play latest+search:8 latest --run-name myrun --seed 100

A player is ``snap:<id>`` (or the bare 16-hex id) from the run's snapshot store, ``latest`` (the
run's newest snapshot by the iteration in its spec), ``champion`` (the pool's champion,
``ladder/pool.json``), or ``scripted:<name>`` (``shared.scripted.SCRIPTED_PLAYERS``): the run's
anchors ``scripted:noop`` and ``scripted:random_legal`` or any bot of RoyaleGym's scripted ladder
(``royalegym.opponents.ladder()``: ``random``, ``first-affordable``, ``defend``, ``push``,
``patient``), exactly the training opponents of the same id; any of them searching at its
choice decisions with ``+search:N[:D]`` (``royalefleet/players.py``). A and B default to
``latest`` and ``scripted:random_legal``.

The games are ``royalegym.evaluate``'s: ``ceil(N / 2)`` env seeds ``S, S + 1, ...``, A blue on each,
then A red on the same seeds, each seat drawing from ``numpy.random.default_rng(2 * seed + seat)``
(``royalegym.evaluate.play_one``), on the run's evaluation env (its training env with no step
limit). So ``play`` between two bots gives the result ``royalegym.evaluate`` gives for the same
seeds (tests/royalefleet/test_watch.py). Each game is recorded (``royalegym.replay.ReplayRecorder``) and
saved with ``royalegym.render``'s page to ``--out`` (default ``<run>/replays/play/``); the run's
replay index is not touched.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from royalefleet.players import DEFAULT_OPPONENT, LATEST, LocalPlayers, load_player, resolve
from royalefleet.run_options import add_run_options, run_config, run_name_of


def add_parser(subparsers) -> argparse.ArgumentParser:
    pp = subparsers.add_parser(
        "play", help="two players play full matches; each written as a trace and an HTML page",
        description="Play A against B (snap:<id>, latest, champion, scripted:<name>, any of them searching with "
        "+search:N) on env seeds S, S+1, ... with each player on both seats, record every match as a RoyaleGym "
        "trace and HTML page, and print A's score.")
    pp.add_argument("a", nargs="?", default=LATEST, help=f"player A (default {LATEST}: the run's newest snapshot)")
    pp.add_argument("b", nargs="?", default=DEFAULT_OPPONENT, help=f"player B (default {DEFAULT_OPPONENT})")
    pp.add_argument("--seed", type=int, default=0, help="the first env seed (default 0)")
    pp.add_argument("--games", type=int, default=2, help="matches: ceil(N/2) seeds, A on both seats (default 2)")
    pp.add_argument("--out", type=Path, help="folder for the traces and pages (default <run>/replays/play)")
    pp.add_argument("--per-decision", action="store_true",
                    help="record one frame per decision instead of per engine tick (10x smaller)")
    add_run_options(pp)
    pp.set_defaults(func=cmd_play)
    return pp


class Seat:
    """A seated player as a RoyaleGym ``Opponent`` (``act(obs, mask, rng)``), for ``play_one``."""

    def __init__(self, player):
        self.player, self.id = player, player.id

    def act(self, obs, mask, rng) -> int:
        return int(self.player.act(obs, rng))


def seats_for_game(env, blue, red) -> tuple[Seat, Seat]:
    """The two seats of one game on ``env``: under frame stacking each with its own history
    (services/evaluator/players.py), a searching player bound to the env and its opponent
    (services/evaluator/games.py ``seat_players``)."""
    from services.evaluator.games import seat_players

    seated = seat_players(env, [getattr(p, "for_game", lambda p=p: p)() for p in (blue, red)])
    return Seat(seated[0]), Seat(seated[1])


def cmd_play(args, out=None) -> int:
    from royalegym.evaluate import play_one
    from royalegym.protocol import Winner
    from royalegym.replay import ReplayRecorder

    from shared.envs import build_env
    from shared.evaluation import eval_env_config
    from shared.replays import replays_dir, trace_result, write_game
    from shared.stats import wilson_interval

    out = out or sys.stdout
    if args.games < 1:
        print(f"royalefleet play: --games {args.games}: expected at least 1", file=sys.stderr)
        return 2
    if args.seed < 0:
        print(f"royalefleet play: --seed {args.seed}: env seeds are >= 0", file=sys.stderr)
        return 2
    cfg = run_config(args, must_exist=run_name_of(args) is not None)  # a run named must exist
    try:
        a, b = resolve(args.a, cfg), resolve(args.b, cfg)
        players = LocalPlayers(cfg)
        loaded = {p: load_player(p, players) for p in dict.fromkeys((a, b))}
    except (ValueError, OSError) as exc:
        print(f"royalefleet play: {exc}", file=sys.stderr)
        return 2
    folder = args.out or replays_dir(cfg.runs_dir, cfg.run_name) / "play"
    env = build_env(eval_env_config(cfg.env))
    per_seat = (args.games + 1) // 2
    wins = losses = draws = 0
    try:
        for a_blue in (True, False):
            for g in range(per_seat):
                seed = args.seed + g
                blue, red = (a, b) if a_blue else (b, a)
                recorder = ReplayRecorder(frame_every_tick=not args.per_decision)
                env.recorder = recorder
                try:
                    winner, ticks, _ = play_one(env, *seats_for_game(env, loaded[blue], loaded[red]), seed)
                finally:
                    env.recorder = None
                stem = f"seed{seed}-{'a_blue' if a_blue else 'a_red'}"
                _, html = write_game(folder, stem, recorder.trace, title=f"{blue} (blue) vs {red} (red), seed {seed}")
                _, crowns, _ = trace_result(recorder.trace)
                if winner is None or winner == Winner.DRAW:
                    draws += 1
                    said = "draw" if winner is not None else "unfinished"
                elif (winner == Winner.BLUE) == a_blue:
                    wins += 1
                    said = "A won"
                else:
                    losses += 1
                    said = "B won"
                out.write(f"  seed {seed}, A {'blue' if a_blue else 'red'}: {said} {crowns[0]}-{crowns[1]} "
                          f"(blue-red crowns) in {ticks} ticks: {html}\n")
                out.flush()
    except OSError as exc:
        print(f"royalefleet play: cannot write to {folder}: {exc}", file=sys.stderr)
        return 2
    finally:
        env.close()
    n = wins + losses + draws
    lo, hi = wilson_interval(wins + 0.5 * draws, n)
    out.write(f"{a} vs {b}: {wins}-{losses}-{draws} (won-lost-drawn) over {n} games, score "
              f"{(wins + 0.5 * draws) / n:.4f}, Wilson 95 % interval [{lo:.4f}, {hi:.4f}]; traces and pages in "
              f"{folder}\n")
    return 0
