"""Seed snapshots (seed 004, SeedSnapshot; royalelearn-facts 6.2, 6.3): frozen actors the user
supplies, held in the pool from the run's first iteration, never evicted, never champion by
admission, their PFSP weight multiplied by their own ``weight``. Also the ladder's
``champion_info`` gauge (one series, the current champion's)."""

from __future__ import annotations

import hashlib
import json
import random

import msgspec
import numpy as np
import pytest

from services.checkpoint.snapshots import SnapshotStore
from services.ladder.gate import GateDecision
from services.ladder.pfsp import pfsp_weights
from services.ladder.pool import Candidate, PoolCorrupt, PoolState, pool_path
from services.ladder.rating import table_from_ratings
from services.ladder.resident import draw_resident, seed_weights
from services.ladder.service import LadderService
from services.learner.seeds import SeedRefused, admit_seeds, read_seed, read_seeds
from shared.config import ConfigError, PoolConfig, SeedSnapshot, load_config
from shared.messages import AdmitCandidate, Admitted, Error, SnapshotSaved

RUN_DIGESTS = {"arch_digest": "a" * 16, "obs_digest": "b" * 16, "codec_table_digest": "c" * 16}
ACTOR = b"fp16 actor weights, as module_to_bytes writes them"
SHA = hashlib.sha256(ACTOR).hexdigest()
SID = SHA[:16]
SEED = f"snap:{SID}"
OWN = [f"snap:{k:016x}" for k in (0xA0, 0xA1, 0xA2, 0xA3)]


def seed_folder(tmp_path, actor=ACTOR, name="seed", **spec):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "actor.safetensors").write_bytes(actor)
    (folder / "spec.json").write_bytes(json.dumps({**RUN_DIGESTS, "dtype": "float16", **spec}).encode())
    return folder


def config(*seeds):
    return load_config({"profile": "cpu", "ladder": {"pool": {"seed_snapshots": [
        {"path": str(p), "sha256": sha, "weight": w} for p, sha, w in seeds]}}})


def decision(cid, champ, promote):
    return GateDecision(candidate=cid, champion=champ, admit=True, promote=promote, cycle=not promote,
                        verdict="promote" if promote else "admit_cycle", conditions=[])


# ----------------------------------------------------------------------------- config


def test_config_refuses_every_bad_seed_at_once():
    good = "0" * 64
    with pytest.raises(ConfigError) as info:
        load_config({"profile": "tiny", "ladder": {"pool": {"seed_snapshots": [
            {"path": "a", "sha256": "AB" * 32},
            {"path": "a", "sha256": "1" * 64, "weight": 0},
            {"path": "b", "sha256": good, "weight": -2.5},
            {"path": "c", "sha256": good},
            {"path": "", "sha256": "2" * 63},
        ]}}})
    assert info.value.problems == [
        f"ladder.pool.seed_snapshots[0].sha256: {"AB" * 32!r} is not a sha256 digest: expected 64 lowercase "
        "hex characters, as `sha256sum actor.safetensors` prints",
        "ladder.pool.seed_snapshots[1].path: 'a' is also seed_snapshots[0]; list each seed snapshot once",
        "ladder.pool.seed_snapshots[1].weight: 0.0 must be a finite number > 0 (it multiplies the seed's PFSP "
        "weight; 1.0 leaves it unchanged)",
        "ladder.pool.seed_snapshots[2].weight: -2.5 must be a finite number > 0 (it multiplies the seed's PFSP "
        "weight; 1.0 leaves it unchanged)",
        "ladder.pool.seed_snapshots[3].sha256: 0000000000000000... is also seed_snapshots[2] (the same "
        "snapshot); list each seed snapshot once",
        "ladder.pool.seed_snapshots[4].path: empty; name the folder holding actor.safetensors and spec.json",
        f"ladder.pool.seed_snapshots[4].sha256: {'2' * 63!r} is not a sha256 digest: expected 64 lowercase hex "
        "characters, as `sha256sum actor.safetensors` prints",
    ]


