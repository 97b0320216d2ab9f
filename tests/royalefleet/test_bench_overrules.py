"""royalefleet.bench.overrules: a row's base pick is the rung's own, recomputed from the legal set."""

import numpy as np

from royalefleet.bench.overrules import count, legal_planes, outcomes

H, W, SLOTS = 32, 18, 4


def _id(slot, y, x):
    return 1 + slot * H * W + y * W + x


def _shard(rows):
    """rows: (legal ids, action, forced) -> the arrays read_shard gives."""
    ids = [np.array(sorted(r[0]), np.int16) for r in rows]
    offsets = np.concatenate([[0], np.cumsum([len(i) for i in ids])]).astype(np.int32)
    return {"legal_ids": np.concatenate(ids), "legal_offsets": offsets,
            "actions": np.array([r[1] for r in rows], np.int64), "forced": np.array([r[2] for r in rows])}


def test_legal_planes_put_each_grid_id_on_its_cell():
    planes = legal_planes(np.array([0, _id(2, 5, 7), _id(0, 31, 17), 1 + SLOTS * H * W]), SLOTS, H, W)
    assert planes.sum() == 2 and planes[2, 5, 7] == 1 and planes[0, 31, 17] == 1


def test_count_splits_overrules_against_defends_own_pick():
    from royalegym.opponents import DefendOpponent

    legal = [0, _id(0, 8, 8), _id(0, 20, 3), _id(1, 8, 8)]
    # defend's pick on this legal set: slot 0 at (8, 8), its anchor (a quarter up, the centre)
    shard = _shard([(legal, _id(0, 8, 8), False),  # kept
                    (legal, 0, False),  # the no-op
                    (legal, _id(0, 20, 3), False),  # same card, another tile
                    (legal, _id(1, 8, 8), False),  # another card
                    ([0], 0, True)])  # forced: not counted
    c = count(None, [shard], DefendOpponent(), SLOTS, H, W)
    assert (c.rows, c.kept, c.noop, c.same_card, c.other_card) == (4, 1, 1, 1, 1)


def test_outcomes_score_each_recorded_seat_by_opponent():
    class B:
        def __init__(self, opponent, outcome):
            self.opponent, self.outcome = opponent, outcome

    class M:
        battles = [B("scripted:defend", [1]), B("scripted:defend", [0]), B("mirror", [1, -1])]

    assert outcomes(M()) == {"scripted:defend": [1.0, 0.5], "mirror": [1.0, 0.0]}


def test_a_set_that_is_not_there_is_refused_naming_it_and_the_runs_sets(tmp_path, capsys):
    from royalefleet.bench.overrules import main

    (tmp_path / "r" / "demos" / "plans-300s").mkdir(parents=True)
    (tmp_path / "r" / "demos" / "mix-150.partial").mkdir()
    assert main(["r", "--demos", "plans-30", "--profile", "tiny", "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no demonstration set 'plans-30' under" in err
    assert "this run has: mix-150.partial, plans-300s" in err
