"""The promotion gate: whether a candidate snapshot joins the pool, and whether it becomes the
champion (royalelearn-facts 6.4, lesson 14; seed 004, PromotionGate / GateDecision /
ConditionResult).

The unit of analysis is the SEED: each eval seed is played twice, the candidate once on each
side, and its score is (blue + red) / 2 in {0, .25, .5, .75, 1}. Score arrays are given per
seed, either as those combined scores (shape (S,)) or as the two sides (shape (S, 2), each in
{0, .5, 1}); only the second lets ``paired_rho`` be measured.

1. ``beats_champion``: the Wilson 95 % lower bound of the candidate's score rate over the
   2S battles against the champion must reach ``champion_lower_bound`` (0.52: 55.2 % at
   n = 1000 passes with 0.5210, 55.0 % fails with 0.5190).
2. ``no_anchor_regression:<anchor>``, per anchor: the candidate's mean score must be no more
   than ``anchor_tolerance_pp`` points below the champion's RECORDED score against it. No
   record -> skipped with a reason (lesson 14: a missing record once compared against a
   default of 0.5 that anything passed).
3. ``no_pool_collapse``: against older pool members drawn with variance weights, the
   candidate's observed mean score must be >= the champion's FITTED predicted mean against
   the same members minus one standard error of the candidate's observed mean (bootstrap over
   seeds, ``bootstrap_resamples`` resamples). A pool with nothing besides the champion and
   the anchors (or ``stratified_snapshots`` = 0) -> skipped with a reason, and the verdict
   rests on 1 and 2.

A condition with no games is SKIPPED with its reason and is never passed. Verdicts:

* ``discard``     -- 1 failed or some 2 failed (the later conditions need not be played);
* ``promote``     -- 1 and 2 passed, 3 passed or skipped for an empty pool: admit + promote;
* ``admit_cycle`` -- 1 and 2 passed, 3 failed: admit, flag ``cycle``, do not promote;
* ``incomplete``  -- nothing failed but some condition that decides the verdict was skipped
  (no games, no anchor record, no fitted prediction): nothing is admitted and nothing is
  discarded; the caller plays what is missing and decides again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import msgspec
import numpy as np

from shared.stats import wilson_interval  # noqa: F401  (re-exported: the gate reports it)

from services.ladder.rating import RatingTable

Verdict = Literal["promote", "admit_cycle", "discard", "incomplete"]
SEED_SCORES = (0.0, 0.25, 0.5, 0.75, 1.0)
SIDE_SCORES = (0.0, 0.5, 1.0)
TIE_SLACK = 1e-12
"""Absolute slack on the comparisons of conditions 2 and 3: their two sides are rational
numbers computed along different float paths, and an exact tie must pass, not fail by 1 ulp."""


class ConditionResult(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One gate condition with the numbers that decided it.

    ``passed`` is True only when the condition was evaluated and held; a ``skipped`` condition
    is never passed, and ``reason`` says why it was skipped (or, when evaluated, the
    comparison in words). ``n`` is battles played for it. ``observed`` is the candidate's
    score (mean of seed scores); ``reference`` is what it is judged against (1: the required
    lower bound; 2: the champion's recorded anchor score; 3: the champion's fitted predicted
    mean); ``bound`` is the number compared (1: the Wilson lower bound, which must be >=
    reference; 2 and 3: the least ``observed`` may be). Numbers that do not exist are absent.
    """

    name: str
    passed: bool
    skipped: bool
    reason: str
    n: int = 0
    observed: float | None = None
    bound: float | None = None
    reference: float | None = None


