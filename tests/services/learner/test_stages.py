"""The learner's stage modules one by one, without a socket (``tests/services/learner/rig.py``
builds a ``Learner`` of declared parts with in-process stand-ins for the services): the
boundary, the collection as a unit, the row, the publication with its checkpoint, the
life-cycle around the iterations, and the start-up's own pieces."""

from __future__ import annotations

import json
import time

import msgspec
import numpy as np
import pytest

from services.learner import collection, lifecycle, startup
from services.learner.advantages import Advantages
from services.learner.rounds import CollectionStats
from services.learner.collection import Collected, collect_iteration
from services.learner.fleet import Member, SlotMap
from services.learner.frozen import FrozenCounts
from services.learner.parts import IterationState, LearnerParts, RunOptions
from services.learner.publish import publish
from services.learner.rectangle import Rectangle
from services.learner.row import assemble_row, write_row
from services.learner.measures import progress_line
from services.learner.stops import SaveHalt, StopRequested
from services.learner.algorithm import TrainResult, UpdateResult
from shared.messages import GROUP_LEARNER, GROUP_SCRIPTED, Plan, PlanReply
from shared.run_dir import RunDir
from tests.services.learner.rig import build_learner, tiny_config

T = 2


def collected(learner, *, iteration: int = 1, env_steps: int = 4) -> Collected:
    """A hand-made collection of one battle (slots 0-1, seat 0 the learner's) over T = 2 cycles,
    every learner cell trainable."""
    rect = Rectangle.for_codec(T, 2, learner.parts.pf.codec)
    rect.group[:, 0], rect.group[:, 1] = GROUP_LEARNER, GROUP_SCRIPTED
    rect.acted[:T, 0] = True
    stats = CollectionStats(rounds=T + 1, inference_seconds=0.25, env_steps=env_steps)
    return Collected(iteration, {"gamma": 0.99, "ent_coef": 0.01, "ent_coef_noop": 0.0}, [],
                     SlotMap(1, np.array([0]), {("a", 0): np.array([0, 1])}), T, 1, [], rect, stats, 2.0, None,
                     time.perf_counter() - 3.0, None, FrozenCounts(1, 2, 0, ["s1"]), {0: 0})


def full_row(learner, c: Collected) -> tuple[dict, list]:
    """``assemble_row``'s row of ``c``: every learner cell trained, 2 rows."""
    trainable = np.zeros((T, 2), bool)
    trainable[:, 0] = True
    result = TrainResult(advantages(trainable), UpdateResult(2, {"ppo/kl": 0.0}, 1.0))
    keys = learner.parts.algorithm.row_keys(c, result, learner.train_context())
    return assemble_row(learner.parts, learner.state, learner.options.t_start, c, result, keys, [])


def advantages(trainable: np.ndarray) -> Advantages:
    z = np.zeros(trainable.shape, np.float32)
    adv = z.copy()
    adv[trainable] = [0.5, 1.5]
    return Advantages(np.zeros((T + 1, 2), np.float32), z, adv, adv + 1.0, trainable, 0, critic_seconds=0.1,
                      gae_seconds=0.01)


# ----------------------------------------------------------------------------- the row


def test_the_row_counts_the_collection_and_the_update_by_hand(tmp_path):
    learner = build_learner(str(tmp_path))
    learner.state.timesteps, learner.state.env_steps, learner.state.episodes = 2, 4, 0
    row, reported = full_row(learner, collected(learner))
    assert row["run/iteration"] == 1 and row["run/timesteps"] == 2 and row["run/env_steps"] == 4
    assert row["run/cycles"] == 2 and row["run/slots"] == 2 and row["run/battles"] == 1
    assert row["throughput/collected_steps_per_second"] == 2 / 2.0  # 2 rows over 2 s of collection
    assert row["throughput/env_steps_per_second"] == 4 / 2.0
    assert row["throughput/inference_ms_per_round"] == 1000 * 0.25 / 3
    assert row["throughput/rollout_capacity_ratio"] == 1.0 / 2.0
    assert row["ppo/advantage_mean"] == 1.0 and row["ppo/return_mean"] == 2.0  # (0.5 + 1.5) / 2, plus 1
    assert row["health/frozen_loads"] == 1 and row["health/frozen_hits"] == 2 and row["health/frozen_resident"] == 1
    assert row["ppo/kl"] == 0.0 and reported == []


