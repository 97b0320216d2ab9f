"""Demonstration shards (shared/demos.py): the head-frame mapping, the CSR form and its
invariants, the returns, and the refusals (a digest that differs, a file that changed)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from shared.demos import (
    DemoDigests, DemosError, check_arrays, concat_shards, csr_contains, csr_from_masks, discounted_returns,
    head_action, read_shard, shard_bytes, teacher_action,
)

DIGESTS = DemoDigests(env_spec_digest="e" * 16, obs_digest="o" * 16, codec_table_digest="c" * 16, codec_version=1,
                      row_bytes=3)


def test_head_action_is_one_plus_slot_tile_in_y_major_order():
    assert head_action(0, 0, 0, height=32, width=18) == 1
    assert head_action(1, 7, 5, height=32, width=18) == 1 + 576 + 5 * 18 + 7 == 674
    assert head_action(3, 17, 31, height=32, width=18) == 2304
    with pytest.raises(ValueError, match=r"tile \(x=18, y=0\) slot 0 is off the 18x32 grid"):
        head_action(0, 18, 0, height=32, width=18)


class _SwappedParser:
    """A parser whose index is laid out x-major: decode gives (slot, x, y) of that layout."""

    def decode(self, a):
        a -= 1
        slot, rest = divmod(a, 576)
        x, y = divmod(rest, 32)
        return slot, x, y


def test_teacher_action_re_encodes_the_parsers_decoding_and_keeps_noop_and_buttons():
    grid = dict(height=32, width=18, n_grid=2305)
    # x-major index of (slot 2, x 3, y 4): 1 + 2*576 + 3*32 + 4 = 1253 -> ours 1 + 1152 + 4*18 + 3 = 1228
    assert teacher_action(1253, _SwappedParser(), **grid) == 1228
    assert teacher_action(0, _SwappedParser(), **grid) == 0
    assert teacher_action(2305, _SwappedParser(), **grid) == 2305  # a button follows the grid in both frames


def test_royalegym_parser_agrees_with_our_head_frame_at_the_corners():
    from shared.config import profile
    from shared.envs import build_env

    env = build_env(profile("tiny").env)
    env.reset(seed=1)
    parser = env.action_parser
    grid = dict(height=32, width=18, n_grid=2305)
    for slot, x, y in ((0, 0, 0), (1, 7, 5), (3, 17, 31), (2, 9, 16)):
        a = parser.encode(slot, x, y)
        assert teacher_action(a, parser, **grid) == a == head_action(slot, x, y, height=32, width=18)


def test_csr_from_masks_and_membership():
    masks = np.array([[1, 0, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], bool)
    ids, offsets = csr_from_masks(masks)
    assert ids.dtype == np.int16 and offsets.dtype == np.int32
    assert ids.tolist() == [0, 2, 0, 0, 1, 2, 3]
    assert offsets.tolist() == [0, 2, 3, 7]
    assert csr_contains(ids, offsets, np.array([2, 1, 3])).tolist() == [True, False, True]


def test_discounted_returns_by_hand():
    assert discounted_returns(np.array([0.0, 0.0, 1.0]), 0.5).tolist() == [0.25, 0.5, 1.0]
    assert discounted_returns(np.array([1.0, -1.0]), 1.0).tolist() == [0.0, -1.0]


def _arrays(masks, actions, battle=7):
    ids, offsets = csr_from_masks(np.asarray(masks, bool))
    n = len(actions)
    return {
        "observations": np.arange(3 * n, dtype=np.uint8).reshape(n, 3), "actions": np.asarray(actions, np.int64),
        "action_legal": csr_contains(ids, offsets, np.asarray(actions)), "legal_ids": ids, "legal_offsets": offsets,
        "returns": np.linspace(0, 1, n).astype(np.float32), "outcomes": np.ones(n, np.int8),
        "battles": np.full(n, battle, np.int64), "seats": np.zeros(n, np.int8),
        "decisions": np.arange(n, dtype=np.int32), "forced": np.diff(offsets) == 1,
    }


def test_check_arrays_holds_the_csr_invariants():
    a = _arrays([[1, 0, 1], [1, 0, 0]], [2, 0])
    check_arrays(a, 3)
    bad = dict(a, forced=np.array([False, False]))
    with pytest.raises(ValueError, match="forced must be exactly the rows whose only legal id is the no-op"):
        check_arrays(bad, 3)
    bad = dict(a, legal_ids=np.array([2, 0, 0], np.int16))
    with pytest.raises(ValueError, match="first legal id must be the no-op"):
        check_arrays(bad, 3)
    bad = dict(a, legal_offsets=np.array([0, 2, 4], np.int32))
    with pytest.raises(ValueError, match="legal_offsets must be"):
        check_arrays(bad, 3)


def test_concat_rebases_the_offsets():
    a = _arrays([[1, 0, 1], [1, 0, 0]], [2, 0], battle=1)
    b = _arrays([[1, 1, 1]], [1], battle=2)
    c = concat_shards([a, b])
    assert c["legal_offsets"].tolist() == [0, 2, 3, 6]
    assert c["legal_ids"].tolist() == [0, 2, 0, 0, 1, 2]
    assert c["battles"].tolist() == [1, 1, 2]
    check_arrays(c, 3)


def test_a_shard_round_trips_and_is_refused_by_digest_field_and_by_sha256(tmp_path):
    a = _arrays([[1, 0, 1], [1, 0, 0]], [2, 0])
    data = shard_bytes(a, DIGESTS)
    path = tmp_path / "shard-00000.npz.zst"
    path.write_bytes(data)
    back = read_shard(path, hashlib.sha256(data).hexdigest(), DIGESTS)
    assert all(np.array_equal(back[k], a[k]) for k in a)
    other = DemoDigests(env_spec_digest="f" * 16, obs_digest="o" * 16, codec_table_digest="c" * 16, codec_version=1,
                        row_bytes=3)
    with pytest.raises(DemosError) as info:
        read_shard(path, None, other)
    assert info.value.fields == ("env_spec_digest",)
    assert f"env_spec_digest is {'e' * 16!r}, this run's is {'f' * 16!r}" in str(info.value)
    with pytest.raises(DemosError, match="is not the manifest's 00"):
        read_shard(path, "00" * 32, DIGESTS)
