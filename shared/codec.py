"""The observation codec: one seat-observation packed into one row of bytes.

The rule is versioned (``CODEC_VERSION``); the table it produces (``CodecTable``) is data,
decided once by the learner from the DECLARED observation space and a sample of real
observations, and sent to every rollout. Per key:

=================  =========================================================  ===========
key                storage                                                    exact?
=================  =========================================================  ===========
spatial plane      ``static`` if the builder's layout DECLARES it static:      exact
                   not stored per row, held once (never inferred from a
                   sample: a tower plane is constant in any sample where no
                   tower fell)
                   ``uint8`` if declared bounds lie in [0, 255] and every     exact
                   sampled value is a whole number
                   ``uint16`` scale 1000 if every sampled value is a whole    exact
                   number of thousandths (the hit-point planes hold summed
                   hp / 1000) and 1000 x the declared bound fits
                   ``float16`` otherwise                                      to fp16
vector             float16                                                    to fp16
action_mask        bit-packed, LSB first, ceil(A / 8) bytes                   exact
mask_planes        not stored: it is ``action_mask[1:]`` reshaped (RoyaleGym   exact
                   hands out a view of the same memory)
card_ids           uint8 as they are, right after the uint8 planes, when the   exact
                   builder has card identity (``ObsSpec.id_planes``; the
                   table's ``id_planes``); never a float plane, where a stored
                   6.997 would read as card 6
=================  =========================================================  ===========

The ``uint16`` storage is where we differ from the reference codec (which stores the two
hit-point planes as float16, which is not lossless there): the same two bytes per cell, and
the round trip is exact. A value that breaks the table at run time (a non-integer headed for an
integer plane, or one above its range) is rounded or clipped and COUNTED, never silently
stored: ``health/obs_codec_rounded`` and ``health/obs_codec_clipped`` are exactly 0 on a
healthy run.

Row layout, in bytes: [uint8 planes][card-id planes][pad][uint16 planes][float16 planes][vector
float16][mask bits], ``row_bytes = HW * (n8 + nid + 2 n16 + 2 n16f) + pad + 2 V + ceil(A / 8)``
(pad: one byte when ``HW * (n8 + nid)`` is odd). The mask bits stay last, so whatever reads a
row's legality from ``omask`` to the end reads the same bytes with or without card ids.

How rows travel (the WIRE codec, negotiated per rollout in Hello / Welcome; docs/protocol.md):

==  ==========================================================================================
1   a round's packed rows as they are, one raw (n, row_bytes) frame (``rows``, ``final_rows``)
2   the same bytes as ONE zstd frame per array (``rows_zstd``, ``final_rows_zstd``), level
    ``ZSTD_LEVEL``, with its content size and a checksum. Lossless: the learner gets back the
    packed rows byte for byte, mask bits included.
==  ==========================================================================================

Legality in codec 2 stays the row's packed mask bits inside the compressed frame: measured on
real rounds they add at most ~9 B a row to the frame, against 28-172 B a row for seed 000's CSR
(``legal_ids`` int16 + ``legal_offsets`` int32, head frame) even compressed by the same zstd,
and 65-875 B a row raw (forced-rich and choice-rich rounds; docs/throughput.md). The learner never trusts a frame's header: the frame must
declare exactly ``n x row_bytes`` bytes (n from the round's own ``group`` / ``final_slots``, so at
most the shard's slots) before anything is expanded (``RowDecompressor``).
"""

from __future__ import annotations

import hashlib

import msgspec
import numpy as np
import zstandard

from shared.envs import ObsSpec
from shared.messages import CodecTable, PlaneCodec

