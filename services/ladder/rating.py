"""The authoritative rating: a MAP Bradley-Terry-Davidson fit of the whole result log.

``fit(games)`` is a pure function of the multiset of games (royalelearn-facts 6.1; seed 004,
Rater / RatingTable). The model, for players i and j with q = 10^(r/400):

    P(i wins) = q_i / D,   P(draw) = nu * sqrt(q_i q_j) / D,   P(j wins) = q_j / D,
    D = q_i + q_j + nu * sqrt(q_i q_j)

fitted by Newton's method on the log-posterior in (theta = ln10/400 * r, ln nu). In those
coordinates each game's log-likelihood is ``a_k - logsumexp(a1, a2, a3)`` with the affine
exponents a1 = theta_i, a2 = theta_j, a3 = ln nu + (theta_i + theta_j)/2, so it is concave;
the Gaussian priors make it strictly concave, and a Newton step with step halving converges
to the unique maximum in a handful of iterations.

* Prior N(0, prior_sd^2) (Elo) on every rating but the anchor's: a player with only wins stays
  finite. Weak prior N(0, 2^2) on ln nu.
* The anchor (``scripted:noop``) is pinned at exactly 0: it is not a parameter at all.
* When the observed draw rate is below 2 % the fit uses ``half_win`` instead (a draw counts
  as half a win, P(i scores) = q_i / (q_i + q_j)), and the table says so and why.
* Standard errors and the covariance come from the inverse of the Hessian of the negative
  log-posterior at the maximum (the observed Fisher information plus the prior's precision).
  The SE of a difference uses the covariance: var_a + var_b - 2 cov_ab (``RatingTable.diff_se``).
* Order invariance is exact, not approximate: games are put in a canonical order (each pair
  oriented by player id, then sorted) before anything is summed, so the same games in any
  order, either orientation, give bit-identical numbers.

Which log lines become games is ``games_from_results`` (see there): by default only
evaluation games (``role == "eval"``), as in the reference.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import msgspec
import numpy as np

from shared.messages import EpisodeRecord

ELO_PER_NAT = 400.0 / math.log(10.0)
"""Elo points per natural-log unit of strength: r = ELO_PER_NAT * theta."""
NAT_PER_ELO = math.log(10.0) / 400.0

DEFAULT_ANCHOR = "scripted:noop"
HALF_WIN_DRAW_RATE = 0.02
"""Below this observed draw rate a Davidson fit is replaced by half_win: nu would be fitted
from a handful of draws, and the model is then mostly its prior."""
LN_NU_PRIOR_SD = 2.0
MAX_NEWTON_ITERATIONS = 100
NEWTON_TOLERANCE = 1e-10
"""Converged when a full Newton step moves no parameter (theta, ln nu) by more than this."""
SCORES = (0.0, 0.5, 1.0)

DrawModel = Literal["davidson", "half_win"]


class Game(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One game between players ``a`` and ``b``.

    ``score_a`` is 1 (a won), 0.5 (draw) or 0 (b won). ``weight`` is how many identical games
    this line stands for (default 1; fractional weights are allowed, e.g. expected counts):
    every count in the table ("games") is a sum of weights.
    """

    a: str
    b: str
    score_a: float
    weight: float = 1.0


