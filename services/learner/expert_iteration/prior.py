"""The prior the network plays, measured against the search's targets (issue 37: the ``policy/``
keys read the searched move, so a prior's drift did not show).

Rows are CSR over each searched row's legal set: ``offsets`` int64 (n + 1,), and per entry the
target probability and the prior's log-probability (nats). Per row: the prior's entropy
H(p) = -sum p log p, top-1 agreement (argmax p == argmax pi, ties to the lowest entry) and
KL(pi || p) = sum pi (log pi - log p) over pi > 0; the means over the rows.
"""

from __future__ import annotations

import numpy as np


def prior_metrics(offsets: np.ndarray, target: np.ndarray, log_prior: np.ndarray) -> dict[str, float]:
    """``{"entropy", "top1", "kl_target"}`` means over the rows (module docstring); {} for no row.
    Raises ValueError when the arrays disagree in length or a row is empty."""
    off = np.asarray(offsets, np.int64)
    pi, lp = np.asarray(target, np.float64), np.asarray(log_prior, np.float64)
    if len(pi) != len(lp) or len(off) < 1 or off[0] != 0 or off[-1] != len(pi):
        raise ValueError(f"prior_metrics: offsets end at {off[-1] if len(off) else None}, {len(pi)} targets, "
                         f"{len(lp)} log-priors: they must agree")
    n = len(off) - 1
    if n == 0:
        return {}
    if (np.diff(off) < 1).any():
        raise ValueError("prior_metrics: every row needs at least one legal action")
    entropy, top1, kl = np.zeros(n), np.zeros(n), np.zeros(n)
    for i in range(n):
        t, q = pi[off[i]:off[i + 1]], lp[off[i]:off[i + 1]]
        p = np.exp(q)
        entropy[i] = -(p[p > 0] * q[p > 0]).sum()
        top1[i] = float(np.argmax(t) == np.argmax(q))
        nz = t > 0
        kl[i] = (t[nz] * (np.log(t[nz]) - q[nz])).sum()
    return {"entropy": float(entropy.mean()), "top1": float(top1.mean()), "kl_target": float(kl.mean())}


def legal_log_priors(policy, rows: np.ndarray, legal_ids: np.ndarray, offsets: np.ndarray,
                     chunk: int = 512) -> np.ndarray:
    """float64 (nnz,): ``policy``'s log-probabilities (``Policy.legal_log_probs``) of each row's
    legal ids, ``rows`` uint8 (n, row_bytes) forwarded ``chunk`` rows at a time."""
    out = np.zeros(len(legal_ids), np.float64)
    for start in range(0, len(rows), chunk):
        lp = policy.legal_log_probs(np.ascontiguousarray(rows[start:start + chunk]))
        for j in range(len(lp)):
            lo, hi = offsets[start + j], offsets[start + j + 1]
            out[lo:hi] = lp[j][legal_ids[lo:hi].astype(np.int64)]
    return out
