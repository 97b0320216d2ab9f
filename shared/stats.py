"""Small statistics both the learner's metric row and the ladder's gate use."""

from __future__ import annotations

import math


def wilson_interval(wins: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a rate: ``wins`` successes (may be fractional: draws count
    half) out of ``n``. Raises ValueError for n <= 0 or wins outside 0..n."""
    if n <= 0:
        raise ValueError(f"wilson_interval: n {n!r} must be > 0 (no games: the condition is skipped, not scored)")
    if not 0.0 <= wins <= n:
        raise ValueError(f"wilson_interval: wins {wins!r} must lie in 0..{n}")
    p = wins / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)
