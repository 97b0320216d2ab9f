"""The wire format: every message kind round-trips with its arrays; every malformed input is a
ProtocolError with the right ``reason`` and a text naming the problem (and nothing else, for any
bytes at all); an oversized message never reaches Python over real ZeroMQ."""

import time

import msgspec
import numpy as np
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st
from zmq.utils.monitor import recv_monitor_message

from shared import transport
from shared.config import EnvConfig, RolloutConfig
from shared.messages import (
    BattleStates, GetStates, LeafQuery, LeafValues, SetState, SimActions, SimActQuery, StatesSet,
    LoadSnapshot, SaveSnapshot, SnapshotLoaded, SnapshotSaved,
    EvalJob, EvalJobRequest, EvalReport, NoJob,
    AdmitCandidate, Admitted, LadderStatus, LadderStatusRequest, MeasureStrength, StrengthSummary,
    ARRAYS, PROTOCOL_VERSION, Ack, Assignment, Close, CodecTable, Decoder, EngineBuild, EpisodeRecord,
    Error, Failure, FromCheckpoint, FromLadder, Heartbeat, Hello, Loaded, LoadLatest, NotFound, Plan,
    PlaneCodec, PlanReply, PlanRequest, ProtocolError, Refused, Rejoin, ReportEpisodes, Round,
    SaveCheckpoint, Saved, Step, ToCheckpoint, ToLadder, ToLearner, ToRollout, Welcome, encode,
)

ENGINE = EngineBuild(engine_class="RustEngine", calibration_digest="cal", build_digest="bd",
                     binary_sha256="ab" * 32, cards_digest="cd", royalegym_version="0.1.25")
TABLE = CodecTable(version=1, planes=(PlaneCodec("a", "uint8", 1.0), PlaneCodec("hp", "uint16", 1000.0),
                                      PlaneCodec("w", "static", 1.0), PlaneCodec("f", "float16", 1.0)),
                   height=3, width=2, vector_size=5, n_actions=25, hand_slots=4)
EPISODE = EpisodeRecord(battle=3, ordinal=7, seat="red", role="scripted", player="learner",
                        opponent="scripted:noop", outcome=-1, truncated=False, episode_steps=120,
                        episode_ticks=1200, own_crowns=0, enemy_crowns=3, own_tower_hp_frac=0.25,
                        enemy_tower_hp_frac=1.0, elixir_leak_steps=4, elixir_count_exact=True,
                        cards_played=9, undiscounted_return=-1.5, iteration=2)
ASSIGN = [Assignment(3, 7, "scripted", "scripted:noop", 1), Assignment(4, 0, "mirror", "learner", -1)]


def round_arrays(n_slots=4, n_learner=3, row_bytes=7, k=1):
    rng = np.random.default_rng(0)
    return {
        "group": np.array([0, 0, 0, -2][:n_slots], np.int8),
        "tick": np.arange(n_slots, dtype=np.int32) * 10,
        "ordinal": np.array([0, 0, 5, 5][:n_slots], np.int32),
        "rows": rng.integers(0, 256, (n_learner, row_bytes), dtype=np.uint8),
        "reward": np.array([0.5, -0.25, 1e-3, 0.0][:n_slots], np.float32),
        "terminated": np.array([0, 0, 1, 1][:n_slots], np.uint8),
        "truncated": np.array([1, 0, 0, 0][:n_slots], np.uint8),
        "deploy_status": np.array([-1, 0, 3, -1][:n_slots], np.int8),
        "final_slots": np.array([0][:k], np.int16),
        "final_rows": rng.integers(0, 256, (k, row_bytes), dtype=np.uint8),
    }


