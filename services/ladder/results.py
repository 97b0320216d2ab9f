"""The durable, append-only result log: ``<runs_dir>/<run_name>/ladder/results.jsonl``.

One msgspec-JSON line per finished episode seat (``ResultLine``: the EpisodeRecord plus the
run name and the UTC wall time of the batch). Written append + flush + fsync per batch, so an
Ack from the ladder means the records are on disk (royalelearn-facts 6.5).

Nothing is ever rewritten. A crash mid-write leaves at most a torn LAST line; ``read`` sets
any line that does not decode aside (with its line number) instead of failing, and ``append``
first ends an unterminated last line with a newline so the next record starts on a line of
its own. A newline rather than a truncation because the cut may fall exactly before the
newline: then the "torn" line is a whole record, and the newline restores it, whereas
truncating would throw it away. A genuinely torn fragment stays in the file as evidence and
is reported by every later ``read``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import msgspec

from shared.messages import EpisodeRecord
from shared.durable import fsync_dir
from shared.run_dir import RESULTS, RunDir, check_run_name  # noqa: F401 - check_run_name: re-exported

RESULTS_FILE = RESULTS


class ResultLine(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    """One line of the log."""

    run_name: str
    wall: str
    """UTC ISO-8601 time the batch was written, e.g. ``2026-10-02T14:03:11.532+00:00``."""
    record: EpisodeRecord
    report_id: str = ""
    """The learner's report it came in (``ReportEpisodes.report_id``), so a resent report is
    written once (``ReportIds``); absent from lines of reports without one."""


def record_key(rec: EpisodeRecord) -> tuple[int, int, str]:
    """A record's place in its report: (battle, ordinal, seat)."""
    return rec.battle, rec.ordinal, rec.seat


class ReportIds:
    """Which records of each report id the log holds: report id -> {record_key}. Filled from
    the log at the ladder's start and by every append, so a report resent after a crash that
    lost its Ack (written, never acked) adds only the records the log does not hold."""

    def __init__(self, lines: list[ResultLine] = ()):
        self.written: dict[str, set[tuple[int, int, str]]] = {}
        for line in lines:
            if line.report_id:
                self.written.setdefault(line.report_id, set()).add(record_key(line.record))

    def missing(self, report_id: str, records: list[EpisodeRecord]) -> list[EpisodeRecord]:
        """The records of ``report_id`` the log does not hold yet (all of them for "")."""
        have = self.written.get(report_id) if report_id else None
        return records if not have else [r for r in records if record_key(r) not in have]

    def add(self, report_id: str, records: list[EpisodeRecord]) -> None:
        if report_id:
            self.written.setdefault(report_id, set()).update(map(record_key, records))


@dataclass
class LogRead:
    """What ``ResultLog.read`` found: the decoded lines in file order, and every line set aside
    as ``(line_number, why)`` with 1-based line numbers."""

    lines: list[ResultLine] = field(default_factory=list)
    set_aside: list[tuple[int, str]] = field(default_factory=list)

    @property
    def records(self) -> list[EpisodeRecord]:
        return [line.record for line in self.lines]

    @property
    def n_set_aside(self) -> int:
        return len(self.set_aside)


def result_log_path(runs_dir: str | os.PathLike, run_name: str) -> Path:
    """``<runs_dir>/<run_name>/ladder/results.jsonl``. Raises ValueError for an unusable run_name."""
    return RunDir.of(runs_dir, run_name).results


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ResultLine)

MAX_ID = 2**31 - 1
"""Battles, ordinals and iterations travel as int32 elsewhere (a Round's ``ordinal``)."""
MAX_TEXT = 200
"""Longest role, player or opponent id a record may carry (real ones are ~20 characters)."""
MAX_REWARD_TERMS = 64


class RecordRefused(ValueError):
    """An episode record the log will not hold; the text names the record, field and value."""


