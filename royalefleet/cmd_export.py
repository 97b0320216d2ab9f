"""``royalefleet export [RUN] PLAYER OUT``: a snapshot, searching or not, as a folder
``royalefleet.load_bot`` reads without its run.

    royalefleet export myrun latest exported/my-bot
    royalefleet export myrun snap:0123456789abcdef+search:8 exported/my-searching-bot

The folder holds the snapshot's ``actor.safetensors`` and ``spec.json`` byte for byte, the run's
``config.json`` and ``bot.json`` (royalefleet/bot.py). The snapshot is loaded first, so a
snapshot this machine cannot play is refused here, not in the user's script. A player with
``+search:N[:D]`` is exported with its budget in ``bot.json`` (``"search": {"candidates": N,
"depth": D}``); ``load_bot`` then gives a bot that searches in the battles ``bot.make_env()``
builds (royalefleet/bot_search.py).
"""

from __future__ import annotations

import argparse
import sys

from royalefleet.player_words import WordRefused, add_words_argument, take_words
from royalefleet.run_options import add_run_options, run_config


def add_parser(subparsers) -> argparse.ArgumentParser:
    xp = subparsers.add_parser(
        "export", help="write a snapshot as a folder royalefleet.load_bot reads without its run",
        description="Write PLAYER (snap:<id>, the bare id, latest or champion) of the run as a folder OUT: "
        "actor.safetensors, spec.json, the run's config.json and bot.json. Load it in your own code with "
        "royalefleet.load_bot(OUT) (README, 'Your bot in your own code').")
    add_words_argument(xp, "[RUN] PLAYER OUT", "the run, then PLAYER (snap:<id>, its bare 16-hex id, latest or "
                       "champion, with +search:N[:D] for a bot that searches) and OUT, the folder to write (it must "
                       "not hold a bot already)")
    add_run_options(xp)
    xp.set_defaults(func=cmd_export)
    return xp


def cmd_export(args, out=None) -> int:
    from royalefleet.bot import BotRefused, export_bot, load_bot

    out = out or sys.stdout
    try:
        take_words(args, ("player", "out"), 2, "export", players=1)
    except WordRefused as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        cfg = run_config(args, must_exist=True)
        bot = load_bot(args.player, config=cfg)
        folder = export_bot(bot, args.out)
    except (BotRefused, ValueError, OSError) as exc:  # RunNotFound and ConfigError are ValueErrors
        print(f"royalefleet export: {exc}", file=sys.stderr)
        return 2
    search = bot.manifest.search
    out.write(f"exported {bot.id} (run {cfg.run_name!r}, iteration {bot.manifest.iteration}"
              + (f", searching {search['candidates']} candidates {search['depth']} decisions deep" if search else "")
              + f") to {folder}; load it with royalefleet.load_bot({str(folder)!r})"
              + ("; it searches in the battles bot.make_env() builds (or bot.watch(env))" if search else "") + "\n")
    return 0