# (decoder union, body, arrays)
CASES = [
    (ToLearner, Hello(instance="i1", host="h", pid=42, battles=4, shards=2, engine=ENGINE), {}),
    (ToLearner, Round(instance="i1", iteration=3, cycle=9, shard=1, episodes=[EPISODE], env_seconds=0.125),
     round_arrays()),
    (ToLearner, Round(instance="i1", iteration=3, cycle=0, shard=0), round_arrays(k=0)),  # empty final_rows
    (ToLearner, Heartbeat(instance="i1", state="waiting"), {}),
    (ToLearner, Failure(instance="i1", kind="exception", message="Traceback ..."), {}),
    (ToRollout, Welcome(env=EnvConfig(max_steps=40), master_seed=5, codec=TABLE, engine=ENGINE,
                        random_legal_noop_prob=0.9, rollout=RolloutConfig(battles=4)), {}),
    (ToRollout, Refused(reason="engine build differs"), {}),
    (ToRollout, Plan(iteration=2, battles=[3, 4], restart_ordinals=[7, -1], assignments=ASSIGN, fresh=True, gamma=0.997), {}),
    (ToRollout, Step(iteration=2, cycle=5, shard=1), {"actions": np.array([0, 2304, 17, 0], np.int16)}),
    (ToLearner, LeafQuery(instance="i1", iteration=2, cycle=5, shard=1),
     {"leaf_rows": np.arange(24, dtype=np.uint8).reshape(3, 8), "leaf_return": np.array([0.5, -1.0, 0.0]),
      "leaf_discount": np.array([0.97, 0.0, 1.0])}),
    (ToRollout, LeafValues(iteration=2, cycle=5, shard=1), {"leaf_q": np.array([0.25, -1.5, 0.0], np.float32)}),
    (ToLearner, SimActQuery(instance="i1", iteration=2, cycle=5, shard=1, seq=3, player="snap:0123456789abcdef",
                            battle=7, ordinal=2),
     {"sim_rows": np.arange(16, dtype=np.uint8).reshape(2, 8), "sim_uniforms": np.array([0.25, 0.75])}),
    (ToRollout, SimActions(iteration=2, cycle=5, shard=1, seq=3), {"sim_actions": np.array([0, 17], np.int16)}),
    (ToRollout, Close(reason="done"), {}),
    (ToRollout, Rejoin(reason="learner restarted"), {}),
    (ToRollout, GetStates(iteration=4), {}),
    (ToRollout, SetState(iteration=5, battles=[3, 4], states=[b"\x81\xa1a\x01", b""]), {}),
    (ToLearner, BattleStates(instance="i1", iteration=4, battles=[3], states=[b"\x00\xff" * 9],
                             failed=["battle 4: over"], seconds=0.25), {}),
    (ToLearner, StatesSet(instance="i1", iteration=5, restored=[3], refused=[4], reasons=["hash: differs"]), {}),
    (ToLadder, PlanRequest(request_id=1, iteration=2, n_battles=8, battles=[3, 4], next_ordinals=[7, 0],
                           lookahead=3), {}),
    (ToLadder, ReportEpisodes(request_id=2, run_name="r", episodes=[EPISODE, EPISODE]), {}),
    (FromLadder, PlanReply(request_id=1, assignments=ASSIGN, role_counts=(1, 0, 1)), {}),
    (FromLadder, Ack(request_id=2, count=2), {}),
    (FromLadder, Error(request_id=3, reason="bad"), {}),
    (ToLadder, EvalJobRequest(request_id=7, worker="host:12"), {}),
    (ToLadder, EvalReport(request_id=8, job_id=3, run_name="r", worker="host:12", records=[EPISODE]), {}),
    (FromLadder, EvalJob(request_id=7, job_id=3, run_name="r", a="snap:0123456789abcdef", b="scripted:noop",
                         seeds=[0, 1, 2], deadline_s=900.0), {}),
    (FromLadder, NoJob(request_id=7, retry_after_s=5.0, reason="no gate pending"), {}),
    (ToLadder, AdmitCandidate(request_id=9, run_name="r", snapshot_id="0123456789abcdef", env_steps=4_000_000,
                              iteration=31), {}),
    (FromLadder, Admitted(request_id=9, snapshot_id="0123456789abcdef", status="pending"), {}),
    (ToLadder, LadderStatusRequest(request_id=10, run_name="r"), {}),
    (FromLadder, LadderStatus(request_id=10, pool_size=2, champion="snap:0123456789abcdef", champion_env_steps=9,
                              gates_run=1, gates_passed=1, champion_rating=35.5, champion_rating_se=20.25,
                              pfsp_effective=True, resident=["snap:0123456789abcdef"],
                              ratings={"snap:0123456789abcdef": 35.5}, rating_se={"snap:0123456789abcdef": 20.25}),
     {}),
    (ToLadder, MeasureStrength(request_id=11, run_name="r", snapshot_id="0123456789abcdef", env_steps=9000,
                               iteration=10, timesteps=40960), {}),
    (FromLadder, LadderStatus(request_id=12, pool_size=0, strength=StrengthSummary(
        snapshot="snap:0123456789abcdef", iteration=10, env_steps=9000, games={"scripted:noop": 20},
        score={"scripted:noop": 0.75}, score_lo={"scripted:noop": 0.53}, score_hi={"scripted:noop": 0.89},
        rating=190.5, rating_se=80.25, measured=1, pending=0)), {}),
    (ToCheckpoint, SaveCheckpoint(request_id=4, run_name="r", iteration=5, names=["a/m.st", "b.json"],
                                  meta=b"\x00{}\xff"),
     {"a/m.st": np.arange(300, dtype=np.uint16).view(np.uint8).copy(), "b.json": np.frombuffer(b"{}", np.uint8)}),
    (ToCheckpoint, LoadLatest(request_id=5, run_name="r"), {}),
    (FromCheckpoint, Saved(request_id=4, path="/x/y", bytes_written=602), {}),
    (ToCheckpoint, SaveSnapshot(request_id=6, run_name="r", spec=b'{"env_steps": 9}'),
     {"actor": np.arange(10, dtype=np.uint8)}),
    (ToCheckpoint, LoadSnapshot(request_id=7, run_name="r", snapshot_id="0123456789abcdef"), {}),
    (FromCheckpoint, SnapshotSaved(request_id=6, snapshot_id="0123456789abcdef", path="/s", created=True), {}),
    (FromCheckpoint, SnapshotLoaded(request_id=7, snapshot_id="0123456789abcdef", spec=b"{}"),
     {"actor": np.arange(10, dtype=np.uint8)}),
    (FromCheckpoint, Loaded(request_id=5, path="/x/y", iteration=5, names=["a"], meta=b"m"),
     {"a": np.zeros(0, np.uint8)}),
    (FromCheckpoint, NotFound(request_id=5, reason="no checkpoint"), {}),
    (FromCheckpoint, Error(request_id=6, reason="disk full"), {}),
]


