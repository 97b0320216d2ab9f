"""Pool battles played against a frozen snapshot, on real RoyaleGym battles.

* The rollout marks the snapshot's seat GROUP_FROZEN, ships its row (full observation, not
  mask-only), plays the action the learner sends for it, and names the snapshot in the records.
* The learner's collection, with a real rollout service, a real checkpoint service and a real
  fp16 snapshot: frozen rows are inferred by the snapshot and answered with legal actions, and
  never reach the rectangle's training cells; a snapshot that cannot be loaded plays the no-op,
  is counted by reason and never waits more than once.
"""

from __future__ import annotations

import copy
import socket
import threading
import time

import msgspec
import numpy as np
import pytest
import torch

from services.checkpoint.service import CheckpointService, Metrics
from services.checkpoint.snapshots import SnapshotStore
from services.learner.rounds import Collector
from services.learner.fleet import Fleet
from services.learner.frozen import FrozenActors, checkpoint_fetcher
from services.learner.rectangle import Rectangle
from services.rollout.battles import Shard
from services.rollout.service import RolloutService
from shared import transport
from shared.config import EnvConfig, tiny
from shared.messages import (
    GROUP_FROZEN, GROUP_LEARNER, GROUP_SCRIPTED, Assignment, Decoder, FromCheckpoint, Plan, ToLearner, Welcome,
)
from shared.nn.model import ActorCritic
from shared.nn.policy import Policy
from shared.nn.snapshot import actor_builder
from shared.nn.statefiles import module_to_bytes
from shared.preflight import run_preflight
from shared.seeding import stream

SEED = 11
ENV = EnvConfig(max_steps=20)
DIGESTS = {"arch_digest": "a" * 16, "obs_digest": "b" * 16, "codec_table_digest": "c" * 16}


@pytest.fixture(scope="module")
def pf():
    return run_preflight(ENV, SEED)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- the rollout side


def test_the_rollout_marks_the_frozen_seat_ships_its_row_and_names_the_snapshot(pf):
    shard = Shard(0, ENV, 2, pf.codec, SEED, 0.9, mask_only_scripted=True)
    for k in range(3):
        shard.table[(0, k)] = Assignment(0, k, "pool", "snap:0123456789abcdef", 1)   # learner red, snapshot blue
        shard.table[(1, k)] = Assignment(1, k, "scripted", "scripted:noop", 0)      # learner blue, scripted red
    shard.start([0, 1], [0, 0])
    r = shard.observe()
    assert r.group.tolist() == [GROUP_FROZEN, GROUP_LEARNER, GROUP_LEARNER, GROUP_SCRIPTED]
    b0, b1 = shard.battles
    assert b0.players == ["snap:0123456789abcdef", "learner"] and b0.scripted == [None, None]
    # One row per slot with group >= 0, in slot order: the frozen seat's row travels.
    assert r.rows.shape == (3, pf.codec.row_bytes)
    expected, _, _ = pf.codec.pack_many([b0.obs["blue"], b0.obs["red"], b1.obs["blue"]])
    assert np.array_equal(r.rows, expected)
    # The frozen seat gets the full observation (only the scripted seat is mask-only).
    assert np.abs(b0.obs["blue"]["spatial"]).sum() > 0 and np.abs(b0.obs["blue"]["vector"]).sum() > 0

    # The frozen seat plays what the learner sends: at the first decision only the no-op is
    # legal, so action 5 there is counted illegal; the same on the scripted seat is ignored.
    res = shard.step(np.array([5, 0, 0, 5], np.int16))
    assert res.illegal_actions == 1
    records = []
    for _ in range(ENV.max_steps - 1):
        res = shard.step(np.zeros(4, np.int16))
        records += res.episodes
        if res.episodes:
            break
    # Both battles truncated at max_steps; final rows go for learner slots only (not slot 0).
    assert res.truncated.tolist() == [1, 1, 1, 1]
    assert res.final_slots.tolist() == [1, 2] and res.final_rows.shape == (2, pf.codec.row_bytes)
    seen = sorted((e.battle, e.seat, e.role, e.player, e.opponent) for e in records)
    assert seen == [
        (0, "blue", "pool", "snap:0123456789abcdef", "learner"),
        (0, "red", "pool", "learner", "snap:0123456789abcdef"),
        (1, "blue", "scripted", "learner", "scripted:noop"),
        (1, "red", "scripted", "scripted:noop", "learner"),
    ]
    # The next episode started with its own assignment: the snapshot still holds blue.
    assert res.group.tolist() == [GROUP_FROZEN, GROUP_LEARNER, GROUP_LEARNER, GROUP_SCRIPTED]
    assert res.rows.shape[0] == 3 and b0.ordinal == 1


