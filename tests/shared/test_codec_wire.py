"""Wire codec 2 (shared/codec.py): a round's packed rows as one zstd frame each.

Lossless on real rounds of RoyaleGym battles and on the edge cases (all-zero planes, a full
board, only the no-op legal, every action legal, any bytes at all); a frame is refused, with its
reason, before it is expanded whenever it claims or holds anything but the round's rows; the
codec is negotiated in Hello / Welcome (an old rollout is served codec 1, one with no common
codec is refused by name); end to end, a run on codec 2 trains on the same bytes as on codec 1."""

from __future__ import annotations

import json
import time

import msgspec
import numpy as np
import pytest
import zmq
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.learner.rounds import Collector
from services.learner.fleet import Fleet
from shared import transport
from shared.codec import (
    WIRE_CODECS, WIRE_REFUSALS, Codec, RowCompressor, RowDecompressor, WireError, compress_round,
    decompress_round,
)
from shared.config import EnvConfig, tiny
from shared.messages import (
    ARRAYS, CodecTable, Decoder, EngineBuild, Hello, Refused, Round, ToLearner, ToRollout, Welcome, encode,
)
from shared.preflight import run_preflight
from tests.stack import free_ports, read_rows, run_to_exit, tiny_config

MASTER_SEED = 20260921
MAX_BYTES = 64 << 20


@pytest.fixture(scope="module")
def pf():
    return run_preflight(EnvConfig(), MASTER_SEED)


@pytest.fixture(scope="module")
def real_rows(pf):
    """(4, 120, row_bytes): four battles of random-legal self-play (no-op probability 0.5: more
    cards on the board and more choice rows than a real iteration has), both seats each
    decision, packed with the run's codec: the rows a round of a 2-battle shard carries."""
    from royalegym import RandomLegalOpponent

    from shared.envs import build_env

    out = np.empty((4, 120, pf.codec.row_bytes), np.uint8)
    for b in range(4):
        env, player, rng = build_env(EnvConfig()), RandomLegalOpponent(0.5), np.random.default_rng(b)
        obs, _ = env.reset(seed=100 + b)
        for k in range(0, 120, 2):
            for j, seat in enumerate(("blue", "red")):
                pf.codec.pack(obs[seat], out[b, k + j])
            obs, _, term, trunc, _ = env.step({s: player.act(obs[s], obs[s]["action_mask"], rng) for s in ("blue", "red")})
            if term["blue"] or trunc["blue"]:
                obs, _ = env.reset(seed=1000 + 10 * b + k)
    return out


def edge_rows(pf, real_rows) -> dict[str, np.ndarray]:
    """One packed row per edge case, built by the codec from an observation (so the bytes are
    ones a rollout could send)."""
    codec, spec = pf.codec, pf.spec
    c, h, w = len(spec.plane_names), spec.height, spec.width
    base = codec.unpack(real_rows[0, :1])
    vector = base["vector"][0]
    noop_only = np.zeros(spec.n_actions, np.int8)
    noop_only[0] = 1
    every = np.ones(spec.n_actions, np.int8)
    # the largest value each plane's storage holds exactly: a unit on every tile
    full = np.empty((c, h, w), np.float32)
    for i, p in enumerate(pf.table.planes):
        full[i] = {"uint8": 255.0, "uint16": 65.535, "float16": 65504.0, "static": 0.0}[p.storage]
    cases = {
        "all_zero_planes_noop_only": ({"spatial": np.zeros((c, h, w), np.float32), "vector": np.zeros_like(vector),
                                       "action_mask": noop_only}),
        "full_board_every_action": {"spatial": full, "vector": vector, "action_mask": every},
        "real_planes_noop_only": {"spatial": base["spatial"][0], "vector": vector, "action_mask": noop_only},
        "real_planes_every_action": {"spatial": base["spatial"][0], "vector": vector, "action_mask": every},
    }
    out = {}
    for name, obs in cases.items():
        row = np.empty((1, codec.row_bytes), np.uint8)
        clipped, rounded = codec.pack(obs, row[0])
        assert clipped == 0 and rounded == 0, name  # exactly storable: the round trip is of these values
        out[name] = row
    return out