def test_the_cases_cover_every_message_kind():
    kinds = {type(body) for _, body, _ in CASES}
    unions = [ToLearner, ToRollout, ToLadder, FromLadder, ToCheckpoint, FromCheckpoint]
    assert kinds == {k for u in unions for k in u.__args__}
    assert {k for k in ARRAYS} <= kinds


@pytest.mark.parametrize("union, body, arrays", CASES, ids=[f"{type(c[1]).__name__}{i}" for i, c in enumerate(CASES)])
def test_round_trip(union, body, arrays):
    frames = encode(body, arrays)
    assert len(frames) == 1 + len(arrays)
    # As bytes (what a test harness holds) and as zmq.Frame objects (what recv gives).
    for as_frames in ([bytes(f) for f in frames], [zmq.Frame(bytes(f)) for f in frames]):
        got, got_arrays = Decoder(union).decode(as_frames)
        assert got == body and type(got) is type(body)
        assert list(got_arrays) == list(arrays)
        for name, arr in arrays.items():
            assert got_arrays[name].dtype == arr.dtype and got_arrays[name].shape == arr.shape
            np.testing.assert_array_equal(got_arrays[name], arr)
            assert not got_arrays[name].flags.writeable  # read-only views of the frames


def test_encode_copies_nothing_and_makes_non_contiguous_arrays_contiguous():
    actions = np.arange(8, dtype=np.int16)
    frames = encode(Step(iteration=1, cycle=0, shard=0), {"actions": actions})
    assert np.shares_memory(np.frombuffer(frames[1], np.int16), actions)  # the caller's memory, not a copy
    strided = np.arange(8, dtype=np.int16)[::2]
    _, arrays = Decoder(ToRollout).decode(encode(Step(iteration=1, cycle=0, shard=0), {"actions": strided}))
    np.testing.assert_array_equal(arrays["actions"], [0, 2, 4, 6])


