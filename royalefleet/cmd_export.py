"""``royalefleet export PLAYER OUT``: a snapshot as a folder ``royalefleet.load_bot`` reads
without its run.

    royalefleet export latest exported/my-bot --run-name myrun
    royalefleet export snap:0123456789abcdef exported/my-bot --run-name myrun

The folder holds the snapshot's ``actor.safetensors`` and ``spec.json`` byte for byte, the run's
``config.json`` and ``bot.json`` (royalefleet/bot.py). The snapshot is loaded first, so a
snapshot this machine cannot play is refused here, not in the user's script.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from royalefleet.run_options import add_run_options, run_config


def add_parser(subparsers) -> argparse.ArgumentParser:
    xp = subparsers.add_parser(
        "export", help="write a snapshot as a folder royalefleet.load_bot reads without its run",
        description="Write PLAYER (snap:<id>, the bare id, latest or champion) of the run as a folder OUT: "
        "actor.safetensors, spec.json, the run's config.json and bot.json. Load it in your own code with "
        "royalefleet.load_bot(OUT) (README, 'Your bot in your own code').")
    xp.add_argument("player", help="the snapshot: snap:<id>, its bare 16-hex id, latest or champion")
    xp.add_argument("out", type=Path, help="the folder to write (must not hold a bot already)")
    add_run_options(xp)
    xp.set_defaults(func=cmd_export)
    return xp


def cmd_export(args, out=None) -> int:
    from royalefleet.bot import BotRefused, export_bot, load_bot

    out = out or sys.stdout
    try:
        cfg = run_config(args, must_exist=True)
        bot = load_bot(args.player, config=cfg)
        folder = export_bot(bot, args.out)
    except (BotRefused, ValueError, OSError) as exc:  # RunNotFound and ConfigError are ValueErrors
        print(f"royalefleet export: {exc}", file=sys.stderr)
        return 2
    out.write(f"exported {bot.id} (run {cfg.run_name!r}, iteration {bot.manifest.iteration}) to {folder}; "
              f"load it with royalefleet.load_bot({str(folder)!r})\n")
    return 0