def round_arrays(rows: np.ndarray, final_rows: np.ndarray) -> dict[str, np.ndarray]:
    """A codec-1 round of len(rows) learner slots with len(final_rows) truncations."""
    n = len(rows)
    return {
        "group": np.zeros(n, np.int8), "tick": np.arange(n, dtype=np.int32), "ordinal": np.zeros(n, np.int32),
        "rows": rows, "reward": np.zeros(n, np.float32), "terminated": np.zeros(n, np.uint8),
        "truncated": np.zeros(n, np.uint8), "deploy_status": np.full(n, -1, np.int8),
        "final_slots": np.arange(len(final_rows), dtype=np.int16), "final_rows": final_rows,
    }


def over_the_wire(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays as the learner's Decoder hands them over: through encode / decode."""
    frames = encode(Round(instance="i", iteration=0, cycle=1, shard=0), arrays)
    _, out = Decoder(ToLearner).decode([bytes(f) for f in frames])
    return out


# ----------------------------------------------------------------------------- lossless


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_real_rounds_and_edge_rows_come_back_byte_for_byte(pf, real_rows, data):
    edges = edge_rows(pf, real_rows)
    n = data.draw(st.integers(0, 16), label="rows")
    picks = data.draw(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 119)), min_size=n, max_size=n))
    rows = np.stack([real_rows[b, k] for b, k in picks]) if picks else np.empty((0, pf.codec.row_bytes), np.uint8)
    extra = data.draw(st.lists(st.sampled_from(sorted(edges)), max_size=4), label="edge rows")
    if extra:
        rows = np.concatenate([rows, *(edges[e] for e in extra)])
    order = data.draw(st.permutations(range(len(rows))))
    rows = np.ascontiguousarray(rows[list(order)])
    finals = rows[: data.draw(st.integers(0, min(2, len(rows))))]
    sent = compress_round(round_arrays(rows, np.ascontiguousarray(finals)), RowCompressor())
    assert "rows" not in sent and "final_rows" not in sent
    got = decompress_round(over_the_wire(sent), RowDecompressor(pf.codec.row_bytes, MAX_BYTES))
    assert got["rows"].dtype == np.uint8 and got["rows"].flags.c_contiguous
    assert got["rows"].tobytes() == rows.tobytes() and got["rows"].shape == rows.shape
    assert got["final_rows"].tobytes() == finals.tobytes() and got["final_rows"].shape == finals.shape
    for k in ("group", "tick", "reward", "final_slots"):
        assert np.array_equal(got[k], sent[k])