CODEC_VERSION = 1
"""The row rule (the table's ``version``): how one observation becomes one row."""
WIRE_RAW = 1
WIRE_ZSTD = 2
WIRE_CODECS = (WIRE_RAW, WIRE_ZSTD)
"""The wire codecs this build speaks (module docstring). A Hello lists the ones a rollout
speaks; the learner's Welcome names the one it serves that rollout."""
ZSTD_LEVEL = 1
"""Measured, not the maximum (docs/throughput.md): on real rounds level 1 is as fast as any
level and within ~10 % of the bytes of levels 2-3; level 5 costs 4x the rollout's time for ~15 %
fewer bytes, level 9 10x. The rows are compressed as they lie: transposing them first saves ~35
B a row but doubles the rollout's time (the strided copy costs as much as zstd itself)."""
WIRE_REFUSALS = ("wire_codec", "wire_size", "wire_corrupt")
"""Why the learner refuses a round's compressed rows (its ``messages_refused_total{reason}``):
a codec the rollout was not welcomed with or a missing array, a frame that declares or expands
to another size than the round's rows, a frame zstd cannot read (or with bytes after it)."""
MIN_TABLE_STATES = 1000
UINT16_SCALE = 1000.0


class CodecError(ValueError):
    pass


def decide_table(spec: ObsSpec, declared_high: np.ndarray, samples: np.ndarray) -> CodecTable:
    """Decide each plane's storage.

    ``declared_high`` (C,) is the observation space's upper bound per plane; ``samples`` is
    (N, C, H, W) float32 spatial observations from real play, N >= MIN_TABLE_STATES (a sample
    too small to reach the states a plane varies in would decide the row size wrongly and in
    silence). Raises CodecError otherwise.
    """
    if samples.shape[0] < MIN_TABLE_STATES:
        raise CodecError(f"codec table needs at least {MIN_TABLE_STATES} sampled observations, got {samples.shape[0]}")
    planes = []
    for c, name in enumerate(spec.plane_names):
        if name in spec.static_planes:
            planes.append(PlaneCodec(name, "static", 1.0))
            continue
        values = samples[:, c]
        high = float(declared_high[c])
        # Integer storage is unsigned: a sample holding a negative value could not round-trip.
        nonneg = bool(values.min() >= 0) if values.size else True
        if high <= 255 and nonneg and np.array_equal(values, np.rint(values)):
            planes.append(PlaneCodec(name, "uint8", 1.0))
            continue
        milli = np.rint(values.astype(np.float64) * UINT16_SCALE)
        if high * UINT16_SCALE <= 65535 and nonneg and np.array_equal((milli / UINT16_SCALE).astype(np.float32), values):
            planes.append(PlaneCodec(name, "uint16", UINT16_SCALE))
            continue
        planes.append(PlaneCodec(name, "float16", 1.0))
    return CodecTable(
        version=CODEC_VERSION,
        planes=tuple(planes),
        height=spec.height,
        width=spec.width,
        vector_size=spec.vector_size,
        n_actions=spec.n_actions,
        hand_slots=spec.hand_slots,
        id_planes=spec.id_planes,
    )


def table_digest(table: CodecTable) -> str:
    """sha256 (16 hex) of the table's canonical JSON: two runs whose tables differ store
    different bytes and are not comparable."""
    return hashlib.sha256(msgspec.json.encode(table)).hexdigest()[:16]


def describe_table(table: CodecTable) -> str:
    """A one-paragraph summary for start-up output."""
    groups: dict[str, list[str]] = {}
    for p in table.planes:
        groups.setdefault(p.storage, []).append(p.name)
    parts = [f"{k} {len(v)} ({', '.join(v)})" for k, v in groups.items()]
    ids = f"; card ids uint8 x{table.id_planes}" if table.id_planes else ""
    return (f"codec v{table.version}: " + "; ".join(parts) + ids
            + f"; vector float16 x{table.vector_size}; mask {table.n_actions} bits")


POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.int32)
"""Set bits of each byte value 0..255."""


def legal_counts(rows: np.ndarray, mask_offset: int) -> np.ndarray:
    """(B,) int32: legal actions (the no-op included) of packed rows (B, row_bytes) uint8 whose
    action mask bits start at byte ``mask_offset`` (``Codec.omask``); the pad bits are zero."""
    return POPCOUNT[rows[:, mask_offset:]].sum(axis=1)


