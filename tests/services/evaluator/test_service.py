"""Evaluation games on real RoyaleGym battles, the evaluator's players, and the two CLIs
(`royalefleet eval`, `royalefleet gate`) at a tiny scale."""

from __future__ import annotations

import json
import re

import msgspec
import numpy as np
import pytest

from services.evaluator.games import play_job
from services.evaluator.players import ScriptedPlayer, SnapshotRefused, load_snapshot_player, run_facts
from shared.config import load_config
from shared.envs import build_env
from shared.evaluation import eval_env_config, eval_seed_set, seed_set_hash, side_scores
from shared.messages import EvalJobRequest, EvalReport, NoJob

NOOP, RAND = "scripted:noop", "scripted:random_legal"


@pytest.fixture(scope="module")
def cfg():
    return load_config({"profile": "tiny", "run_name": "t",
                        "ladder": {"pool": {"eval_seed_count": 4},
                                   "gate": {"champion_games": 2, "anchor_games": 2, "stratified_snapshots": 0, "stratified_games": 2,
                                            "bootstrap_resamples": 100}},
                        "evaluation": {"job_seeds": 1}})


@pytest.fixture(scope="module")
def facts(cfg):
    return run_facts(cfg)


def scripted(cfg):
    return {p: ScriptedPlayer(p, cfg.ladder.random_legal_noop_prob) for p in (NOOP, RAND)}


def job(cfg, players, job_id, a, b, seeds):
    return play_job(build_env(eval_env_config(cfg.env)), players, job=job_id, a=a, b=b, seeds=seeds,
                    seed_set=eval_seed_set(cfg.master_seed, cfg.ladder.pool.eval_seed_count),
                    master_seed=cfg.master_seed, decision_ms=cfg.env.decision_ms)


def make_snapshot(cfg, facts, runs_dir, seed: int) -> str:
    """A freshly initialised actor, stored in fp16 as the learner stores a pool candidate."""
    from services.checkpoint.snapshots import SnapshotStore
    from shared.nn.model import ActorCritic
    from shared.nn.statefiles import module_to_bytes

    actor = module_to_bytes(ActorCritic(facts.spec, cfg.net, seed=seed).actor.half())
    spec = msgspec.json.encode({"arch_digest": facts.arch_digest, "obs_digest": facts.obs_digest,
                                "codec_table_digest": facts.codec_table_digest, "dtype": "float16",
                                "env_steps": 0, "iteration": 0, "run_id": "test"})
    sid, _, _ = SnapshotStore(runs_dir / cfg.run_name / "snapshots").write(actor, spec)
    return "snap:" + sid


def test_the_same_job_gives_the_same_records_and_the_job_id_names_the_streams(cfg):
    first = job(cfg, scripted(cfg), 5, RAND, NOOP, [0, 1])
    again = job(cfg, scripted(cfg), 5, RAND, NOOP, [0, 1])
    other = job(cfg, scripted(cfg), 6, RAND, NOOP, [0, 1])
    assert first == again
    assert [r.cards_played for r in first] != [r.cards_played for r in other]
    # The interface: iteration = job, battle = seed index, ordinal = side (0: a blue), role eval.
    assert [(r.iteration, r.battle, r.ordinal, r.seat, r.player, r.opponent) for r in first] == [
        (5, 0, 0, "blue", RAND, NOOP), (5, 0, 0, "red", NOOP, RAND),
        (5, 0, 1, "blue", NOOP, RAND), (5, 0, 1, "red", RAND, NOOP),
        (5, 1, 0, "blue", RAND, NOOP), (5, 1, 0, "red", NOOP, RAND),
        (5, 1, 1, "blue", NOOP, RAND), (5, 1, 1, "red", RAND, NOOP)]
    assert all(r.role == "eval" and not r.truncated for r in first)
    assert all(a.outcome == -b.outcome for a, b in zip(first[::2], first[1::2]))
    # Full matches: no step cap in the evaluation env (the tiny training env stops at 40).
    assert min(r.episode_steps for r in first) > cfg.env.max_steps


def test_the_seed_set_is_fixed_by_the_master_seed_and_its_size():
    a, b = eval_seed_set(7, 5), eval_seed_set(7, 5)
    assert a.dtype == np.int64 and a.shape == (5,) and (a == b).all() and (a >= 0).all()
    assert seed_set_hash(a) == seed_set_hash(b) != seed_set_hash(eval_seed_set(8, 5))
    with pytest.raises(ValueError, match="eval seed count 0: expected >= 1"):
        eval_seed_set(7, 0)