def test_config_seed_defaults_and_unknown_fields():
    cfg = load_config({"profile": "tiny", "ladder": {"pool": {"seed_snapshots": [{"path": "x", "sha256": SHA}]}}})
    assert cfg.ladder.pool.seed_snapshots == [SeedSnapshot(path="x", sha256=SHA, weight=1.0)]
    assert load_config({"profile": "tiny"}).ladder.pool.seed_snapshots == []
    with pytest.raises(ConfigError, match=r"Object contains unknown field `wieght`"):
        load_config({"profile": "tiny", "ladder": {"pool": {"seed_snapshots": [
            {"path": "x", "sha256": SHA, "wieght": 2}]}}})


# ----------------------------------------------------------------------------- the learner's checks


def test_a_sha256_mismatch_is_refused_naming_path_and_both_digests(tmp_path):
    folder = seed_folder(tmp_path, actor=ACTOR + b"!")
    found = hashlib.sha256(ACTOR + b"!").hexdigest()
    with pytest.raises(SeedRefused) as info:
        read_seed(0, SeedSnapshot(path=str(folder), sha256=SHA), RUN_DIGESTS)
    assert str(info.value) == (
        f"seed snapshot {folder} (ladder.pool.seed_snapshots[0]): actor.safetensors has sha256 {found}, the config "
        f"expects {SHA}; these are other weights: point path at the folder the digest was taken of, or (if you "
        "mean these weights) set sha256 to the found digest, which is another run")


def test_a_spec_digest_mismatch_is_refused_naming_the_field(tmp_path):
    folder = seed_folder(tmp_path, obs_digest="f" * 16)
    with pytest.raises(SeedRefused) as info:
        read_seed(2, SeedSnapshot(path=str(folder), sha256=SHA), RUN_DIGESTS)
    assert str(info.value) == (
        f"seed snapshot {folder} (ladder.pool.seed_snapshots[2]): does not fit this run (obs_digest): snapshot "
        f"{SID}: spec obs_digest is {'f' * 16!r}, this run's is {'b' * 16!r}; a seed must be an actor of this "
        "run's architecture, observation layout and codec table")


def test_every_seed_problem_is_named_at_once_and_a_good_seed_reads(tmp_path):
    good = seed_folder(tmp_path)
    missing = tmp_path / "nowhere"
    seeds = [SeedSnapshot(path=str(good), sha256=SHA, weight=2.0), SeedSnapshot(path=str(missing), sha256="1" * 64)]
    with pytest.raises(SeedRefused) as info:
        read_seeds(seeds, RUN_DIGESTS)
    (line,) = str(info.value).splitlines()
    assert line.startswith(f"seed snapshot {missing} (ladder.pool.seed_snapshots[1]): cannot read it (No such file")
    (files,) = read_seeds(seeds[:1], RUN_DIGESTS)
    assert (files.snapshot_id, files.actor, files.weight) == (SID, ACTOR, 2.0)


class _Fake:
    """A transport.Client stand-in answering with a handler (no sockets)."""

    def __init__(self, handle):
        self.handle, self.n, self.sent = handle, 0, []

    def next_id(self):
        self.n += 1
        return self.n

    def request(self, msg, arrays=None):
        self.sent.append(msg)
        return self.handle(msg, arrays), None


def test_the_learner_stores_and_admits_its_seeds_and_a_resend_is_a_duplicate(tmp_path):
    folder = seed_folder(tmp_path)
    cfg = config((folder, SHA, 3.0))
    store = SnapshotStore(tmp_path / "runs" / "default" / "snapshots")

    def save(msg, arrays):
        sid, path, created = store.write(arrays["actor"].tobytes(), msg.spec)
        return SnapshotSaved(request_id=msg.request_id, snapshot_id=sid, path=str(path), created=created)

    ladder = LadderService(cfg, bind="tcp://127.0.0.1:*", runs_dir=tmp_path / "runs", say=lambda _: None)
    try:
        said = []
        ckpt, lad = _Fake(save), _Fake(lambda msg, _: ladder.handle(msg))
        files = read_seeds(cfg.ladder.pool.seed_snapshots, RUN_DIGESTS)
        assert admit_seeds(files, "default", ckpt, lad, said.append) == ["admitted_seed"]
        assert lad.sent == [AdmitCandidate(request_id=1, run_name="default", snapshot_id=SID, env_steps=0,
                                           iteration=0, seed=True)]
        assert store.read(SID) == (ACTOR, (folder / "spec.json").read_bytes())
        assert said == [f"learner: seed snapshot {SEED} from {folder} (PFSP weight x3): admitted to the pool"]
        # A restart before the first checkpoint sends them again: harmless.
        assert admit_seeds(files, "default", ckpt, lad, said.append) == ["duplicate"]
        pool = PoolState.load(pool_path(tmp_path / "runs", "default"))
        assert pool.members == [SEED] and pool.seeds == [SEED] and pool.champion is None and pool.version == 1
        # A ladder refusal is a start-up refusal naming the seed.
        refusing = _Fake(lambda msg, _: Error(request_id=msg.request_id, reason="no"))
        with pytest.raises(SeedRefused, match=f"seed snapshot {folder}: the ladder did not admit {SEED} as a seed: no"):
            admit_seeds(files, "default", ckpt, refusing)
    finally:
        ladder.close()