def test_write_row_appends_the_line_and_says_the_progress_line(tmp_path):
    said: list[str] = []
    learner = build_learner(str(tmp_path), say=said.append)
    row, _ = full_row(learner, collected(learner))
    line, written = write_row(learner.parts, row)
    assert written and line == msgspec.json.encode(row) + b"\n"
    assert open(learner.parts.metrics_path, "rb").read() == line
    assert said[-1] == progress_line(row) and said[-1].startswith("it    1 | ts         0 |")


def test_write_row_says_when_the_disk_refuses(tmp_path):
    said: list[str] = []
    learner = build_learner(str(tmp_path), say=said.append, metrics_path=str(tmp_path / "missing" / "m.jsonl"))
    _, written = write_row(learner.parts, full_row(learner, collected(learner))[0])
    assert not written
    assert any(s.startswith("learner: metric row of iteration 1 NOT written to ") for s in said)


# ----------------------------------------------------------------------------- publish


def test_publish_writes_the_row_and_the_checkpoint_of_its_state(tmp_path):
    learner = build_learner(str(tmp_path))
    learner.state.iteration = 1
    c = collected(learner)
    row = publish(learner.parts, learner.state, c, *full_row(learner, c))
    snapshot = learner.state.snapshot
    assert snapshot is not None and snapshot.iteration == 1
    assert row["run/state_digest"] == snapshot.state_digest and row["run/run_id"] == learner.parts.run_id
    assert row["throughput/overall_steps_per_second"] == 2 / row["time/iteration"]
    on_disk = [json.loads(x) for x in open(learner.parts.metrics_path)]
    assert on_disk == [row]
    assert learner.parts.ckpt.saved[1] == list(snapshot.files)  # tiny saves every iteration
    assert learner.state.saved_iteration == 1 and learner.state.failed_saves == 0


def test_publish_halts_after_the_failed_saves_the_config_allows(tmp_path, monkeypatch):
    monkeypatch.setattr(time, "sleep", lambda s: None)  # the save's retry pauses
    learner = build_learner(str(tmp_path), cfg=tiny_config(checkpoint={"max_failed_saves": 1}))
    learner.parts.ckpt.down = True
    learner.state.iteration = 1
    with pytest.raises(SaveHalt, match="1 checkpoint saves in a row failed"):
        c = collected(learner)
        publish(learner.parts, learner.state, c, *full_row(learner, c))
    assert learner.state.failed_saves == 1 and learner.state.saved_iteration == -1


# ----------------------------------------------------------------------------- lifecycle


def test_the_timestep_limit_is_a_total_of_the_run():
    said: list[str] = []
    cfg = tiny_config(timestep_limit=100)
    assert not lifecycle.timestep_limit_reached(cfg, IterationState(timesteps=99), said.append)
    assert lifecycle.timestep_limit_reached(cfg, IterationState(iteration=4, timesteps=100), said.append)
    assert said == ["learner: 100 learner timesteps at iteration 4 reach timestep_limit 100 (a total of the run): "
                    "stopping"]
    assert not lifecycle.timestep_limit_reached(tiny_config(), IterationState(timesteps=10**9), said.append)


def test_a_halted_run_refuses_to_start_with_exit_3(tmp_path):
    said: list[str] = []
    learner = build_learner(str(tmp_path), say=said.append)
    RunDir(learner.parts.run_dir).mark_halted(7, "alarm x")
    assert lifecycle.run(learner.parts, learner.state, learner.options, learner.run_iteration) == 3
    assert learner.state.closed and learner.parts.ckpt.saved == {}
    assert any("was halted at iteration 7: alarm x" in s for s in said)


def test_shutdown_saves_the_last_rows_checkpoint_once(tmp_path):
    learner = build_learner(str(tmp_path))
    learner.state.iteration = 1
    c = collected(learner)
    publish(learner.parts, learner.state, c, *full_row(learner, c))
    learner.parts.ckpt.saved.clear()
    lifecycle.shutdown(learner.parts, learner.state)
    assert learner.parts.ckpt.saved == {}  # iteration 1 is saved already
    learner.state.saved_iteration = 0
    lifecycle.shutdown(learner.parts, learner.state)
    assert list(learner.parts.ckpt.saved) == [1] and learner.parts.sock.closed


# ----------------------------------------------------------------------------- boundary and collection


def ready_member(learner) -> Member:
    m = Member("a", b"id-a", 1, 1, "h", 1, ready=True)
    learner.parts.fleet.add(m)
    return m