# ----------------------------------------------------------------------------- the learner side


class Stack:
    """A learner socket and Collector in this thread; a rollout service and a checkpoint
    service on their own threads."""

    def __init__(self, pf, runs_dir):
        self.pf, self.lines = pf, []
        self.addr = f"tcp://127.0.0.1:{free_port()}"
        self.sock = transport.bind_router(self.addr, max_bytes=64 << 20)
        self.fleet = Fleet()
        rollout_cfg = tiny().rollout
        welcome = Welcome(env=ENV, master_seed=SEED, codec=pf.table, engine=pf.engine,
                          random_legal_noop_prob=0.9, rollout=rollout_cfg)
        self.collector = Collector(self.sock, Decoder(ToLearner), self.fleet, lambda codec: welcome, pf.engine,
                                   self.lines.append)
        self.rollout = RolloutService(self.addr, battles=4, shards=2, say=self.lines.append)
        self.rollout_thread = threading.Thread(target=self.rollout.run, daemon=True)
        self.rollout_thread.start()
        self.ckpt_addr = f"tcp://127.0.0.1:{free_port()}"
        ckpt_sock = transport.bind_router(self.ckpt_addr, max_bytes=64 << 20)
        self.ckpt = CheckpointService(ckpt_sock, runs_dir, keep=2, metrics=Metrics(None), out=self.lines.append)
        self.ckpt_stop = threading.Event()

        def serve():
            try:
                self.ckpt.serve(self.ckpt_stop.is_set, poll_ms=20)
            finally:
                ckpt_sock.close(0)

        self.ckpt_thread = threading.Thread(target=serve, daemon=True)
        self.ckpt_thread.start()

    def wait_ready(self, timeout=90.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.collector.poll(200, lambda *a: None)
            if any(m.ready for m in self.fleet.members.values()):
                return self.fleet.arrange()
        raise AssertionError("the rollout did not get ready:\n" + "\n".join(self.lines))

    def close(self):
        self.rollout.request_stop()
        self.rollout_thread.join(10)
        self.rollout.close()
        self.ckpt_stop.set()
        self.ckpt_thread.join(10)
        self.sock.close(0)


def test_the_learner_plays_frozen_seats_with_the_snapshot_and_never_trains_on_them(pf, tmp_path):
    net = tiny().net
    model = ActorCritic(pf.spec, net, seed=1)
    policy = Policy(model, pf.codec, torch.device("cpu"))
    # A different actor for the snapshot, stored as the learner's _snapshot_actor stores one.
    frozen_model = ActorCritic(pf.spec, net, seed=2)
    actor_bytes = module_to_bytes(copy.deepcopy(frozen_model.actor).half())
    sid, _, _ = SnapshotStore(tmp_path / "runs" / "run" / "snapshots").write(
        actor_bytes, msgspec.json.encode({**DIGESTS, "iteration": 3, "env_steps": 100, "dtype": "float16"}))
    snap = f"snap:{sid}"

    stack = Stack(pf, tmp_path / "runs")
    try:
        members = stack.wait_ready()
        (m,) = members
        slot_map = stack.fleet.slot_map(members)
        assert m.battle_ids == [0, 1, 2, 3]
        # Battle 0: snapshot blue; 1: mirror; 2: snapshot red; 3: scripted red.
        table = {0: ("pool", snap, 1), 1: ("mirror", "learner", -1), 2: ("pool", snap, 0),
                 3: ("scripted", "scripted:random_legal", 0)}
        assignments = [Assignment(b, k, role, opp, seat) for b, (role, opp, seat) in table.items() for k in range(8)]
        transport.send(stack.sock, Plan(iteration=1, battles=m.battle_ids, restart_ordinals=[0] * 4,
                                        assignments=assignments, fresh=True, gamma=0.99), identity=m.identity)
        stack.fleet.record_plan(members, assignments)
        frozen_slots, scripted_slot = [0, 5], 7

        ckpt = transport.Client(stack.ckpt_addr, Decoder(FromCheckpoint), name="checkpoint service", timeout_s=10)
        actors = FrozenActors(4, checkpoint_fetcher(ckpt, "run", 10.0), actor_builder(pf.spec, net), DIGESTS,
                              pf.codec, torch.device("cpu"), say=stack.lines.append)
        seen = []
        play = actors.play

        def spy(ids, rows, n_legal, uniforms):
            actions, reasons = play(ids, rows, n_legal, uniforms)
            seen.append((list(ids), rows.copy(), n_legal.copy(), uniforms.copy(), actions.copy()))
            return actions, reasons

        actors.play = spy
        T = 30
        rect = Rectangle(T, slot_map.n_slots, pf.codec.row_bytes, pf.codec.omask)
        stats = stack.collector.collect(1, members, slot_map, rect, policy, SEED, 30.0, frozen=actors)
        assert stats.lost == [] and stats.rounds == 2 * (T + 1)

        # Every frozen cell was answered by the snapshot, none by a no-op.
        assert stats.frozen.rows == 2 * T and stats.frozen.noop_rows == {} and stats.frozen.tainted == set()
        assert (actors.loads, actors.hits, actors.load_failures) == (1, 2 * T - 1, 0)
        assert len(seen) == 2 * T and all(ids == [sid] for ids, *_ in seen)
        # The rows of frozen seats never reach the training cells (or the rectangle's rows).
        assert (rect.group[:, frozen_slots] == GROUP_FROZEN).all() and (rect.group[:, scripted_slot] == GROUP_SCRIPTED).all()
        trainable = rect.trainable()
        assert not trainable[:, frozen_slots + [scripted_slot]].any()
        assert trainable.sum() == 5 * T and not rect.acted[:, frozen_slots].any()
        assert not rect.rows[:, frozen_slots].any()
        assert not rect.learner_cells()[:, frozen_slots].any()

        # The snapshot's actions are legal, it had choices, it played cards, and the engine took them.
        rows = np.concatenate([r for _, r, *_ in seen])
        n_legal = np.concatenate([n for _, _, n, *_ in seen])
        actions = np.concatenate([a for *_, a in seen])
        mask = pf.codec.unpack(rows)["mask"].astype(bool)
        assert mask[np.arange(len(actions)), actions].all()
        assert (n_legal > 1).sum() > 0 and (actions > 0).sum() > 0
        assert not (rect.deploy_status[:, frozen_slots] > 0).any()
        # They are the upcast fp16 actor's own draws, on the uniforms of the frozen stream
        # (indexed by slot), which is not the learner's stream.
        uniforms = np.concatenate([u for *_, u, _ in seen])
        frozen_u = {float(u) for c in range(T) for u in stream(
            SEED, "act/frozen/iteration/{iteration}/cycle/{cycle}", iteration=1, cycle=c).random(rect.R)[frozen_slots]}
        learner_u = {float(u) for c in range(T) for u in stream(
            SEED, "act/iteration/{iteration}/cycle/{cycle}", iteration=1, cycle=c).random(rect.R)[frozen_slots]}
        assert set(uniforms.tolist()) == frozen_u and not frozen_u & learner_u
        upcast = copy.deepcopy(frozen_model.actor).half().float()
        again, _ = Policy(type("M", (), {"actor_logits": staticmethod(upcast)})(), pf.codec, "cpu").act(
            rows, n_legal, uniforms)
        assert np.array_equal(again, actions)

        # The records name the snapshot.
        pool_records = sorted({(e.battle, e.player, e.opponent) for e in stats.episodes if e.battle in (0, 2)})
        assert pool_records == [(0, "learner", snap), (0, snap, "learner"), (2, "learner", snap), (2, snap, "learner")]

        # Iteration 2: the snapshot cannot be loaded (nobody answers within the deadline). Its
        # seats play the no-op, counted by reason, with one deadline for the whole iteration.
        m.fresh = False
        dead = transport.Client(f"tcp://127.0.0.1:{free_port()}", Decoder(FromCheckpoint), name="checkpoint service",
                                timeout_s=0.5)
        broken = FrozenActors(4, checkpoint_fetcher(dead, "run", 0.5), actor_builder(pf.spec, net), DIGESTS,
                              pf.codec, torch.device("cpu"), say=stack.lines.append)
        rect2 = Rectangle(T, slot_map.n_slots, pf.codec.row_bytes, pf.codec.omask)
        stats2 = stack.collector.collect(2, members, slot_map, rect2, policy, SEED, 30.0, frozen=broken)
        assert stats2.lost == []
        assert stats2.frozen.noop_rows == {"timeout": 2 * T}
        assert (broken.loads, broken.load_failures) == (0, 1)
        assert (rect2.deploy_status[:, frozen_slots] == -1).all()  # no command: the no-op
        assert {b for b, _ in stats2.frozen.tainted} == {0, 2}
        finished = {(e.battle, e.ordinal) for e in stats2.episodes if e.battle in (0, 2)}
        assert finished and finished <= stats2.frozen.tainted
        assert not any(b in (1, 3) for b, _ in stats2.frozen.tainted)
        assert sum("cannot play this iteration (timeout)" in line for line in stack.lines) == 1
        assert rect2.trainable().sum() == 5 * T  # the learner's cells are all still valid
        dead.close()
        ckpt.close()
    finally:
        stack.close()
