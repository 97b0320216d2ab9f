"""The search's policy target and its move: Gumbel AlphaZero's completed-Q policy improvement
(Danihelka, Guez, Schrittwieser & Silver 2022, "Policy improvement by planning with Gumbel",
eq. 10-11 and appendix D), for a root whose candidates were each simulated once.

Inputs per searched decision: the prior's log-probabilities over the A actions (``-inf`` where
illegal), the candidates tried (distinct legal ids, the no-op among them) and each candidate's
score q (``shared.search.lookahead.board_value`` after the candidate and its playout, minus the
value now: tower HP, crowns at ``CROWN_VALUE``, a win at ``WIN_VALUE``).

* completed Q: a candidate keeps its q; every other legal action gets v_mix, the prior-weighted
  mean of the candidates' q (the paper's v_mix without a network value, since q is in board
  units, not the critic's);
* normalisation: completed Q rescaled to [0, 1] by the candidates' min and max (MuZero's
  min-max over the tree); when every candidate scored the same the search learned nothing and
  the target is the prior itself;
* sigma(q) = (c_visit + max_b N(b)) * c_scale * q, with N = 1 (one simulation per candidate);
* pi' = softmax(log prior + sigma(completed Q)) over the legal set: the policy target.

The move played is Gumbel AlphaZero's: the candidate maximising g(a) + log prior(a) + sigma(q_hat(a)),
g the Gumbel noise that drew the candidates (``gumbel_move_index``), so the search's choice is a
pure function of the prior, the named Gumbel stream and the scores. (``searched_move``, a draw
from pi' over the candidates by one uniform, is the alternative for candidates not drawn by
Gumbel-top-k.)
"""

from __future__ import annotations

import numpy as np

C_VISIT = 50.0
"""Gumbel MuZero's c_visit (the paper's 50)."""


def fixed_scale(q: np.ndarray, value_scale: float) -> np.ndarray:
    """Scores on a fixed value scale: tanh(q / ``value_scale``) in [-1, 1] (``q`` in tower HP, the
    board difference). Unlike the min-max rescaling, a 1-HP difference stays a 1-HP difference:
    it moves the target by ~1 / ``value_scale`` of sigma's range, not all of it."""
    if not value_scale > 0:
        raise ValueError(f"fixed_scale: value_scale {value_scale!r} must be > 0 (tower HP a unit of value)")
    return np.tanh(np.asarray(q, np.float64) / value_scale)


def root_value(candidates_q: np.ndarray, move_index: int) -> float:
    """The searched root value, the value target of a searched decision: the score of the move
    played (its mean over its playouts), in the scores' own units."""
    return float(np.asarray(candidates_q, np.float64)[int(move_index)])


def _check(lp: np.ndarray, cand: np.ndarray, q: np.ndarray, who: str) -> None:
    legal = np.isfinite(lp)
    if len(cand) == 0 or len(cand) != len(q):
        raise ValueError(f"{who}: {len(cand)} candidates and {len(q)} scores (need k >= 1 of each)")
    if not legal[cand].all() or len(set(cand.tolist())) != len(cand):
        raise ValueError(f"{who}: candidates {cand.tolist()} must be distinct legal actions")
    if not np.isfinite(q).all():
        raise ValueError(f"{who}: scores {q.tolist()} must be finite")