class Codec:
    """Packs and unpacks rows for one CodecTable.

    ``statics`` (n_static, H, W) float32 holds the static planes in table order; it is needed
    only to unpack (the learner has it; a rollout does not)."""

    def __init__(self, table: CodecTable, statics: np.ndarray | None = None):
        if table.version != CODEC_VERSION:
            raise CodecError(f"codec table version {table.version}; this build packs version {CODEC_VERSION}")
        self.table = table
        hw = table.height * table.width
        self.hw = hw
        kinds = [p.storage for p in table.planes]
        self.idx = {k: np.array([i for i, s in enumerate(kinds) if s == k], dtype=np.int64) for k in
                    ("uint8", "uint16", "float16", "static")}
        n8, n16, nf = (len(self.idx[k]) for k in ("uint8", "uint16", "float16"))
        self.oid = n8 * hw  # the card-id planes (table.id_planes), bytes as the builder gives them
        self.oid_end = self.oid + table.id_planes * hw
        self.o16 = self.oid_end + self.oid_end % 2
        self.of16 = self.o16 + 2 * n16 * hw
        self.ovec = self.of16 + 2 * nf * hw
        self.omask = self.ovec + 2 * table.vector_size
        self.mask_bytes = (table.n_actions + 7) // 8
        self.row_bytes = self.omask + self.mask_bytes
        self.scale16 = np.array([table.planes[i].scale for i in self.idx["uint16"]], dtype=np.float32)
        if statics is not None and statics.shape != (len(self.idx["static"]), table.height, table.width):
            raise CodecError(f"static planes of shape {statics.shape} do not match the table")
        self.statics = statics

    # ------------------------------------------------------------------ packing (rollout)

    def pack(self, obs: dict, out: np.ndarray) -> tuple[int, int]:
        """Pack one seat-observation (RoyaleGym dict: ``spatial`` (C,H,W) float32, ``vector``
        (V,) float32, ``action_mask`` (A,) int8) into ``out`` (row_bytes,) uint8.
        Returns (clipped, rounded): how many values broke the table."""
        spatial, t = obs["spatial"], self.table
        clipped = rounded = 0
        hw = self.hw
        if len(self.idx["uint8"]):
            v = spatial[self.idx["uint8"]]
            r = np.rint(v)
            rounded += int(np.count_nonzero(r != v))
            over = r > 255
            clipped += int(np.count_nonzero(over) + np.count_nonzero(r < 0))
            np.clip(r, 0, 255, out=r)
            out[: len(self.idx["uint8"]) * hw] = r.reshape(-1)
        if t.id_planes:
            ids = obs.get("card_ids")
            if ids is None or ids.shape != (t.id_planes, t.height, t.width):
                raise CodecError(f"the codec table stores {t.id_planes} card-id planes; the observation's card_ids is "
                                 f"{None if ids is None else ids.shape} (was the env built without card identity?)")
            out[self.oid : self.oid_end] = ids.reshape(-1)
        out[self.oid_end : self.o16] = 0  # the pad byte, if any: every byte of a row is defined
        if len(self.idx["uint16"]):
            src = spatial[self.idx["uint16"]]
            r = np.rint(src.astype(np.float64) * self.scale16[:, None, None])
            rounded += int(np.count_nonzero((r / self.scale16[:, None, None]).astype(np.float32) != src))
            clipped += int(np.count_nonzero(r > 65535) + np.count_nonzero(r < 0))
            np.clip(r, 0, 65535, out=r)
            out[self.o16 : self.of16].view("<u2")[:] = r.reshape(-1)
        if len(self.idx["float16"]):
            out[self.of16 : self.ovec].view("<f2")[:] = spatial[self.idx["float16"]].reshape(-1)
        out[self.ovec : self.omask].view("<f2")[:] = obs["vector"]
        out[self.omask :] = np.packbits(obs["action_mask"] != 0, bitorder="little")
        return clipped, rounded

    def pack_many(self, observations: list[dict]) -> tuple[np.ndarray, int, int]:
        """A fresh (n, row_bytes) uint8 array (never reused, so it can be handed to ZeroMQ
        without a copy), and the summed (clipped, rounded) counts."""
        rows = np.empty((len(observations), self.row_bytes), dtype=np.uint8)
        clipped = rounded = 0
        for i, obs in enumerate(observations):
            c, r = self.pack(obs, rows[i])
            clipped += c
            rounded += r
        return rows, clipped, rounded

    # ------------------------------------------------------------------ unpacking (learner)

    def legal_counts(self, rows: np.ndarray) -> np.ndarray:
        """(B,) int32: legal actions (the no-op included) of packed rows (B, row_bytes) uint8,
        from their mask bits; no static planes needed."""
        return legal_counts(rows, self.omask)

    def unpack(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """(B, row_bytes) uint8 -> ``spatial`` (B, C, H, W) float32, ``vector`` (B, V)
        float32, ``mask`` (B, A) bool, and with card identity ``card_ids`` (B, id_planes, H, W)
        uint8. Needs the static planes."""
        if self.statics is None:
            raise CodecError("unpacking needs the static planes; construct Codec(table, statics)")
        t, hw, b = self.table, self.hw, rows.shape[0]
        h, w = t.height, t.width
        spatial = np.empty((b, len(t.planes), h, w), dtype=np.float32)
        n8, n16, nf = (len(self.idx[k]) for k in ("uint8", "uint16", "float16"))
        if n8:
            spatial[:, self.idx["uint8"]] = rows[:, : n8 * hw].reshape(b, n8, h, w)
        if n16:
            u16 = np.ascontiguousarray(rows[:, self.o16 : self.of16]).view("<u2").reshape(b, n16, h, w)
            # float64 then one rounding to float32: the same value the environment produced
            spatial[:, self.idx["uint16"]] = u16 / self.scale16.astype(np.float64)[None, :, None, None]
        if nf:
            f16 = np.ascontiguousarray(rows[:, self.of16 : self.ovec]).view("<f2").reshape(b, nf, h, w)
            spatial[:, self.idx["float16"]] = f16
        if len(self.idx["static"]):
            spatial[:, self.idx["static"]] = self.statics[None]
        vector = np.ascontiguousarray(rows[:, self.ovec : self.omask]).view("<f2").astype(np.float32)
        mask = np.unpackbits(rows[:, self.omask :], axis=1, count=t.n_actions, bitorder="little").astype(bool)
        out = {"spatial": spatial, "vector": vector, "mask": mask}
        if t.id_planes:
            out["card_ids"] = rows[:, self.oid : self.oid_end].reshape(b, t.id_planes, h, w).copy()
        return out


# ---------------------------------------------------------------------- the wire (codec 2)


class WireError(CodecError):
    """Compressed rows refused; ``reason`` is one of WIRE_REFUSALS, the text says what was wrong."""

    def __init__(self, reason: str, text: str):
        self.reason = reason
        super().__init__(text)


class RowCompressor:
    """Wire codec 2, the rollout's half: packed rows -> one zstd frame. Not thread-safe (one
    per sending thread; a rollout has one)."""

    def __init__(self, level: int = ZSTD_LEVEL):
        # the checksum (XXH64, 4 B a frame) turns a flipped byte into a refusal, not a wrong row
        self._zstd = zstandard.ZstdCompressor(level=level, write_content_size=True, write_checksum=True)
        # most rounds truncate no episode: their empty final_rows is this frame, made once
        self._empty = np.frombuffer(self._zstd.compress(b""), dtype=np.uint8)

    def compress(self, rows: np.ndarray) -> np.ndarray:
        """(n, row_bytes) uint8 -> (k,) uint8: the zstd frame of the rows' bytes in row order,
        with its content size (n x row_bytes) in the header and a content checksum."""
        if rows.size == 0:
            return self._empty
        return np.frombuffer(self._zstd.compress(np.ascontiguousarray(rows)), dtype=np.uint8)


class RowDecompressor:
    """Wire codec 2, the learner's half. ``max_bytes``: the most one array may expand to (the
    learner's frame limit), whatever the round claims."""

    def __init__(self, row_bytes: int, max_bytes: int):
        self.row_bytes, self.max_bytes = row_bytes, max_bytes
        self._zstd = zstandard.ZstdDecompressor()

    def decompress(self, frame: np.ndarray, n_rows: int, what: str = "rows_zstd") -> np.ndarray:
        """(k,) uint8 zstd frame -> (n_rows, row_bytes) uint8, read-only (as the Decoder's
        codec-1 rows are).

        ``n_rows`` is the count the round's other arrays imply, never the frame's word. The
        frame's header is read first and must declare exactly n_rows x row_bytes bytes (at most
        ``max_bytes``) in a window no larger, and a checksum: a bomb is refused before one byte
        is expanded, a corrupted frame by the checksum.
        Raises WireError (``wire_size`` or ``wire_corrupt``), never anything else."""
        expected = n_rows * self.row_bytes
        if n_rows < 0 or expected > self.max_bytes:
            raise WireError("wire_size", f"{what}: {n_rows} rows of {self.row_bytes} B exceed the frame limit "
                                         f"of {self.max_bytes} B")
        data = memoryview(frame).cast("B")
        try:
            params = zstandard.get_frame_parameters(data)
        except zstandard.ZstdError as exc:
            raise WireError("wire_corrupt", f"{what}: not a zstd frame ({exc})") from None
        if params.content_size in (zstandard.CONTENTSIZE_UNKNOWN, zstandard.CONTENTSIZE_ERROR):
            raise WireError("wire_size", f"{what}: the zstd frame does not declare its size; "
                                         f"expected {expected} B ({n_rows} rows)")
        if params.content_size != expected:
            raise WireError("wire_size", f"{what}: the zstd frame declares {params.content_size} B, the round's "
                                         f"{n_rows} rows are {expected} B; refused unexpanded")
        if not params.has_checksum:
            raise WireError("wire_corrupt", f"{what}: the zstd frame carries no content checksum")
        if params.window_size > max(expected, 1 << 10):
            raise WireError("wire_size", f"{what}: the zstd frame asks for a {params.window_size} B window "
                                         f"for {expected} B of rows")
        try:
            block = self._zstd.decompress(data, max_output_size=expected, allow_extra_data=False)
        except zstandard.ZstdError as exc:
            raise WireError("wire_corrupt", f"{what}: zstd refused the frame ({exc})") from None
        if len(block) != expected:
            raise WireError("wire_size", f"{what}: the frame expanded to {len(block)} B, expected {expected} B")
        return np.frombuffer(block, dtype=np.uint8).reshape(n_rows, self.row_bytes)  # read-only, as codec 1's


ROW_ARRAYS = {"rows": "rows_zstd", "final_rows": "final_rows_zstd"}
"""A round's packed-row arrays and their codec-2 names."""


def compress_round(arrays: dict[str, np.ndarray], compressor: RowCompressor) -> dict[str, np.ndarray]:
    """A round's arrays with ``rows`` / ``final_rows`` replaced by their codec-2 frames."""
    out = {k: v for k, v in arrays.items() if k not in ROW_ARRAYS}
    for raw, packed in ROW_ARRAYS.items():
        out[packed] = compressor.compress(arrays[raw])
    return out


def decompress_round(arrays: dict[str, np.ndarray], decompressor: RowDecompressor | None) -> dict[str, np.ndarray]:
    """A received round's arrays as codec 1 has them (``rows``, ``final_rows``).

    ``decompressor`` is None for a rollout welcomed with codec 1. The row counts come from the
    round's ``group`` (rows of slots with group >= 0) and ``final_slots``. Raises WireError:
    ``wire_codec`` for arrays of the other codec, a mix or a missing one, else as
    ``RowDecompressor.decompress``."""
    want_packed = decompressor is not None
    expected = tuple(ROW_ARRAYS.values()) if want_packed else tuple(ROW_ARRAYS)
    other = tuple(ROW_ARRAYS) if want_packed else tuple(ROW_ARRAYS.values())
    if any(k in arrays for k in other) or not all(k in arrays for k in expected):
        have = sorted(k for k in (*expected, *other) if k in arrays)
        raise WireError("wire_codec", f"round carries row arrays {have}; a rollout welcomed with wire codec "
                                      f"{WIRE_ZSTD if want_packed else WIRE_RAW} sends {list(expected)}")
    if not want_packed:
        return arrays
    if "group" not in arrays or "final_slots" not in arrays:
        raise WireError("wire_codec", "compressed rows need the round's group and final_slots to count them")
    out = {k: v for k, v in arrays.items() if k not in expected}
    out["rows"] = decompressor.decompress(arrays["rows_zstd"], int(np.count_nonzero(arrays["group"] >= 0)), "rows_zstd")
    out["final_rows"] = decompressor.decompress(arrays["final_rows_zstd"], len(arrays["final_slots"]), "final_rows_zstd")
    return out
