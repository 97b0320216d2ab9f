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
from royalefleet.player_words import WordRefused, add_words_argument, take_words
from royalefleet.run_options import add_run_options, run_config, run_name_of

VISER_DEFAULT = "127.0.0.1:9870"
"""RoyaleViser's stream address (``royalegym.viser.HOST``/``PORT``), the viewer's default."""


def add_parser(subparsers) -> argparse.ArgumentParser:
    pp = subparsers.add_parser(
        "play", help="two players play full matches; each written as a trace and an HTML page",
        description="Play A against B (snap:<id>, latest, champion, scripted:<name>, any of them searching with "
        "+search:N) on env seeds S, S+1, ... with each player on both seats, record every match as a RoyaleGym "
        "trace and HTML page, and print A's score.")
    add_words_argument(pp, "[RUN] [A] [B]", "the run, then players A and B (default latest and scripted:random_legal)")
    pp.add_argument("--seed", type=int, default=0, help="the first env seed (default 0)")
    pp.add_argument("--games", type=int, default=2, help="matches: ceil(N/2) seeds, A on both seats (default 2)")
    pp.add_argument("--out", type=Path, help="folder for the traces and pages (default <run>/replays/play)")
    pp.add_argument("--per-decision", action="store_true",
                    help="record one frame per decision instead of per engine tick (10x smaller)")
    pp.add_argument("--viser", nargs="?", const=VISER_DEFAULT, metavar="HOST:PORT",
                    help=f"stream the matches to RoyaleViser (the viser extra: {VISER_EXTRA}; then python -m royaleviser "
                    f"--stream HOST:PORT) at this address "
                    f"(default {VISER_DEFAULT}); nothing is sent until a viewer says hello")
    pp.add_argument("--speed", type=float, default=1.0,
                    help="game seconds per wall second while a viewer watches (default 1: real time; 0: as fast as "
                    "the machine plays)")
    add_run_options(pp)
    pp.set_defaults(func=cmd_play, a=LATEST, b=DEFAULT_OPPONENT)
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


VISER_EXTRA = "pip install -e '.[viser]'"
"""How to install RoyaleViser, the viewer (an optional extra: pyproject.toml's ``viser``)."""


def viser_missing() -> str:
    """``""`` when RoyaleViser is importable here, else the sentence naming the extra that
    installs it (the stream itself needs only royalegym; the viewer may run on another machine)."""
    import importlib.util

    if importlib.util.find_spec("royaleviser") is not None:
        return ""
    return (f" (RoyaleViser is not installed here: {VISER_EXTRA} from the checkout, or pip install royaleviser "
            "where the viewer runs)")


def watch_live(env, address: str, run_name: str, speed: float, out) -> None:
    """Stream ``env``'s battles to RoyaleViser at ``address`` (host:port; RoyaleGym's
    ``ViserPublisher``: a frame per engine tick while a viewer is attached, nothing otherwise)
    and, while one is attached and ``speed`` > 0, pace each decision to ``decision_ms / speed``
    of wall time so the viewer sees the battle at that speed. Raises ValueError for an address
    that is not host:port, OSError when the port cannot be bound (RoyaleGym's text says why)."""
    import time

    from royalegym.viser import ViserPublisher

    host, _, port = address.rpartition(":")
    if not port.isdigit() or not host:
        raise ValueError("expected HOST:PORT, for example 127.0.0.1:9870")
    env.viser = ViserPublisher(host, int(port), run=run_name)
    bound = env.viser.address[1]
    out.write(f"  streaming to RoyaleViser at {host}:{bound} (run {run_name!r}); watch with "
              f"python -m royaleviser --stream {host}:{bound}" + viser_missing() + "\n")
    out.flush()
    if speed <= 0:
        return
    step, wait = env.step, env.decision_ms / 1000.0 / speed
    last = [time.monotonic()]

    def paced_step(actions):
        result = step(actions)
        if env.viser.attached:
            pause = wait - (time.monotonic() - last[0])
            if pause > 0:
                time.sleep(pause)
        last[0] = time.monotonic()
        return result

    env.step = paced_step


def cmd_play(args, out=None) -> int:
    from royalegym.evaluate import play_one
    from royalegym.protocol import Winner
    from royalegym.replay import ReplayRecorder

    from shared.envs import build_env
    from shared.evaluation import eval_env_config
    from shared.replays import replays_dir, trace_result, write_game
    from shared.stats import wilson_interval

    out = out or sys.stdout
    try:
        take_words(args, ("a", "b"), 0, "play")
    except WordRefused as exc:
        print(exc, file=sys.stderr)
        return 2
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
    if args.speed < 0:
        print(f"royalefleet play: --speed {args.speed}: expected >= 0 (0: unpaced)", file=sys.stderr)
        return 2
    folder = args.out or replays_dir(cfg.runs_dir, cfg.run_name) / "play"
    env = build_env(eval_env_config(cfg.env))
    if args.viser:
        try:
            watch_live(env, args.viser, cfg.run_name, args.speed, out)
        except (OSError, ValueError) as exc:
            print(f"royalefleet play: --viser {args.viser}: {exc}", file=sys.stderr)
            env.close()
            return 2
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