# ----------------------------------------------------------------------------- refusals


def header(body, arrays=()):
    """An envelope as a builtins dict, to be broken and re-encoded."""
    return {"protocol": PROTOCOL_VERSION, "body": msgspec.to_builtins(body, builtin_types=(bytes,)) | {"type": type(body).__struct_config__.tag},
            "arrays": [list(a) for a in arrays]}


def refused(union, frames) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        Decoder(union).decode(frames)
    return info.value


def pack(doc) -> bytes:
    return msgspec.msgpack.encode(doc)


def test_header_helper_builds_what_encode_builds():
    body = Heartbeat(instance="i", state="s")
    assert msgspec.msgpack.decode(pack(header(body))) == msgspec.msgpack.decode(encode(body)[0])


@pytest.mark.parametrize("head, text", [
    (b"\xc1", "undecodable envelope: MessagePack data is malformed: invalid opcode '\\xc1' (byte 0)"),
    (b"", "undecodable envelope: Input data was truncated"),
    (b"\x00", "undecodable envelope: Expected `object`, got `int`"),
    (b"\x80", "undecodable envelope: Object missing required field `protocol`"),
    (pack({"protocol": 1, "body": {"type": "heartbeat", "instance": "i", "state": "s"}, "arrays": [], "x": 1}),
     "undecodable envelope: Object contains unknown field `x`"),
    (pack({"protocol": 1, "body": {"type": "heartbeat", "instance": "i", "state": "s"}, "arrays": [["a", "int8"]]}),
     "undecodable envelope: Expected `array` of at least length 3, got 2 - at `$.arrays[0]`"),
    (pack({"protocol": 1, "body": [1, 2]}), "refused message: Expected `object`, got `array`"),
])
def test_undecodable(head, text):
    exc = refused(ToLearner, [head])
    assert exc.reason in ("undecodable", "schema")
    assert str(exc) == text
    assert exc.reason == ("schema" if text.startswith("refused") else "undecodable")


def test_empty_message():
    exc = refused(ToLearner, [])
    assert (exc.reason, str(exc)) == ("frames", "empty message")


def test_unknown_type_tag():
    doc = header(Heartbeat(instance="i", state="s"))
    doc["body"]["type"] = "launch"
    exc = refused(ToLearner, [pack(doc)])
    assert exc.reason == "unknown_kind"
    assert str(exc) == "refused message: Invalid value 'launch' - at `$.type`"


def test_a_kind_of_another_seam_is_an_unknown_kind():
    exc = refused(ToLearner, encode(Close(reason="x")))
    assert exc.reason == "unknown_kind" and "'close'" in str(exc)
    exc = refused(ToRollout, encode(Heartbeat(instance="i", state="s")))
    assert exc.reason == "unknown_kind" and "'heartbeat'" in str(exc)


def test_unknown_field():
    doc = header(Hello(instance="i", host="h", pid=1, battles=2, shards=1, engine=ENGINE))
    doc["body"]["colour"] = "blue"
    exc = refused(ToLearner, [pack(doc)])
    assert (exc.reason, str(exc)) == ("schema", "refused message: Object contains unknown field `colour`")
    # ... also inside a nested struct.
    doc = header(Hello(instance="i", host="h", pid=1, battles=2, shards=1, engine=ENGINE))
    doc["body"]["engine"]["extra"] = 1
    exc = refused(ToLearner, [pack(doc)])
    assert (exc.reason, str(exc)) == ("schema", "refused message: Object contains unknown field `extra` - at `$.engine`")


