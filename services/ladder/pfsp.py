"""Prioritised fictitious self-play: how likely each pool member is to be the learner's next
opponent (royalelearn-facts 6.2, lesson 15).

p is the FITTED model's predicted score of the learner against a candidate
(``RatingTable.predict``, a draw counted as half a win). The live learner is never in the fit,
so its stand-in is the newest admitted snapshot (``learner_stand_in``). Asking the table for an
id it does not hold is exactly the reference's bug that made "hard" PFSP uniform in every run;
here a missing stand-in or candidate still gets p = 0.5, but ``effective`` comes back False so
the caller can publish it (``ladder/pfsp_effective``) instead of sampling uniformly in silence.

Weights, for M candidates:

    hard      (1 - p)^power          the learner's hardest opponents most
    variance  p (1 - p)              the most informative games (evaluation / stratified draws)
    linear    1 - p
    uniform   1
    -> normalise (all zero -> uniform), mix (1 - uniform_floor) * w + uniform_floor / M,
       floor each weight at floor_scale / M, multiply by any per-candidate multiplier (a seed
       snapshot's own weight), renormalise.

Pure functions: the draw itself takes a generator from a named stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from services.ladder.rating import RatingTable

SHAPES = ("hard", "variance", "linear", "uniform")


def learner_stand_in(admitted: Sequence[str]) -> str | None:
    """The id PFSP predicts the live learner with: the newest admitted snapshot (``admitted``
    in admission order), or None before the first admission."""
    return admitted[-1] if admitted else None


def predicted_scores(candidates: Sequence[str], ratings: RatingTable | None,
                     learner_id: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(p, known): p[k] is the fitted predicted score of ``learner_id`` against candidate k,
    and known[k] says whether it came from the fit. A table that is None, a stand-in it does
    not hold, or a candidate it does not hold gives p = 0.5 and known = False."""
    p = np.full(len(candidates), 0.5)
    known = np.zeros(len(candidates), dtype=bool)
    if ratings is None or learner_id is None or learner_id not in ratings:
        return p, known
    for k, c in enumerate(candidates):
        if c in ratings:
            p[k] = ratings.predict(learner_id, c)
            known[k] = True
    return p, known


def pfsp_weights(candidates: Sequence[str], ratings: RatingTable | None, learner_id: str | None, *,
                 shape: str = "hard", power: float = 2.0, uniform_floor: float = 0.2, floor_scale: float = 0.01,
                 multipliers: Mapping[str, float] | None = None) -> tuple[np.ndarray, bool]:
    """(weights, effective): sampling probabilities over ``candidates`` (float64, sums to 1,
    same order) and whether every p came from the fit (module docstring for the formula).

    ``effective`` is False when any candidate's or the stand-in's prediction was missing (that
    p was taken as 0.5); it is reported, whatever the shape, so a dashboard can tell fitted
    PFSP from a fallback. Raises ValueError for no candidates, an unknown shape, or a
    power / floor / multiplier out of range.
    """
    m = len(candidates)
    if m == 0:
        raise ValueError("pfsp_weights: no candidates to weight")
    if shape not in SHAPES:
        raise ValueError(f"pfsp shape {shape!r}: expected one of {', '.join(SHAPES)}")
    if not power > 0:
        raise ValueError(f"pfsp power {power!r}: expected > 0")
    if not 0.0 <= uniform_floor <= 1.0:
        raise ValueError(f"pfsp uniform_floor {uniform_floor!r}: expected 0..1")
    if not 0.0 <= floor_scale <= 1.0:
        raise ValueError(f"pfsp floor_scale {floor_scale!r}: expected 0..1 (the floor is floor_scale / M)")
    p, known = predicted_scores(candidates, ratings, learner_id)
    if shape == "hard":
        w = (1.0 - p) ** power
    elif shape == "variance":
        w = p * (1.0 - p)
    elif shape == "linear":
        w = 1.0 - p
    else:
        w = np.ones(m)
    total = w.sum()
    w = w / total if total > 0 else np.full(m, 1.0 / m)
    w = (1.0 - uniform_floor) * w + uniform_floor / m
    w = np.maximum(w, floor_scale / m)
    if multipliers:
        mult = np.array([float(multipliers.get(c, 1.0)) for c in candidates])
        if not np.all(np.isfinite(mult)) or np.any(mult < 0) or mult.sum() == 0:
            raise ValueError(f"pfsp multipliers {dict(multipliers)!r}: expected finite numbers >= 0, not all 0")
        w = w * mult
    return w / w.sum(), bool(known.all())


def pfsp_weights_for(candidates: Sequence[str], ratings: RatingTable | None, learner_id: str | None,
                     pool_cfg, **kw) -> tuple[np.ndarray, bool]:
    """``pfsp_weights`` with the shape, power and floors of a ``shared.config.PoolConfig``."""
    return pfsp_weights(candidates, ratings, learner_id, shape=pool_cfg.pfsp_weighting, power=pool_cfg.pfsp_power,
                        uniform_floor=pool_cfg.pfsp_uniform_floor, floor_scale=pool_cfg.weight_floor_scale, **kw)


def draw_stratified(candidates: Sequence[str], ratings: RatingTable | None, reference_id: str | None, k: int,
                    rng: np.random.Generator, *, uniform_floor: float = 0.2,
                    floor_scale: float = 0.01) -> tuple[list[str], bool]:
    """Up to ``k`` distinct candidates drawn without replacement with ``variance`` weights
    relative to ``reference_id`` (the gate's condition 3 uses the champion): the members whose
    games against it say most. Returns (drawn ids in draw order, effective). ``rng`` should
    come from the stream ``eval/stratified/{candidate}``. No candidates -> ([], True)."""
    if k < 0:
        raise ValueError(f"k {k}: expected >= 0")
    if not candidates or k == 0:
        return [], True
    w, effective = pfsp_weights(candidates, ratings, reference_id, shape="variance",
                                uniform_floor=uniform_floor, floor_scale=floor_scale)
    picks = rng.choice(len(candidates), size=min(k, len(candidates)), replace=False, p=w)
    return [candidates[int(i)] for i in picks], effective
