"""Recorded games in a run folder: ``<runs_dir>/<run>/replays/<id>.{msgpack,html}`` and
``replays/index.json``.

A recorded game is a RoyaleGym trace (``royalegym.replay``: seed + setup + the engine's command
log + state hashes, checked by re-simulation with ``verify_trace``) saved as msgpack, beside the
self-contained HTML page RoyaleGym's own viewer makes of it (``royalegym.render``: board, units,
towers, HP, deploys; opens by double-click, no server). Nothing here draws anything.

Who writes: the ladder, the one owner of ``ladder/`` and ``replays/`` in a run (the evaluators
send the traces of the games the ladder asked them to record with their report, so an evaluator
on another host needs no share of the run folder; under Compose the folder is in the ladder's
``results`` volume). ``royalefleet play`` and ``royalefleet replay`` write their own games to a
folder of their own and never touch the index.

``index.json`` (``ReplayIndex``) lists every game kept, oldest first: its players, seeds, result,
the job and the iteration of the snapshot it evaluated, and the two files relative to the run
folder. It is rewritten whole and atomically on every change; games beyond ``keep`` are dropped
from it, oldest first, and their files deleted.

Torch-free: the ladder and ``royalefleet status`` import it.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import msgspec

from shared.durable import replace_file
from shared.run_dir import REPLAYS, REPLAYS_INDEX, RunDir

REPLAYS_DIR = REPLAYS
INDEX_FILE = REPLAYS_INDEX
WINNERS = {0: "blue", 1: "red", 2: "draw"}
"""``royalegym.protocol.Winner`` (the engine's winner code) as the index names it."""


class ReplayEntry(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One recorded game of ``index.json``."""

    id: str
    """File stem, unique in the run: ``job<J>-seed<S>-side<K>`` for an evaluation game."""
    kind: str
    """What it was recorded for: ``gate`` (a candidate's promotion gate) or ``strength`` (a
    champion's record against the scripted anchors)."""
    blue: str
    red: str
    """The players of the two seats (``snap:<id>`` or ``scripted:<name>``)."""
    a: str
    b: str
    """The job's two players: ``a`` sits blue on side 0 and red on side 1."""
    job: int
    seed_index: int
    """Index in the run's evaluation seed set (``shared.evaluation.eval_seed_set``)."""
    side: int
    env_seed: int
    """The env's reset seed: entry ``seed_index`` of the seed set (the trace header holds the
    engine seed RoyaleGym derived from it)."""
    iteration: int
    """Learner iteration at which snapshot ``a`` was taken (-1 when ``a`` is scripted or unknown)."""
    winner: str
    """``blue``, ``red``, ``draw``, or ``unfinished`` (a trace with no result)."""
    crowns: list[int]
    """[blue's, red's]."""
    ticks: int
    """Engine ticks played (50 ms each)."""
    decisions: int
    trace: str
    html: str
    """The two files, relative to the run folder (``replays/<id>.msgpack``, ``replays/<id>.html``)."""
    written: str
    """UTC ISO-8601."""


class ReplayIndex(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    entries: list[ReplayEntry] = []


def replays_dir(runs_dir: str | os.PathLike, run_name: str) -> Path:
    """``<runs_dir>/<run_name>/replays``."""
    return RunDir(Path(runs_dir) / run_name).replays


def read_index(folder: str | os.PathLike) -> ReplayIndex:
    """The index in ``folder`` (a ``replays`` folder); an empty one when there is no file.
    Raises ValueError naming the file when it does not decode (OSError if unreadable)."""
    path = Path(folder) / INDEX_FILE
    if not path.exists():
        return ReplayIndex()
    try:
        return msgspec.json.decode(path.read_bytes(), type=ReplayIndex)
    except msgspec.DecodeError as exc:
        raise ValueError(f"{path}: not a replay index ({exc})") from None


def trace_result(trace) -> tuple[str, list[int], int]:
    """(winner name, [blue crowns, red crowns], final tick) of a ``royalegym.replay.Trace``."""
    if trace.result is None:
        last = trace.frames[-1] if trace.frames else None
        return "unfinished", list(last.crowns) if last else [0, 0], last.tick if last else 0
    r = trace.result
    return WINNERS.get(int(r.winner), f"winner {r.winner}"), list(r.crowns), int(r.final_tick)


def write_game(folder: str | os.PathLike, stem: str, trace, *, title: str) -> tuple[Path, Path]:
    """Save ``trace`` (a ``royalegym.replay.Trace``) as ``<folder>/<stem>.msgpack`` and its page
    as ``<folder>/<stem>.html`` (``royalegym.render``), each atomically. Returns both paths.
    Raises ``royalegym.render.RenderError`` for a trace the viewer cannot draw, OSError if the
    disk refuses."""
    from royalegym.render import render_html

    folder = Path(folder)
    page = render_html(trace, title=title)  # first: a trace that cannot be drawn writes nothing
    trace_path, html_path = folder / f"{stem}.msgpack", folder / f"{stem}.html"
    replace_file(trace_path, msgspec.msgpack.encode(trace))
    replace_file(html_path, page.encode("utf-8"))
    for p in (trace_path, html_path):
        os.chmod(p, 0o644)  # a page to open in a browser, not a secret (the temporary file was 0600)
    return trace_path, html_path


def add_entries(folder: str | os.PathLike, entries: list[ReplayEntry], keep: int) -> list[ReplayEntry]:
    """Append ``entries`` to the index in ``folder`` (an entry whose id is already there
    replaces it), drop the oldest beyond ``keep`` (deleting their two files) and rewrite the
    index atomically. Returns the entries dropped. Raises ValueError for keep < 1 or an index
    that does not decode, OSError if the disk refuses."""
    if keep < 1:
        raise ValueError(f"keep {keep}: at least 1 recorded game is kept (evaluation.replays_keep)")
    folder = Path(folder)
    index = read_index(folder)
    new_ids = {e.id for e in entries}
    kept = [e for e in index.entries if e.id not in new_ids] + list(entries)
    dropped = kept[:-keep] if len(kept) > keep else []
    kept = kept[len(dropped):]
    replace_file(folder / INDEX_FILE, msgspec.json.format(msgspec.json.encode(ReplayIndex(entries=kept)), indent=1))
    run_folder = folder.parent
    for e in dropped:
        for rel in (e.trace, e.html):
            try:
                (run_folder / rel).unlink()
            except FileNotFoundError:
                pass
    return dropped


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