@pytest.mark.parametrize("field, value, text", [
    ("pid", "42", "Expected `int`, got `str` - at `$.pid`"),
    ("battles", 2.5, "Expected `int`, got `float` - at `$.battles`"),
    ("instance", None, "Expected `str`, got `None` - at `$.instance`"),
])
def test_wrong_field_type(field, value, text):
    doc = header(Hello(instance="i", host="h", pid=1, battles=2, shards=1, engine=ENGINE))
    doc["body"][field] = value
    exc = refused(ToLearner, [pack(doc)])
    assert (exc.reason, str(exc)) == ("schema", "refused message: " + text)


def test_missing_field_and_bad_literal():
    doc = header(Failure(instance="i", kind="exception", message="m"))
    del doc["body"]["message"]
    exc = refused(ToLearner, [pack(doc)])
    assert (exc.reason, str(exc)) == ("schema", "refused message: Object missing required field `message`")
    doc = header(Failure(instance="i", kind="exception", message="m"))
    doc["body"]["kind"] = "panic"
    exc = refused(ToLearner, [pack(doc)])
    assert (exc.reason, str(exc)) == ("schema", "refused message: Invalid enum value 'panic' - at `$.kind`")


@pytest.mark.parametrize("version", [0, 2, 99, -1])
def test_wrong_protocol_version(version):
    doc = header(Heartbeat(instance="i", state="s"))
    doc["protocol"] = version
    exc = refused(ToLearner, [pack(doc)])
    assert (exc.reason, str(exc)) == ("version", f"protocol version {version}; this build speaks {PROTOCOL_VERSION}")
    # A future envelope the rest of which this build cannot read is still reported as a version.
    exc = refused(ToLearner, [pack({"protocol": version, "body": 0, "arrays": "v2", "compression": "zstd"})])
    assert (exc.reason, str(exc)) == ("version", f"protocol version {version}; this build speaks {PROTOCOL_VERSION}")


def test_frame_count_mismatch():
    frames = encode(Step(iteration=1, cycle=0, shard=0), {"actions": np.zeros(4, np.int16)})
    exc = refused(ToRollout, frames[:1])
    assert (exc.reason, str(exc)) == ("frames", "Step: header lists 1 arrays, got 0 frames")
    exc = refused(ToRollout, frames + [b"extra"])
    assert (exc.reason, str(exc)) == ("frames", "Step: header lists 1 arrays, got 2 frames")


def test_an_array_the_kind_does_not_carry():
    exc = refused(ToRollout, encode(Step(iteration=1, cycle=0, shard=0), {"rows": np.zeros((1, 4), np.uint8)}))
    assert (exc.reason, str(exc)) == ("arrays", "Step carries no array named 'rows'")
    exc = refused(ToLearner, encode(Heartbeat(instance="i", state="s"), {"actions": np.zeros(4, np.int16)}))
    assert (exc.reason, str(exc)) == ("arrays", "Heartbeat carries no array named 'actions'")


@pytest.mark.parametrize("array, text", [
    (np.zeros(4, np.int32), "Step.actions: expected 1-d int16, header says int32 [4]"),
    (np.zeros(4, np.float64), "Step.actions: expected 1-d int16, header says float64 [4]"),
    (np.zeros((2, 2), np.int16), "Step.actions: expected 1-d int16, header says int16 [2, 2]"),
    (np.zeros((1, 1, 3), np.int16), "Step.actions: expected 1-d int16, header says int16 [1, 1, 3]"),
])
def test_dtype_or_ndim_mismatch(array, text):
    exc = refused(ToRollout, encode(Step(iteration=1, cycle=0, shard=0), {"actions": array}))
    assert (exc.reason, str(exc)) == ("arrays", text)


