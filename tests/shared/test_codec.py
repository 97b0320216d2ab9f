"""The observation codec on REAL RoyaleGym observations (the table run_preflight decides, and a
bit-exact round trip of random-legal self-play), and on hand-built tables: refusals, the clip
and rounding counters, the row layout."""

import math

import numpy as np
import pytest

from shared.codec import (
    CODEC_VERSION, MIN_TABLE_STATES, Codec, CodecError, decide_table, describe_table, table_digest,
)
from shared.config import EnvConfig
from shared.envs import ObsSpec
from shared.messages import CodecTable, PlaneCodec
from shared.preflight import run_preflight
from tests.shared.selfplay import random_legal_observations

MASTER_SEED = 20260921
HP_PLANES = {"own_hp", "enemy_hp"}
STATIC_PLANES = {"water", "no_deploy"}
UINT8_PLANES = {
    "own_ground_troops", "own_air_troops", "own_buildings", "own_towers",
    "enemy_ground_troops", "enemy_air_troops", "enemy_buildings", "enemy_towers",
    "own_deploying", "enemy_deploying", "enemy_troop_zone", "own_spells", "enemy_spells",
    "own_spell_aim", "own_stunned", "enemy_stunned",
}


@pytest.fixture(scope="module")
def preflight():
    return run_preflight(EnvConfig(), MASTER_SEED)


@pytest.fixture(scope="module")
def real_obs():
    """~300 decisions of random-legal self-play (no-op probability 0.5, so far more cards are
    played than in the preflight's own 0.9 sample), both seats: 600 observations, copied."""
    return random_legal_observations(EnvConfig(), 300, rng_seed=12345, reset_seed=777, next_reset=1000)


def by_storage(table):
    groups = {}
    for p in table.planes:
        groups.setdefault(p.storage, set()).add(p.name)
    return groups


# ----------------------------------------------------------------------------- the real table


def test_preflight_decides_the_table_by_plane_name(preflight):
    table, spec = preflight.table, preflight.spec
    assert table.version == CODEC_VERSION
    assert tuple(p.name for p in table.planes) == spec.plane_names
    assert set(spec.static_planes) == STATIC_PLANES
    groups = by_storage(table)
    assert groups == {"uint8": UINT8_PLANES, "uint16": HP_PLANES, "static": STATIC_PLANES}
    assert all(p.scale == 1000.0 for p in table.planes if p.storage == "uint16")
    assert all(p.scale == 1.0 for p in table.planes if p.storage != "uint16")
    assert (table.height, table.width, table.vector_size, table.n_actions, table.hand_slots) == (32, 18, 1783, 2305, 4)
    assert preflight.statics.shape == (2, 32, 18) and preflight.statics.dtype == np.float32
    assert describe_table(table).startswith("codec v1: uint8 16 (own_ground_troops, ")
    assert len(table_digest(table)) == 16


def test_row_bytes_follows_the_formula(preflight):
    codec, t = preflight.codec, preflight.table
    hw = t.height * t.width
    n8, n16, nf = (sum(p.storage == k for p in t.planes) for k in ("uint8", "uint16", "float16"))
    assert (n8, n16, nf) == (16, 2, 0)
    formula = hw * (n8 + 2 * n16 + 2 * nf) + 2 * t.vector_size + math.ceil(t.n_actions / 8)
    assert codec.row_bytes == formula == 576 * 20 + 3566 + 289 == 15375


