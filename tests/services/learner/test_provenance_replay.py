"""Replaying TRAINING episodes exactly: the learner's provenance stamp
(services/learner/provenance.py) and ``royalefleet replay`` of a training episode
(royalefleet/replay_training.py), on a real tiny stack run."""

from __future__ import annotations

import json
import shutil

import msgspec
import numpy as np
import pytest

from services.learner.provenance import ProvenanceTracker, choice_batches
from shared.messages import DecisionSpan, EpisodeProvenance, EpisodeRecord, InferredChoice


def record(battle, ordinal, seat, steps, **kw):
    fields = dict(role="mirror", player="learner", opponent="learner", outcome=0, truncated=True,
                  episode_steps=steps, episode_ticks=10 * steps, own_crowns=0, enemy_crowns=0,
                  own_tower_hp_frac=1.0, enemy_tower_hp_frac=1.0, elixir_leak_steps=0, elixir_count_exact=True,
                  cards_played=0, undiscounted_return=0.0)
    fields.update(kw)
    return EpisodeRecord(battle=battle, ordinal=ordinal, seat=seat, episode_steps=steps,
                         **{k: v for k, v in fields.items() if k != "episode_steps"})


# ----------------------------------------------------------------------------- the stamp


def test_choice_batches_follow_policy_act_and_frozen_grouping():
    n_legal = np.array([1, 5, 2, 1, 9, 3])
    batch, index = choice_batches(n_legal)
    assert batch.tolist() == [0, 4, 4, 0, 4, 4] and index.tolist() == [-1, 0, 1, -1, 2, 3]
    # frozen rows: one batch per snapshot, each in row order (FrozenActors.play)
    batch, index = choice_batches(n_legal, ["b", "a", "b", "a", "a", "b"])
    assert batch.tolist() == [0, 2, 2, 0, 2, 2] and index.tolist() == [-1, 0, 0, -1, 1, 1]


class _Actor:
    """Stands in for the actor module: begin() only hashes its weights."""


def test_the_tracker_stamps_an_episode_across_two_iterations(monkeypatch):
    monkeypatch.setattr("services.learner.provenance.actor_digest", lambda actor: f"w{actor}")
    tr = ProvenanceTracker()
    ids = np.array([7, 9])  # battle 7 at position 0, battle 9 at position 1
    slots = np.array([2, 3])  # this shard holds battle 9 only
    tr.begin(4, 4)
    for cycle in (30, 31):  # T = 32: the episode (ordinal 5) begins at cycle 30 of iteration 4
        legal = np.array([1, 3]) if cycle == 31 else np.array([1, 1])
        tr.observe(cycle, ids, slots, np.array([5, 5]), False, [(slots, legal, np.array([0, 17]), None)])
    tr.begin(5, 5)
    for cycle in (0, 1, 2):
        tr.observe(cycle, ids, slots, np.array([5, 5]), False, [(slots, np.array([2, 1]), np.array([4, 0]), None)])
    blue, red = record(9, 5, "blue", 5), record(9, 5, "red", 5)
    tr.stamp([blue, red])
    want = [DecisionSpan(4, 30, 2, 1, "w4"), DecisionSpan(5, 0, 3, 1, "w5")]
    assert blue.provenance.spans == want and red.provenance.spans == want
    assert red.provenance.choices == [InferredChoice(1, 1, 0, 17)]
    assert blue.provenance.choices == [InferredChoice(d, 1, 0, 4) for d in (2, 3, 4)]
    # a record whose count disagrees, or a battle restarted mid-episode, is left unstamped
    short = record(9, 5, "blue", 4)
    tr.stamp([short])
    assert short.provenance is None and tr.unstamped == 1
    tr.observe(3, ids, slots, np.array([5, 5]), True, [])
    again = record(9, 5, "blue", 6)
    tr.stamp([again])
    assert again.provenance is None


def test_old_records_still_read_and_new_ones_round_trip():
    old = msgspec.json.encode(record(1, 2, "blue", 3))
    assert b',"provenance":null' in old
    decoded = msgspec.json.decode(old.replace(b',"provenance":null', b""), type=EpisodeRecord)
    assert decoded.provenance is None
    stamped = record(1, 2, "blue", 3, provenance=EpisodeProvenance(spans=[DecisionSpan(1, 0, 3, 0, "ab")],
                                                                     choices=[InferredChoice(2, 4, 1, 99)]))
    assert msgspec.json.decode(msgspec.json.encode(stamped), type=EpisodeRecord) == stamped


