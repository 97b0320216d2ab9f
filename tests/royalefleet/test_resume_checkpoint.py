"""``royalefleet resume RUN --checkpoint N``: a chosen verified checkpoint, the later ones set
aside (moved, not deleted), the rows past N purged as any older-checkpoint resume does, and a
missing or corrupt N refused naming the checkpoints that exist."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from royalefleet.checkpoint_choice import SET_ASIDE_PREFIX, ChoiceRefused, set_aside_after
from services.checkpoint.store import CheckpointStore
from services.learner.metric_log import PURGED_NAME
from tests.stack import REPO, read_rows, run_to_exit, tiny_config

NOON = 1_796_299_200.0  # 2026-12-03 12:00:00 UTC


def row(it: int, digest: str) -> bytes:
    return json.dumps({"run/iteration": it, "run/state_digest": digest}).encode() + b"\n"


def small_run(tmp_path: Path, iterations=(1, 2, 3, 4)) -> tuple[Path, Path]:
    """A checkpoint store with one checkpoint per iteration (meta: its iteration and state digest
    d<k>) and the metric rows that describe them."""
    ckpts, metrics = tmp_path / "checkpoints", tmp_path / "metrics.jsonl"
    store = CheckpointStore(ckpts)
    for k in iterations:
        store.write(k, {"actor/model.safetensors": bytes([k]) * 64},
                    json.dumps({"iteration": k, "state_digest": f"d{k}"}).encode())
    metrics.write_bytes(b"".join(row(k, f"d{k}") for k in iterations))
    return ckpts, metrics


def test_the_later_checkpoints_move_whole_into_a_set_aside_folder_with_their_index(tmp_path):
    ckpts, metrics = small_run(tmp_path)
    before = {p: p.read_bytes() for p in (ckpts / "00000003").rglob("*") if p.is_file()}
    folder, moved = set_aside_after(ckpts, 2, metrics, now=NOON)
    assert moved == [3, 4] and folder == ckpts / f"{SET_ASIDE_PREFIX}20261203T120000Z"
    assert [e.iteration for e in CheckpointStore(ckpts).index().entries] == [1, 2]
    assert sorted(p.name for p in ckpts.iterdir()) == ["00000001", "00000002", "index.json",
                                                       f"{SET_ASIDE_PREFIX}20261203T120000Z"]
    aside = CheckpointStore(folder).list_entries()
    assert [(e.iteration, e.ok) for e in aside] == [(3, True), (4, True)]  # every file still verifies
    assert {p: p.read_bytes() for p in (folder / "00000003").rglob("*") if p.is_file()} == {
        folder / p.relative_to(ckpts): data for p, data in before.items()}
    assert CheckpointStore(ckpts).latest()[0].iteration == 2  # what the learner's resume now finds
    # a second choice in the same second gets its own folder
    folder2, moved2 = set_aside_after(ckpts, 1, metrics, now=NOON)
    assert moved2 == [2] and folder2.name == f"{SET_ASIDE_PREFIX}20261203T120000Z-2"


def test_royalefleet_checkpoints_names_the_set_aside_folders(tmp_path, capsys):
    from royalefleet.cli import main

    ckpts, metrics = small_run(tmp_path / "runs" / "r")
    folder, _ = set_aside_after(ckpts, 2, metrics, now=NOON)
    assert main(["checkpoints", "r", "--runs-dir", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[1:3]] == ["1", "2"] and len(out) == 4
    assert out[3] == f"set aside by resume --checkpoint: {folder} (iterations 3, 4)"


def test_the_newest_moves_nothing(tmp_path):
    ckpts, metrics = small_run(tmp_path)
    assert set_aside_after(ckpts, 4, metrics) == (None, [])
    assert [e.iteration for e in CheckpointStore(ckpts).index().entries] == [1, 2, 3, 4]


def test_a_missing_or_corrupt_checkpoint_is_refused_naming_those_that_exist_and_nothing_moves(tmp_path):
    ckpts, metrics = small_run(tmp_path, (1, 2, 4))
    with pytest.raises(ChoiceRefused) as exc:
        set_aside_after(ckpts, 3, metrics)
    assert str(exc.value) == (f"--checkpoint 3: no checkpoint of iteration 3 in {ckpts / 'index.json'}; the run's "
                              "checkpoints: 1 ok, 2 ok, 4 ok. Choose one that is ok (`royalefleet checkpoints RUN` "
                              "lists them)")
    (ckpts / "00000002" / "actor" / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ChoiceRefused) as exc:
        set_aside_after(ckpts, 2, metrics)
    text = str(exc.value)
    assert text.startswith("--checkpoint 2: checkpoint 2 does not verify (actor/model.safetensors: sha256 ")
    assert "the run's checkpoints: 1 ok, 2 CORRUPT (actor/model.safetensors: sha256 " in text and ", 4 ok." in text
    assert [e.iteration for e in CheckpointStore(ckpts).index().entries] == [1, 2, 4]
    assert not any(p.name.startswith(SET_ASIDE_PREFIX) for p in ckpts.iterdir())


def test_a_checkpoint_no_metric_row_describes_is_refused(tmp_path):
    ckpts, metrics = small_run(tmp_path)
    metrics.write_bytes(row(1, "d1") + row(2, "other") + row(3, "d3") + row(4, "d4"))
    with pytest.raises(ChoiceRefused) as exc:
        set_aside_after(ckpts, 2, metrics)
    assert str(exc.value).startswith("--checkpoint 2: checkpoint 2: checkpoint of iteration 2 holds state d2, but the "
                                     "metric rows of that iteration describe other; the run's checkpoints: 1 ok, 2 ok")


@pytest.mark.slow
def test_resume_checkpoint_2_of_a_4_iteration_run_continues_at_3_with_the_same_run_id(tmp_path):
    """A tiny run of 4 iterations with a checkpoint each; `resume --checkpoint 2 --iterations 3`:
    checkpoints 3 and 4 set aside, rows 3 and 4 purged, iteration 3 trained again from 2 under
    the same run id, to the state it reached the first time (episodes of env.max_steps 32 end at
    the tiny profile's T = 32 boundaries: run_exact)."""
    cfg = tiny_config(tmp_path / "runs", checkpoint={"every_iterations": 1, "keep": 10}, env={"max_steps": 32})
    run = tmp_path / "runs" / "default"
    up, code = run_to_exit(cfg, "--iterations", "4", timeout=400)
    assert code == 0, up.tail()
    first = read_rows(run)
    assert [r["run/iteration"] for r in first] == [1, 2, 3, 4]
    assert [e.iteration for e in CheckpointStore(run / "checkpoints").index().entries] == [1, 2, 3, 4]

    done = subprocess.run([sys.executable, "-m", "royalefleet", "resume", "--config", str(cfg), "--no-doctor",
                           "--checkpoint", "2", "--iterations", "3"],
                          cwd=REPO, capture_output=True, text=True, timeout=400)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    asides = [p for p in (run / "checkpoints").iterdir() if p.name.startswith(SET_ASIDE_PREFIX)]
    assert len(asides) == 1
    assert (f"royalefleet resume: checkpoint 2 verifies; the later checkpoint(s) 3, 4 set aside in {asides[0]}"
            in out), out[-4000:]
    assert sorted(p.name for p in asides[0].iterdir()) == ["00000003", "00000004", "index.json"]
    assert [(e.iteration, e.ok) for e in CheckpointStore(asides[0]).list_entries()] == [(3, True), (4, True)]
    assert "resumed iteration 2 " in out
    rows = read_rows(run)
    assert [r["run/iteration"] for r in rows] == [1, 2, 3]
    assert rows[:2] == first[:2]
    assert [json.loads(x)["run/iteration"] for x in (run / PURGED_NAME).read_bytes().splitlines()] == [3, 4]
    assert rows[2]["run/run_id"] == first[2]["run/run_id"]
    assert rows[2]["run/state_digest"] == first[2]["run/state_digest"]
    assert [e.iteration for e in CheckpointStore(run / "checkpoints").index().entries] == [1, 2, 3]


def test_resume_refuses_a_checkpoint_the_run_lacks_naming_those_it_has(tmp_path):
    ckpts, metrics = small_run(tmp_path / "runs" / "r", (1, 2))
    (tmp_path / "runs" / "r" / "config.json").write_text(json.dumps({"profile": "tiny", "run_name": "r",
                                                                     "runs_dir": str(tmp_path / "runs")}))
    done = subprocess.run([sys.executable, "-m", "royalefleet", "resume", "r", "--runs-dir", str(tmp_path / "runs"),
                           "--no-doctor", "--checkpoint", "7"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (f"royalefleet resume: --checkpoint 7: no checkpoint of iteration 7 in {ckpts / 'index.json'}; the run's "
            "checkpoints: 1 ok, 2 ok. Choose one that is ok") in done.stderr


def test_the_compose_one_shot_sets_the_later_checkpoints_aside_from_the_two_volumes(tmp_path):
    """compose.yaml's resume-checkpoint as Compose runs it (its entrypoint, N appended, its
    environment): the checkpoints from the checkpoint service's volume, the rows from the
    learner's, the run name from the learner's config file; a refused N says why, exit 2."""
    from tests.royalefleet.test_compose import compose, env_list

    spec = compose("compose.yaml")["services"]["resume-checkpoint"]
    assert spec["profiles"] == ["tools"] and "command" not in spec
    assert set(spec["volumes"]) >= {"runs:/data/runs", "checkpoints:/data/checkpoint-volume"}
    env = env_list(spec)
    volumes = {"/data/runs": tmp_path / "runs-volume", "/data/checkpoint-volume": tmp_path / "checkpoint-volume"}
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "cpu.json").write_text(json.dumps({"profile": "cpu", "run_name": "myrun"}))
    env = {k: str(volumes.get(v, v)) for k, v in env.items()}
    env["ROYALEFLEET_CONFIG"] = str(tmp_path / "etc" / "cpu.json")
    ckpts, _ = small_run(tmp_path / "checkpoint-volume" / "myrun")
    (tmp_path / "runs-volume" / "myrun").mkdir(parents=True)
    (tmp_path / "checkpoint-volume" / "myrun" / "metrics.jsonl").rename(tmp_path / "runs-volume" / "myrun" / "metrics.jsonl")
    argv = [sys.executable, *spec["entrypoint"][1:]]
    run_env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)} | env
    out = subprocess.run([*argv, "2"], env=run_env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("resume-checkpoint: checkpoint 2 of run 'myrun' verifies; the later checkpoint(s) 3, 4 "
                                 "set aside in ")
    assert [e.iteration for e in CheckpointStore(ckpts).index().entries] == [1, 2]
    refused = subprocess.run([*argv, "7"], env=run_env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2
    assert refused.stderr.startswith("resume-checkpoint: --checkpoint 7: no checkpoint of iteration 7")
