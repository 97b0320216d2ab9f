"""services.ladder.results: the durable append-only result log and its torn-line tolerance."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import msgspec
import pytest

from services.ladder.results import ResultLine, ResultLog, result_log_path
from shared.messages import EpisodeRecord


def record(battle: int, ordinal: int, seat: str = "blue", outcome: int = 1) -> EpisodeRecord:
    return EpisodeRecord(
        battle=battle, ordinal=ordinal, seat=seat, role="scripted", player="learner", opponent="scripted:noop",
        outcome=outcome, truncated=False, episode_steps=123, episode_ticks=1230, own_crowns=3, enemy_crowns=0,
        own_tower_hp_frac=0.75, enemy_tower_hp_frac=0.0, elixir_leak_steps=4, elixir_count_exact=True,
        cards_played=17, undiscounted_return=1.25, iteration=2,
    )


BATCHES = [
    [record(0, 0), record(0, 0, "red", -1)],
    [record(1, 0, outcome=0)],
    [record(2, 0), record(2, 1), record(3, 0, "red")],
]


@pytest.fixture
def log(tmp_path):
    return ResultLog.for_run(tmp_path, "run-a")


def fill(log: ResultLog) -> list[EpisodeRecord]:
    for batch in BATCHES:
        assert log.append(batch) == len(batch)
    return [r for batch in BATCHES for r in batch]


def test_path_and_run_name(tmp_path, log):
    assert log.path == tmp_path / "run-a" / "ladder" / "results.jsonl"
    assert ResultLog(tmp_path / "run-b" / "ladder" / "results.jsonl").run_name == "run-b"
    for bad in ("a/b", "..", "", "x\\y"):
        with pytest.raises(ValueError, match="not a usable folder name"):
            result_log_path(tmp_path, bad)


def test_append_three_batches_and_read_back(log):
    before = datetime.now(timezone.utc)
    written = fill(log)
    found = log.read()
    assert found.records == written
    assert found.set_aside == []
    assert all(line.run_name == "run-a" for line in found.lines)
    for line in found.lines:
        wall = datetime.fromisoformat(line.wall)
        assert wall.utcoffset() == timedelta(0)
        assert before - timedelta(seconds=1) <= wall <= datetime.now(timezone.utc)
    # one JSON object per line, the episode nested under "record"
    raw = log.path.read_bytes().splitlines()
    assert len(raw) == 6
    assert msgspec.json.decode(raw[0])["record"]["battle"] == 0


def test_each_batch_is_fsynced(log, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    log.append(BATCHES[0])  # creates the file: the data, then its directory entry
    assert len(calls) == 2
    log.append(BATCHES[1])
    assert len(calls) == 3


def test_missing_file_and_empty_batch(log):
    assert log.read().records == [] and log.read().set_aside == []
    assert log.append([]) == 0
    assert not log.path.exists()


def test_torn_last_line_is_set_aside_and_next_append_is_readable(log):
    written = fill(log)
    whole = msgspec.json.encode(ResultLine(run_name="run-a", wall="2026-01-01T00:00:00+00:00", record=record(9, 9)))
    with open(log.path, "ab") as fh:  # a crash half-way through a line
        fh.write(whole[: len(whole) // 2])

    reopened = ResultLog(log.path)
    found = reopened.read()
    assert found.records == written  # earlier lines intact
    assert [n for n, _ in found.set_aside] == [7]
    assert "torn" in found.set_aside[0][1]

    reopened.append([record(4, 0), record(4, 1)])
    found = reopened.read()
    assert found.records == written + [record(4, 0), record(4, 1)]
    assert [n for n, _ in found.set_aside] == [7]  # the fragment stays, on a line of its own
    assert "unterminated" not in found.set_aside[0][1]

    reopened.append([record(5, 0)])  # no further newline is inserted
    assert len(reopened.path.read_bytes().splitlines()) == 10
    assert reopened.read().n_set_aside == 1


def test_line_cut_just_before_its_newline_is_restored(log):
    fill(log)
    data = log.path.read_bytes()
    log.path.write_bytes(data[:-1])  # the crash lost only the final newline
    assert ResultLog(log.path).read().records == [r for batch in BATCHES for r in batch]  # a whole record
    log.append([record(6, 0)])
    found = log.read()
    assert found.set_aside == []
    assert found.records[-2:] == [BATCHES[2][-1], record(6, 0)]


def test_invalid_line_in_the_middle_is_set_aside(log):
    log.append(BATCHES[0])
    with open(log.path, "ab") as fh:
        fh.write(b'{"run_name": "run-a", "wall": "x", "record": {"battle": "zero"}}\n')
        fh.write(b"\xff\xfe not json\n")
    log.append(BATCHES[1])
    found = log.read()
    assert found.records == BATCHES[0] + BATCHES[1]
    assert [n for n, _ in found.set_aside] == [3, 4]