def test_checkpoint_files_must_be_1d_uint8():
    body = SaveCheckpoint(request_id=1, run_name="r", iteration=1, names=["a"], meta=b"")
    exc = refused(ToCheckpoint, encode(body, {"a": np.zeros(3, np.int8)}))
    assert (exc.reason, str(exc)) == ("arrays", "SaveCheckpoint.a: expected 1-d uint8, header says int8 [3]")


def test_zero_dimensional_header_is_refused():
    # (encode itself sends a 0-d array as shape [1]: np.ascontiguousarray returns ndim >= 1.)
    doc = header(Step(iteration=1, cycle=0, shard=0), [("actions", "int16", [])])
    exc = refused(ToRollout, [pack(doc), b"\x00\x00"])
    assert (exc.reason, str(exc)) == ("arrays", "Step.actions: expected 1-d int16, header says int16 []")


def test_negative_dimension():
    doc = header(Step(iteration=1, cycle=0, shard=0), [("actions", "int16", [-2])])
    exc = refused(ToRollout, [pack(doc), b""])
    assert (exc.reason, str(exc)) == ("arrays", "Step.actions: expected 1-d int16, header says int16 [-2]")


@pytest.mark.parametrize("shape, nbytes", [([3], 5), ([3], 8), ([3], 0), ([0], 2)])
def test_byte_count_that_does_not_match_the_shape(shape, nbytes):
    doc = header(Step(iteration=1, cycle=0, shard=0), [("actions", "int16", shape)])
    exc = refused(ToRollout, [pack(doc), b"\x01" * nbytes])
    assert (exc.reason, str(exc)) == ("arrays", f"Step.actions: {nbytes} bytes for shape {shape} of int16")


@pytest.mark.parametrize("shape", [[2**32, 2**32], [2**62, 4], [2**63, 2], [2**64 - 1, 1], [0, 2**63]])
def test_a_shape_whose_product_overflows_int64_is_refused(shape):
    # Regression: the size was computed with np.prod in int64, which wraps [2**32, 2**32] to 0
    # bytes; an empty frame then "matched" and reshape raised ValueError out of decode().
    doc = header(Round(instance="i", iteration=1, cycle=0, shard=0), [("rows", "uint8", shape)])
    exc = refused(ToLearner, [pack(doc), b""])
    assert (exc.reason, str(exc)) == ("arrays", f"Round.rows: 0 bytes for shape {shape} of uint8")


def test_an_array_larger_than_the_decoder_limit_is_refused():
    frames = encode(Round(instance="i", iteration=1, cycle=0, shard=0), {"rows": np.zeros((2, 64), np.uint8)})
    assert Decoder(ToLearner, max_array_bytes=128).decode(frames)[1]["rows"].shape == (2, 64)
    exc = refused_with(Decoder(ToLearner, max_array_bytes=127), frames)
    assert (exc.reason, str(exc)) == ("arrays", "Round.rows: 128 bytes for shape [2, 64] of uint8")


def refused_with(decoder, frames):
    with pytest.raises(ProtocolError) as info:
        decoder.decode(frames)
    return info.value


def test_an_array_given_twice():
    doc = header(Step(iteration=1, cycle=0, shard=0), [("actions", "int16", [1]), ("actions", "int16", [1])])
    exc = refused(ToRollout, [pack(doc), b"\x00\x00", b"\x00\x00"])
    assert (exc.reason, str(exc)) == ("arrays", "Step: array 'actions' given twice")


# ----------------------------------------------------------------------------- properties

DECODERS = [Decoder(u) for u in (ToLearner, ToRollout, ToLadder, FromLadder, ToCheckpoint, FromCheckpoint)]
REASONS = {"undecodable", "version", "unknown_kind", "schema", "frames", "arrays"}


