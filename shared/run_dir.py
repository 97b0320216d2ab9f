"""The layout of a run's folder, ``<runs_dir>/<run_name>/``: every name in it, and the readers
and writers of its plain files. It is the one module that spells a file name of the folder;
services and the CLI ask ``RunDir`` for a path (docs/running.md, "Where a run's outputs go")::

    <run>/config.json                 the config the launcher wrote (``royalefleet up``)
    <run>/metrics.jsonl               one metric row per iteration (the learner)
    <run>/metrics.purged.jsonl        rows a resume moved out of metrics.jsonl
    <run>/halted.json                 {iteration, reason}: every start refuses while it exists
    <run>/alarms.jsonl                one record per alarm fired
    <run>/drift.json                  one record per resume across an identity drift
    <run>/episodes.held.jsonl         episode reports the ladder has not acknowledged
    <run>/bundles/<iteration>/        diagnostic bundles (operator_halt.txt, halt.json, ...)
    <run>/logs/                       every service's log (the launcher)
    <run>/tensorboard/                TensorBoard curves (the learner)
    <run>/checkpoints/index.json      the checkpoint index; checkpoints/<iteration:08d>/ each
    <run>/ladder/pool.json            the pool; resident.json its resident set
    <run>/ladder/results.jsonl        the result log; strength.json the strength plan
    <run>/ladder/gate_in_flight.json  the gate in flight; gates/<candidate>.json each decision
    <run>/snapshots/<id>/             pool snapshots (the checkpoint service)
    <run>/replays/index.json          recorded games (shared/replays.py)

Inside a checkpoint, each component names its own files (they are the checkpoint's format, not
the run folder's). This module imports nothing of the project: ``shared`` sits below services.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from shared.durable import replace_file

CONFIG = "config.json"
METRICS = "metrics.jsonl"
PURGED = "metrics.purged.jsonl"
HALTED = "halted.json"
ALARMS = "alarms.jsonl"
DRIFT = "drift.json"
HELD_EPISODES = "episodes.held.jsonl"
BUNDLES = "bundles"
OPERATOR_HALT = "operator_halt.txt"
"""In a bundle: the operator's reason for a halt by the endpoint."""
BUNDLE_HALT = "halt.json"
"""In a bundle: the alarms that fired, the checkpoint and the resume command (beside copies of
metrics.jsonl, alarms.jsonl and config.json)."""
LOGS = "logs"
CURVES = "tensorboard"
CHECKPOINTS = "checkpoints"
CHECKPOINT_INDEX = "index.json"
"""In ``checkpoints/``."""
LADDER = "ladder"
POOL = "pool.json"
RESIDENT = "resident.json"
RESULTS = "results.jsonl"
STRENGTH = "strength.json"
GATES = "gates"
GATE_IN_FLIGHT = "gate_in_flight.json"
SNAPSHOTS = "snapshots"
"""Pool snapshots (the checkpoint service's ``SnapshotStore``), ``snapshots/<id>/``."""
REPLAYS = "replays"
REPLAYS_INDEX = "index.json"
"""In ``replays/``."""
DEMOS = "demos"
"""Demonstration sets (shared/demos.py): ``demos/<name>/`` each, written by ``royalefleet demos record``."""
CLONES = "clones"
"""``clones/<snapshot id>/``: a clone's critic and epoch report (royalefleet/cmd_clone.py)."""

TAIL_BYTES = 1 << 20
"""The last metric row is looked for in the file's last MiB (a row is a few KB; the file grows
by one row an iteration and is never read whole)."""


def check_run_name(run_name: str) -> str | None:
    """Why ``run_name`` cannot name a run folder, or None: it must be one path component, so no
    slash, backslash or NUL, and not empty, ``.`` or ``..`` (the rule of
    ``shared.config.check_consistency``)."""
    if not run_name or run_name in (".", "..") or any(c in run_name for c in "/\\\0"):
        return f"run_name {run_name!r} is not a usable folder name (one path component, no slash)"
    return None


def last_metric_row(path: str | os.PathLike) -> dict | None:
    """The last whole metric row of ``path`` (a torn last line is skipped), None if it has none.
    Reads only the file's last ``TAIL_BYTES``. Raises OSError for an unreadable file
    (FileNotFoundError when there is none)."""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - TAIL_BYTES))
        lines = fh.read().splitlines()
    for line in reversed(lines):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "run/iteration" in row:
            return row
    return None