def test_real_observations_round_trip_exactly(preflight, real_obs):
    codec, spec = preflight.codec, preflight.spec
    rows, clipped, rounded = codec.pack_many(real_obs)
    assert rows.shape == (600, 15375) and rows.dtype == np.uint8
    assert (clipped, rounded) == (0, 0)
    out = codec.unpack(rows)
    spatial = np.stack([o["spatial"] for o in real_obs])
    vector = np.stack([o["vector"] for o in real_obs])
    mask = np.stack([o["action_mask"] for o in real_obs]) != 0

    # Bit-exact for every integer and static plane, by name.
    names = spec.plane_names
    for kind, planes in (("uint8", UINT8_PLANES), ("uint16", HP_PLANES), ("static", STATIC_PLANES)):
        for name in planes:
            c = names.index(name)
            assert np.array_equal(out["spatial"][:, c].view(np.uint32), spatial[:, c].view(np.uint32)), (kind, name)
    # The sample is not trivial: hit points in thousandths, several unit counts, played cards.
    hp = spatial[:, names.index("own_hp")]
    assert len(np.unique(hp)) > 20 and np.any(hp != np.rint(hp))
    assert sum(int(m.sum()) > 1 for m in mask) > 50

    # The mask, bit for bit; and mask_planes (not stored) is the mask without its no-op, reshaped.
    assert out["mask"].dtype == bool and np.array_equal(out["mask"], mask)
    planes = np.stack([o["mask_planes"] for o in real_obs])
    assert np.array_equal(out["mask"][:, 1:].reshape(planes.shape), planes != 0)

    # The vector: exactly its float16 rounding, so within half an ulp (relative 2**-11 <= 2**-10).
    assert np.array_equal(out["vector"], vector.astype(np.float16).astype(np.float32))
    nonzero = vector != 0
    assert np.abs(vector[nonzero]).min() >= 2.0**-14  # all normal halves here: a relative bound holds
    rel = np.abs(out["vector"][nonzero] - vector[nonzero]) / np.abs(vector[nonzero])
    assert rel.max() <= 2.0**-11
    assert np.array_equal(out["vector"][~nonzero], vector[~nonzero])


def test_packing_is_deterministic_and_defines_every_byte(preflight, real_obs):
    codec = preflight.codec
    a = np.full(codec.row_bytes, 0xAB, np.uint8)
    b = np.full(codec.row_bytes, 0x11, np.uint8)
    codec.pack(real_obs[17], a)
    codec.pack(real_obs[17], b)
    assert np.array_equal(a, b)


def test_decide_table_refuses_a_small_sample(preflight, real_obs):
    spatial = np.stack([o["spatial"] for o in real_obs])
    high = np.full(len(preflight.spec.plane_names), 64.0, np.float32)
    with pytest.raises(CodecError) as info:
        decide_table(preflight.spec, high, spatial)
    assert str(info.value) == f"codec table needs at least {MIN_TABLE_STATES} sampled observations, got 600"
    # 1000 real observations (some repeated) decide the same table as the preflight's.
    table = decide_table(preflight.spec, high, np.concatenate([spatial, spatial[:400]]))
    assert table == preflight.table


def test_unpacking_without_statics_raises(preflight, real_obs):
    codec = Codec(preflight.table)  # as a rollout holds it
    rows, _, _ = codec.pack_many(real_obs[:2])
    assert np.array_equal(rows, preflight.codec.pack_many(real_obs[:2])[0])  # packing needs no statics
    with pytest.raises(CodecError, match=r"unpacking needs the static planes; construct Codec\(table, statics\)"):
        codec.unpack(rows)
    with pytest.raises(CodecError, match=r"static planes of shape \(3, 32, 18\) do not match the table"):
        Codec(preflight.table, np.zeros((3, 32, 18), np.float32))


