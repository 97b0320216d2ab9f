"""The ladder service's pool side through ``LadderService.handle``: AdmitCandidate, PFSP plans
from the resident set, LadderStatus, the pool gauges, refusals."""

from __future__ import annotations

import math

import pytest

from services.ladder.gate import GateDecision
from services.ladder.pool import PoolCorrupt, PoolState, current_ratings, pool_path
from services.ladder.results import ResultLog
from services.ladder.service import LadderService
from shared.config import profile
from shared.matchmaking import battle_roles, is_pool_fallback
from shared.messages import AdmitCandidate, Admitted, Error, LadderStatus, LadderStatusRequest, PlanReply, PlanRequest
from tests.services.ladder.test_pool import eval_record

IDS = [f"{k:016x}" for k in (0xB0, 0xB1, 0xB2)]
N = 12


@pytest.fixture
def ladder(tmp_path):
    said: list[str] = []
    svc = LadderService(profile("cpu"), bind="tcp://127.0.0.1:*", runs_dir=tmp_path, say=said.append)
    svc.said = said
    yield svc
    svc.close()


def admit(svc, sid, steps=4_000_000, iteration=30, run="default", rid=1):
    return svc.handle(AdmitCandidate(request_id=rid, run_name=run, snapshot_id=sid, env_steps=steps,
                                     iteration=iteration))


def plan(svc, first=0, lookahead=3):
    return svc.handle(PlanRequest(request_id=9, iteration=1, n_battles=N, battles=list(range(N)),
                                  next_ordinals=[first] * N, lookahead=lookahead))


def metric(svc, name, **labels):
    return svc.metrics.registry.get_sample_value("royalefleet_ladder_" + name, labels or None)


def test_admission_first_free_then_pending_then_duplicate(ladder, tmp_path):
    assert admit(ladder, IDS[0], steps=123) == Admitted(request_id=1, snapshot_id=IDS[0], status="admitted_free")
    assert admit(ladder, IDS[1], rid=2).status == "pending"
    assert admit(ladder, IDS[1], rid=3).status == "duplicate"
    on_disk = PoolState.load(pool_path(tmp_path, "default"))
    assert on_disk.members == [f"snap:{IDS[0]}"] and on_disk.champion == f"snap:{IDS[0]}"
    assert [c.id for c in on_disk.pending] == [f"snap:{IDS[1]}"]
    assert any(f"candidate snap:{IDS[1]}" in s and "waits for a gate" in s for s in ladder.said)
    assert metric(ladder, "pool_size") == 1 and metric(ladder, "pool_pending") == 1
    assert metric(ladder, "champion_env_steps") == 123


@pytest.mark.parametrize("kw, named", [
    ({"run": "other"}, "run_name 'other': this ladder keeps the pool of run 'default'"),
    ({"run": "../x"}, "run_name '../x' is not a usable folder name"),
    ({"sid": "snap:00000000000000b0"}, "snapshot_id 'snap:00000000000000b0' is not a snapshot content id"),
    ({"sid": "xyz"}, "expected 16 lowercase hex characters, as SnapshotSaved.snapshot_id gives"),
    ({"steps": -4}, "env_steps -4, iteration 30: both must be >= 0"),
])
def test_admission_refusals_name_the_bad_value(ladder, tmp_path, kw, named):
    reply = admit(ladder, kw.pop("sid", IDS[0]), **kw)
    assert isinstance(reply, Error) and reply.request_id == 1 and named in reply.reason
    assert not pool_path(tmp_path, "default").exists()
    assert metric(ladder, "messages_refused_total", reason="bad_request") == 1


def test_a_corrupt_pool_is_refused_at_start_and_per_request(tmp_path):
    path = pool_path(tmp_path, "default")
    path.parent.mkdir(parents=True)
    path.write_text("{]")
    with pytest.raises(PoolCorrupt, match="not a readable pool state"):
        LadderService(profile("cpu"), bind="tcp://127.0.0.1:*", runs_dir=tmp_path, say=lambda _: None)
    path.unlink()
    svc = LadderService(profile("cpu"), bind="tcp://127.0.0.1:*", runs_dir=tmp_path, say=lambda _: None)
    try:
        path.write_text("{]")  # damaged while the ladder runs
        for reply in (admit(svc, IDS[0]), plan(svc),
                      svc.handle(LadderStatusRequest(request_id=4, run_name="default"))):
            assert isinstance(reply, Error) and reply.reason.startswith(f"{path}: not a readable pool state")
        assert metric(svc, "messages_refused_total", reason="pool") == 3
        assert path.read_text() == "{]"  # never reset
    finally:
        svc.close()