@settings(max_examples=400, deadline=None)
@given(frames=st.lists(st.binary(max_size=64), max_size=4), which=st.integers(0, len(DECODERS) - 1))
def test_arbitrary_bytes_raise_only_protocol_error(frames, which):
    try:
        DECODERS[which].decode(frames)
    except ProtocolError as exc:
        assert exc.reason in REASONS and str(exc)


VALID_BODIES = [body for _, body, _ in CASES]
DTYPES = ["int8", "uint8", "int16", "int32", "float32", "float64", "uint16", "object", "V3", ""]
NAMES = sorted({n for rules in ARRAYS.values() for n in rules} | {"a", "", "*"})
DIM = st.one_of(st.integers(0, 8), st.integers(-2**63, 2**64 - 1))


@settings(max_examples=400, deadline=None)
@given(
    protocol=st.one_of(st.just(PROTOCOL_VERSION), st.integers(-2**63, 2**64 - 1)),
    body=st.sampled_from(VALID_BODIES),
    metas=st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(DTYPES), st.lists(DIM, max_size=3)), max_size=3),
    payloads=st.lists(st.binary(max_size=80), max_size=4),
    which=st.integers(0, len(DECODERS) - 1),
)
def test_structured_headers_raise_only_protocol_error(protocol, body, metas, payloads, which):
    """Well-formed envelopes with arbitrary array metadata (including dimensions up to 2**64 - 1)
    and arbitrary buffers: decoded arrays, when accepted, match their header exactly."""
    doc = header(body, metas)
    doc["protocol"] = protocol
    try:
        got, arrays = DECODERS[which].decode([pack(doc), *payloads])
    except ProtocolError as exc:
        assert exc.reason in REASONS and str(exc)
        return
    assert protocol == PROTOCOL_VERSION and got == body
    assert len(arrays) == len(metas) == len(payloads)
    for (name, dtype, shape), buf in zip(metas, payloads):
        assert arrays[name].dtype == np.dtype(dtype) and list(arrays[name].shape) == shape
        assert arrays[name].tobytes() == buf


# ----------------------------------------------------------------------------- over real ZeroMQ


def test_an_oversized_message_is_dropped_by_zeromq_and_its_sender_disconnected():
    ctx = zmq.Context()
    sockets = []
    try:
        router = transport.bind_router("tcp://127.0.0.1:*", max_bytes=1024, ctx=ctx)
        sockets.append(router)
        address = router.getsockopt_string(zmq.LAST_ENDPOINT)
        monitor = router.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        sockets.append(monitor)
        decoder = Decoder(ToLearner)

        offender = transport.connect_dealer(address, ctx=ctx)
        sockets.append(offender)
        big = np.zeros((1, 5000), np.uint8)
        assert transport.send(offender, Round(instance="big", iteration=1, cycle=0, shard=0), {"rows": big})

        # ZeroMQ drops the connection that carried it (MAXMSGSIZE) ...
        deadline = time.monotonic() + 10
        disconnected = False
        while not disconnected and time.monotonic() < deadline:
            if monitor.poll(100):
                disconnected = recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED
        assert disconnected, "the router never disconnected the sender of a 5000-byte message"
        # ... and Python never sees a byte of it.
        assert router.poll(300) == 0

        # A fresh peer's small message still gets through.
        fresh = transport.connect_dealer(address, ctx=ctx)
        sockets.append(fresh)
        assert transport.send(fresh, Heartbeat(instance="fresh", state="waiting"))
        assert router.poll(10_000), "a small message from a fresh dealer was not delivered"
        identity, body, arrays = transport.recv(router, decoder, router=True)
        assert body == Heartbeat(instance="fresh", state="waiting") and arrays == {}
        assert isinstance(identity, bytes) and identity
        # The oversized one never arrives later either.
        assert router.poll(300) == 0
    finally:
        for s in sockets:
            s.close(0)
        ctx.term()


