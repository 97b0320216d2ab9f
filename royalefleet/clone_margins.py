"""What a clone copies of a searching teacher, split by how clear the search's choice was.

A searched teacher keeps its base player's move where the search finds nothing better and
overrules it where a candidate wins; a clone's overall agreement mixes the two. Split by the
search's margin (the best survivor's score minus the runner-up's, on the pick rule's scale:
``royalefleet.clone.search_margins``), the held-out choices show whether the clone copies the
decisions the search found clear, which is where a searched teacher's edge lies (docs/learning.md,
"What a clone misses of its searched teacher").
"""

from __future__ import annotations

import numpy as np

MARGIN_EDGES = (0.0, 0.05, 0.1, 0.2, 0.4)
"""Edges of the margin bands: [0, 0.05], then (lo, hi], the last open above. Upper edges are
inclusive because a tie between two survivors that the pick rule breaks by ``keep`` (say 0.1)
has a margin of exactly ``keep``: it belongs with the close calls, not above them. Margins are
rounded to 1e-6 first, so float32 round-off does not move a row across an edge."""


def margin_bands(margins: np.ndarray) -> list[tuple[float, float | None, np.ndarray]]:
    """(low, high or None for the last band, (n,) bool rows in the band) for each band of
    ``MARGIN_EDGES`` over ``margins`` ((n,) float; NaN, a decision not searched, in none), margins
    rounded to 1e-6 first. Shared by the clone's split and the search-stability bench's."""
    m = np.round(np.asarray(margins, np.float64), 6)
    out = []
    for i, lo in enumerate(MARGIN_EDGES):
        hi = MARGIN_EDGES[i + 1] if i + 1 < len(MARGIN_EDGES) else None
        above = m >= lo if i == 0 else m > lo
        out.append((lo, hi, above if hi is None else above & (m <= hi)))
    return out


def band_words(low: float, high: float | None) -> str:
    """A band as printed: "0.05-0.10", or "> 0.40" for the last."""
    return f"{low:.2f}-{high:.2f}" if high is not None else f"> {low:.2f}"


def agreement_by_margin(picks: np.ndarray, actions: np.ndarray, search_actions: np.ndarray,
                        search_scores: np.ndarray) -> list[dict]:
    """Per margin band (``MARGIN_EDGES``) with at least one searched row, a dict ``low``, ``high``
    (None for the last band), ``choices``, ``overruled`` (share where the teacher's move is not its base
    player's pick), ``agreement`` (the clone's pick equals the teacher's move) and ``base_move``
    (the clone's pick equals the base player's pick).

    Args: ``picks`` (n,) int64, the clone's argmax on n held-out choice rows; ``actions`` (n,)
    int64, the teacher's moves; ``search_actions`` (n, K) int64, the candidates the pick rule
    chose among (``royalefleet.clone_data.search_choices`` with ``survivors_only``), the base
    player's pick in column 0 (sequential halving always keeps it: shared/search/halving.py), -1
    padding; ``search_scores`` (n, K) float32, their scores, -inf padding. Rows that were not
    searched (all padding) are left out. Raises ValueError on mismatched lengths."""
    from royalefleet.clone import search_margins

    n = len(picks)
    if not (len(actions) == len(search_actions) == len(search_scores) == n):
        raise ValueError(f"picks ({n}), actions ({len(actions)}), search_actions ({len(search_actions)}) and "
                         f"search_scores ({len(search_scores)}) must have one entry per held-out choice")
    searched = np.isfinite(search_scores).any(axis=1)
    margin = np.where(searched, search_margins(search_scores), np.nan)
    base = search_actions[:, 0]
    out = []
    for lo, hi, m in margin_bands(margin):
        if not m.any():
            continue
        out.append({"low": lo, "high": hi, "choices": int(m.sum()),
                    "overruled": float(np.mean(actions[m] != base[m])),
                    "agreement": float(np.mean(picks[m] == actions[m])),
                    "base_move": float(np.mean(picks[m] == base[m]))})
    return out


def describe_by_margin(bands: list[dict], kept: str = "the best epoch") -> list[str]:
    """The lines ``royalefleet clone`` prints for ``agreement_by_margin``'s bands (none without)."""
    if not bands:
        return []
    lines = [f"royalefleet clone: held-out choices by the search's margin (its best survivor's score minus the "
             f"runner-up's), as {kept} plays them:"]
    for b in bands:
        band = band_words(b["low"], b["high"])
        lines.append(f"  margin {band:>9}: {b['choices']:>6,} choices, the search overruled its base player on "
                     f"{b['overruled']:.2f}; the clone agrees on {b['agreement']:.3f}, plays the base player's "
                     f"move on {b['base_move']:.3f}")
    return lines