def test_the_mask_the_network_reads_is_rebuilt_exactly(pf, real_rows):
    """Forced rows stay forced (only index 0, the no-op), every-action rows keep all 2,305, and
    each real row's legal ids are the ones it was packed with."""
    edges = edge_rows(pf, real_rows)
    rows = np.concatenate([real_rows[:, :30].reshape(-1, pf.codec.row_bytes), *edges.values()])
    frame = RowCompressor().compress(rows)
    back = RowDecompressor(pf.codec.row_bytes, MAX_BYTES).decompress(frame, len(rows))
    before, after = pf.codec.unpack(rows), pf.codec.unpack(back)
    for k in ("spatial", "vector", "mask"):
        assert np.array_equal(before[k], after[k]), k
    n_edge = len(edges)
    names = list(edges)
    masks = after["mask"][-n_edge:]
    assert np.flatnonzero(masks[names.index("all_zero_planes_noop_only")]).tolist() == [0]
    assert np.flatnonzero(masks[names.index("real_planes_noop_only")]).tolist() == [0]
    assert masks[names.index("full_board_every_action")].sum() == pf.spec.n_actions == 2305
    # a real forced row: the no-op alone, never a card play
    forced = np.flatnonzero(before["mask"][: len(rows) - n_edge].sum(axis=1) == 1)
    assert len(forced) and (after["mask"][forced, 0]).all() and after["mask"][forced].sum() == len(forced)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40).flatmap(lambda rb: st.tuples(st.just(rb), st.binary(min_size=0, max_size=40 * rb).map(
    lambda b: b[: len(b) // rb * rb]))))
def test_any_bytes_round_trip(case):
    row_bytes, raw = case
    rows = np.frombuffer(raw, np.uint8).reshape(-1, row_bytes)
    frame = RowCompressor().compress(rows)
    assert RowDecompressor(row_bytes, MAX_BYTES).decompress(frame, len(rows)).tobytes() == raw


# ----------------------------------------------------------------------------- refusals


class NoExpansion:
    """A decompressor stand-in that fails the test if anything is expanded."""

    def decompress(self, *a, **k):
        raise AssertionError("a refused frame was expanded")


def refusing(row_bytes=100) -> RowDecompressor:
    d = RowDecompressor(row_bytes, MAX_BYTES)
    d._zstd = NoExpansion()
    return d


def frame_header(content_size: int, window_log: int = 10) -> bytes:
    """A zstd frame (RFC 8878 3.1.1) that declares ``content_size`` in an 8-byte field and a
    2^window_log window, holding one empty raw last block: the bomb's header, with no body."""
    magic = (0xFD2FB528).to_bytes(4, "little")
    descriptor = bytes([0b11000100])  # 8-byte content size, not single-segment, a checksum, no dict
    window = bytes([(window_log - 10) << 3])
    return magic + descriptor + window + content_size.to_bytes(8, "little") + bytes([1, 0, 0])


def test_a_frame_that_claims_more_than_the_rounds_rows_is_refused_unexpanded():
    bomb = np.frombuffer(frame_header(1 << 40), np.uint8)
    assert zstandard.get_frame_parameters(bomb).content_size == 1 << 40  # what a trusting reader would allocate
    with pytest.raises(WireError, match=r"declares 1099511627776 B, the round's 3 rows are 300 B") as e:
        refusing().decompress(bomb, 3)
    assert e.value.reason == "wire_size"


def test_a_real_zero_bomb_is_refused_before_expansion():
    """A 4 MB block of zeros (a few hundred bytes compressed) sent as 2 rows of 100 B."""
    small = RowCompressor().compress(np.zeros((40_000, 100), np.uint8))
    assert small.nbytes < 1000
    with pytest.raises(WireError, match="declares 4000000 B, the round's 2 rows are 200 B") as e:
        refusing().decompress(small, 2)
    assert e.value.reason == "wire_size"


def test_a_frame_without_a_declared_size_a_checksum_or_with_a_huge_window_is_refused():
    no_sum = zstandard.ZstdCompressor(write_checksum=False).compress(bytes(300))
    with pytest.raises(WireError, match="carries no content checksum") as e:
        refusing().decompress(np.frombuffer(no_sum, np.uint8), 3)
    assert e.value.reason == "wire_corrupt"
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(300))
    with pytest.raises(WireError, match="does not declare its size; expected 300 B") as e:
        refusing().decompress(np.frombuffer(no_size, np.uint8), 3)
    assert e.value.reason == "wire_size"
    wide = np.frombuffer(frame_header(300, window_log=30), np.uint8)
    with pytest.raises(WireError, match=r"asks for a 1073741824 B window for 300 B") as e:
        refusing().decompress(wide, 3)
    assert e.value.reason == "wire_size"


def test_more_rows_than_the_frame_limit_are_refused_before_the_frame_is_read():
    d = RowDecompressor(15375, max_bytes=1 << 20)
    d._zstd = NoExpansion()
    with pytest.raises(WireError, match="69 rows of 15375 B exceed the frame limit of 1048576 B"):
        d.decompress(np.frombuffer(b"anything", np.uint8), 69)


@pytest.mark.parametrize("mutate,text", [
    (lambda f: b"not a zstd frame at all", "not a zstd frame"),
    (lambda f: b"", "not a zstd frame"),
    (lambda f: f[:-3], "zstd refused the frame"),
    (lambda f: f + b"\x00\x01", "zstd refused the frame"),
    (lambda f: f + f, "zstd refused the frame"),
    (lambda f: f[:-8] + bytes([f[-8] ^ 1]) + f[-7:], "zstd refused the frame"),  # one bit of the body
])
def test_a_corrupt_frame_is_refused_with_a_reason(mutate, text):
    rows = np.arange(300, dtype=np.uint8).reshape(3, 100)
    frame = bytes(RowCompressor().compress(rows))
    bad = np.frombuffer(mutate(frame), np.uint8)
    with pytest.raises(WireError, match=text) as e:
        RowDecompressor(100, MAX_BYTES).decompress(bad, 3)
    assert e.value.reason in ("wire_corrupt", "wire_size")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 64))
def test_no_bytes_make_the_decoder_raise_anything_but_a_refusal(blob, n_rows):
    try:
        rows = RowDecompressor(7, 1 << 12).decompress(np.frombuffer(blob, np.uint8), n_rows)
    except WireError as exc:
        assert exc.reason in WIRE_REFUSALS
    else:
        assert rows.shape == (n_rows, 7)


def test_rows_of_the_wrong_codec_are_refused_by_name():
    rows = np.zeros((2, 10), np.uint8)
    plain = round_arrays(rows, rows[:0])
    packed = compress_round(plain, RowCompressor())
    d = RowDecompressor(10, MAX_BYTES)
    with pytest.raises(WireError, match=r"carries row arrays \['final_rows', 'rows'\]; a rollout welcomed with "
                                        r"wire codec 2 sends \['rows_zstd', 'final_rows_zstd'\]") as e:
        decompress_round(plain, d)
    assert e.value.reason == "wire_codec"
    with pytest.raises(WireError, match="welcomed with wire codec 1 sends") as e:
        decompress_round(packed, None)
    assert e.value.reason == "wire_codec"
    with pytest.raises(WireError, match="wire_codec|carries row arrays"):
        decompress_round({**packed, "rows": rows}, d)
    assert decompress_round(plain, None) is plain  # codec 1: nothing to do


def test_the_frame_holds_the_rows_the_round_counts_not_its_own_word():
    """Two rows in the frame, three learner slots in the round's group: refused."""
    rows = np.ones((2, 10), np.uint8)
    arrays = compress_round(round_arrays(rows, rows[:0]), RowCompressor())
    arrays["group"] = np.zeros(3, np.int8)
    with pytest.raises(WireError, match="declares 20 B, the round's 3 rows are 30 B"):
        decompress_round(arrays, RowDecompressor(10, MAX_BYTES))


def test_round_allows_the_compressed_arrays_and_nothing_else_new():
    assert ARRAYS[Round]["rows_zstd"] == ("uint8", 1) and ARRAYS[Round]["final_rows_zstd"] == ("uint8", 1)


# ----------------------------------------------------------------------------- negotiation

ENGINE = EngineBuild(engine_class="E", calibration_digest="c", build_digest="b", binary_sha256="s",
                     cards_digest="k", royalegym_version="v")


class OldWelcome(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, tag_field="type", tag="welcome"):
    """The Welcome of a rollout built before wire codec 2 (no ``wire_codec``, unknown fields refused)."""

    env: EnvConfig
    master_seed: int
    codec: msgspec.Raw
    engine: msgspec.Raw
    random_legal_noop_prob: float
    rollout: msgspec.Raw


def hello_answers(learner_codec: int, hellos: list[Hello]) -> tuple[list, Collector]:
    port = free_ports(1)[0]
    server = transport.bind_router(f"tcp://127.0.0.1:{port}")
    said: list[str] = []
    cfg = tiny()

    def welcome_for(codec):
        return Welcome(env=cfg.env, master_seed=1, codec=TABLE, engine=ENGINE,
                       random_legal_noop_prob=0.9, rollout=cfg.rollout, wire_codec=codec)

    collector = Collector(server, Decoder(ToLearner), Fleet(), welcome_for, ENGINE, said.append,
                          wire_codec=learner_codec, decompressor=RowDecompressor(10, MAX_BYTES))
    replies = []
    try:
        for hello in hellos:
            client = transport.connect_dealer(f"tcp://127.0.0.1:{port}")
            try:
                transport.send(client, hello)
                deadline = time.monotonic() + 10
                while not client.poll(50, zmq.POLLIN) and time.monotonic() < deadline:
                    collector.poll(50, lambda *a: None)
                assert client.poll(1000, zmq.POLLIN), said
                frames = client.recv_multipart()
                replies.append((Decoder(ToRollout).decode(frames)[0], frames))
            finally:
                client.close(0)
    finally:
        server.close(0)
    return replies, collector


TABLE = CodecTable(version=1, planes=(), height=1, width=1, vector_size=1, n_actions=1, hand_slots=0)


class OldHello(msgspec.Struct, kw_only=True, tag_field="type", tag="hello"):
    """The Hello of a rollout built before wire codec 2: no ``codecs``."""

    instance: str
    host: str
    pid: int
    battles: int
    shards: int
    engine: EngineBuild


def hello(instance: str, **kw) -> Hello:
    return Hello(instance=instance, host="h", pid=1, battles=2, shards=1, engine=ENGINE, **kw)


def test_the_learner_serves_its_codec_to_rollouts_that_speak_it_and_codec_1_to_old_ones():
    old = OldHello(instance="old", host="h", pid=1, battles=2, shards=1, engine=ENGINE)
    assert "codecs" not in msgspec.msgpack.decode(msgspec.msgpack.encode(old))
    replies, collector = hello_answers(2, [old, hello("new", codecs=list(WIRE_CODECS)), hello("v1", codecs=[1])])
    (w_old, frames_old), (w_new, _), (w_v1, _) = replies
    assert isinstance(w_old, Welcome) and w_old.wire_codec == 1
    assert isinstance(w_new, Welcome) and w_new.wire_codec == 2
    assert w_v1.wire_codec == 1
    assert {i: m.wire_codec for i, m in collector.fleet.members.items()} == {"old": 1, "new": 2, "v1": 1}
    # The codec-1 Welcome is one an old rollout reads: no wire_codec field in it at all.
    body = msgspec.msgpack.decode(frames_old[0])["body"]
    assert body["type"] == "welcome" and "wire_codec" not in body
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(body), type=OldWelcome).master_seed == 1