def test_pool_battles_play_the_resident_set_once_the_pool_has_members(ladder):
    roles = battle_roles(ladder.config.master_seed, N, ladder.config.ladder.mix)
    empty = plan(ladder)
    pool_eps = [a for a in empty.assignments if a.role == "pool"]
    assert pool_eps and all(is_pool_fallback(a) for a in pool_eps)
    assert metric(ladder, "pool_fallback_battles") == roles.count("pool")

    admit(ladder, IDS[0])
    reply = plan(ladder)
    assert isinstance(reply, PlanReply)
    pool_eps = [a for a in reply.assignments if a.role == "pool"]
    assert pool_eps and {a.opponent for a in pool_eps} == {f"snap:{IDS[0]}"}
    assert metric(ladder, "pool_fallback_battles") == 0
    # Mirror and scripted battles and every seat are untouched by the pool filling up.
    assert [(a.role, a.learner_seat) for a in reply.assignments] == [(a.role, a.learner_seat) for a in empty.assignments]
    assert [a for a in reply.assignments if a.role != "pool"] == [a for a in empty.assignments if a.role != "pool"]
    assert plan(ladder) == reply  # the same resident set until the pool changes


def test_the_resident_set_is_redrawn_only_when_the_pool_changes(ladder, tmp_path):
    admit(ladder, IDS[0])
    first = ladder.pool.resident()
    assert first.version == 1 and first.ids == [f"snap:{IDS[0]}"]
    admit(ladder, IDS[1])  # pending: the sampler did not change
    assert ladder.pool.resident() is first
    # The gate runner promotes it through its own PoolState of the same file.
    gate = PoolState.for_run(tmp_path, "default", ladder.config.ladder)
    cid = f"snap:{IDS[1]}"
    gate.resolve(cid, GateDecision(candidate=cid, champion=f"snap:{IDS[0]}", admit=True, promote=True, cycle=False,
                                   verdict="promote", conditions=[]))
    gate.save()
    second = ladder.pool.resident()
    assert second.version == 2 and sorted(second.ids) == sorted([f"snap:{IDS[0]}", cid])  # 2 resident of 2
    assert second.effective is False  # no eval games yet: PFSP fell back to even predictions, and says so
    ladder.sync_pool_metrics()
    assert metric(ladder, "gates_run_total") == 1 and metric(ladder, "gates_passed_total") == 1
    # A restarted ladder plans with the stored draw.
    again = LadderService(ladder.config, bind="tcp://127.0.0.1:*", runs_dir=tmp_path, say=lambda _: None)
    try:
        assert again.pool.resident() == second
    finally:
        again.close()


def test_status_carries_the_pool_the_gate_counters_and_the_fit(ladder, tmp_path):
    empty = ladder.handle(LadderStatusRequest(request_id=5, run_name="default"))
    assert empty == LadderStatus(request_id=5, pool_size=0)
    assert math.isnan(metric(ladder, "champion_rating")) and math.isnan(metric(ladder, "transitivity_residual"))

    admit(ladder, IDS[0], steps=777)
    champ = f"snap:{IDS[0]}"
    games = [(1, b) for b in range(6)] + [(-1, 6), (0, 7)]
    ResultLog.for_run(tmp_path, "default").append(
        [eval_record(champ, "scripted:noop", o, battle=b) for o, b in games]
        + [eval_record("learner", "scripted:noop", 1, battle=b, role="pool") for b in range(3)])
    table = current_ratings(tmp_path, "default", ladder.config.ladder.rater)
    status = ladder.handle(LadderStatusRequest(request_id=6, run_name="default"))
    assert status == LadderStatus(
        request_id=6, pool_size=1, archive_size=1, champion=champ, champion_env_steps=777,
        champion_rating=table.ratings[champ], champion_rating_se=table.se[champ], transitivity_residual=None,
        pfsp_effective=True, resident=[champ], ratings={champ: table.ratings[champ]}, rating_se={champ: table.se[champ]},
    )
    assert table.ratings[champ] > 0 and table.se[champ] > 0
    ladder.sync_pool_metrics()
    assert metric(ladder, "champion_rating") == table.ratings[champ]
    assert metric(ladder, "champion_rating_se") == table.se[champ]
    assert metric(ladder, "eval_games_recorded_total") == 8  # the 3 training records are not evaluation games
    refused = ladder.handle(LadderStatusRequest(request_id=7, run_name="nope"))
    assert isinstance(refused, Error) and "this ladder keeps the pool of run 'default'" in refused.reason
