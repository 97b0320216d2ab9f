"""Synthetic rollouts (royalefleet/synthetic.py): a recording of a real tiny-profile rollout,
replayed byte for byte over a real socket, and a real learner serving two of them."""

from __future__ import annotations

import time

import msgspec
import numpy as np
import pytest
import zmq

from royalefleet.bench.synthetic import bench_config, record, replay
from royalefleet.synthetic import Recording, SyntheticRollout
from shared import transport
from shared.config import profile
from shared.messages import Decoder, Plan, ProtocolError, Step, ToLearner, Welcome
from tests.stack import free_ports

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A real tiny stack (1 rollout x 4 battles, 2 iterations of 24 decisions: the 40-decision
    episodes end in the second) whose rollout recorded its rounds."""
    cfg = bench_config(profile("tiny"))
    path, rows = record(cfg, str(tmp_path_factory.mktemp("rec")), iterations=2, say=lambda s: None)
    return cfg, path, rows


def _recv_round(router, decoder, timeout_s=10.0):
    assert router.poll(int(timeout_s * 1000), zmq.POLLIN), "no message from the synthetic rollout"
    frames = router.recv_multipart()[1:]  # drop the routing identity
    body, _ = decoder.decode(frames)
    return frames, body


def _welcome(cfg, rec: Recording) -> Welcome:
    return Welcome(env=rec.env, master_seed=rec.master_seed, codec=rec.codec, engine=rec.engine,
                   random_legal_noop_prob=cfg.ladder.random_legal_noop_prob, rollout=cfg.rollout,
                   wire_codec=rec.wire_codec)


def test_a_replayed_round_is_the_recorded_one_byte_for_byte(recorded):
    cfg, path, rows = recorded
    rec = Recording.load(path)
    assert rec.battles == 4 and len(rec.shards) == 2 and rows[0]["run/battles"] == 4
    # two iterations of T cycles: the fresh cycle-0 round and one per Step, per shard
    T = rows[0]["health/trainable_rows"] // (2 * rec.battles)
    assert T == 24 and [len(s) for s in rec.shards] == [2 * T + 1, 2 * T + 1]
    decoder = Decoder(ToLearner)
    recorded_bodies = [[decoder.decode(m)[0] for m in s] for s in rec.shards]
    first = recorded_bodies[0][0].iteration  # the learner numbers its first iteration 1
    assert all((b.iteration, b.cycle, b.shard) == (first + (k - 1) // T if k else first, (k - 1) % T + 1 if k else 0, s)
               for s, bodies in enumerate(recorded_bodies) for k, b in enumerate(bodies))
    ended = [e for s in recorded_bodies for b in s for e in b.episodes]
    assert len(ended) >= 2 * rec.battles  # every battle's first episode (both seats) ended in the recording

    port = free_ports(1)[0]
    router = transport.bind_router(f"tcp://127.0.0.1:{port}")
    synth = SyntheticRollout(f"tcp://127.0.0.1:{port}", rec, say=lambda s: None)
    try:
        synth.instance = recorded_bodies[0][0].instance  # the one field a new process draws afresh
        synth._hello()
        assert router.poll(5000)
        router.recv_multipart()
        synth._on_welcome(_welcome(cfg, rec))
        router.recv_multipart()  # its "ready" heartbeat
        synth._on_plan(Plan(iteration=first, battles=rec.battle_ids, restart_ordinals=[0] * rec.battles,
                            assignments=[], fresh=True, gamma=0.99))
        got = [[_recv_round(router, decoder)[0]] for _ in rec.shards]
        for k in range(2 * T):  # the next iteration's Step(cycle 0) answers the held cycle-T round
            for s in range(len(rec.shards)):
                synth._on_step(Step(iteration=first + k // T, cycle=k % T, shard=s), {"actions": np.zeros(4, np.int16)})
                got[s].append(_recv_round(router, decoder)[0])
        # the same plan and iteration as the recording: every frame of every round is the recorded one
        assert got == rec.shards

        # another plan (other battle ids, a later iteration, a new instance): the array frames are
        # still the recorded bytes; the body differs exactly in what the protocol has the rollout
        # take from the learner (iteration, cycle, the episodes' battle ids) or draw (instance)
        synth.instance = "0123456789ab"
        ids = [b + 100 for b in rec.battle_ids]
        synth._on_plan(Plan(iteration=7, battles=ids, restart_ordinals=[0] * rec.battles, assignments=[],
                            fresh=True, gamma=0.99))
        for s in range(len(rec.shards)):
            frames, body = _recv_round(router, decoder)
            assert frames[1:] == rec.shards[s][0][1:]
        renamed = 0
        for k in range(2 * T):
            synth._on_step(Step(iteration=7 + k // T, cycle=k % T, shard=0), {"actions": np.zeros(4, np.int16)})
            frames, body = _recv_round(router, decoder)
            old = recorded_bodies[0][k + 1]
            assert frames[1:] == rec.shards[0][k + 1][1:]
            assert (body.instance, body.iteration, body.cycle) == ("0123456789ab", 7 + k // T, k % T + 1)
            assert [e.battle for e in body.episodes] == [e.battle + 100 for e in old.episodes]
            assert body == msgspec.structs.replace(
                old, instance="0123456789ab", iteration=7 + k // T, cycle=k % T + 1,
                episodes=[msgspec.structs.replace(e, battle=e.battle + 100) for e in old.episodes])
            renamed += len(body.episodes)
        assert renamed == sum(len(b.episodes) for b in recorded_bodies[0]) > 0
    finally:
        synth.close()
        router.close(linger=0)


def test_step_actions_of_the_wrong_shape_are_refused(recorded):
    cfg, path, _ = recorded
    rec = Recording.load(path)
    synth = SyntheticRollout("tcp://127.0.0.1:1", rec, say=lambda s: None)
    try:
        synth._on_welcome(_welcome(cfg, rec))
        with pytest.raises(ProtocolError, match=r"step actions must be \(4,\) int16"):
            synth._on_step(Step(iteration=0, cycle=0, shard=0), {"actions": np.zeros(3, np.int16)})
        with pytest.raises(ProtocolError, match="step for shard 2; this rollout has 2"):
            synth._on_step(Step(iteration=0, cycle=0, shard=2), {"actions": np.zeros(4, np.int16)})
    finally:
        synth.close()


def test_a_welcome_with_another_codec_table_is_refused_naming_it(recorded):
    cfg, path, _ = recorded
    rec = Recording.load(path)
    synth = SyntheticRollout("tcp://127.0.0.1:1", rec, say=lambda s: None)
    try:
        other = msgspec.structs.replace(rec.codec, height=rec.codec.height + 1)
        with pytest.raises(SystemExit, match="the learner's codec table is not the recording's"):
            synth._on_welcome(msgspec.structs.replace(_welcome(cfg, rec), codec=other))
    finally:
        synth.close()


def test_a_learner_serves_two_synthetic_rollouts_for_an_iteration(recorded):
    cfg, path, _ = recorded
    t0 = time.monotonic()
    rows = replay(cfg, path, 2, iterations=1, say=lambda s: None)
    assert len(rows) == 1
    row = rows[0]
    assert row["run/battles"] == 8  # both synthetic rollouts' 4 battles
    # the iteration is twice the recording's, so each shard replays the recording's T = 24 cycles
    assert row["health/trainable_rows"] == 2 * cfg.ppo.timesteps_per_iteration == 2 * 8 * 24
    assert row["health/rows_invalid"] == 0 and row["health/rollouts_lost"] == 0
    assert row["health/messages_refused"] == 0
    assert time.monotonic() - t0 < 120
