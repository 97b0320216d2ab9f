"""The run's record across a resume (services/learner/metric_log.py): rows past the checkpoint
a resume starts from (all rows, at a start with no checkpoint) are moved out to
metrics.purged.jsonl, so metrics.jsonl keeps exactly one row per iteration, in order; nothing
is deleted. A checkpoint whose rows only the purged file holds is refused."""

from __future__ import annotations

import json

import pytest

from services.learner.metric_log import PURGED_NAME, append_row, purge_after
from tests.stack import read_rows, run_to_exit, tiny_config


def row(it: int, digest: str = "") -> bytes:
    return json.dumps({"run/iteration": it, "run/state_digest": digest or f"d{it}"}).encode() + b"\n"


def test_rows_past_the_checkpoint_and_a_torn_line_move_out_in_order(tmp_path):
    path = tmp_path / "metrics.jsonl"
    for it in (1, 2, 3, 4, 5, 6, 7):
        append_row(path, row(it))
    path.write_bytes(path.read_bytes() + b'{"run/iteration": 8, "run/sta')  # torn by a kill
    assert purge_after(path, 5) == (3, [6, 7])
    assert path.read_bytes() == b"".join(row(it) for it in (1, 2, 3, 4, 5))
    assert (tmp_path / PURGED_NAME).read_bytes() == row(6) + row(7) + b'{"run/iteration": 8, "run/sta\n'
    assert purge_after(path, 5) == (0, [])  # nothing left to move: both files unchanged
    assert (tmp_path / PURGED_NAME).read_bytes().count(b"\n") == 3


def test_a_second_purge_appends_and_keeps_earlier_purged_rows(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(row(1) + row(2) + row(3))
    assert purge_after(path, 1) == (2, [2, 3])
    path.write_bytes(path.read_bytes() + row(2, "x") + row(3, "y") + row(4, "z"))
    assert purge_after(path, 2) == (2, [3, 4])
    assert path.read_bytes() == row(1) + row(2, "x")
    assert (tmp_path / PURGED_NAME).read_bytes() == row(2) + row(3) + row(3, "y") + row(4, "z")


def test_a_whole_last_row_whose_newline_was_cut_is_kept_and_ended(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(row(1) + row(2)[:-1])  # the kill fell between the row and its newline
    assert purge_after(path, 2) == (0, [])
    assert path.read_bytes() == row(1) + row(2)
    path.write_bytes(row(1) + row(2)[:-1] + b"\n" + row(3)[:-1])
    assert purge_after(path, 2) == (1, [3])
    assert path.read_bytes() == row(1) + row(2)
    assert (tmp_path / PURGED_NAME).read_bytes() == row(3)


def test_a_checkpoint_whose_rows_were_purged_is_refused(tmp_path):
    """An earlier resume fell back past checkpoint 5 (it did not verify then) and purged its
    rows; the run went on from 3. Checkpoint 5 verifying again later must not be resumed: the
    record would hold another history's rows 4 and 5."""
    from tests.services.learner.test_resume import meta
    from services.learner import checkpointing

    path = tmp_path / "metrics.jsonl"
    path.write_bytes(row(1) + row(2) + row(3) + row(4, "b4"))
    (tmp_path / PURGED_NAME).write_bytes(row(4, "a4") + row(5, "a5"))
    ok, why = checkpointing.described(meta(5, "a5"), str(path))
    assert not ok and why.startswith("the metric rows of iteration 5 were moved to metrics.purged.jsonl by an "
                                     "earlier resume that fell back past this checkpoint")
    assert checkpointing.described(meta(5, "zz"), str(path))[0]  # not that state: nothing to say
    assert checkpointing.described(meta(4, "b4"), str(path)) == (True, "")


def test_nothing_to_purge_leaves_no_file(tmp_path):
    assert purge_after(tmp_path / "metrics.jsonl", 3) == (0, [])
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(row(1) + row(2))
    assert purge_after(path, 2) == (0, [])
    assert not (tmp_path / PURGED_NAME).exists()


@pytest.mark.slow  # a whole stack, three iterations and a resume: 25-37 s, the fast suite's slowest by 4x
def test_a_resume_from_an_older_checkpoint_purges_the_rows_past_it_and_trains_them_again(tmp_path):
    """Three iterations with a checkpoint every two (2, and 3 at the clean stop); checkpoint 3
    then corrupted, as a kill mid-write would leave it. The resume falls back to checkpoint 2,
    moves row 3 out and trains iteration 3 again, to the same state (run_exact: episodes of
    env.max_steps 32 end at the boundaries of the tiny profile's T = 32 cycles, so none is in
    flight at the checkpoint)."""
    cfg = tiny_config(tmp_path / "runs", checkpoint={"every_iterations": 2}, env={"max_steps": 32})
    run = tmp_path / "runs" / "default"
    run.mkdir(parents=True)
    dead = row(1, "dead1") + b'{"run/iteration": 2, "run/st'  # a process killed before its first checkpoint
    (run / "metrics.jsonl").write_bytes(dead)
    up, code = run_to_exit(cfg, "--iterations", "3", timeout=300)
    assert code == 0, up.tail()
    assert (f"2 metric row(s) of a process that wrote no checkpoint moved from metrics.jsonl to {PURGED_NAME}"
            in "\n".join(up.lines)), up.tail()
    first = read_rows(run)
    assert [r["run/iteration"] for r in first] == [1, 2, 3] and first[2]["run/cycles"] == 32
    actor = run / "checkpoints" / "00000003" / "actor" / "model.safetensors"
    actor.write_bytes(actor.read_bytes()[:-8] + b"\x00" * 8)

    again, code = run_to_exit(cfg, "--iterations", "3", timeout=300)  # a total: resumed at 2, one more
    assert code == 0, again.tail()
    out = "\n".join(again.lines)
    assert "resumed iteration 2 " in out, again.tail()
    assert (f"1 metric row(s) that describe no weights this run goes on from (iteration 3: past checkpoint 2, "
            f"torn, or superseded) moved from metrics.jsonl to {PURGED_NAME}") in out
    rows = read_rows(run)
    assert [r["run/iteration"] for r in rows] == [1, 2, 3]
    assert rows[:2] == first[:2]
    purged = (run / PURGED_NAME).read_bytes()
    assert purged.startswith(dead + b"\n")
    assert [json.loads(x) for x in purged[len(dead) + 1:].splitlines()] == [first[2]]
    # Trained again from checkpoint 2, iteration 3 reaches the state it reached the first time.
    assert rows[2]["run/state_digest"] == first[2]["run/state_digest"]
    assert rows[2]["run/timesteps"] == first[2]["run/timesteps"]


def test_a_superseded_row_of_an_older_run_moves_out_too(tmp_path):
    """A run written before the purge existed: iterations 2 and 3 written twice (a crash and a
    resume from 1). The later row of each is the history the run went on from."""
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(row(1) + row(2, "a2") + row(3, "a3") + row(2, "b2") + row(3, "b3") + row(4, "b4"))
    assert purge_after(path, 4) == (2, [2, 3])
    assert path.read_bytes() == row(1) + row(2, "b2") + row(3, "b3") + row(4, "b4")
    assert (tmp_path / PURGED_NAME).read_bytes() == row(2, "a2") + row(3, "a3")
