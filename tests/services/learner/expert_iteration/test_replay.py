"""Expert iteration's replay: its bounds, its order, and its contents across a checkpoint."""

from __future__ import annotations

import numpy as np
import pytest

from services.learner.expert_iteration.replay import ReplayPart, SearchReplay


def part(iteration: int, n: int, width: int = 5) -> ReplayPart:
    """n rows whose bytes and targets name (iteration, row): row j is filled with 10 * iteration + j,
    its legal set is j + 1 actions {0..j}, its value 100 * iteration + j."""
    sizes = np.arange(1, n + 1)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return ReplayPart(iteration, np.stack([np.full(width, 10 * iteration + j, np.uint8) for j in range(n)]),
                      np.concatenate([np.arange(k, dtype=np.int16) for k in sizes]), offsets,
                      np.concatenate([np.full(k, 1.0 / k, np.float32) for k in sizes]),
                      np.asarray([100 * iteration + j for j in range(n)], np.float32))


def values(replay: SearchReplay) -> list[float]:
    return [float(v) for p in replay.parts for v in p.values]


def test_the_replay_keeps_the_last_k_iterations_then_at_most_n_rows_oldest_dropped_first():
    r = SearchReplay(max_iterations=3, max_rows=7)
    r.add(part(1, 3))
    r.add(part(2, 2))
    assert values(r) == [100, 101, 102, 200, 201]
    r.add(part(3, 2))  # 7 rows: at the bound
    assert values(r) == [100, 101, 102, 200, 201, 300, 301]
    r.add(part(4, 1))  # iteration 1 is out of the last 3
    assert values(r) == [200, 201, 300, 301, 400] and r.iterations() == [2, 3, 4]
    r.add(part(5, 4))  # 3 iterations of 2 + 1 + 4 = 7 rows: iteration 2 is out by the K bound
    assert values(r) == [300, 301, 400, 500, 501, 502, 503]
    r.add(part(6, 5))  # 4, 5, 6 hold 1 + 4 + 5 = 10 rows: the 3 oldest go (400, then 500's first two)
    assert values(r) == [502, 503, 600, 601, 602, 603, 604] and len(r) == 7
    first = r.parts[0]  # the trimmed part keeps its rows' own targets (rows 2 and 3: 3 and 4 legal actions)
    assert first.rows[:, 0].tolist() == [52, 53] and first.legal_offsets.tolist() == [0, 3, 7]
    assert first.legal_ids.tolist() == [0, 1, 2, 0, 1, 2, 3]


def test_the_batch_is_every_row_oldest_first_with_its_target():
    r = SearchReplay(4, 100)
    r.add(part(1, 2))
    r.add(part(2, 3))
    b = r.batch(mask_offset=4, n_actions=8)
    assert len(b) == 5 and b.obs.packed()[:, 0].tolist() == [10, 11, 20, 21, 22]
    assert b.value_targets.tolist() == [100, 101, 200, 201, 202] and b.policy_weights.tolist() == [1] * 5
    assert b.legal_offsets.tolist() == [0, 1, 3, 4, 6, 9]
    assert b.policy_targets[b.legal_offsets[4]:b.legal_offsets[5]].tolist() == pytest.approx([1 / 3] * 3)


def test_a_restored_replay_holds_the_same_rows_in_the_same_order_and_bounds_the_same_way():
    a = SearchReplay(2, 6)
    for i, n in ((1, 3), (2, 4), (3, 2)):
        a.add(part(i, n))
    b = SearchReplay(2, 6)
    b.load_files(a.to_files())
    assert b.to_files() == a.to_files()  # the same bytes: the checkpoint's state digest reads them
    assert b.iterations() == a.iterations() == [2, 3] and values(b) == values(a) == [200, 201, 202, 203, 300, 301]
    for pa, pb in zip(a.parts, b.parts):
        for name in ("rows", "legal_ids", "legal_offsets", "probs", "values"):
            assert np.array_equal(getattr(pa, name), getattr(pb, name)) and getattr(pa, name).dtype == getattr(pb, name).dtype
    a.add(part(4, 3))
    b.add(part(4, 3))  # the resumed replay evolves as the uninterrupted one
    assert values(b) == values(a) == [300, 301, 400, 401, 402]


def test_a_torn_replay_file_is_refused_naming_the_part():
    a = SearchReplay(2, 6)
    a.add(part(1, 2))
    files = a.to_files()
    files["expert_iteration/replay.json"] = files["expert_iteration/replay.json"].replace(b'"rows":2', b'"rows":3')
    with pytest.raises(ValueError, match="replay part 0 \\(iteration 1\\): its arrays do not hold the 3 rows"):
        SearchReplay(2, 6).load_files(files)