def test_a_snapshot_plays_the_same_games_twice_and_a_foreign_one_is_refused(cfg, facts, tmp_path):
    from services.checkpoint.snapshots import SnapshotStore

    player = make_snapshot(cfg, facts, tmp_path, seed=3)
    actor, spec = SnapshotStore(tmp_path / "t" / "snapshots").read(player[5:])

    def play():
        players = scripted(cfg) | {player: load_snapshot_player(player, actor, spec, cfg, facts)}
        return job(cfg, players, 2, player, NOOP, [1])

    first = play()
    assert first == play()
    assert sum(r.cards_played for r in first if r.player == player) > 0  # it was inferred, not forced
    doc = json.loads(spec) | {"codec_table_digest": "0" * 16}
    with pytest.raises(SnapshotRefused) as info:
        load_snapshot_player(player, actor, json.dumps(doc).encode(), cfg, facts)
    # The text is shared.nn.snapshot's (the learner's frozen seats refuse with it too), plus the fix.
    assert str(info.value) == (f"snapshot {player[5:]}: spec codec_table_digest is '0000000000000000', this run's "
                               f"is '{facts.codec_table_digest}'. Evaluate it with the config of the run that wrote it")


def test_royalefleet_eval_scripted_against_scripted(cfg, tmp_path, capsys):
    from royalefleet.cli import main

    path = tmp_path / "c.json"
    path.write_bytes(msgspec.json.encode(cfg))
    assert main(["eval", RAND, NOOP, "--games", "4", "--config", str(path), "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    records = job(cfg, scripted(cfg), 0, RAND, NOOP, [0, 1])
    s = side_scores(records, RAND, NOOP, [0, 1])
    assert s.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    # Wilson 95 % of 4 / 4: (1 + z^2/8) / (1 + z^2/4) -/+ z sqrt(z^2/64) / (1 + z^2/4) = 0.5101 .. 1
    assert out.strip().endswith("scripted:random_legal vs scripted:noop: score 1.0000 over 4 games (4 won, 0 drawn, "
                                "0 lost; 2 seeds x 2 sides), Wilson 95 % interval [0.5101, 1.0000]")
    assert main(["eval", RAND, "scripted:pusher", "--games", "4", "--config", str(path)]) == 2
    assert ("player 'scripted:pusher': no such scripted player (did you mean 'scripted:push'?); the scripted "
            "players are scripted:noop, scripted:random_legal, scripted:random, scripted:first-affordable, "
            "scripted:defend, scripted:push, scripted:patient") in capsys.readouterr().err


def test_a_gate_played_by_an_evaluator_is_re_run_exactly_by_royalefleet_gate(cfg, facts, tmp_path, capsys):
    from royalefleet.cli import main
    from royalefleet.players import LocalPlayers
    from services.ladder.gate_runner import GateRunner, gate_record_path, read_gate_record
    from services.ladder.pool import Candidate, PoolState

    run_cfg = msgspec.structs.replace(cfg, runs_dir=str(tmp_path))
    champ, cand = (make_snapshot(cfg, facts, tmp_path, seed=s) for s in (0, 1))
    pool = PoolState.for_run(tmp_path, "t", cfg.ladder)
    pool.submit(Candidate(id=champ, env_steps=10, iteration=1))
    pool.set_anchor_record(champ, {NOOP: 0.5, RAND: 0.5})
    pool.submit(Candidate(id=cand, env_steps=20, iteration=2))
    pool.save()
    runner = GateRunner(run_cfg, tmp_path, say=lambda s: None)
    players = LocalPlayers(run_cfg)
    for k in range(20):  # an in-process evaluator: the service's loop without the sockets
        j = runner.request_job(EvalJobRequest(request_id=k, worker="test"))
        if isinstance(j, NoJob):
            break
        recs = job(cfg, {p: players.get(p) for p in (j.a, j.b)}, j.job_id, j.a, j.b, j.seeds)
        runner.report(EvalReport(request_id=k, job_id=j.job_id, run_name="t", worker="test", records=recs))
    path = gate_record_path(tmp_path, "t", cand)
    logged = read_gate_record(path)
    assert logged.decision.verdict in ("promote", "discard", "admit_cycle")
    assert [j.seeds for j in logged.jobs][:1] == [[0]]
    cfg_file = tmp_path / "c.json"
    cfg_file.write_bytes(msgspec.json.encode(cfg))
    argv = ["gate", cand, "--run-name", "t", "--runs-dir", str(tmp_path), "--config", str(cfg_file)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "match     beats_champion:" in out and "MISMATCH" not in out and "every number matches" in out
    assert main(["gate", cand, "t", "--runs-dir", str(tmp_path), "--config", str(cfg_file)]) == 0  # RUN positionally
    assert capsys.readouterr().out == out
    # A record whose number no longer matches what the games give is caught.
    c1 = logged.decision.conditions[0]
    bad = msgspec.structs.replace(logged.decision, conditions=[
        msgspec.structs.replace(c1, observed=c1.observed + 0.25), *logged.decision.conditions[1:]])
    path.write_bytes(msgspec.json.encode(msgspec.structs.replace(logged, decision=bad)))
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert re.search(rf"MISMATCH  beats_champion: observed {c1.observed + 0.25!r} -> {c1.observed!r}", out)
