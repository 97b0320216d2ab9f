"""The torch expansion of packed rows (shared/nn/rows.py) against the codec's numpy unpack:
bit for bit, on thousands of real rows of real battles, under the run's codec table and under
one that stores a plane in float16 (the branch the real table does not use), on random bytes,
and through the update's fetch. On the CPU here; tests/services/learner/test_gpu.py repeats it on CUDA."""

import msgspec
import numpy as np
import pytest
import torch

from royalefleet.bench.update import real_rows
from shared.codec import Codec, CodecError
from shared.config import EnvConfig
from shared.nn.policy import Policy
from shared.nn.rows import STAGING_ROWS, DeviceRows
from shared.preflight import run_preflight

N_ROWS = 3000  # ~8 battles of play, both seats


@pytest.fixture(scope="module")
def pf():
    return run_preflight(EnvConfig(), 11)


@pytest.fixture(scope="module")
def rows(pf):
    return real_rows(EnvConfig(), pf.codec, N_ROWS, seed=5)


def bits_equal(expanded: dict, unpacked: dict) -> None:
    """Every value equal bit for bit (float32 compared as int32 patterns: -0.0 vs 0.0 or two
    NaN payloads would differ here although == would not tell)."""
    assert set(expanded) == set(unpacked)
    for key, ref in unpacked.items():
        got = expanded[key].cpu().numpy()
        assert got.dtype == ref.dtype and got.shape == ref.shape, key
        if ref.dtype == np.float32:
            np.testing.assert_array_equal(got.view(np.int32), ref.view(np.int32), err_msg=key)
        else:
            np.testing.assert_array_equal(got, ref, err_msg=key)


def test_the_real_table_uses_the_integer_and_static_branches(pf):
    kinds = {p.storage for p in pf.table.planes}
    assert {"uint8", "uint16", "static"} <= kinds


def test_expansion_equals_numpy_unpack_on_real_rows(pf, rows):
    device_rows = DeviceRows(pf.codec, "cpu")
    for lo in range(0, N_ROWS, 512):  # minibatch-sized pieces, the last one short
        part = rows[lo : lo + 512]
        bits_equal(device_rows.expand(torch.from_numpy(part)), pf.codec.unpack(part))


def test_expansion_equals_numpy_unpack_with_a_float16_plane(pf):
    """A table that stores one uint8 plane and one uint16 plane as float16 instead (as the codec
    does for a plane with fractional values): rows packed from real play under it."""
    planes = list(pf.table.planes)
    first8 = next(i for i, p in enumerate(planes) if p.storage == "uint8")
    first16 = next(i for i, p in enumerate(planes) if p.storage == "uint16")
    for i in (first8, first16):
        planes[i] = msgspec.structs.replace(planes[i], storage="float16", scale=1.0)
    codec = Codec(msgspec.structs.replace(pf.table, planes=tuple(planes)), pf.codec.statics)
    assert len(codec.idx["float16"]) == 2 and codec.row_bytes != pf.codec.row_bytes
    packed = real_rows(EnvConfig(), codec, 800, seed=9)
    bits_equal(DeviceRows(codec, "cpu").expand(torch.from_numpy(packed)), codec.unpack(packed))


def test_expansion_equals_numpy_unpack_on_random_bytes(pf):
    """Any byte pattern, not only what play produces: every mask bit, every uint16 value
    (finite float16 patterns only: numpy and torch may carry a NaN's payload differently)."""
    rng = np.random.default_rng(3)
    packed = rng.integers(0, 256, (300, pf.codec.row_bytes), dtype=np.uint8)
    vec = packed[:, pf.codec.ovec : pf.codec.omask].view("<f2")
    vec[~np.isfinite(vec)] = 0.5
    bits_equal(DeviceRows(pf.codec, "cpu").expand(torch.from_numpy(packed)), pf.codec.unpack(packed))


def test_bad_input_is_refused_by_shape(pf):
    device_rows = DeviceRows(pf.codec, "cpu")
    with pytest.raises(ValueError, match=rf"expand wants \(B, {pf.codec.row_bytes}\) uint8 rows, got \(2, 10\)"):
        device_rows.expand(torch.zeros((2, 10), dtype=torch.uint8))
    with pytest.raises(CodecError, match="needs the static planes"):
        DeviceRows(Codec(pf.table), "cpu")


def test_gather_and_upload_give_the_rows_in_index_order(pf, rows):
    device_rows = DeviceRows(pf.codec, "cpu")
    index = np.random.default_rng(1).permutation(N_ROWS)[: STAGING_ROWS + 37]  # two slabs, the second short
    assert torch.equal(device_rows.gather(rows, index), torch.from_numpy(rows[index]))
    assert torch.equal(device_rows.upload(rows[:5]), torch.from_numpy(rows[:5]))


def test_the_cpu_fetch_is_the_numpy_unpack_of_the_same_rows(pf, rows):
    """The learner's update on the CPU: unchanged numbers (Policy.fetcher is obs_batch of the
    gathered rows, the numpy unpack)."""
    policy = Policy(None, pf.codec, torch.device("cpu"))
    assert policy.device_rows is None
    rect = rows[:600].reshape(20, 30, -1)  # (T, R, row_bytes), as the rectangle holds them
    t_idx, r_idx = np.nonzero(np.arange(600).reshape(20, 30) % 3 == 0)
    fetch = policy.fetcher(rect.reshape(-1, pf.codec.row_bytes), t_idx * 30 + r_idx)
    cells = np.array([0, 4, 5, 150, 199])
    bits_equal(fetch(cells), pf.codec.unpack(rect[t_idx[cells], r_idx[cells]]))
