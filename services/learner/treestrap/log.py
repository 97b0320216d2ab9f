"""What TreeStrap keeps beside expert iteration's replay (``expert_iteration.replay.SearchReplay``):
each replayed row's searched candidates and its bootstrap membership (seed 000's ``masks``), in
the checkpoint so a resume trains every head on the same rows.

A part is added with the replay's part of the same iteration (same rows, same order). The replay
trims a part only from its front (its oldest rows first), so a part of n rows holds the LAST n
rows of what was added: ``aligned`` takes the tail of each logged part. Masks are drawn once, at
insertion, from ``treestrap/bootstrap_masks/iteration/{i}`` (``dqn.behaviour.bootstrap_masks``:
Bernoulli(``treestrap.bootstrap_p``) per row and head).
"""

from __future__ import annotations

import msgspec
import numpy as np

FILES = ("treestrap/log.json", "treestrap/log.msgpack")


class CandidateLog:
    """Candidates int16 (n, k) (-1 padding) and masks uint8 (n, K) per replayed iteration."""

    def __init__(self, k: int, heads: int):
        self.k, self.heads = k, heads
        self.parts: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def add(self, iteration: int, candidates: np.ndarray, masks: np.ndarray) -> None:
        """Log ``iteration``'s rows. Raises ValueError for shapes other than (n, k) and (n, K)."""
        c, m = np.asarray(candidates, np.int16), np.asarray(masks, np.uint8)
        if c.shape != (len(c), self.k) or m.shape != (len(c), self.heads):
            raise ValueError(f"candidate log: candidates {c.shape} and masks {m.shape}, expected (n, {self.k}) "
                             f"and (n, {self.heads})")
        if len(c):
            self.parts[int(iteration)] = (c, m)

    def aligned(self, replay) -> tuple[np.ndarray, np.ndarray]:
        """(candidates int16 (N, k), masks uint8 (N, K)) for the replay's rows in its order; drops
        the parts the replay no longer holds. Raises ValueError when a replay part has more rows
        than were logged for its iteration (the log and the replay disagree)."""
        keep = {p.iteration for p in replay.parts}
        self.parts = {i: v for i, v in self.parts.items() if i in keep}
        cands, masks = [np.zeros((0, self.k), np.int16)], [np.zeros((0, self.heads), np.uint8)]
        for p in replay.parts:
            c, m = self.parts.get(p.iteration, (np.zeros((0, self.k), np.int16), None))
            if len(c) < len(p):
                raise ValueError(f"candidate log: iteration {p.iteration} logged {len(c)} rows, the replay holds "
                                 f"{len(p)}")
            assert m is not None
            cands.append(c[len(c) - len(p):])
            masks.append(m[len(m) - len(p):])
        return np.concatenate(cands), np.concatenate(masks)

    def to_files(self) -> dict[str, bytes]:
        """``FILES``: the iterations and sizes (JSON), the arrays (msgpack of little-endian bytes)."""
        its = sorted(self.parts)
        index = {"k": self.k, "heads": self.heads, "parts": [{"iteration": i, "rows": len(self.parts[i][0])} for i in its]}
        data = [{"candidates": self.parts[i][0].astype("<i2").tobytes(), "masks": self.parts[i][1].tobytes()} for i in its]
        return {FILES[0]: msgspec.json.encode(index), FILES[1]: msgspec.msgpack.encode(data)}

    def load_files(self, files: dict[str, bytes]) -> None:
        """The parts ``to_files`` wrote. Raises ValueError when the saved k or K are not this
        run's, or a part's arrays disagree with the index."""
        index = msgspec.json.decode(files[FILES[0]])
        data = msgspec.msgpack.decode(files[FILES[1]])
        if (index["k"], index["heads"]) != (self.k, self.heads):
            raise ValueError(f"candidate log: the checkpoint has {index['k']} candidates x {index['heads']} heads, "
                             f"this run {self.k} x {self.heads} (alphazero.candidates, treestrap.heads): resume with "
                             "the run's own settings")
        parts = {}
        for meta, arrays in zip(index["parts"], data, strict=True):
            n = meta["rows"]
            c = np.frombuffer(arrays["candidates"], "<i2")
            m = np.frombuffer(arrays["masks"], np.uint8)
            if len(c) != n * self.k or len(m) != n * self.heads:
                raise ValueError(f"candidate log: iteration {meta['iteration']}'s arrays do not hold {n} rows")
            parts[int(meta["iteration"])] = (c.astype(np.int16).reshape(n, self.k), m.copy().reshape(n, self.heads))
        self.parts = parts