class RunDir:
    """The folder of one run. Paths only; nothing is created until a writer writes."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    @classmethod
    def of(cls, runs_dir: str | os.PathLike, run_name: str) -> RunDir:
        """``<runs_dir>/<run_name>``. Raises ValueError for an unusable run_name (``check_run_name``)."""
        problem = check_run_name(run_name)
        if problem:
            raise ValueError(problem)
        return cls(Path(runs_dir) / run_name)

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    # ----------------------------------------------------------------- paths

    config = property(lambda self: self.root / CONFIG)
    metrics = property(lambda self: self.root / METRICS)
    purged = property(lambda self: self.root / PURGED)
    halted = property(lambda self: self.root / HALTED)
    alarms = property(lambda self: self.root / ALARMS)
    drift = property(lambda self: self.root / DRIFT)
    held_episodes = property(lambda self: self.root / HELD_EPISODES)
    bundles = property(lambda self: self.root / BUNDLES)
    logs = property(lambda self: self.root / LOGS)
    curves = property(lambda self: self.root / CURVES)
    checkpoints = property(lambda self: self.root / CHECKPOINTS)
    checkpoint_index = property(lambda self: self.root / CHECKPOINTS / CHECKPOINT_INDEX)
    ladder = property(lambda self: self.root / LADDER)
    pool = property(lambda self: self.root / LADDER / POOL)
    resident = property(lambda self: self.root / LADDER / RESIDENT)
    results = property(lambda self: self.root / LADDER / RESULTS)
    strength = property(lambda self: self.root / LADDER / STRENGTH)
    gates = property(lambda self: self.root / LADDER / GATES)
    gate_in_flight = property(lambda self: self.root / LADDER / GATE_IN_FLIGHT)
    snapshots = property(lambda self: self.root / SNAPSHOTS)
    replays = property(lambda self: self.root / REPLAYS)
    replays_index = property(lambda self: self.root / REPLAYS / REPLAYS_INDEX)
    demos = property(lambda self: self.root / DEMOS)
    clones = property(lambda self: self.root / CLONES)

    def bundle(self, iteration: int) -> Path:
        """``bundles/<iteration>``: the diagnostic bundle of a halt at ``iteration``."""
        return self.bundles / str(iteration)

    def checkpoint(self, iteration: int) -> Path:
        """``checkpoints/<iteration:08d>``."""
        return self.checkpoints / f"{iteration:08d}"

    def gate_record(self, candidate: str) -> Path:
        """``ladder/gates/<candidate>.json`` (``snap:`` written ``snap_``, a colon being no
        portable file name character)."""
        return self.gates / f"{candidate.replace(':', '_')}.json"

    # ----------------------------------------------------------------- metric rows

    def last_metric_row(self) -> dict | None:
        """``last_metric_row(self.metrics)``."""
        return last_metric_row(self.metrics)

    def purged_rows(self) -> int | None:
        """How many rows ``metrics.purged.jsonl`` holds, None when there is no such file."""
        try:
            data = self.purged.read_bytes()
        except FileNotFoundError:
            return None
        return sum(1 for line in data.splitlines() if line.strip())

    # ----------------------------------------------------------------- alarms, drift

    def read_alarms(self) -> list[dict]:
        """Every alarm record of ``alarms.jsonl``, oldest first (lines that do not decode are
        skipped: a torn last write); [] without the file."""
        try:
            data = self.alarms.read_bytes()
        except FileNotFoundError:
            return []
        fired = []
        for line in data.splitlines():
            try:
                fired.append(json.loads(line))
            except ValueError:
                continue
        return fired

    def append_alarms(self, records: list[bytes]) -> None:
        """Append encoded alarm records (one JSON object each, no newline) to ``alarms.jsonl``."""
        with open(self.alarms, "ab") as fh:
            for rec in records:
                fh.write(rec + b"\n")

    def append_drift(self, record: bytes) -> None:
        """Append one encoded drift record (a JSON object, no newline) to ``drift.json``."""
        with open(self.drift, "ab") as fh:
            fh.write(record + b"\n")

    # ----------------------------------------------------------------- halt mark

    def mark_halted(self, iteration: int, reason: str) -> None:
        """Write ``halted.json`` ({iteration, reason}) atomically. Raises OSError."""
        replace_file(self.halted, json.dumps({"iteration": iteration, "reason": reason}).encode() + b"\n")

    def read_halt_mark(self) -> str | None:
        """``at iteration N: <reason>`` when the run is marked halted (a mark that does not
        decode says so instead), None when it is not."""
        path = self.halted
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"({path} is unreadable: {exc})"
        try:
            mark = json.loads(data)
            return f"at iteration {mark['iteration']}: {mark['reason']}"
        except (ValueError, KeyError, TypeError) as exc:
            return f"({path} is unreadable: {exc!r})"

    def clear_halt(self) -> None:
        """Remove ``halted.json``. Raises FileNotFoundError when there is none."""
        os.remove(self.halted)
