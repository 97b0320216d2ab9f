"""Packed observation rows to the model's tensors with torch, on the device that holds them.

``shared.codec.Codec.unpack`` expands rows with numpy on the CPU; a CUDA learner would then
copy 57,821 float32 bytes a row over the bus instead of the 15,375 packed ones, and spend CPU
time per minibatch. ``DeviceRows.expand`` does the same expansion with torch wherever the
packed rows are (royalelearn-facts §3: "Unpack happens on the GPU"), and
``DeviceRows.upload`` / ``DeviceRows.gather`` bring packed rows there through pinned host
memory with non-blocking copies.

The expansion is bit-identical to the codec's numpy unpack (tests/shared/nn/test_rows.py checks
it on thousands of real rows on the CPU, tests/services/learner/test_gpu.py on CUDA), step by step:

* uint8 planes: the byte as float32 (exact);
* uint16 planes: the little-endian pair as an integer, divided by the plane's scale in float64
  and rounded once to float32, as numpy's ``u16 / scale.astype(float64)`` stored into float32
  (IEEE division is correctly rounded on both, and the same one rounding follows);
* float16 planes and the vector: float16 to float32 (exact);
* static planes: the learner's ``statics``, repeated per row;
* the mask: bit ``i`` of byte ``j`` (least significant first) is action ``8 j + i``, as
  ``np.unpackbits(..., bitorder="little")``.

The learner's CPU path keeps numpy (``shared.nn.policy.Policy``): CPU numbers do not move.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from shared.codec import Codec, CodecError

STAGING_ROWS = 1024
"""Rows per pinned staging slab (15 MB at 15,375 B a row): the unit ``gather`` copies in."""


class DeviceRows:
    """Expands packed rows of one codec on ``device`` (any torch device; CUDA in the learner).

    Raises CodecError when the codec has no static planes to expand with, and RuntimeError on
    a big-endian host (the row layout is little-endian and torch's dtype views are native)."""

    def __init__(self, codec: Codec, device):
        if codec.statics is None:
            raise CodecError("expanding rows needs the static planes; construct Codec(table, statics)")
        if sys.byteorder != "little":
            raise RuntimeError("DeviceRows reads the little-endian row layout through native dtype views; "
                               f"this host is {sys.byteorder}-endian")
        self.codec, self.device = codec, torch.device(device)
        t = codec.table
        self.n_planes, self.h, self.w, self.n_actions = len(t.planes), t.height, t.width, t.n_actions
        self.index = {k: torch.as_tensor(v, device=self.device) for k, v in codec.idx.items()}
        self.counts = {k: len(v) for k, v in codec.idx.items()}
        self.scale16 = torch.as_tensor(codec.scale16.astype(np.float64), device=self.device)[None, :, None, None]
        self.statics = torch.as_tensor(codec.statics, dtype=torch.float32, device=self.device)
        self.bit_shifts = torch.arange(8, dtype=torch.uint8, device=self.device)
        self._slabs: list[tuple[torch.Tensor, torch.cuda.Event | None]] = []
        self._next_slab = 0

    # ------------------------------------------------------------------ expansion

    def expand(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """(B, row_bytes) uint8 on this device -> ``spatial`` (B, C, H, W) float32, ``vector``
        (B, V) float32, ``mask`` (B, A) bool (and ``card_ids`` (B, id_planes, H, W) uint8 with
        card identity), on the same device: ``Codec.unpack``'s values bit
        for bit. Raises ValueError for another dtype, rank or row width."""
        c = self.codec
        if rows.dtype != torch.uint8 or rows.dim() != 2 or rows.shape[1] != c.row_bytes:
            raise ValueError(f"expand wants (B, {c.row_bytes}) uint8 rows, got {tuple(rows.shape)} {rows.dtype}")
        b, hw, h, w = rows.shape[0], c.hw, self.h, self.w
        n8, n16, nf = self.counts["uint8"], self.counts["uint16"], self.counts["float16"]
        spatial = torch.empty((b, self.n_planes, h, w), dtype=torch.float32, device=rows.device)
        if n8:
            spatial[:, self.index["uint8"]] = rows[:, : n8 * hw].reshape(b, n8, h, w).to(torch.float32)
        if n16:
            u16 = rows[:, c.o16 : c.of16].contiguous().view(torch.int16).to(torch.int32) & 0xFFFF
            milli = u16.reshape(b, n16, h, w).to(torch.float64)
            spatial[:, self.index["uint16"]] = (milli / self.scale16).to(torch.float32)
        if nf:
            f16 = rows[:, c.of16 : c.ovec].contiguous().view(torch.float16).reshape(b, nf, h, w)
            spatial[:, self.index["float16"]] = f16.to(torch.float32)
        if self.counts["static"]:
            spatial[:, self.index["static"]] = self.statics[None].expand(b, -1, -1, -1)
        vector = rows[:, c.ovec : c.omask].contiguous().view(torch.float16).to(torch.float32)
        bits = (rows[:, c.omask :, None] >> self.bit_shifts) & 1  # (B, mask_bytes, 8), LSB first
        mask = bits.reshape(b, -1)[:, : self.n_actions].bool()
        out = {"spatial": spatial, "vector": vector, "mask": mask}
        if c.table.id_planes:
            out["card_ids"] = rows[:, c.oid : c.oid_end].reshape(b, c.table.id_planes, h, w).clone()
        return out

    # ------------------------------------------------------------------ host to device

    def _slab(self, n: int) -> torch.Tensor:
        """The next staging slab of the ring (two), at least ``n`` rows, once the copy that last
        read it has finished. Pinned on CUDA (so the copy can be asynchronous)."""
        pinned = self.device.type == "cuda"
        if len(self._slabs) < 2:
            self._slabs.append((torch.empty((0, self.codec.row_bytes), dtype=torch.uint8), None))
        i = self._next_slab
        self._next_slab = (i + 1) % 2
        slab, event = self._slabs[i]
        if event is not None:
            event.synchronize()  # the copy that read this slab is done: its bytes may be overwritten
        if slab.shape[0] < n:
            slab = torch.empty((max(n, STAGING_ROWS), self.codec.row_bytes), dtype=torch.uint8, pin_memory=pinned)
        self._slabs[i] = (slab, None)
        return slab

    def _send(self, slab: torch.Tensor, n: int, out: torch.Tensor) -> None:
        out.copy_(slab[:n], non_blocking=True)
        if self.device.type == "cuda":
            event = torch.cuda.Event()
            event.record()
            i = (self._next_slab - 1) % 2
            self._slabs[i] = (self._slabs[i][0], event)

    def upload(self, rows: np.ndarray) -> torch.Tensor:
        """(B, row_bytes) uint8 numpy -> the same bytes on this device, through a pinned slab and
        a non-blocking copy (later kernels on the stream wait for it; the slab is not reused
        before it is done)."""
        rows = np.asarray(rows)
        out = torch.empty((len(rows), self.codec.row_bytes), dtype=torch.uint8, device=self.device)
        slab = self._slab(len(rows))
        np.copyto(slab[: len(rows)].numpy(), rows)
        self._send(slab, len(rows), out)
        return out

    def gather(self, rows: np.ndarray, index: np.ndarray) -> torch.Tensor:
        """``rows[index]`` ((N, row_bytes) uint8, N = len(index)) on this device: gathered by
        numpy straight into pinned slabs of ``STAGING_ROWS`` rows and copied without blocking,
        so the gather of one slab overlaps the copy of the other. ``rows`` is (M, row_bytes)
        uint8 (the rectangle's rows, flattened), ``index`` int row numbers into it."""
        index = np.asarray(index, dtype=np.int64)
        out = torch.empty((len(index), self.codec.row_bytes), dtype=torch.uint8, device=self.device)
        for lo in range(0, len(index), STAGING_ROWS):
            part = index[lo : lo + STAGING_ROWS]
            slab = self._slab(len(part))
            np.take(rows, part, axis=0, out=slab[: len(part)].numpy())
            self._send(slab, len(part), out[lo : lo + len(part)])
        return out