def test_a_value_that_breaks_the_table_is_clipped_or_rounded_and_counted(preflight, real_obs):
    codec, names = preflight.codec, preflight.spec.plane_names
    g, hp = names.index("own_ground_troops"), names.index("enemy_hp")
    obs = {k: v.copy() for k, v in real_obs[0].items()}
    obs["spatial"][g] = 0.0
    obs["spatial"][hp] = 0.0
    row = np.empty(codec.row_bytes, np.uint8)

    def once(plane, y, x, value):
        o = {k: v.copy() for k, v in obs.items()}
        o["spatial"][plane, y, x] = value
        counts = codec.pack(o, row)
        return counts, float(codec.unpack(row[None])["spatial"][0, plane, y, x])

    assert once(g, 3, 4, 300.0) == ((1, 0), 255.0)     # above uint8: clipped to 255
    assert once(g, 3, 4, -2.0) == ((1, 0), 0.0)        # below: clipped to 0
    assert once(g, 3, 4, 1.5) == ((0, 1), 2.0)         # not whole: rounded (half to even)
    assert once(g, 3, 4, 2.5) == ((0, 1), 2.0)
    assert once(g, 3, 4, 300.5) == ((1, 1), 255.0)     # both
    assert once(g, 3, 4, 7.0) == ((0, 0), 7.0)         # fine
    assert once(hp, 0, 0, 0.0004) == ((0, 1), 0.0)     # not a whole thousandth: rounded to 0
    assert once(hp, 0, 0, 70.0) == ((1, 0), np.float32(65.535))  # 70000 thousandths > 65535: clipped
    assert once(hp, 0, 0, 1.234) == ((0, 0), np.float32(1.234))
    # pack_many sums the counts over rows.
    bad = {k: v.copy() for k, v in obs.items()}
    bad["spatial"][g, 0, :3] = [300.0, 1.5, -1.0]
    _, clipped, rounded = codec.pack_many([bad, obs, bad])
    assert (clipped, rounded) == (4, 2)


def test_a_static_plane_is_not_stored_and_a_changed_one_is_not_counted(preflight, real_obs):
    """The actual behaviour: a static plane is never stored per row; unpack fills in the learner's
    copy. A row whose static plane differed (a RoyaleGym change) comes back with the learner's
    statics and counts nothing: the only guard is run_preflight, which refuses static planes
    that differ between seats or states in its sample (PreflightError)."""
    codec, names = preflight.codec, preflight.spec.plane_names
    w = names.index("water")
    obs = {k: v.copy() for k, v in real_obs[5].items()}
    obs["spatial"][w] = 1.0 - obs["spatial"][w]
    row = np.empty(codec.row_bytes, np.uint8)
    assert codec.pack(obs, row) == (0, 0)
    back = codec.unpack(row[None])["spatial"][0, w]
    assert np.array_equal(back, preflight.statics[list(preflight.spec.static_planes).index("water")])
    assert not np.array_equal(back, obs["spatial"][w])


# ----------------------------------------------------------------------------- hand-built tables

SPEC = ObsSpec(plane_names=("ints", "milli", "floats", "wide_ints", "stat", "neg_ints", "milli_66"),
               static_planes=("stat",), height=2, width=3, vector_size=4, vector_fields={"v": (0, 4)},
               n_actions=1 + 4 * 6, hand_slots=4, decision_ms=500)
HIGH = np.array([255, 65, 10, 300, 1, 10, 66], np.float32)


def synthetic(n=MIN_TABLE_STATES, seed=0):
    rng = np.random.default_rng(seed)
    s = np.zeros((n, 7, 2, 3), np.float32)
    s[:, 0] = rng.integers(0, 256, (n, 2, 3))                          # whole numbers <= 255
    s[:, 1] = (rng.integers(0, 65001, (n, 2, 3)) / 1000).astype(np.float32)   # thousandths
    s[:, 2] = rng.random((n, 2, 3), dtype=np.float32) * 10             # arbitrary reals
    s[:, 3] = rng.integers(0, 301, (n, 2, 3))                          # whole, but declared up to 300
    s[:, 4] = rng.random((n, 2, 3))                                    # "static" yet varying
    s[:, 5] = rng.integers(-3, 4, (n, 2, 3))                           # whole, but negative too
    s[:, 6] = (rng.integers(0, 1000, (n, 2, 3)) / 1000).astype(np.float32)    # thousandths, high 66
    return s