def test_a_byte_swapped_array_arrives_with_its_values():
    # Regression: dtype(">i2").name is "int16", so encode used to send big-endian bytes under a
    # header the decoder reads as native order: [1, 2, 3] arrived as [256, 512, 768].
    swapped = np.array([1, 2, -3], dtype=">i2")
    _, arrays = Decoder(ToRollout).decode(encode(Step(iteration=1, cycle=0, shard=0), {"actions": swapped}))
    np.testing.assert_array_equal(arrays["actions"], [1, 2, -3])
    assert arrays["actions"].dtype == np.dtype("int16")


# ----------------------------------------------------------------------------- hostile input (issue 12)


@pytest.mark.parametrize("depth", [200, 5_000, 100_000])
def test_deep_nesting_is_a_protocol_error_not_a_recursion_error(depth):
    # Before: the envelope's Raw body of ~5,000 nested one-element arrays raised RecursionError.
    nested = b"\x91" * depth + b"\x01"
    wrapped = msgspec.msgpack.encode({"protocol": PROTOCOL_VERSION, "body": msgspec.Raw(nested), "arrays": []})
    for head in (wrapped, nested):
        with pytest.raises(ProtocolError):  # and nothing else
            Decoder(ToLadder).decode([head])
    with pytest.raises(ProtocolError) as err:
        Decoder(ToLadder).decode([wrapped])
    if depth >= 5_000:
        assert err.value.reason == "nesting" and "nested deeper than the decoder allows" in str(err.value)
    else:  # shallow enough to decode: refused by the schema (a body is a map)
        assert err.value.reason == "schema"


def test_more_frames_than_any_message_has_is_refused():
    frames = encode(Heartbeat(instance="x", state="ready")) + [b""] * 300
    with pytest.raises(ProtocolError) as err:
        Decoder(ToLearner).decode(frames)
    assert err.value.reason == "frames" and "301 frames; a message has at most 257" in str(err.value)


def test_the_size_limit_bounds_the_whole_message_not_each_frame():
    # Before: MAXMSGSIZE is per frame, so three frames just under it made a message three times
    # the limit that reached the decoder whole; now recv refuses it as "oversized", keeps none of
    # it, and the next message of the same peer gets through.
    ctx = zmq.Context()
    sockets = []
    try:
        router = transport.bind_router("tcp://127.0.0.1:*", max_bytes=10_000, ctx=ctx)
        sockets.append(router)
        address = router.getsockopt_string(zmq.LAST_ENDPOINT)
        peer = transport.connect_dealer(address, ctx=ctx)
        sockets.append(peer)
        header = encode(Round(instance="big", iteration=1, cycle=0, shard=0), {"rows": np.zeros((1, 9000), np.uint8)})[0]
        peer.send_multipart([header, b"\0" * 9000, b"\0" * 9000, b"\0" * 9000])
        assert router.poll(10_000)
        with pytest.raises(ProtocolError) as err:
            transport.recv(router, Decoder(ToLearner), router=True)
        assert err.value.reason == "oversized"
        assert "message of 4 frames" in str(err.value) and "10000 bytes (max_message_mb) for the whole message" in str(err.value)
        assert isinstance(err.value.identity, bytes) and err.value.identity
        assert router.poll(300) == 0  # every frame of it was consumed
        assert transport.send(peer, Heartbeat(instance="big", state="ready"))
        assert router.poll(10_000)
        _, body, _ = transport.recv(router, Decoder(ToLearner), router=True)
        assert body == Heartbeat(instance="big", state="ready")
        # A message just under the limit, in several frames, still arrives whole.
        rows = np.arange(4000, dtype=np.uint8).reshape(2, 2000)
        assert transport.send(peer, Round(instance="ok", iteration=1, cycle=0, shard=0), {"rows": rows, "tick": np.zeros(3, np.int32)})
        assert router.poll(10_000)
        _, body, arrays = transport.recv(router, Decoder(ToLearner), router=True)
        assert body.instance == "ok" and np.array_equal(arrays["rows"], rows)
    finally:
        for s in sockets:
            s.close(0)
        ctx.term()
