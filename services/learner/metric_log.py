"""``runs/<run>/metrics.jsonl``, the run's record: one JSON row per iteration, appended and
fsynced as each iteration ends.

A resume restarts from the newest checkpoint, which can be older than the last row (checkpoints
are written every ``checkpoint.every_iterations``; a hard kill loses the iterations since). The
rows of those lost iterations describe weights that no longer exist, and the resumed run writes
those iterations again. So a resume first moves them out (``purge_after``), as TensorBoard's
``SummaryWriter(purge_step=...)`` hides the events of steps at or past the restart step: the
record keeps exactly one row per iteration, in order, and the rows moved out are kept, appended
to ``metrics.purged.jsonl`` beside it, not deleted.
"""

from __future__ import annotations

import json
import numbers
import os
from pathlib import Path

import numpy as np

from shared.durable import replace_file
from shared.run_dir import PURGED

PURGED_NAME = PURGED


def plain_row(row: dict) -> dict:
    """``row`` with every value a plain JSON value: numpy scalars (``np.int64``,
    ``np.float32``, ``np.bool_``) become the Python int, float or bool they hold; str, int,
    float, bool and None pass. Everything the learner writes as JSON (the metric row,
    ``alarms.jsonl``, a bundle's ``metrics.jsonl`` and ``halt.json``) goes through this, since
    neither msgspec nor ``json`` encodes a numpy scalar (a TypeError in the middle of a halt).

    Raises TypeError naming the key for any other value (an array, an object)."""
    out = {}
    for key, value in row.items():
        if value is None or type(value) in (str, bool, int, float):
            out[key] = value
        elif isinstance(value, np.bool_):
            out[key] = bool(value)
        elif isinstance(value, numbers.Integral):  # np.int64, np.uint32, ...
            out[key] = int(value)
        elif isinstance(value, numbers.Real):  # np.float32, np.float64
            out[key] = float(value)
        else:
            raise TypeError(f"metric row key {key!r} holds {type(value).__name__} {value!r}: "
                            "a row holds numbers, strings, booleans or null only")
    return out


def append_row(path: str | os.PathLike, line: bytes) -> None:
    """Append one encoded row (``line`` ends with a newline) and fsync before returning."""
    with open(path, "ab") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def purge_after(path: str | os.PathLike, iteration: int) -> tuple[int, list[int]]:
    """Move every line of ``path`` that is not the last row of an iteration <= ``iteration``
    (rows of later iterations, a line torn by a crash, and a row superseded by a later row of
    its iteration, as runs written before this purge existed hold) to ``metrics.purged.jsonl``
    in the same folder; the rest stays, in order.

    Returns (lines moved, the distinct iterations of the rows moved, sorted). The moved lines
    are appended to the purged file and fsynced before ``path`` is atomically replaced, so a
    crash in between leaves them in both, never in neither (the next resume moves them again).
    A missing ``path`` moves nothing. Raises OSError if the disk refuses."""
    path = Path(path)
    try:
        lines = path.read_bytes().splitlines(keepends=True)
    except FileNotFoundError:
        return 0, []
    its = []
    for line in lines:
        try:
            it = json.loads(line)["run/iteration"]
        except (ValueError, TypeError, KeyError):
            it = None
        its.append(it if isinstance(it, int) else None)
    last = {it: k for k, it in enumerate(its) if it is not None}
    keep, moved, later = [], [], set()
    for k, (line, it) in enumerate(zip(lines, its)):
        ended = line if line.endswith(b"\n") else line + b"\n"
        if it is not None and it <= iteration and last[it] == k:
            keep.append(ended)
        elif line.strip():
            moved.append(ended)
            if it is not None:
                later.add(it)
    if not moved:
        if keep and not lines[-1].endswith(b"\n"):
            replace_file(path, b"".join(keep))  # a whole last row whose newline was cut: restore it
        return 0, []
    append_row(path.with_name(PURGED_NAME), b"".join(moved))
    replace_file(path, b"".join(keep))
    return len(moved), sorted(later)


def state_digests_of(path: str, iteration: int) -> list[str]:
    """``run/state_digest`` of every row of ``iteration`` in a metric file (none if it is absent)."""
    digests: list[str] = []
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return digests
    with fh:
        for line in fh:
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line torn by a crash says nothing about the weights
            if isinstance(row, dict) and row.get("run/iteration") == iteration and "run/state_digest" in row:
                digests.append(row["run/state_digest"])
    return digests


def described(meta, metrics_path: str) -> tuple[bool, str]:
    """Whether a metric row of the checkpoint's iteration carries its state digest (``meta``: a
    ``checkpointing.CheckpointMeta``, or anything with its ``iteration`` and ``state_digest``).

    (True, note) when it does, or when nothing can be compared (no file, no row of that
    iteration, iteration 0); (False, reason) when rows of that iteration exist and none carries
    the digest: the checkpoint holds weights the run's record does not describe; also when the
    only rows of that iteration are ones a resume purged (``purge_after``)."""
    if meta.iteration == 0 or not os.path.exists(metrics_path):
        return True, "no metric rows to compare the checkpoint with"
    digests = state_digests_of(metrics_path, meta.iteration)
    if not digests:
        # Its rows moved out by an earlier resume that fell back past it (it did not verify
        # then): resuming it now would leave the record with another history's rows before it.
        purged = os.path.join(os.path.dirname(metrics_path), PURGED)
        if meta.state_digest in state_digests_of(purged, meta.iteration):
            return False, (f"the metric rows of iteration {meta.iteration} were moved to metrics.purged.jsonl by an "
                           "earlier resume that fell back past this checkpoint, and the run has gone on from an "
                           "older one since; move this checkpoint's folder out of checkpoints/ to go on from "
                           "the older one")
        return True, f"no metric row of iteration {meta.iteration} to compare the checkpoint with"
    if meta.state_digest in digests:
        return True, ""
    return False, (f"checkpoint of iteration {meta.iteration} holds state {meta.state_digest}, but the metric "
                   f"rows of that iteration describe {', '.join(sorted(set(digests)))}")