def test_a_uniform_is_the_same_drawn_as_a_prefix():
    """Replay draws ``slot + 1`` uniforms of the stream, the learner ``R``: element ``slot`` agrees."""
    from shared.seeding import stream

    full = stream(3, "act/iteration/{iteration}/cycle/{cycle}", iteration=2, cycle=5).random(64, dtype=np.float64)
    for slot in (0, 1, 17, 63):
        part = stream(3, "act/iteration/{iteration}/cycle/{cycle}", iteration=2, cycle=5).random(slot + 1,
                                                                                                 dtype=np.float64)
        assert part[slot] == full[slot]


def test_a_rows_logits_depend_on_its_batch_size_and_place_not_on_the_other_rows():
    """What makes the replay of an inferred seat exact: the row at index i of a batch of B has the
    same logits whatever the other B - 1 rows are (the replay fills them with copies)."""
    import torch

    from shared.config import load_config
    from shared.envs import build_env
    from shared.nn.model import ActorCritic
    from shared.nn.policy import Policy
    from shared.preflight import run_preflight
    from royalegym import RandomLegalOpponent

    cfg = load_config({"profile": "tiny"})
    torch.set_num_threads(cfg.determinism.torch_threads)
    pf = run_preflight(cfg.env, cfg.master_seed)
    env, rng, bot = build_env(cfg.env), np.random.default_rng(0), RandomLegalOpponent(0.5)
    obs, _ = env.reset(seed=1)
    rows = []
    while len(rows) < 80:
        rows += [obs[s] for s in ("blue", "red") if obs[s]["action_mask"].sum() > 1]
        obs, _, te, tr, _ = env.step({s: bot.act(obs[s], obs[s]["action_mask"], rng) for s in ("blue", "red")})
        if te["blue"] or tr["blue"]:
            obs, _ = env.reset(seed=int(rng.integers(1 << 30)))
    packed, _, _ = pf.codec.pack_many(rows)
    model = ActorCritic(pf.spec, cfg.net, seed=5)
    policy = Policy(model, pf.codec, torch.device("cpu"))
    for _ in range(25):
        b = int(rng.integers(1, 40))
        i = int(rng.integers(0, b))
        idx = rng.choice(len(packed), b, replace=False)
        with torch.no_grad():
            real = model.actor_logits(policy.obs_batch(packed[idx]))[i]
            copies = model.actor_logits(policy.obs_batch(np.repeat(packed[idx[i]][None], b, axis=0)))[i]
        assert torch.equal(real, copies), (b, i)