class PairStat(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What was OBSERVED between two players, oriented ``a < b`` by id.

    ``games`` is the summed weight, ``score_a`` a's mean score (draws half), ``draws`` the
    weighted share of draws. A pair that never played has no PairStat at all."""

    a: str
    b: str
    games: float
    score_a: float
    draws: float


class RatingTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One fit of the whole result log (seed 004, RatingTable).

    Ratings in Elo with the anchor pinned at exactly 0 (its SE and covariances are 0: it is
    the gauge, not an estimate). ``covariance`` is (Elo^2), rows and columns in ``players``
    order (sorted ids). ``nu`` and ``ln_nu_se`` are present only for a Davidson fit.
    ``transitivity_residual`` is absent when no pair reached ``min_pair_games`` games --
    never a fake 0 (lesson 16).
    """

    anchor: str
    players: list[str]
    ratings: dict[str, float]
    se: dict[str, float]
    covariance: list[list[float]]
    games_by_player: dict[str, float]
    games: float
    """Total summed weight of the games fitted."""
    records: int
    """Number of Game lines fitted."""
    draw_model: DrawModel
    draw_model_reason: str
    """Why this draw model: ``"requested"``, or the observed draw rate that forced half_win."""
    pairs: list[PairStat]
    min_pair_games: int
    pairs_tested: int
    """Pairs with >= min_pair_games games and no sweep: the denominator of the transitivity
    residual."""
    pairs_off: int
    """Of those, pairs whose observed score is more than 2 model SEs from the prediction."""
    prior_sd: float
    newton_iterations: int
    draw_rate: float | None = None
    """Weighted share of draws among the fitted games; absent with no games."""
    nu: float | None = None
    ln_nu_se: float | None = None
    transitivity_residual: float | None = None
    pairs_swept: int = 0
    """Pairs with >= min_pair_games games where one side scored every game (observed score 0
    or 1): not tested for transitivity (``_transitivity``)."""

    # ------------------------------------------------------------------ lookups

    def __contains__(self, player: object) -> bool:
        return isinstance(player, str) and self._index(player) is not None

    def _index(self, player: str) -> int | None:
        i = bisect.bisect_left(self.players, player)
        return i if i < len(self.players) and self.players[i] == player else None

    def _need(self, player: str) -> int:
        i = self._index(player)
        if i is None:
            raise KeyError(f"player {player!r} is not in the rating table ({len(self.players)} players)")
        return i

    def outcome_probs(self, a: str, b: str) -> tuple[float, float, float]:
        """(P(a wins), P(draw), P(b wins)) under the fitted model; P(draw) = 0 under half_win.
        Raises KeyError naming a player the table does not contain."""
        self._need(a), self._need(b)
        d = NAT_PER_ELO * (self.ratings[a] - self.ratings[b])
        if self.draw_model == "half_win" or self.nu is None:
            p = _sigmoid(d)
            return p, 0.0, 1.0 - p
        # Divide through by sqrt(q_a q_b): exponents d/2, -d/2 and ln nu.
        lw, ll, ld = d / 2.0, -d / 2.0, math.log(self.nu)
        m = max(lw, ll, ld)
        ew, el, ed = math.exp(lw - m), math.exp(ll - m), math.exp(ld - m)
        z = ew + el + ed
        return ew / z, ed / z, el / z

    def predict(self, a: str, b: str) -> float:
        """P(a scores against b) under the fitted model, a draw counted as half a win.
        Raises KeyError naming a player the table does not contain."""
        win, draw, _ = self.outcome_probs(a, b)
        return win + 0.5 * draw

    def cov(self, a: str, b: str) -> float:
        """Covariance of two ratings, Elo^2."""
        return self.covariance[self._need(a)][self._need(b)]

    def diff_se(self, a: str, b: str) -> float:
        """SE of r_a - r_b: sqrt(var_a + var_b - 2 cov_ab), not the sum of the marginals."""
        i, j = self._need(a), self._need(b)
        c = self.covariance
        return math.sqrt(max(c[i][i] + c[j][j] - 2.0 * c[i][j], 0.0))

    def pair(self, a: str, b: str) -> PairStat | None:
        """The observed record of a vs b (oriented a < b as stored), None if they never played."""
        lo, hi = (a, b) if a < b else (b, a)
        for p in self.pairs:
            if p.a == lo and p.b == hi:
                return p
        return None

    def observed(self, a: str, b: str) -> float | None:
        """a's observed mean score against b, or None (absent, never 0.5) if they never played."""
        p = self.pair(a, b)
        if p is None:
            return None
        return p.score_a if p.a == a else 1.0 - p.score_a


# ---------------------------------------------------------------------- the fit


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def _check_game(k: int, g: Game) -> None:
    if not isinstance(g.a, str) or not isinstance(g.b, str) or not g.a or not g.b:
        raise ValueError(f"game {k}: players must be non-empty strings, got {g.a!r} vs {g.b!r}")
    if g.a == g.b:
        raise ValueError(f"game {k}: {g.a!r} plays itself; a self-play game carries no rating information")
    if g.score_a not in SCORES:
        raise ValueError(f"game {k} ({g.a} vs {g.b}): score_a {g.score_a!r} must be 0, 0.5 or 1")
    if not (math.isfinite(g.weight) and g.weight > 0):
        raise ValueError(f"game {k} ({g.a} vs {g.b}): weight {g.weight!r} must be a finite number > 0")


def _canonical(games: Iterable[Game]) -> list[tuple[str, str, float, float]]:
    """Each game as (lo, hi, score of lo, weight), sorted: the order everything is summed in."""
    out = []
    for k, g in enumerate(games):
        _check_game(k, g)
        s = float(g.score_a)
        out.append((g.a, g.b, s, float(g.weight)) if g.a < g.b else (g.b, g.a, 1.0 - s, float(g.weight)))
    out.sort()
    return out


@dataclass
class _Pairs:
    """Per-pair weighted counts, in canonical order. lo/hi index into the sorted player list."""

    lo: np.ndarray
    hi: np.ndarray
    wins: np.ndarray  # lo won
    losses: np.ndarray  # hi won
    draws: np.ndarray

    @property
    def n(self) -> np.ndarray:
        return self.wins + self.losses + self.draws


def _aggregate(canon: list[tuple[str, str, float, float]], index: dict[str, int]) -> _Pairs:
    acc: dict[tuple[str, str], list[float]] = {}
    for lo, hi, s, w in canon:  # canonical order: every sum is taken in the same order
        c = acc.setdefault((lo, hi), [0.0, 0.0, 0.0])
        c[0 if s == 1.0 else 1 if s == 0.0 else 2] += w
    keys = sorted(acc)
    arr = np.array([acc[k] for k in keys], dtype=np.float64).reshape(-1, 3)
    return _Pairs(
        lo=np.array([index[k[0]] for k in keys], dtype=np.int64),
        hi=np.array([index[k[1]] for k in keys], dtype=np.int64),
        wins=arr[:, 0].copy(), losses=arr[:, 1].copy(), draws=arr[:, 2].copy(),
    )


class _Posterior:
    """The negative log-posterior's value, gradient and Hessian in the free parameters
    x = (theta of every non-anchor player in sorted order, [ln nu])."""

    def __init__(self, pairs: _Pairs, n_players: int, anchor_index: int, davidson: bool, prior_sd: float):
        self.p = pairs
        self.davidson = davidson
        # player index -> parameter index; the anchor has none (-1).
        self.param = np.full(n_players, -1, dtype=np.int64)
        free = [i for i in range(n_players) if i != anchor_index]
        self.param[free] = np.arange(len(free))
        self.n_theta = len(free)
        self.size = self.n_theta + (1 if davidson else 0)
        self.theta_precision = 1.0 / (NAT_PER_ELO * prior_sd) ** 2
        self.lnu_precision = 1.0 / LN_NU_PRIOR_SD**2

    def theta(self, x: np.ndarray) -> np.ndarray:
        """Every player's theta, the anchor's 0."""
        full = np.zeros(len(self.param))
        mask = self.param >= 0
        full[mask] = x[self.param[mask]]
        return full

    def _local(self, x: np.ndarray):
        """Per pair: exponents, softmax probabilities, local Jacobian rows."""
        th = self.theta(x)
        ti, tj = th[self.p.lo], th[self.p.hi]
        if self.davidson:
            a = np.stack([ti, tj, x[-1] + 0.5 * (ti + tj)], axis=1)
        else:
            a = np.stack([ti, tj], axis=1)
        m = a.max(axis=1, keepdims=True)
        e = np.exp(a - m)
        z = e.sum(axis=1, keepdims=True)
        return a, m[:, 0] + np.log(z[:, 0]), e / z

    def value(self, x: np.ndarray) -> float:
        a, lse, _ = self._local(x)
        p = self.p
        if self.davidson:
            ll = p.wins * a[:, 0] + p.losses * a[:, 1] + p.draws * a[:, 2] - p.n * lse
        else:
            # half_win: a draw is half a win and half a loss.
            ll = (p.wins + 0.5 * p.draws) * a[:, 0] + (p.losses + 0.5 * p.draws) * a[:, 1] - p.n * lse
        prior = 0.5 * self.theta_precision * float(np.dot(x[: self.n_theta], x[: self.n_theta]))
        if self.davidson:
            prior += 0.5 * self.lnu_precision * float(x[-1]) ** 2
        return -float(ll.sum()) + prior

    def grad_hess(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Gradient and Hessian of the NEGATIVE log-posterior."""
        _, _, pi = self._local(x)
        p = self.p
        n = p.n
        if self.davidson:
            obs = np.stack([p.wins, p.losses, p.draws], axis=1)
            # Jacobian of (a1, a2, a3) w.r.t. (theta_lo, theta_hi, ln nu).
            jac = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.5, 1.0]])
            cols = np.stack([self.param[p.lo], self.param[p.hi], np.full(len(n), self.size - 1)], axis=1)
        else:
            obs = np.stack([p.wins + 0.5 * p.draws, p.losses + 0.5 * p.draws], axis=1)
            jac = np.eye(2)
            cols = np.stack([self.param[p.lo], self.param[p.hi]], axis=1)
        resid = obs - n[:, None] * pi  # d ll / d a
        g_local = resid @ jac  # (pairs, k)
        cov = (pi[:, :, None] * np.eye(pi.shape[1])[None]) - pi[:, :, None] * pi[:, None, :]
        h_local = n[:, None, None] * np.einsum("ka,pkl,lb->pab", jac, cov, jac)
        grad = np.zeros(self.size)
        hess = np.zeros((self.size, self.size))
        k = cols.shape[1]
        for u in range(k):
            cu = cols[:, u]
            mu = cu >= 0
            np.add.at(grad, cu[mu], -g_local[mu, u])
            for v in range(k):
                cv = cols[:, v]
                mv = mu & (cv >= 0)
                np.add.at(hess, (cu[mv], cv[mv]), h_local[mv, u, v])
        t = self.n_theta
        grad[:t] += self.theta_precision * x[:t]
        hess[np.arange(t), np.arange(t)] += self.theta_precision
        if self.davidson:
            grad[-1] += self.lnu_precision * x[-1]
            hess[-1, -1] += self.lnu_precision
        return grad, hess


def _newton(post: _Posterior, x0: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Maximise the log-posterior. Returns (x, Hessian of the negative log-posterior at x,
    iterations). Raises RuntimeError if it does not converge (it always should: the objective
    is strictly concave)."""
    x = x0.copy()
    f = post.value(x)
    for it in range(1, MAX_NEWTON_ITERATIONS + 1):
        g, h = post.grad_hess(x)
        step = np.linalg.solve(h, -g)
        if float(np.max(np.abs(step), initial=0.0)) < NEWTON_TOLERANCE:
            x = x + step
            _, h = post.grad_hess(x)
            return x, h, it
        # Step halving: never accept a step that lowers the posterior (beyond rounding).
        t = 1.0
        while True:
            cand = x + t * step
            fc = post.value(cand)
            if fc <= f + 1e-13 * (1.0 + abs(f)) or t < 1e-12:
                break
            t *= 0.5
        x, f = cand, fc
    raise RuntimeError(f"rating fit did not converge in {MAX_NEWTON_ITERATIONS} Newton iterations")


def fit(games: Iterable[Game], *, anchor: str = DEFAULT_ANCHOR, prior_sd: float = 400.0,
        draws: DrawModel = "davidson", min_pair_games: int = 30) -> RatingTable:
    """The MAP Bradley-Terry-Davidson fit of ``games`` (module docstring for the model).

    ``draws="davidson"`` fits nu jointly unless the observed draw rate is under 2 %, in which
    case (and with no games at all) the fit is ``half_win`` and ``draw_model_reason`` says why;
    ``draws="half_win"`` always counts a draw as half a win. The anchor is in the table at
    exactly 0 even when it never played (then the prior alone sets the scale's origin).

    Raises ValueError naming the game for a self-play game, a score outside {0, 0.5, 1} or a
    weight that is not a finite positive number, and for a bad prior_sd / draws / anchor.
    """
    if draws not in ("davidson", "half_win"):
        raise ValueError(f"draws {draws!r}: expected 'davidson' or 'half_win'")
    if not (math.isfinite(prior_sd) and prior_sd > 0):
        raise ValueError(f"prior_sd {prior_sd!r}: expected a finite number of Elo > 0")
    if not isinstance(anchor, str) or not anchor:
        raise ValueError(f"anchor {anchor!r}: expected a player id")
    canon = _canonical(games)
    players = sorted({p for g in canon for p in g[:2]} | {anchor})
    index = {p: i for i, p in enumerate(players)}
    pairs = _aggregate(canon, index)

    total = math.fsum(g[3] for g in canon)
    drawn = math.fsum(g[3] for g in canon if g[2] == 0.5)
    draw_rate = drawn / total if canon else None
    model: DrawModel = draws
    reason = "requested"
    if draws == "davidson":
        if draw_rate is None:
            model, reason = "half_win", "no games"
        elif draw_rate < HALF_WIN_DRAW_RATE:
            model = "half_win"
            reason = f"observed draw rate {100 * draw_rate:.2f} % < {100 * HALF_WIN_DRAW_RATE:.0f} %"

    post = _Posterior(pairs, len(players), index[anchor], model == "davidson", prior_sd)
    x0 = np.zeros(post.size)
    if model == "davidson":
        # At equal strength P(draw) = nu / (2 + nu): start nu where that matches the data.
        x0[-1] = math.log(2.0 * draw_rate / (1.0 - draw_rate)) if draw_rate < 1.0 else math.log(1e3)
    x, hess, iterations = _newton(post, x0)

    cov_x = np.linalg.inv(hess)
    cov_x = 0.5 * (cov_x + cov_x.T)
    theta = post.theta(x)
    ratings_elo = ELO_PER_NAT * theta
    cov = np.zeros((len(players), len(players)))
    free = post.param >= 0
    fi = np.nonzero(free)[0]
    cov[np.ix_(fi, fi)] = cov_x[np.ix_(post.param[fi], post.param[fi])] * ELO_PER_NAT**2
    se = np.sqrt(np.clip(np.diag(cov), 0.0, None))

    ratings = {p: float(ratings_elo[i]) for i, p in enumerate(players)}
    ratings[anchor] = 0.0  # exactly, not -0.0
    per_player: Counter[str] = Counter()
    for lo, hi, _, w in canon:
        per_player[lo] += w
        per_player[hi] += w
    pair_stats = [
        PairStat(a=players[int(i)], b=players[int(j)], games=float(w + l + d),
                 score_a=float((w + 0.5 * d) / (w + l + d)), draws=float(d / (w + l + d)))
        for i, j, w, l, d in zip(pairs.lo, pairs.hi, pairs.wins, pairs.losses, pairs.draws)
    ]
    nu = ln_nu_se = None
    if model == "davidson":
        nu = float(math.exp(x[-1]))
        ln_nu_se = float(math.sqrt(max(cov_x[-1, -1], 0.0)))
    table = RatingTable(
        anchor=anchor, players=players, ratings=ratings,
        se={p: float(se[i]) for i, p in enumerate(players)},
        covariance=cov.tolist(), games_by_player={p: float(per_player.get(p, 0.0)) for p in players},
        games=float(total), records=len(canon), draw_model=model, draw_model_reason=reason,
        pairs=pair_stats, min_pair_games=int(min_pair_games), pairs_tested=0, pairs_off=0,
        prior_sd=float(prior_sd), newton_iterations=iterations, draw_rate=draw_rate, nu=nu, ln_nu_se=ln_nu_se,
    )
    tested, off, swept = _transitivity(table, min_pair_games)
    return msgspec.structs.replace(
        table, pairs_tested=tested, pairs_off=off, pairs_swept=swept,
        transitivity_residual=(off / tested) if tested else None,
    )


def fit_with(games: Iterable[Game], rater) -> RatingTable:
    """``fit`` with the settings of a ``shared.config.RaterConfig``."""
    return fit(games, anchor=rater.anchor, prior_sd=rater.prior_sd, draws=rater.draws,
               min_pair_games=rater.min_pair_games)


def _transitivity(table: RatingTable, min_pair_games: int) -> tuple[int, int, int]:
    """(pairs with >= min_pair_games games and no sweep, of those the ones whose observed score
    is more than 2 * sqrt(p(1-p)/n) from the fitted prediction p, the swept pairs left out).

    A sweep (one side scored every game: observed 0 or 1) is left out, a departure from the
    reference's rule (royalelearn-facts 6.1; docs/design.md). A sweep is consistent with any
    rating gap beyond what the fit reaches, but the Gaussian prior (``prior_sd``) keeps every
    gap finite, so the fit always predicts the loser some wins and the pair always tests as off.
    The champion's 200-0 anchor record against ``scripted:noop`` did exactly that in every cpu
    run: its prediction 0.024 against 2 SE of 0.022, and ``transitivity`` fired on 42 of 85
    iterations of the two-hour run with no intransitive pair in the log. A rock-paper-scissors
    cycle shows in the pairs that are not sweeps, which are all still tested."""
    tested = off = swept = 0
    for pair in table.pairs:
        if pair.games < min_pair_games:
            continue
        if pair.score_a in (0.0, 1.0):
            swept += 1
            continue
        tested += 1
        p = table.predict(pair.a, pair.b)
        if abs(pair.score_a - p) > 2.0 * math.sqrt(p * (1.0 - p) / pair.games):
            off += 1
    return tested, off, swept


def table_from_ratings(ratings: dict[str, float], *, anchor: str = DEFAULT_ANCHOR,
                       nu: float | None = None) -> RatingTable:
    """A table holding the given ratings as if fitted, with zero SEs and no games: for what-if
    questions and tests (the PFSP doc example). ``nu`` None means half_win predictions."""
    players = sorted(set(ratings) | {anchor})
    r = {p: float(ratings.get(p, 0.0)) for p in players}
    return RatingTable(
        anchor=anchor, players=players, ratings=r, se={p: 0.0 for p in players},
        covariance=[[0.0] * len(players) for _ in players], games_by_player={p: 0.0 for p in players},
        games=0.0, records=0, draw_model="half_win" if nu is None else "davidson",
        draw_model_reason="given, not fitted", pairs=[], min_pair_games=0, pairs_tested=0, pairs_off=0,
        prior_sd=math.inf, newton_iterations=0, nu=nu,
    )


# ---------------------------------------------------------------------- from the log

EVAL_ROLE = "eval"
"""The ``EpisodeRecord.role`` an evaluation battle is written with (gates, anchor records)."""
PROBE_ROLE = "probe"
"""The role of a live-policy probe battle: a one-moment player, never fitted by default."""
KINDS = ("eval", "train", "probe")


def kind_of(record: EpisodeRecord) -> str:
    """``eval`` / ``probe`` for records written with that role, ``train`` for every training
    role (mirror, pool, scripted): the record has no kind field of its own."""
    return record.role if record.role in (EVAL_ROLE, PROBE_ROLE) else "train"


def learner_id(record_iteration: int) -> str:
    """The player id of the live learner in a training game: ``learner@iter<N>``, the policy
    that played in iteration N. The live learner is a different player every iteration (the
    reference writes ``learner@<env_steps>``; our records carry the iteration)."""
    return f"learner@iter{record_iteration}"


@dataclass
class Extraction:
    """What ``extract_games`` made of a record stream: the games, and how many records were
    dropped and why (reason -> count)."""

    games: list[Game] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)


def _player(record: EpisodeRecord, name: str) -> str | None:
    if name != "learner":
        return name
    return learner_id(record.iteration) if record.iteration >= 0 else None


def extract_games(records: Iterable[EpisodeRecord], *, kinds: Sequence[str] = ("eval",)) -> Extraction:
    """Turn the ladder's EpisodeRecord stream into Games.

    The ladder logs one record per SEAT, so a battle appears twice (blue and red, mirror
    images). Records are grouped by (role, iteration, battle, ordinal) -- the key the two seats
    of one battle share -- and each battle becomes ONE game: from its blue record when it
    has one, else from its red record (a log holding only one seat of a battle loses nothing).
    ``a`` is that record's player, ``score_a`` is 1 / 0.5 / 0 for outcome +1 / 0 / -1 (a
    truncated battle is a draw, as the record already says).

    Only records whose ``kind_of`` is in ``kinds`` are used (default: evaluation games only,
    as the reference fits only ``kind="eval"``; training games are PFSP-selected and biased).
    The live learner (player ``"learner"``) becomes ``learner@iter<N>`` (``learner_id``), a new
    player each iteration. Dropped, and counted in ``Extraction.dropped``:

    * ``other_kind`` -- the record's kind is not asked for;
    * ``mirror`` -- both seats are the same player (self-play carries no rating information);
    * ``no_iteration`` -- a learner record without an iteration (-1): no player to name;
    * ``second_seat`` -- the other seat of a battle already counted;
    * ``bad_outcome`` -- an outcome other than +1 / 0 / -1;
    * ``seat_mismatch`` -- a blue and a red record of one key that disagree on the players or
      the result (both dropped: the log contradicts itself and neither can be trusted).

    A pure function of the multiset of records (``fit`` puts the games in canonical order).
    """
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"kinds {unknown}: expected some of {', '.join(KINDS)}")
    out = Extraction()
    groups: dict[tuple, dict[str, list[EpisodeRecord]]] = {}
    for rec in records:
        if kind_of(rec) not in kinds:
            out.dropped["other_kind"] += 1
            continue
        if rec.player == rec.opponent:
            out.dropped["mirror"] += 1
            continue
        key = (rec.role, rec.iteration, rec.battle, rec.ordinal)
        groups.setdefault(key, {"blue": [], "red": []})[rec.seat].append(rec)
    for key in sorted(groups, key=repr):
        blue, red = groups[key]["blue"], groups[key]["red"]
        if len(blue) == 1 and len(red) == 1:
            b, r = blue[0], red[0]
            if (b.player, b.opponent, b.outcome) != (r.opponent, r.player, -r.outcome):
                out.dropped["seat_mismatch"] += 2
                continue
        use = blue if len(blue) >= len(red) else red
        out.dropped["second_seat"] += len(blue) + len(red) - len(use)
        for rec in use:
            a, b = _player(rec, rec.player), _player(rec, rec.opponent)
            if rec.outcome not in (1, 0, -1):
                out.dropped["bad_outcome"] += 1
                continue
            if a is None or b is None:
                out.dropped["no_iteration"] += 1
                continue
            out.games.append(Game(a=a, b=b, score_a={1: 1.0, 0: 0.5, -1: 0.0}[int(rec.outcome)]))
    return out


def games_from_results(records: Iterable[EpisodeRecord], *, kinds: Sequence[str] = ("eval",)) -> list[Game]:
    """``extract_games(records, kinds=kinds).games``."""
    return extract_games(records, kinds=kinds).games