def test_decide_table_on_a_hand_built_sample():
    table = decide_table(SPEC, HIGH, synthetic())
    assert [(p.name, p.storage, p.scale) for p in table.planes] == [
        ("ints", "uint8", 1.0),
        ("milli", "uint16", 1000.0),      # 65 * 1000 <= 65535
        ("floats", "float16", 1.0),
        ("wide_ints", "float16", 1.0),    # > 255 declared, and 300 * 1000 > 65535
        ("stat", "static", 1.0),          # declared static: stored static though the sample varies
        ("neg_ints", "float16", 1.0),     # whole numbers, but negative: no unsigned storage fits
        ("milli_66", "float16", 1.0),     # 66 * 1000 > 65535
    ]
    with pytest.raises(CodecError, match=f"at least {MIN_TABLE_STATES} sampled observations, got 999"):
        decide_table(SPEC, HIGH, synthetic(999))


def test_hand_built_round_trip_with_float16_planes_and_odd_layout():
    table = decide_table(SPEC, HIGH, synthetic())
    statics = np.full((1, 2, 3), 0.5, np.float32)
    codec = Codec(table, statics)
    hw, n8, n16, nf = 6, 1, 1, 4
    # n8 * HW = 6 bytes: even, no pad byte. row = 6 + 2*6 + 2*4*6 + 2*4 + ceil(25/8) = 6+12+48+8+4
    assert codec.row_bytes == hw * (n8 + 2 * n16 + 2 * nf) + 2 * 4 + math.ceil(25 / 8) == 78
    s = synthetic(4, seed=1)
    s[:, 4] = 0.5
    rng = np.random.default_rng(2)
    obs = [{"spatial": s[i], "vector": rng.random(4, dtype=np.float32),
            "action_mask": (rng.random(25) < 0.3).astype(np.int8)} for i in range(4)]
    rows, clipped, rounded = codec.pack_many(obs)
    assert (clipped, rounded) == (0, 0)
    out = codec.unpack(rows)
    for c, p in enumerate(table.planes):
        want = s[:, c] if p.storage != "float16" else s[:, c].astype(np.float16).astype(np.float32)
        assert np.array_equal(out["spatial"][:, c], want), p.name
    assert np.array_equal(out["mask"], np.stack([o["action_mask"] for o in obs]) != 0)


def test_an_odd_uint8_block_gets_a_defined_pad_byte():
    """With n8 * HW odd the uint16 block starts one byte later: row_bytes is the formula + 1, and
    the pad byte is written (zero), so a row's bytes are a function of the observation alone."""
    table = CodecTable(version=1, planes=(PlaneCodec("a", "uint8", 1.0), PlaneCodec("b", "uint16", 1000.0)),
                       height=1, width=3, vector_size=1, n_actions=9, hand_slots=1)
    codec = Codec(table, np.zeros((0, 1, 3), np.float32))
    assert codec.row_bytes == 3 * (1 + 2) + 2 + 2 + 1 == 14
    obs = {"spatial": np.array([[[1, 2, 3]], [[0.001, 2.5, 65.535]]], np.float32),
           "vector": np.array([0.25], np.float32), "action_mask": np.array([1, 0, 0, 0, 0, 0, 0, 0, 1], np.int8)}
    a = np.full(14, 0xFF, np.uint8)
    assert codec.pack(obs, a) == (0, 0)
    assert a[3] == 0
    assert a.tobytes() == bytes([1, 2, 3, 0]) + np.array([1, 2500, 65535], "<u2").tobytes() \
        + np.array([0.25], "<f2").tobytes() + bytes([0b00000001, 0b00000001])
    back = codec.unpack(a[None])
    assert np.array_equal(back["spatial"][0], obs["spatial"])
    assert back["mask"][0].tolist() == [True] + [False] * 7 + [True]


def test_a_table_of_another_version_is_refused():
    table = CodecTable(version=CODEC_VERSION + 1, planes=(), height=1, width=1, vector_size=1, n_actions=1,
                       hand_slots=0)
    with pytest.raises(CodecError, match=f"codec table version {CODEC_VERSION + 1}; this build packs version {CODEC_VERSION}"):
        Codec(table)
