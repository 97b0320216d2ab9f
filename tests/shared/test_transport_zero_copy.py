"""Zero-copy sends: a numpy buffer handed to ZeroMQ without a copy is read by ZeroMQ whenever it
gets to it, so it must not be written again before it has gone out.

(a) The rollout's real path: ``Shard`` packs every round into FRESH arrays, sends them with
    ``shared.transport.send`` (copy=False), and steps on at once. Over real loopback sockets the
    learner must receive exactly what was sent, however many steps happen before it reads.
(b) The hazard itself, deterministically: a zero-copy frame IS the caller's memory (a write to
    the array after the send changes the frame's bytes), where a copying frame is not. Whether a
    write after ``send`` reaches the wire depends on when the I/O thread gets to it, so no test
    here races it: that would be a flaky test.
"""

import numpy as np
import pytest
import zmq

from services.rollout.battles import Shard
from shared import transport
from shared.config import EnvConfig
from shared.messages import GROUP_LEARNER, Assignment, Decoder, Round, ToLearner
from shared.preflight import run_preflight

MASTER_SEED = 20260921


@pytest.fixture(scope="module")
def preflight():
    return run_preflight(EnvConfig(), MASTER_SEED)


@pytest.fixture(scope="module")
def codec(preflight):
    return preflight.codec


@pytest.fixture
def loopback():
    """A ROUTER and a DEALER connected on a free loopback port, in their own context. pyzmq copies
    frames under ``copy_threshold`` (64 KiB) even with copy=False; a 2-battle round (61,500 B of
    rows) is under it, so the DEALER's threshold is set to 0 to send truly zero-copy, as a
    production shard (8+ battles, 246 kB of rows) does."""
    ctx = zmq.Context()
    router = transport.bind_router("tcp://127.0.0.1:*", max_bytes=64 << 20, ctx=ctx)
    dealer = transport.connect_dealer(router.getsockopt_string(zmq.LAST_ENDPOINT), ctx=ctx)
    dealer.copy_threshold = 0
    yield router, dealer
    dealer.close(0)
    router.close(0)
    ctx.term()


def make_shard(codec, max_steps=12):
    # max_steps 12: episodes truncate within the test, so rounds also carry final_rows.
    shard = Shard(0, EnvConfig(max_steps=max_steps), 2, codec, MASTER_SEED, 0.9, True)
    for battle in (0, 1):
        for ordinal in range(6):
            shard.table[(battle, ordinal)] = Assignment(battle, ordinal, "mirror", "learner", -1)
    shard.start([0, 1], [0, 0])
    return shard


def snapshot(result):
    return {k: v.copy() for k, v in result.arrays().items()}


def test_rounds_arrive_as_sent_although_the_shard_steps_on_before_the_learner_reads(codec, loopback):
    router, dealer = loopback
    shard = make_shard(codec)
    decoder = Decoder(ToLearner)
    actions = np.zeros(shard.n_slots, np.int16)  # the no-op is always legal

    sent = []
    result = shard.observe()
    assert result.rows.shape == (4, codec.row_bytes)  # mirror: all four seats are the learner's
    assert np.all(result.group == GROUP_LEARNER)
    results = [result]
    for cycle in range(15):
        sent.append(snapshot(result))
        assert transport.send(dealer, Round(instance="t", iteration=1, cycle=cycle, shard=0), result.arrays())
        # Step on at once, several times, before anything is received.
        for _ in range(3 if cycle == 0 else 1):
            result = shard.step(actions)
            results.append(result)
    assert sum(len(r.final_rows) for r in results) > 0, "no episode was truncated: final_rows untested"

    for cycle, expected in enumerate(sent):
        assert router.poll(10_000), f"round {cycle} never arrived"
        _, body, arrays = transport.recv(router, decoder, router=True)
        assert body.cycle == cycle
        assert list(arrays) == list(expected)
        for name, arr in expected.items():
            assert arrays[name].dtype == arr.dtype and arrays[name].shape == arr.shape, name
            assert np.array_equal(arrays[name], arr), f"round {cycle}: {name} changed after it was sent"

    # Every result owns fresh memory: no array of one round aliases any array of another.
    for older, newer in zip(results, results[1:]):
        for a in older.arrays().values():
            for b in newer.arrays().values():
                assert not np.shares_memory(a, b)
    # ... nor the environment's own observation buffers, which the next step overwrites.
    for battle in shard.battles:
        for seat_obs in battle.obs.values():
            for buf in seat_obs.values():
                assert not any(np.shares_memory(buf, a) for a in results[-1].arrays().values())


def test_the_rows_sent_are_the_observations_the_learner_unpacks(preflight, loopback):
    """The same path with the unpacking side: the learner gets the observation the battle was in
    when the round was sent, not a later one."""
    router, dealer = loopback
    shard = make_shard(preflight.codec, max_steps=0)
    observed = [{k: v.copy() for k, v in b.obs[s].items()} for b in shard.battles for s in ("blue", "red")]
    result = shard.observe()
    assert transport.send(dealer, Round(instance="t", iteration=1, cycle=0, shard=0), result.arrays())
    for _ in range(3):
        shard.step(np.zeros(shard.n_slots, np.int16))
    assert router.poll(10_000)
    _, _, arrays = transport.recv(router, Decoder(ToLearner), router=True)
    out = preflight.codec.unpack(np.asarray(arrays["rows"]))
    assert out["spatial"].shape[0] == len(observed) == 4
    for i, obs in enumerate(observed):
        assert np.array_equal(out["spatial"][i], obs["spatial"])
        assert np.array_equal(out["mask"][i], obs["action_mask"] != 0)


def test_a_zero_copy_frame_is_the_callers_memory():
    """The hazard, shown deterministically: what ZeroMQ will read is the array itself."""
    arr = np.arange(16, dtype=np.uint8)
    shared_frame = zmq.Frame(arr, copy=False)
    copied_frame = zmq.Frame(arr, copy=True)
    assert np.shares_memory(np.frombuffer(shared_frame.buffer, np.uint8), arr)
    arr[:] = 0xEE  # "the next env step packs into the same buffer"
    assert shared_frame.bytes == b"\xee" * 16  # the message now carries the overwritten bytes
    assert copied_frame.bytes == bytes(range(16))


def test_transport_send_hands_the_arrays_own_memory_to_zeromq():
    """shared.transport.send encodes without copying: the frames it hands to ZeroMQ view the
    caller's arrays, which is why the caller must never write to them again."""
    from shared.messages import encode

    rows = np.zeros((3, 5), np.uint8)
    frames = encode(Round(instance="t", iteration=1, cycle=0, shard=0), {"rows": rows})
    assert np.shares_memory(np.frombuffer(frames[1], np.uint8), rows)
    rows[1, 2] = 9
    assert bytes(frames[1])[7] == 9
