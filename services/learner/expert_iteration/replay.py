"""The replay of expert iteration: the searched rows of the recent iterations, bounded, in the
checkpoint so a resume trains on exactly the rows the uninterrupted run would.

A part is one iteration's searched rows in (cycle, slot) order: packed observations, the policy
target over each row's legal set (CSR), the value target; under playout-cap randomisation
(``alphazero.full_search_share`` below 1) also the unsearched (fast) choice rows, value-only: an
empty legal slice, trained with policy weight 0. ``SearchReplay.add`` appends a part,
drops whole parts older than the newest ``max_iterations``, then drops the oldest rows (the
oldest part's first rows first) until at most ``max_rows`` remain. The rows train in the
replay's order (oldest first); the update permutes them by its own named stream.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import msgspec
import numpy as np

from shared.batches import AlphaZeroBatch, PackedObs

FILES = ("expert_iteration/replay.json", "expert_iteration/replay.msgpack")
DTYPES = {"legal_ids": "<i2", "legal_offsets": "<i8", "probs": "<f4", "values": "<f4"}


@dataclass
class ReplayPart:
    """One iteration's searched rows: ``rows`` uint8 (n, row_bytes), ``legal_ids`` int16 (nnz,)
    and ``legal_offsets`` int64 (n + 1,) the CSR of each row's legal set, ``probs`` float32 (nnz,)
    the policy targets, ``values`` float32 (n,) the value targets."""

    iteration: int
    rows: np.ndarray
    legal_ids: np.ndarray
    legal_offsets: np.ndarray
    probs: np.ndarray
    values: np.ndarray
    packed: bytes | None = field(default=None, repr=False, compare=False)
    """``rows`` zlib level 1, made at the first capture and kept: a part never changes (a trim
    makes a new one), and the replay is captured every iteration."""

    def __len__(self) -> int:
        return len(self.rows)

    def compressed_rows(self) -> bytes:
        if self.packed is None:
            self.packed = zlib.compress(np.ascontiguousarray(self.rows).tobytes(), 1)
        return self.packed

    def labels(self) -> int:
        """Rows with a policy target (a non-empty legal slice; the others are value-only)."""
        return int(np.count_nonzero(np.diff(self.legal_offsets) > 0))

    def labelled(self) -> ReplayPart:
        """The part without its value-only rows (playout-cap randomisation's fast rows); itself
        when it has none."""
        keep = np.flatnonzero(np.diff(self.legal_offsets) > 0)
        if len(keep) == len(self):
            return self
        counts = np.diff(self.legal_offsets)[keep]
        entries = np.concatenate([np.arange(self.legal_offsets[i], self.legal_offsets[i + 1]) for i in keep]) \
            if len(keep) else np.zeros(0, np.int64)
        offsets = np.zeros(len(keep) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        return ReplayPart(self.iteration, self.rows[keep], self.legal_ids[entries], offsets, self.probs[entries],
                          self.values[keep])

    def tail(self, start: int) -> ReplayPart:
        """The part without its first ``start`` rows."""
        off = self.legal_offsets
        lo = int(off[start])
        return ReplayPart(self.iteration, self.rows[start:], self.legal_ids[lo:], off[start:] - lo, self.probs[lo:],
                          self.values[start:])


class SearchReplay:
    """The bounded replay (module docstring). Raises ValueError for bounds below 1."""

    def __init__(self, max_iterations: int, max_rows: int):
        if max_iterations < 1 or max_rows < 1:
            raise ValueError(f"replay bounds {max_iterations} iterations, {max_rows} rows: both must be >= 1")
        self.max_iterations, self.max_rows = max_iterations, max_rows
        self.parts: list[ReplayPart] = []

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def add(self, part: ReplayPart) -> None:
        """Append ``part`` (an empty one is not kept) and apply the bounds."""
        if len(part):
            self.parts.append(part)
        newest = self.parts[-1].iteration if self.parts else 0
        self.parts = [p for p in self.parts if p.iteration > newest - self.max_iterations]
        excess = len(self) - self.max_rows
        while excess > 0:
            first = self.parts[0]
            if len(first) <= excess:
                self.parts.pop(0)
                excess -= len(first)
            else:
                self.parts[0] = first.tail(excess)
                excess = 0

    def labels(self) -> int:
        """Rows with a policy target across the parts (``ReplayPart.labels``)."""
        return sum(p.labels() for p in self.parts)

    def iterations(self) -> list[int]:
        return [p.iteration for p in self.parts]

    def batch(self, mask_offset: int, n_actions: int) -> AlphaZeroBatch:
        """Every row as an ``AlphaZeroBatch``, oldest first: policy weight 1 on a row with a
        target, 0 on a value-only one (an empty legal slice: playout-cap randomisation's fast
        rows). Raises ValueError when the replay is empty."""
        if not self.parts:
            raise ValueError("the replay holds no searched row")
        rows = np.concatenate([p.rows for p in self.parts])
        offsets, base = [np.zeros(1, np.int64)], 0
        for p in self.parts:
            offsets.append(p.legal_offsets[1:] + base)
            base += int(p.legal_offsets[-1])
        n = len(rows)
        legal_offsets = np.concatenate(offsets)
        return AlphaZeroBatch(obs=PackedObs(rows, np.arange(n, dtype=np.int64), mask_offset, n_actions),
                              players=np.zeros(n, np.int32), policy_targets=np.concatenate([p.probs for p in self.parts]),
                              value_targets=np.concatenate([p.values for p in self.parts]),
                              policy_weights=(np.diff(legal_offsets) > 0).astype(np.float32),
                              legal_ids=np.concatenate([p.legal_ids for p in self.parts]),
                              legal_offsets=legal_offsets, n_actions=n_actions)

    def to_files(self) -> dict[str, bytes]:
        """``FILES``: the parts' iterations and sizes (JSON) and their arrays (msgpack of raw
        little-endian bytes, the packed rows zlib level 1): the same replay gives the same bytes,
        as the state digest needs (an npz would stamp the time)."""
        data = [{"rows": p.compressed_rows(),
                 **{name: np.ascontiguousarray(getattr(p, name), dtype).tobytes() for name, dtype in DTYPES.items()}}
                for p in self.parts]
        index = {"max_iterations": self.max_iterations, "max_rows": self.max_rows,
                 "parts": [{"iteration": p.iteration, "rows": len(p), "row_bytes": int(p.rows.shape[1]),
                            "entries": len(p.legal_ids)} for p in self.parts]}
        return {FILES[0]: msgspec.json.encode(index), FILES[1]: msgspec.msgpack.encode(data)}

    def load_files(self, files: dict[str, bytes]) -> None:
        """The parts ``to_files`` wrote (the bounds stay this run's). Raises ValueError naming
        the part whose arrays disagree with the index."""
        index = msgspec.json.decode(files[FILES[0]])
        data = msgspec.msgpack.decode(files[FILES[1]])
        if len(data) != len(index["parts"]):
            raise ValueError(f"replay: {len(data)} parts of arrays, the index lists {len(index['parts'])}")
        parts = []
        for i, (meta, arrays) in enumerate(zip(index["parts"], data)):
            n, width, nnz = meta["rows"], meta["row_bytes"], meta["entries"]
            raw = zlib.decompress(arrays["rows"])
            got = {name: np.frombuffer(arrays[name], dtype).copy() for name, dtype in DTYPES.items()}
            sizes = {"legal_ids": nnz, "legal_offsets": n + 1, "probs": nnz, "values": n}
            if len(raw) != n * width or any(len(got[k]) != v for k, v in sizes.items()):
                raise ValueError(f"replay part {i} (iteration {meta['iteration']}): its arrays do not hold the "
                                 f"{n} rows x {width} B and {nnz} target entries the index says")
            parts.append(ReplayPart(meta["iteration"], np.frombuffer(raw, np.uint8).reshape(n, width).copy(),
                                    got["legal_ids"], got["legal_offsets"], got["probs"], got["values"]))
        self.parts = parts
