"""``royalefleet status`` (royalefleet/cmd_status.py) on a run folder built by hand with the
services' own writers: every line exact, a torn last row skipped, an unreadable file costing
only its own line, and a missing run named."""

from __future__ import annotations

import json
import os

import msgspec

from royalefleet.cli import main
from royalefleet.cmd_status import ago, last_row, status_lines
from services.checkpoint.store import CheckpointStore
from services.ladder.gate_runner import GateInFlight, JobSpec, in_flight_path
from services.ladder.pool import Candidate, PoolState
from shared.config import load_config

CHAMP, CAND = "snap:" + "0" * 15 + "1", "snap:" + "0" * 15 + "2"


def make_run(tmp_path):
    cfg = load_config({"profile": "tiny", "run_name": "r", "runs_dir": str(tmp_path)})
    run = tmp_path / "r"
    run.mkdir()
    rows = [{"run/iteration": i, "run/timesteps": 1200 * i, "run/env_steps": 2000 * i, "run/episodes": 7 * i,
             "time/iteration": 61.4, "env/win_rate_scripted": 0.25 + 0.1 * i, "ppo/kl": 0.0123,
             "ppo/clip_fraction": 0.0456, "ppo/entropy_normalised": 0.789, "ppo/explained_variance": 0.5,
             "health/rollouts": 2} for i in (1, 2, 3)]
    (run / "metrics.jsonl").write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows)
                                        + b'{"run/iteration": 4, "run/ti')  # torn by a kill
    os.utime(run / "metrics.jsonl", (1000.0, 1000.0))
    store = CheckpointStore(run / "checkpoints", say=lambda s: None)
    store.write(2, {"a.bin": b"x"}, b"{}")
    pool = PoolState.for_run(tmp_path, "r", cfg.ladder)
    pool.submit(Candidate(id=CHAMP, env_steps=100, iteration=1))
    pool.submit(Candidate(id=CAND, env_steps=200, iteration=2))
    pool.save()
    journal = GateInFlight(kind="gate", candidate=CAND, champion=CHAMP, started=0.0, phase="anchors", record={},
                           members=[], jobs=[JobSpec(job_id=k, a=CAND, b=CHAMP, seeds=[k], condition="champion")
                                             for k in range(3)],
                           gate=cfg.ladder.gate, job_seeds=1, eval_seed_set_hash="h")
    in_flight_path(tmp_path, "r").write_bytes(msgspec.json.encode(journal))
    (run / "alarms.jsonl").write_text(json.dumps({"iteration": 2, "alarm": "kl_dead", "severity": "warn"}) + "\n"
                                      + json.dumps({"iteration": 3, "alarm": "nonfinite", "severity": "halt"}) + "\n")
    (run / "halted.json").write_text(json.dumps({"iteration": 3, "reason": "halted by alarm nonfinite"}))
    (run / "metrics.purged.jsonl").write_text('{"run/iteration": 4}\n{"run/iteration": 5}\n')
    return cfg, run


def test_every_line_of_a_run_folder(tmp_path):
    cfg, run = make_run(tmp_path)
    created = CheckpointStore(run / "checkpoints").index().entries[-1].created_unix_ns / 1e9
    lines, ok = status_lines(cfg, now=created + 300.0)
    assert ok
    assert lines[0] == f"run 'r' in {run}"
    written = ago(created + 300.0 - 1000.0)
    assert lines[1:] == [
        f"  progress   iteration 3: 3,600 timesteps, 6,000 env steps, 21 episodes; last row written {written} ago "
        "(an iteration takes 61 s)",
        "  last row   win rate vs scripted 0.55; KL 0.012; clip fraction 0.046; entropy (normalised) 0.789; "
        "explained variance 0.50; 2 rollout(s)",
        "  checkpoint iteration 2 (checkpoints/00000002, written 5 min ago), the newest of 1; "
        "`royalefleet checkpoints` verifies every file",
        "             iteration 3 past it: normal while training, but a resume after a crash starts from 2 and "
        "trains it again",
        "  halt       HALTED at iteration 3: halted by alarm nonfinite; every start refuses until "
        "`royalefleet resume --clear-halt` (read the bundle under bundles/ first)",
        f"  ladder     pool 1 member(s), champion {CHAMP} (1 so far), 1 candidate(s) pending; gates 0 run, 0 passed, "
        "0 failed in a row",
        f"  gate       in flight: {CAND} vs {CHAMP}, phase anchors, 3 job(s) planned so far",
        "  strength   none measured yet (0 snapshot(s) pending; off: evaluation.strength.every_iterations is 0)",
        "  alarms     2 fired (1 halting); last: iteration 3 [halt] nonfinite (docs/alarms.md)",
        "  purged     2 row(s) a resume moved out of metrics.jsonl (metrics.purged.jsonl)",
        "  replays    no recorded game yet (the evaluators record evaluation.replays_per_gate games of each gate); "
        "`royalefleet play` plays some now",
    ]