def test_the_boundary_waits_for_a_ready_rollout_and_a_stop_ends_the_wait(tmp_path):
    learner = build_learner(str(tmp_path))
    learner.parts.collector.poll = lambda timeout_ms, on_round: 0
    learner.state.first_iteration = False
    m = ready_member(learner)
    def wait():
        p = learner.parts
        return collection.wait_for_rollouts(p.collector, learner.state, min_rollouts=1, round_timeout_s=5.0,
                                          forgotten=p.metrics.rollouts_forgotten, say=p.say)

    assert wait() == [m] and m.battle_ids == [0]
    learner.parts.fleet.members.clear()
    learner.parts.collector.stop_requested = True
    with pytest.raises(StopRequested):
        wait()


def test_send_plans_sends_each_member_its_plan_from_the_ladders_reply(tmp_path):
    learner = build_learner(str(tmp_path))
    sent: list = []
    learner.parts.collector.send = lambda identity, body, arrays=None: sent.append((identity, body)) or True
    m = ready_member(learner)
    members = learner.parts.fleet.arrange()
    slot_map = learner.parts.fleet.slot_map(members)
    asked: list = []

    def request_plan(req, fleet):
        asked.append(req)
        return PlanReply(request_id=req.request_id, assignments=[], role_counts=[1, 0])

    learner.parts.pool.request_plan = request_plan
    T_, rows, roles = collection.send_plans(learner.parts, members, slot_map, 0.99, 1)
    assert (asked[0].iteration, asked[0].n_battles, asked[0].battles) == (1, 1, [0])
    assert [(i, type(p)) for i, p in sent] == [(b"id-a", Plan)]
    plan = sent[0][1]
    assert plan.battles == [0] and plan.gamma == 0.99 and plan.fresh and plan.restart_ordinals == [0]
    assert roles == [1, 0] and T_ >= 1 and rows >= 1 and m.active


def test_collect_iteration_returns_the_boundarys_and_the_collections_record(tmp_path):
    learner = build_learner(str(tmp_path))
    learner.state.first_iteration = False
    ready_member(learner)
    c = learner.parts.collector
    c.send = lambda identity, body, arrays=None: True
    c.poll = lambda timeout_ms, on_round: 0
    learner.parts.pool.request_plan = lambda req, fleet: PlanReply(request_id=req.request_id, assignments=[],
                                                                   role_counts=[1])
    seen: list = []

    def collect(iteration, members, slot_map, rect, policy, master_seed, round_timeout_s, frozen=None):
        seen.append((iteration, [m.instance for m in members], rect.T, master_seed))
        return CollectionStats(env_steps=3)

    c.collect = collect
    got = collect_iteration(learner.parts, learner.state, 1, 5, 0, learner.parts.policy)
    cfg = learner.parts.cfg
    assert seen == [(5, ["a"], got.T, cfg.master_seed)]
    assert got.iteration == 5 and got.stats.env_steps == 3 and got.rect.R == 2 and got.slot_map.n_battles == 1
    assert got.frozen_counts == FrozenCounts(0, 0, 0, [])


# ----------------------------------------------------------------------------- startup


def test_build_model_declares_what_the_run_identity_and_the_policy_are(tmp_path):
    cfg = tiny_config()
    said: list[str] = []
    parts = startup.build_model(cfg, str(tmp_path), said.append)
    assert set(parts) <= {f for f in LearnerParts.__dataclass_fields__}
    assert parts["run_dir"] == str(tmp_path / "unit") and (tmp_path / "unit").is_dir()
    assert parts["identity"].codec_table_digest == parts["codec_digest"] and len(parts["run_id"]) == 16
    assert parts["algorithm"].name == "ppo" and parts["policy"].model is parts["model"]
    assert any(s.startswith("learner: actor ") for s in said)


def test_the_welcome_carries_the_config_and_the_codec(tmp_path):
    cfg = tiny_config()
    pf = build_learner(str(tmp_path)).parts.pf
    w = startup.welcome(cfg, pf, None, 2)
    assert w.wire_codec == 2 and w.master_seed == cfg.master_seed and w.codec == pf.table and w.engine == pf.engine


def test_run_options_and_state_start_where_a_fresh_run_does():
    st, opts = IterationState(), RunOptions()
    assert (st.iteration, st.saved_iteration, st.snapshot, st.first_iteration) == (0, -1, None, True)
    assert opts.iterations_limit == 0 and opts.min_rollouts == 1 and opts.perturb_resume == ()