def check_record(rec: EpisodeRecord) -> str | None:
    """Why ``rec`` cannot go into a result log (None when it can). Every number must be finite
    and in its range: what JSON cannot carry (NaN and infinities become ``null``, which the next
    ``read`` sets aside) or what no battle can produce (RoyaleGym's terminal info:
    ``outcome`` in {-1, 0, 1}, crowns 0..3, tower hp fractions in [0, 1], counts >= 0)."""
    ints = {
        "battle": (0, MAX_ID), "ordinal": (0, MAX_ID), "iteration": (-1, MAX_ID), "outcome": (-1, 1),
        "own_crowns": (0, 3), "enemy_crowns": (0, 3), "episode_steps": (0, MAX_ID), "episode_ticks": (0, 2**62),
        "elixir_leak_steps": (0, MAX_ID), "cards_played": (0, MAX_ID),
    }
    for name, (low, high) in ints.items():
        value = getattr(rec, name)
        if not low <= value <= high:
            return f"{name} {value} is outside {low}..{high}"
    for name in ("own_tower_hp_frac", "enemy_tower_hp_frac"):
        value = getattr(rec, name)
        if not 0.0 <= value <= 1.0:  # False for NaN too
            return f"{name} {value!r} is not a fraction in [0, 1]"
    if not math.isfinite(rec.undiscounted_return):
        return f"undiscounted_return {rec.undiscounted_return!r} is not finite"
    for field_name in ("reward_terms", "reward_terms_abs"):
        terms = getattr(rec, field_name)
        if len(terms) > MAX_REWARD_TERMS:
            return f"{field_name} has {len(terms)} terms; at most {MAX_REWARD_TERMS}"
        for term, value in terms.items():
            if len(term) > MAX_TEXT or not math.isfinite(value):
                return f"{field_name}[{term[:MAX_TEXT]!r}] = {value!r}: term names up to {MAX_TEXT} chars, finite values"
    for name in ("role", "player", "opponent"):
        if len(getattr(rec, name)) > MAX_TEXT:
            return f"{name} is {len(getattr(rec, name))} characters long; at most {MAX_TEXT}"
    return None


def check_records(records: list[EpisodeRecord]) -> None:
    """Raise RecordRefused naming the first record (its index, battle and ordinal) that
    ``check_record`` refuses."""
    for i, rec in enumerate(records):
        problem = check_record(rec)
        if problem:
            raise RecordRefused(f"records[{i}] (battle {rec.battle}, ordinal {rec.ordinal}, seat {rec.seat}): "
                                f"{problem}; nothing of this batch was written")


class ResultLog:
    """The result log of one run. Only one process (the ladder) may append to it.

    ``run_name`` defaults to the run folder the path sits in (``<run_name>/ladder/results.jsonl``).
    """

    def __init__(self, path: str | os.PathLike, run_name: str | None = None):
        self.path = Path(path)
        self.run_name = run_name if run_name is not None else self.path.parent.parent.name

    @classmethod
    def for_run(cls, runs_dir: str | os.PathLike, run_name: str) -> ResultLog:
        return cls(result_log_path(runs_dir, run_name), run_name)

    def append(self, records: list[EpisodeRecord], report_id: str = "") -> int:
        """Append one line per record (each carrying ``report_id`` when given), then flush and
        fsync. Returns the number written (0 for an empty batch, which touches nothing). Raises
        OSError if the disk refuses; lines of earlier batches are never touched. Raises
        RecordRefused (``check_records``), writing nothing, when any record of the batch is out
        of range."""
        if not records:
            return 0
        check_records(records)
        wall = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        data = b"".join(
            _encoder.encode(ResultLine(run_name=self.run_name, wall=wall, record=r, report_id=report_id)) + b"\n"
            for r in records
        )
        created = not self.path.exists()
        if created:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # "a+b": every write goes to the end whatever the read position; reading lets us look
        # at the last byte first.
        with open(self.path, "a+b") as fh:
            # Checked on every batch, not once: a write that failed half-way earlier in this
            # process (disk full) leaves the same unterminated line a crash does.
            if _ends_unterminated(fh):
                data = b"\n" + data
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if created:
            # The new file's directory entry must be durable too, or a crash could lose the file.
            fsync_dir(self.path.parent)
        return len(records)

    def read(self) -> LogRead:
        """Every line that decodes, and every one that does not set aside with its number and
        why. A missing file reads as empty. Never raises for the file's contents (OSError for
        an unreadable file only)."""
        out = LogRead()
        if not self.path.exists():
            return out
        with open(self.path, "rb") as fh:
            for number, raw in enumerate(fh, start=1):
                text = raw.rstrip(b"\n")
                try:
                    out.lines.append(_decoder.decode(text))
                except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
                    torn = "" if raw.endswith(b"\n") else " (unterminated: torn last line)"
                    out.set_aside.append((number, f"{exc}{torn}"))
        return out


def _ends_unterminated(fh) -> bool:
    """True when the file is non-empty and its last byte is not a newline."""
    size = fh.seek(0, os.SEEK_END)
    if size == 0:
        return False
    fh.seek(size - 1)
    return fh.read(1) != b"\n"