# ----------------------------------------------------------------------------- admission


@pytest.fixture
def ladder(tmp_path):
    svc = LadderService(config(("/seeds/s", SHA, 3.0)), bind="tcp://127.0.0.1:*", runs_dir=tmp_path,
                        say=lambda _: None)
    yield svc
    svc.close()


def admit(svc, sid, seed=False, steps=4_000_000, rid=1):
    return svc.handle(AdmitCandidate(request_id=rid, run_name="default", snapshot_id=sid, env_steps=steps,
                                     iteration=0 if seed else 30, seed=seed))


def test_a_seed_is_admitted_as_a_member_never_champion_and_the_run_first_is_crowned(ladder, tmp_path):
    assert admit(ladder, SID, seed=True, steps=0) == Admitted(request_id=1, snapshot_id=SID, status="admitted_seed")
    pool = PoolState.load(pool_path(tmp_path, "default"))
    assert (pool.members, pool.archive, pool.seeds, pool.champion, pool.champions) == ([SEED], [SEED], [SEED], None, [])
    # Pool battles meet it from the first plan on, before the run has a snapshot of its own.
    assert ladder.pool.resident().ids == [SEED]
    assert admit(ladder, SID, seed=True, rid=2).status == "duplicate"
    assert admit(ladder, SID, rid=3).status == "duplicate"  # nor can it come back as a candidate
    # The run's own first snapshot is still admitted free and crowned.
    assert admit(ladder, OWN[0][5:], steps=123, rid=4).status == "admitted_free"
    assert admit(ladder, OWN[1][5:], rid=5).status == "pending"
    pool = PoolState.load(pool_path(tmp_path, "default"))
    assert pool.members == [SEED, OWN[0]] and pool.champion == OWN[0] and pool.champions == [OWN[0]]
    assert pool.seeds == [SEED] and pool.own_archive == [OWN[0]] and pool.first == OWN[0]
    assert ladder.metrics.registry.get_sample_value("royalefleet_ladder_champion_env_steps") == 123


def test_an_admit_candidate_without_seed_still_decodes():
    old = b'{"type":"admit_candidate","request_id":4,"run_name":"r","snapshot_id":"' + SID.encode() + \
        b'","env_steps":8,"iteration":2}'
    assert msgspec.json.decode(old, type=AdmitCandidate) == AdmitCandidate(
        request_id=4, run_name="r", snapshot_id=SID, env_steps=8, iteration=2, seed=False)


def test_a_seed_the_ladder_config_does_not_list_is_refused(ladder, tmp_path):
    reply = admit(ladder, OWN[2][5:], seed=True)
    assert isinstance(reply, Error) and reply.reason == (
        f"seed snapshot {OWN[2][5:]}: not one of this ladder's ladder.pool.seed_snapshots ({SID}); start the "
        "ladder with the learner's config")
    assert not pool_path(tmp_path, "default").exists()


def test_an_old_pool_file_reads_without_seeds_and_a_lost_seed_is_refused(tmp_path):
    path = pool_path(tmp_path, "run")
    pool = PoolState.load(path)
    pool.submit(Candidate(id=SEED, env_steps=0, iteration=0), seed=True)
    pool.submit(Candidate(id=OWN[0], env_steps=5, iteration=1))
    pool.save()
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "seeds": [], "members": [OWN[0], SEED]}))
    assert PoolState.load(path).seeds == []  # a file without seeds is a pool without seeds
    del data["seeds"]
    path.write_text(json.dumps(data))
    assert PoolState.load(path).seeds == []
    path.write_text(json.dumps({**data, "seeds": [SEED], "members": [OWN[0]]}))
    with pytest.raises(PoolCorrupt, match=f"the seed snapshot '{SEED}' is missing from members"):
        PoolState.load(path)