def margin_policy(log_prior: np.ndarray, candidates: np.ndarray, q: np.ndarray, *, c_scale: float, keep: float,
                  c_visit: float = C_VISIT) -> np.ndarray:
    """(A,) float64 policy target on a fixed value scale: pi' = softmax(log prior + sigma) over the
    legal set with sigma(a) = (c_visit + 1) c_scale max(0, q(a) - q(candidates[0]) - keep) for a
    candidate and 0 for every other action.

    ``q`` (k,) are the candidates' scores on a fixed scale (``shared.search.halving``'s means
    under ``vs``: tanh units), ``candidates[0]`` the player's own pick, ``keep`` the margin the
    move rule (``halving.pick``) gives it. Mass moves from the prior only toward a candidate that
    beats the own pick by more than ``keep``, by the same rule that moves the play; a candidate
    whose score is noise below that margin keeps exactly its prior mass, so being tried earns
    nothing (tests/shared/test_search_targets.py measures the bias under pure noise). At c_scale
    0.3 (sigma 15.3 per unit) a crown's difference (about 1 on the tanh scale) outweighs a
    uniform prior over two thousand actions. Raises ValueError as ``completed_q_policy``."""
    lp = np.asarray(log_prior, np.float64)
    cand = np.asarray(candidates, np.int64)
    q = np.asarray(q, np.float64)
    _check(lp, cand, q, "margin_policy")
    legal = np.isfinite(lp)
    sigma = np.zeros(lp.shape)
    sigma[cand] = (c_visit + 1.0) * c_scale * np.maximum(0.0, q - q[0] - keep)
    logits = np.where(legal, lp + sigma, -np.inf)
    out = np.exp(logits - logits[legal].max())
    return out / out.sum()


def completed_q_policy(log_prior: np.ndarray, candidates: np.ndarray, q: np.ndarray, *, c_scale: float,
                       c_visit: float = C_VISIT) -> np.ndarray:
    """(A,) float64 improved policy pi' over the legal set (0 where ``log_prior`` is -inf).

    ``log_prior`` (A,) float, finite exactly on the legal set; ``candidates`` (k,) int distinct
    legal ids (k >= 1); ``q`` (k,) float their scores. Raises ValueError naming the candidate
    for an illegal or repeated candidate, or a non-finite score."""
    lp = np.asarray(log_prior, np.float64)
    cand = np.asarray(candidates, np.int64)
    q = np.asarray(q, np.float64)
    legal = np.isfinite(lp)
    if len(cand) == 0 or len(cand) != len(q):
        raise ValueError(f"completed_q_policy: {len(cand)} candidates and {len(q)} scores (need k >= 1 of each)")
    if not legal[cand].all() or len(set(cand.tolist())) != len(cand):
        raise ValueError(f"completed_q_policy: candidates {cand.tolist()} must be distinct legal actions")
    if not np.isfinite(q).all():
        raise ValueError(f"completed_q_policy: scores {q.tolist()} must be finite")
    prior = np.exp(lp[cand] - lp[cand].max())
    v_mix = float((prior * q).sum() / prior.sum())
    completed = np.full(lp.shape, v_mix)
    completed[cand] = q
    lo, hi = float(q.min()), float(q.max())
    scaled = (completed - lo) / (hi - lo) if hi > lo else np.zeros(lp.shape)
    sigma = (c_visit + 1.0) * c_scale * scaled
    logits = np.where(legal, lp + sigma, -np.inf)
    out = np.exp(logits - logits[legal].max())
    return out / out.sum()


def gumbel_move_index(keys: np.ndarray, q: np.ndarray, *, c_scale: float, c_visit: float = C_VISIT) -> int:
    """Gumbel AlphaZero's root move (Danihelka et al. 2022, eq. 8 at one simulation each): the
    index of argmax over candidates of ``keys`` + sigma(q_hat), ``keys`` (k,) the candidates'
    Gumbel + log prior (what drew them), ``q`` (k,) their scores, q_hat their min-max rescaling
    to [0, 1] (all 0 when they tie). Ties go to the earliest."""
    q = np.asarray(q, np.float64)
    lo, hi = float(q.min()), float(q.max())
    scaled = (q - lo) / (hi - lo) if hi > lo else np.zeros(len(q))
    return int(np.argmax(np.asarray(keys, np.float64) + (c_visit + 1.0) * c_scale * scaled))


def searched_move(improved: np.ndarray, candidates: np.ndarray, uniform: float) -> int:
    """The candidate drawn from ``improved`` (A,) restricted to ``candidates`` (k,), by inverse
    CDF of ``uniform`` in [0, 1) over the candidates in the order given."""
    cand = np.asarray(candidates, np.int64)
    p = improved[cand]
    cdf = np.cumsum(p / p.sum())
    return int(cand[min(int(np.searchsorted(cdf, uniform, side="right")), len(cand) - 1)])