def test_an_unreadable_file_costs_only_its_line(tmp_path):
    cfg, run = make_run(tmp_path)
    (run / "ladder" / "pool.json").write_text("{not json")
    lines, ok = status_lines(cfg)
    assert not ok
    bad = [x for x in lines if x.startswith("  cannot read")]
    assert len(bad) == 1 and bad[0].startswith("  cannot read ladder/pool.json: PoolCorrupt: ")
    assert any(x.startswith("  alarms     2 fired") for x in lines)  # the subjects after it still print


def test_a_fresh_run_folder_says_what_comes_when(tmp_path):
    cfg = load_config({"profile": "tiny", "run_name": "r", "runs_dir": str(tmp_path)})
    (tmp_path / "r").mkdir()
    lines, ok = status_lines(cfg)
    assert ok and lines[1:] == [
        "  progress   no metric row yet (the first one is written when iteration 1 ends)",
        "  checkpoint none yet (written every checkpoint.every_iterations and at a clean stop)",
        "  halt       none",
        f"  ladder     no pool yet (the first snapshot comes at ladder.pool.candidate_every_env_steps, "
        f"{cfg.ladder.pool.candidate_every_env_steps:,} env steps)",
        "  strength   none measured yet (0 snapshot(s) pending; off: evaluation.strength.every_iterations is 0)",
        "  alarms     none fired",
        "  replays    no recorded game yet (the evaluators record evaluation.replays_per_gate games of each gate); "
        "`royalefleet play` plays some now",
    ]


def test_last_row_skips_a_torn_line_and_reads_only_the_tail(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"".join(json.dumps({"run/iteration": i, "pad": "x" * 5000}).encode() + b"\n"
                              for i in range(1, 400)) + b'{"run/iter')
    assert path.stat().st_size > 1 << 20
    assert last_row(path)["run/iteration"] == 399
    path.write_bytes(b'{"run/iter')
    assert last_row(path) is None


def test_the_command_reads_the_run_and_names_a_missing_one(tmp_path, capsys):
    cfg, run = make_run(tmp_path)
    assert main(["status", "--runs-dir", str(tmp_path), "--run-name", "r"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"run 'r' in {run}\n") and "  halt       HALTED at iteration 3" in out
    assert main(["status", "--runs-dir", str(tmp_path), "--run-name", "nope"]) == 2
    assert capsys.readouterr().err.startswith(f"royalefleet status: no run 'nope': there is no folder "
                                              f"{tmp_path / 'nope'}; runs in {tmp_path}: r. ")


def test_the_run_is_named_positionally_as_on_every_read_only_command(tmp_path, capsys):
    cfg, run = make_run(tmp_path)
    assert main(["status", "r", "--runs-dir", str(tmp_path)]) == 0
    by_position = capsys.readouterr().out
    assert main(["status", "--runs-dir", str(tmp_path), "--run-name", "r"]) == 0
    assert by_position.startswith(f"run 'r' in {run}\n") and by_position == capsys.readouterr().out
    for command in ("status", "strength", "report", "snapshots", "rate", "checkpoints", "eval", "doctor", "config"):
        assert main([command, "r", "--run-name", "other", "--runs-dir", str(tmp_path)]) == 2, command
        assert capsys.readouterr().err == (f"royalefleet {command}: RUN 'r' and --run-name 'other' name two runs; "
                                           "give one\n"), command
    for argv in (["checkpoints", "r"], ["checkpoints", "--run-name", "r"]):
        assert main([*argv, "--runs-dir", str(tmp_path), "--profile", "tiny"]) == 0
        assert capsys.readouterr().out.splitlines() == ["iteration  name            MB  status",
                                                        "        2  00000002      0.00  ok (every file verifies)"]


def test_ago_units():
    assert [ago(s) for s in (5, 89, 90, 5399, 5400, 172799, 172800)] == [
        "5 s", "89 s", "2 min", "90 min", "1.5 h", "48.0 h", "2.0 days"]


def test_iterations_past_the_newest_checkpoint_are_named(tmp_path):
    from royalefleet.cmd_status import checkpoint_line, last_row

    run = tmp_path / "r"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"run/iteration": i}) + "\n" for i in (1, 2, 3, 4)))
    CheckpointStore(run / "checkpoints", say=lambda s: None).write(1, {"a.bin": b"x"}, b"{}")
    lines = checkpoint_line(run, now=0.0, last=last_row(run / "metrics.jsonl")).split("\n")
    assert lines[1] == ("           iterations 2-4 past it: normal while training, but a resume after a crash "
                        "starts from 1 and trains them again")
    CheckpointStore(run / "checkpoints", say=lambda s: None).write(4, {"a.bin": b"x"}, b"{}")
    assert "\n" not in checkpoint_line(run, now=0.0, last=last_row(run / "metrics.jsonl"))  # the last row's