# ----------------------------------------------------------------------------- eviction


def test_eviction_never_removes_a_seed():
    """Property over 300 random pools: seeds anywhere in the rating range, any working size, any
    mix of promotions and cycle admissions; every seed stays a member, the archive keeps all."""
    rng = random.Random(5)
    seeds = [f"snap:{k:016x}" for k in (0x5E, 0x5F)]
    for trial in range(300):
        pool = PoolState(f"/nonexistent/{trial}/pool.json", working_size=rng.randint(1, 5))
        for s in seeds:
            assert pool.submit(Candidate(id=s, env_steps=0, iteration=0), seed=True) == "admitted_seed"
        own = [f"snap:{k:016x}" for k in range(0x100, 0x100 + rng.randint(2, 8))]
        pool.submit(Candidate(id=own[0], env_steps=1, iteration=1))
        ratings = table_from_ratings({m: rng.uniform(-400, 400) for m in seeds + own})
        for k, cid in enumerate(own[1:], start=2):
            pool.submit(Candidate(id=cid, env_steps=k, iteration=k))
            pool.resolve(cid, decision(cid, pool.champion, rng.random() < 0.3), ratings=ratings)
            assert set(seeds) <= set(pool.members), (trial, pool.members)
        assert pool.archive == seeds + own and pool.seeds == seeds
        assert pool.champion not in seeds
        unprotected = [m for m in pool.members if m not in pool.protected()]
        assert len(pool.members) <= pool.working_size or not unprotected


# ----------------------------------------------------------------------------- PFSP


def test_the_seed_weight_multiplies_its_pfsp_weight_hand_computed():
    """Stand-in L (the run's own newest, rating 0) and seed S (rating 400): p(L beats S) = 1/11.
    hard, power 2: (10/11)^2 = 100/121 for S and (1/2)^2 = 1/4 for L (p = 0.5 against itself);
    normalised 400/521 and 121/521; mixed 0.8 w + 0.2 / 2: S 3721/5210, L 1489/5210 (the 0.005
    floor binds nowhere); S's weight 2: 7442 and 1489, renormalised over 8931."""
    S, L = SEED, OWN[0]
    table = table_from_ratings({S: 400.0, L: 0.0})
    w, effective = pfsp_weights([S, L], table, L)
    assert effective and w.tolist() == pytest.approx([3721 / 5210, 1489 / 5210], abs=1e-15)
    w, _ = pfsp_weights([S, L], table, L, multipliers={S: 2.0})
    assert w.tolist() == pytest.approx([7442 / 8931, 1489 / 8931], abs=1e-15)
    # The resident draw uses them (both resident; weights in draw order), through the config.
    cfg = PoolConfig(seed_snapshots=[SeedSnapshot(path="s", sha256=SHA, weight=2.0)])
    assert seed_weights([S], cfg) == {S: 2.0} and seed_weights([], cfg) == {}
    r = draw_resident(7, 3, [S, L], [L], table, cfg, multipliers=seed_weights([S], cfg))
    assert r.effective and r.stand_in == L
    assert dict(zip(r.ids, r.weights)) == pytest.approx({S: 7442 / 8931, L: 1489 / 8931}, abs=1e-15)
    # A seed is never the learner's stand-in: with only seeds there is none (p = 0.5, said).
    only = draw_resident(7, 1, [S], [], table, cfg, multipliers={S: 2.0})
    assert only.ids == [S] and only.weights == [1.0] and only.stand_in is None and not only.effective


def test_the_ladder_applies_the_configured_seed_weight(ladder):
    """No evaluation games: p = 0.5 for both, even weights 1/2 each; the seed's weight 3 makes
    them 3/4 and 1/4."""
    admit(ladder, SID, seed=True, steps=0)
    admit(ladder, OWN[0][5:], rid=2)
    r = ladder.pool.resident()
    assert r.stand_in == OWN[0] and not r.effective
    assert dict(zip(r.ids, r.weights)) == pytest.approx({SEED: 0.75, OWN[0]: 0.25}, abs=1e-15)