# ----------------------------------------------------------------------------- a real run


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two iterations of a real tiny stack, a pool candidate admitted after the first, a
    checkpoint every iteration (the tiny profile's)."""
    from tests.stack import run_to_exit, tiny_config

    root = tmp_path_factory.mktemp("replay_training")
    cfg = tiny_config(root / "runs", env={"max_steps": 12}, ladder={"pool": {"candidate_every_env_steps": 100}},
                      checkpoint={"every_iterations": 1})
    up, code = run_to_exit(cfg, "--rollouts", "1", "--iterations", "2", timeout=300)
    assert code == 0, up.tail()
    from services.ladder.results import ResultLog

    lines = ResultLog.for_run(root / "runs", "default").read().lines
    return {"root": root, "cfg": cfg, "lines": lines}


def _argv(run, line):
    return ["replay", "default", str(line), "--config", str(run["cfg"]), "--per-decision",
            "--out", str(run["root"] / "out")]


def _pick(lines, want):
    for n, line in enumerate(lines, start=1):
        if want(line.record):
            return n, line.record
    raise AssertionError("no such record in the result log")


@pytest.mark.slow
def test_every_training_record_of_the_run_is_stamped(trained):
    recs = [line.record for line in trained["lines"]]
    assert recs and all(r.provenance is not None for r in recs)
    for r in recs:
        assert sum(s.decisions for s in r.provenance.spans) == r.episode_steps
        assert all(c.action > 0 or c.action == 0 for c in r.provenance.choices)
        if r.player.startswith("scripted:"):
            assert r.provenance.choices == []


@pytest.mark.slow
def test_a_training_episode_spanning_two_iterations_replays_and_verifies(trained, capsys):
    from royalefleet.cli import main

    n, rec = _pick(trained["lines"], lambda r: r.player == "learner" and len(r.provenance.spans) == 2)
    assert [s.iteration for s in rec.provenance.spans] == [1, 2]
    assert main(_argv(trained, n)) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert f"verified: line {n} replays to the logged records, every inferred decision's action included " \
           f"({rec.episode_steps} decisions)" in out
    assert (trained["root"] / "out" / f"it2-battle{rec.battle}-ordinal{rec.ordinal}.html").is_file()


@pytest.mark.slow
def test_a_pool_episode_against_a_snapshot_replays_and_verifies(trained, capsys):
    from royalefleet.cli import main

    n, rec = _pick(trained["lines"], lambda r: r.opponent.startswith("snap:") and r.player == "learner")
    assert main(_argv(trained, n)) == 0, capsys.readouterr()
    assert f"verified: line {n}" in capsys.readouterr().out


@pytest.mark.slow
def test_another_checkpoints_weights_are_reported_at_the_first_diverging_decision(trained, monkeypatch, capsys):
    """The planted change: iteration 2's decisions played with a strongly perturbed copy of
    its weights. The first decision whose replayed action differs is named; it is one of the
    record's choice decisions of iteration 2, and the logged action printed is the record's."""
    import torch

    from royalefleet.cli import main
    from royalefleet.replay_training import Weights

    n, rec = _pick(trained["lines"], lambda r: r.player == "learner" and len(r.provenance.spans) == 2
                   and any(c.decision >= r.provenance.spans[0].decisions for c in r.provenance.choices))
    real = Weights.policy

    def planted(self, iteration, device):
        policy = real(self, iteration, device)
        if iteration == 2:  # other weights: the pointer head made sharp, so the sampled actions move
            with torch.no_grad():
                for p in policy.model.actor.parameters():
                    p.mul_(-40.0)
        return policy

    monkeypatch.setattr(Weights, "policy", planted)
    assert main(_argv(trained, n)) == 1
    out = capsys.readouterr().out
    first = next(line for line in out.splitlines() if line.startswith("DIFFERS  decision "))
    decision = int(first.split()[2])
    choice = {c.decision: c for c in rec.provenance.choices}[decision]
    assert decision >= rec.provenance.spans[0].decisions  # iteration 1's decisions were not planted
    assert f"(iteration 2, cycle {decision - rec.provenance.spans[0].decisions}, " in first
    assert f"{rec.seat} (learner): logged action {choice.action}, replayed " in first


@pytest.mark.slow
def test_a_missing_checkpoint_and_a_rolled_back_iteration_are_refused_by_name(trained, tmp_path, capsys):
    from royalefleet.cli import main

    run = tmp_path / "copy"
    shutil.copytree(trained["root"] / "runs", run)
    cfg = json.loads(trained["cfg"].read_text()) | {"runs_dir": str(run)}
    cfg_file = tmp_path / "c.json"
    cfg_file.write_text(json.dumps(cfg))
    lines = trained["lines"]
    n, rec = _pick(lines, lambda r: r.player == "learner" and [s.iteration for s in r.provenance.spans] == [1, 2])
    shutil.rmtree(run / "default" / "checkpoints" / "00000001")
    argv = ["replay", "default", str(n), "--config", str(cfg_file)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"line {n}: cannot reproduce {rec.seat} (learner): the learner's weights of iteration 2 " \
           f"({rec.provenance.spans[1].decisions} decisions): no checkpoint of iteration 1 exists (checkpoints: 2" in err
    assert "The episode spanned iteration(s) 1, 2; replay does not stand other weights in" in err
    # a record whose iteration-1 weights are not the initial ones: a rolled-back iteration 1
    (run / "default" / "metrics.purged.jsonl").write_text(json.dumps({"run/iteration": 1}) + "\n")
    n1, rec1 = _pick(lines, lambda r: r.player == "learner" and [s.iteration for s in r.provenance.spans] == [1])
    log = run / "default" / "ladder" / "results.jsonl"
    raw = log.read_bytes().splitlines()
    doc = json.loads(raw[n1 - 1])
    for span in doc["record"]["provenance"]["spans"]:
        span[4] = "0123456789abcdef"
    raw[n1 - 1] = json.dumps(doc).encode()
    log.write_bytes(b"\n".join(raw) + b"\n")
    assert main(["replay", "default", str(n1), "--config", str(cfg_file)]) == 2
    err = capsys.readouterr().err
    assert "the initial weights holds actor " in err and "the record was played by actor 0123456789abcdef: " \
           "iteration 1 was rolled back by a resume" in err
