"""The ensemble's choices among a decision's searched candidates, and how steady they are
(docs/treestrap.md, "Thompson proposal", "Steadiness").

``scores`` float64 (n, K, k): head h's score of searched candidate j of row i (``-inf`` where the
row has fewer than k candidates: a padded slot is never chosen; every row has at least one).
Argmaxes break ties toward the lower candidate index (the search's order: its first candidate is
the prior's own pick).

* Thompson choice (Thompson 1933; Osband et al. 2016, bootstrapped DQN's per-episode head, here
  per decision): draw a head h ~ U{0..K-1} per row and draw, take argmax_j scores[i, h, j]. With
  D draws a row's proposal target is the share of draws that chose each candidate: an unbiased
  estimate of the ensemble's probability that the candidate is best.
* ``head_disagreement``: per row, the share of the K(K-1)/2 head pairs whose argmaxes differ;
  its complement is how often two single heads (two bootstrap resamples) agree on the top-1.
* ``target_stability``: per row, whether the argmax of the mean score of heads [0, K/2) equals
  that of heads [K/2, K): two independent half-ensembles on disjoint heads, each on its own
  bootstrap samples. Against ``1 - head_disagreement`` it says whether averaging heads steadies
  the top-1 target (K >= 2; with K = 1 there is no pair and both are absent).
* ``search_agreement``: whether the whole ensemble's mean-score argmax is the search target's.
"""

from __future__ import annotations

import numpy as np


def _check(scores: np.ndarray) -> np.ndarray:
    s = np.asarray(scores, np.float64)
    if s.ndim != 3 or s.shape[2] < 1:
        raise ValueError(f"candidate scores must be (rows, heads, candidates >= 1), got shape {s.shape}")
    if len(s) and not np.isfinite(s).any(axis=2).all():
        raise ValueError("every row and head needs at least one finite candidate score")
    if np.isnan(s).any() or np.isposinf(s).any():
        raise ValueError("candidate scores must be finite, or -inf for a padded candidate")
    return s


def thompson_choice(scores: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """int64 (n, D): candidate index argmax_j ``scores[i, heads[i, d], j]``; ``heads`` int (n, D).
    Raises ValueError for a head outside 0..K-1 or shapes that disagree."""
    s = _check(scores)
    h = np.asarray(heads, np.int64)
    if h.ndim != 2 or len(h) != len(s):
        raise ValueError(f"heads must be (rows={len(s)}, draws), got shape {h.shape}")
    if h.size and (h.min() < 0 or h.max() >= s.shape[1]):
        raise ValueError(f"a drawn head lies outside 0..{s.shape[1] - 1}")
    return np.argmax(s[np.arange(len(s))[:, None], h], axis=2)


def thompson_probs(choice: np.ndarray, k: int) -> np.ndarray:
    """float64 (n, k): the share of each row's D draws (``choice`` (n, D)) that chose each candidate."""
    c = np.asarray(choice, np.int64)
    out = np.zeros((len(c), k))
    np.add.at(out, (np.repeat(np.arange(len(c)), c.shape[1]), c.ravel()), 1.0)
    return out / max(c.shape[1], 1)


def ensemble_keys(scores: np.ndarray, search_top: np.ndarray) -> dict[str, float]:
    """``{"head_disagreement", "target_stability", "search_agreement"}`` means over the rows
    (module docstring; the first two only with K >= 2); {} without a row. ``search_top`` int (n,):
    the candidate index of the search target's top-1."""
    s = _check(scores)
    n, k_heads = s.shape[:2]
    if not n:
        return {}
    top = np.argmax(s, axis=2)  # (n, K)
    out = {"search_agreement": float(np.mean(np.argmax(s.mean(axis=1), axis=1) == np.asarray(search_top)))}
    if k_heads >= 2:
        same = (top[:, :, None] == top[:, None, :]).sum(axis=(1, 2)) - k_heads  # ordered equal pairs, off-diagonal
        out["head_disagreement"] = float(np.mean(1.0 - same / (k_heads * (k_heads - 1))))
        half = k_heads // 2
        a = np.argmax(s[:, :half].mean(axis=1), axis=1)
        b = np.argmax(s[:, half:].mean(axis=1), axis=1)
        out["target_stability"] = float(np.mean(a == b))
    return out