# ----------------------------------------------------------------------------- champion_info


def champion_series(svc) -> dict[str, float]:
    (family,) = [m for m in svc.metrics.registry.collect() if m.name == "royalefleet_ladder_champion_info"]
    return {s.labels["member"]: s.value for s in family.samples}


def test_champion_info_holds_one_series_the_current_champion(ladder, tmp_path):
    assert champion_series(ladder) == {}
    admit(ladder, SID, seed=True, steps=0)
    assert champion_series(ladder) == {}  # a seed is never champion by admission
    admit(ladder, OWN[0][5:], rid=2)
    assert champion_series(ladder) == {OWN[0]: 1.0}
    admit(ladder, OWN[1][5:], rid=3)
    gate = PoolState.for_run(tmp_path, "default", ladder.config.ladder)
    gate.resolve(OWN[1], decision(OWN[1], OWN[0], promote=True))
    gate.save()
    ladder.sync_pool_metrics()
    assert champion_series(ladder) == {OWN[1]: 1.0}
    text = msgspec.json.encode(sorted(champion_series(ladder)))  # never the old label set again
    assert OWN[0].encode() not in text
    admit(ladder, OWN[2][5:], rid=4)
    gate = PoolState.for_run(tmp_path, "default", ladder.config.ladder)
    gate.resolve(OWN[2], decision(OWN[2], OWN[1], promote=False))  # a cycle admission: champion unchanged
    gate.save()
    ladder.sync_pool_metrics()
    assert champion_series(ladder) == {OWN[1]: 1.0}
    assert np.isfinite(ladder.metrics.registry.get_sample_value("royalefleet_ladder_champion_env_steps"))


# ----------------------------------------------------------------------------- the whole stack


@pytest.mark.slow
def test_pool_battles_meet_the_seed_from_the_first_iteration(tmp_path):
    """The local stack with one seed snapshot (a freshly initialised actor, written to a folder
    by the snapshot store as another run would have) and no candidate of its own in 2
    iterations: the pool holds the seed alone, so every pool episode, iteration 1 included,
    meets ``snap:<its id>``; nothing is champion."""
    import copy

    from shared.codec import table_digest
    from shared.identity import config_digests
    from shared.nn.model import ActorCritic
    from shared.nn.statefiles import module_to_bytes
    from shared.preflight import run_preflight
    from tests.stack import run_to_exit, tiny_config

    base = load_config({"profile": "tiny", "env": {"max_steps": 12}})
    pf = run_preflight(base.env, base.master_seed)
    actor = module_to_bytes(copy.deepcopy(ActorCritic(pf.spec, base.net, seed=11).actor).half())
    spec = json.dumps({"run_id": "elsewhere", "iteration": 0, "env_steps": 0, "dtype": "float16",
                       "arch_digest": config_digests(base)["arch_digest"], "obs_digest": pf.spec.digest(),
                       "codec_table_digest": table_digest(pf.table)}).encode()
    sid, folder, _ = SnapshotStore(tmp_path / "elsewhere" / "snapshots").write(actor, spec)
    sha = hashlib.sha256(actor).hexdigest()
    cfg = tiny_config(tmp_path / "runs", env={"max_steps": 12}, ladder={"pool": {
        "candidate_every_env_steps": 10**9, "seed_snapshots": [{"path": str(folder), "sha256": sha, "weight": 2.0}]}})
    up, code = run_to_exit(cfg, "--rollouts", "1", "--iterations", "2", timeout=300)
    assert code == 0, up.tail()
    run = tmp_path / "runs" / "default"
    pool = json.loads((run / "ladder" / "pool.json").read_text())
    seed = f"snap:{sid}"
    assert (pool["members"], pool["seeds"], pool["champion"]) == ([seed], [seed], None)
    assert (run / "snapshots" / sid / "actor.safetensors").read_bytes() == actor
    records = [json.loads(x)["record"] for x in (run / "ladder" / "results.jsonl").read_text().splitlines()]
    pool_eps = [r for r in records if r["role"] == "pool" and r["player"] == "learner"]
    assert pool_eps and {r["opponent"] for r in pool_eps} == {seed}
    assert min(r["iteration"] for r in pool_eps) == 1
    assert any(f"seed snapshot {seed} from {folder}" in line for line in up.lines)