class GateDecision(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A candidate's audition, kept whole: what happened to it and every condition's numbers.

    ``admit`` puts it in the pool, ``promote`` makes it champion, ``cycle`` flags a member
    worth playing without being the best. ``paired_rho`` is the correlation of a seed's two
    sides in the champion comparison (effective n ~ n / (1 + rho)); absent when undefined
    (combined scores only, fewer than two seeds, or a side that never varies)."""

    candidate: str
    champion: str
    admit: bool
    promote: bool
    cycle: bool
    verdict: Verdict
    conditions: list[ConditionResult]
    paired_rho: float | None = None


@dataclass
class Stratified:
    """Condition 3's evidence: the candidate's per-seed scores against each sampled pool member,
    and the champion's fitted predicted score against each (``stratified_from_table``).
    An empty ``scores`` means the pool had nothing to sample."""

    scores: Mapping[str, Sequence[float] | np.ndarray] = field(default_factory=dict)
    champion_predicted: Mapping[str, float] = field(default_factory=dict)


def stratified_from_table(scores: Mapping[str, Sequence[float] | np.ndarray], ratings: RatingTable | None,
                          champion: str) -> Stratified:
    """Condition 3's evidence with the champion's predictions read off a fit. A member the fit
    does not hold (or a champion it does not hold) gets no prediction, and condition 3 is then
    skipped naming it."""
    predicted = {}
    if ratings is not None and champion in ratings:
        predicted = {o: ratings.predict(champion, o) for o in scores if o in ratings}
    return Stratified(scores=dict(scores), champion_predicted=predicted)


def seed_scores(values, what: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(combined (S,), sides (S, 2) or None) from per-seed scores given either way. Raises
    ValueError naming ``what`` for another shape or a value outside the allowed set."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 2 and arr.shape[1] == 2:
        if not np.isin(arr, SIDE_SCORES).all():
            raise ValueError(f"{what}: side scores must be 0, 0.5 or 1")
        return arr.mean(axis=1), arr
    if arr.ndim == 1 or arr.size == 0:
        arr = arr.reshape(-1)
        if not np.isin(arr, SEED_SCORES).all():
            raise ValueError(f"{what}: seed scores must be 0, 0.25, 0.5, 0.75 or 1 ((blue + red) / 2)")
        return arr, None
    raise ValueError(f"{what}: expected shape (seeds,) or (seeds, 2), got {arr.shape}")


def paired_rho(sides: np.ndarray | None) -> float | None:
    """Pearson correlation of the two sides across seeds; None when undefined."""
    if sides is None or len(sides) < 2:
        return None
    if np.ptp(sides[:, 0]) == 0 or np.ptp(sides[:, 1]) == 0:
        return None
    return float(np.corrcoef(sides[:, 0], sides[:, 1])[0, 1])


def _skip(name: str, reason: str, n: int = 0, reference: float | None = None) -> ConditionResult:
    return ConditionResult(name=name, passed=False, skipped=True, reason=reason, n=n, reference=reference)


def beats_champion(scores: np.ndarray, lower_bound: float) -> ConditionResult:
    """Condition 1 on combined seed scores."""
    name = "beats_champion"
    if scores.size == 0:
        return _skip(name, "no games against the champion", reference=lower_bound)
    n = 2 * scores.size
    observed = float(scores.mean())
    lo, _ = wilson_interval(2.0 * float(scores.sum()), n)
    passed = lo >= lower_bound
    return ConditionResult(
        name=name, passed=passed, skipped=False, n=n, observed=observed, bound=lo, reference=lower_bound,
        reason=f"Wilson 95 % lower bound {lo:.4f} of score {observed:.4f} over {n} battles "
        f"{'>=' if passed else '<'} {lower_bound}",
    )


def no_anchor_regression(anchor: str, scores: np.ndarray | None, recorded: float | None,
                         tolerance_pp: float) -> ConditionResult:
    """Condition 2 for one anchor."""
    name = f"no_anchor_regression:{anchor}"
    if recorded is None:
        return _skip(name, f"the champion has no recorded score against {anchor}; play it against the "
                     "anchor once and keep the record", n=0 if scores is None else 2 * scores.size)
    if scores is None or scores.size == 0:
        return _skip(name, f"no games against {anchor}", reference=recorded)
    observed = float(scores.mean())
    bound = recorded - tolerance_pp / 100.0
    passed = observed >= bound - TIE_SLACK
    return ConditionResult(
        name=name, passed=passed, skipped=False, n=2 * scores.size, observed=observed, bound=bound,
        reference=recorded,
        reason=f"score {observed:.4f} vs {anchor} {'>=' if passed else '<'} champion's recorded "
        f"{recorded:.4f} - {tolerance_pp} pp",
    )


def no_pool_collapse(stratified: Stratified, resamples: int,
                     rng: np.random.Generator | None) -> tuple[ConditionResult, bool]:
    """Condition 3. Returns (result, empty_pool)."""
    name = "no_pool_collapse"
    if not stratified.scores:
        return _skip(name, "the pool holds nothing besides the champion and the anchors"), True
    members = sorted(stratified.scores)  # a fixed order: the bootstrap draws per member in it
    per = {o: seed_scores(stratified.scores[o], f"scores vs {o}")[0] for o in members}
    n = 2 * sum(a.size for a in per.values())
    empty = [o for o in members if per[o].size == 0]
    if empty:
        return _skip(name, f"no games against {', '.join(empty)}", n=n), False
    unpredicted = [o for o in members if stratified.champion_predicted.get(o) is None]
    if unpredicted:
        return _skip(name, f"no fitted prediction of the champion against {', '.join(unpredicted)}", n=n), False
    if rng is None:
        raise ValueError("condition 3 needs a generator for its bootstrap (stream eval/bootstrap/{comparison})")
    # Each member counts equally (the gate plays each the same number of games; if it did
    # not, a member with more seeds would otherwise dominate), and the bootstrap resamples
    # seeds within each member.
    observed = float(np.mean([per[o].mean() for o in members]))
    reference = float(np.mean([stratified.champion_predicted[o] for o in members]))
    boot = np.zeros(resamples)
    for o in members:
        a = per[o]
        boot += a[rng.integers(0, a.size, size=(resamples, a.size))].mean(axis=1)
    boot /= len(members)
    se = float(boot.std(ddof=1)) if resamples > 1 else 0.0
    bound = reference - se
    passed = observed >= bound - TIE_SLACK
    return ConditionResult(
        name=name, passed=passed, skipped=False, n=n, observed=observed, bound=bound, reference=reference,
        reason=f"score {observed:.4f} vs {len(members)} pool members {'>=' if passed else '<'} champion's "
        f"predicted {reference:.4f} - 1 SE {se:.4f}",
    ), False


def decide_gate(champion_scores, anchor_scores: Mapping[str, object],
                champion_anchor_record: Mapping[str, float] | None, stratified: Stratified | None, cfg,
                rng: np.random.Generator | None, *, candidate: str, champion: str) -> GateDecision:
    """The gate's verdict from the games played (module docstring for the rules).

    ``champion_scores``: per-seed scores vs the champion, (S,) combined or (S, 2) sides.
    ``anchor_scores``: anchor id -> per-seed scores vs that anchor (a missing or empty entry
    means not played). ``champion_anchor_record``: anchor id -> the champion's recorded mean
    score (None or a missing anchor: no record). The anchors judged are those in either
    mapping. ``stratified``: condition 3's evidence (None or empty: empty pool). ``cfg`` is a
    ``shared.config.GateConfig``. ``rng`` feeds condition 3's bootstrap; take it from stream
    ``eval/bootstrap/{comparison}`` with the candidate's id.

    Raises ValueError for scores of the wrong shape or values.
    """
    champ, sides = seed_scores(champion_scores, "champion_scores")
    c1 = beats_champion(champ, cfg.champion_lower_bound)
    record = dict(champion_anchor_record or {})
    anchors = sorted(set(anchor_scores) | set(record))
    if anchors:
        c2 = [
            no_anchor_regression(
                a, seed_scores(anchor_scores[a], f"anchor_scores[{a!r}]")[0] if a in anchor_scores else None,
                record.get(a), cfg.anchor_tolerance_pp)
            for a in anchors
        ]
    else:
        c2 = [_skip("no_anchor_regression", "no anchor was played and the champion has no anchor record")]
    if cfg.stratified_snapshots == 0:
        c3, empty_pool = _skip("no_pool_collapse", "off: ladder.gate.stratified_snapshots is 0"), True
    else:
        c3, empty_pool = no_pool_collapse(stratified or Stratified(), cfg.bootstrap_resamples, rng)

    def failed(c: ConditionResult) -> bool:
        return not c.skipped and not c.passed

    verdict: Verdict
    if failed(c1) or any(failed(c) for c in c2):
        verdict = "discard"
    elif c1.skipped or any(c.skipped for c in c2):
        verdict = "incomplete"
    elif c3.passed or (c3.skipped and empty_pool):
        verdict = "promote"
    elif failed(c3):
        verdict = "admit_cycle"
    else:
        verdict = "incomplete"
    return GateDecision(
        candidate=candidate, champion=champion, admit=verdict in ("promote", "admit_cycle"),
        promote=verdict == "promote", cycle=verdict == "admit_cycle", verdict=verdict,
        conditions=[c1, *c2, c3], paired_rho=paired_rho(sides),
    )


def anchor_record(anchor_scores: Mapping[str, object]) -> dict[str, float]:
    """A champion's anchor record: anchor id -> mean seed score, for the anchors it played
    (an anchor with no games gets no entry, never a default)."""
    out = {}
    for a, s in anchor_scores.items():
        scores, _ = seed_scores(s, f"anchor_scores[{a!r}]")
        if scores.size:
            out[a] = float(scores.mean())
    return out
