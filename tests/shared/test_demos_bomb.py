"""A demo shard that decompresses past its cap is refused (issue 38), whether the zstd frame
is the bomb (declared size or not) or a deflated member inside the npz is, and a real shard
reads as before."""

from __future__ import annotations

import hashlib
import io
import zipfile

import numpy as np
import pytest
import zstandard

from shared.demos import DemosError, decompress_capped, read_shard, shard_bytes
from tests.shared.test_demos import DIGESTS, _arrays

MIB = 1 << 20


def test_a_zstd_bomb_is_refused_at_the_cap_declared_size_or_not(tmp_path):
    zeros = b"\0" * (8 * MIB)
    for frame in (zstandard.ZstdCompressor(level=19).compress(zeros),
                  zstandard.ZstdCompressor(write_content_size=False).compress(zeros)):
        assert len(frame) < 4096  # 8 MiB from a few hundred bytes
        path = tmp_path / "shard-00000.npz.zst"
        path.write_bytes(frame)
        with pytest.raises(DemosError, match=rf"{path}: decompresses past 1,048,576 bytes \(MAX_SHARD_BYTES\); "
                                             "refused as a decompression bomb"):
            read_shard(path, None, DIGESTS, max_bytes=MIB)
    assert decompress_capped(zstandard.ZstdCompressor().compress(zeros), "x", 8 * MIB) == zeros  # at the cap: whole
    with pytest.raises(DemosError, match="x: not a zstd shard"):
        decompress_capped(b"not zstd at all", "x")


def test_a_deflated_member_inside_the_npz_is_a_bomb_too(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("observations.npy", b"\0" * (8 * MIB))
    frame = zstandard.ZstdCompressor().compress(buf.getvalue())
    path = tmp_path / "shard-00000.npz.zst"
    path.write_bytes(frame)
    assert len(buf.getvalue()) < MIB  # the zstd layer stays under the cap; the member does not
    with pytest.raises(DemosError, match=r"its arrays declare 8,388,608 bytes, past 1,048,576"):
        read_shard(path, None, DIGESTS, max_bytes=MIB)


def test_a_real_shard_reads_under_a_cap_just_above_its_size(tmp_path):
    a = _arrays([[1, 0, 1], [1, 0, 0]], [2, 0])
    data = shard_bytes(a, DIGESTS)
    path = tmp_path / "shard-00000.npz.zst"
    path.write_bytes(data)
    size = len(zstandard.ZstdDecompressor().decompress(data))
    back = read_shard(path, hashlib.sha256(data).hexdigest(), DIGESTS, max_bytes=size)
    assert all(np.array_equal(back[k], a[k]) for k in a)
    with pytest.raises(DemosError, match="decompresses past"):
        read_shard(path, None, DIGESTS, max_bytes=size - 1)