def test_a_learner_on_codec_1_serves_codec_1_to_everyone():
    replies, collector = hello_answers(1, [hello("new", codecs=[1, 2])])
    assert replies[0][0].wire_codec == 1 and collector.fleet.members["new"].wire_codec == 1


def test_a_rollout_with_no_common_codec_is_refused_naming_both():
    replies, collector = hello_answers(2, [hello("future", codecs=[3])])
    reply = replies[0][0]
    assert isinstance(reply, Refused)
    assert "the rollout speaks [3], this learner [1, 2]" in reply.reason
    assert collector.fleet.members == {}


# ----------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_a_run_on_codec_2_trains_on_the_same_bytes_as_on_codec_1(tmp_path):
    """Two tiny runs, one iteration, one on each codec, side by side: the same learner state
    after the update (its digest covers the weights and optimizers, which every packed byte
    of every row reaches), the compressed one at a fraction of the wire bytes."""
    rows = {}
    for codec in (1, 2):
        cfg = tiny_config(tmp_path / f"runs{codec}", env={"max_steps": 12}, services={"wire_codec": codec})
        up, code = run_to_exit(cfg, "--iterations", "1", timeout=240)
        assert code == 0, up.tail()
        (rows[codec],) = read_rows(tmp_path / f"runs{codec}" / "default")
    one, two = rows[1], rows[2]
    assert one["run/state_digest"] == two["run/state_digest"]
    assert one["run/run_id"] != two["run/run_id"]  # codec_version is in the identity
    assert one["health/messages_refused"] == two["health/messages_refused"] == 0
    assert one["throughput/wire_encode_us_per_row"] == 0.0 and two["throughput/wire_encode_us_per_row"] > 0
    assert one["throughput/wire_bytes_per_row"] > 15_000 and two["throughput/wire_bytes_per_row"] < 3_000
    print(json.dumps({k: (one[k], two[k]) for k in one if k.startswith("throughput/")}))


# ----------------------------------------------------------------------------- the bench's arithmetic


def test_the_bench_counts_legality_and_row_bytes_exactly(pf, real_rows):
    from royalefleet.bench.wire import codec_figures, legality_bytes

    edges = edge_rows(pf, real_rows)
    rows = np.concatenate([edges["real_planes_noop_only"], edges["real_planes_every_action"], edges["all_zero_planes_noop_only"]])
    rnd = round_arrays(rows, rows[:0])
    # CSR: ids 1 + 2305 + 1 int16, offsets 4 int32, over 3 rows
    assert legality_bytes(pf.codec, [rnd])["csr_raw"] == pytest.approx((2 * 2307 + 4 * 4) / 3)
    f = codec_figures(pf.codec, [rnd, rnd])
    scalars = 1 + 4 + 4 + 4 + 1 + 1 + 1  # group, tick, ordinal, reward, terminated, truncated, deploy_status
    assert f[1]["mean"] == f[1]["p99"] == pytest.approx(pf.codec.row_bytes + scalars)
    assert f["forced_frac"] == pytest.approx(2 / 3) and f["rows"] == 6 and f[2]["mean"] < 3000
