"""The candidate log beside expert iteration's replay: aligned with the replay's trims, saved and
restored exactly, refused when the run's shape differs."""

from __future__ import annotations

import numpy as np
import pytest

from services.learner.expert_iteration.replay import ReplayPart, SearchReplay
from services.learner.treestrap.log import CandidateLog


def part(iteration: int, n: int) -> ReplayPart:
    offsets = np.arange(n + 1, dtype=np.int64)
    return ReplayPart(iteration, np.full((n, 2), iteration, np.uint8), np.zeros(n, np.int16), offsets,
                      np.ones(n, np.float32), np.zeros(n, np.float32))


def logged(iteration: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    c = (100 * iteration + np.arange(n * 2)).reshape(n, 2).astype(np.int16)
    m = (np.arange(n * 3).reshape(n, 3) + iteration) % 2
    return c, m.astype(np.uint8)


def test_the_log_follows_the_replays_trims_row_for_row():
    replay, log = SearchReplay(max_iterations=2, max_rows=6), CandidateLog(2, 3)
    for it, n in ((1, 3), (2, 2), (3, 5)):
        replay.add(part(it, n))
        log.add(it, *logged(it, n))
    # iteration 1 dropped (two newest kept); 2 + 5 = 7 rows > 6: iteration 2's first row dropped
    assert replay.iterations() == [2, 3] and len(replay) == 6
    cands, masks = log.aligned(replay)
    c2, m2 = logged(2, 2)
    c3, m3 = logged(3, 5)
    np.testing.assert_array_equal(cands, np.concatenate([c2[1:], c3]))
    np.testing.assert_array_equal(masks, np.concatenate([m2[1:], m3]))
    assert sorted(log.parts) == [2, 3]


def test_saved_and_restored_the_log_gives_the_same_arrays_and_bytes():
    log = CandidateLog(2, 3)
    log.add(4, *logged(4, 3))
    log.add(5, *logged(5, 1))
    files = log.to_files()
    back = CandidateLog(2, 3)
    back.load_files(files)
    assert back.to_files() == files
    for it in (4, 5):
        np.testing.assert_array_equal(back.parts[it][0], log.parts[it][0])
        np.testing.assert_array_equal(back.parts[it][1], log.parts[it][1])


def test_refusals():
    log = CandidateLog(2, 3)
    with pytest.raises(ValueError, match=r"expected \(n, 2\) and \(n, 3\)"):
        log.add(1, np.zeros((2, 3)), np.zeros((2, 3)))
    log.add(1, *logged(1, 2))
    with pytest.raises(ValueError, match="2 candidates x 3 heads, this run 4 x 3"):
        CandidateLog(4, 3).load_files(log.to_files())
    replay = SearchReplay(2, 10)
    replay.add(part(1, 3))
    with pytest.raises(ValueError, match="iteration 1 logged 2 rows, the replay holds 3"):
        log.aligned(replay)
