"""Several playouts per candidate, sequential halving over them, and the move they lead to
(``SearchSpec``'s ``p``, ``sh``, ``opp``, ``vs`` and ``keep``; docs/search.md, "Targets worth
distilling").

One playout of a candidate is ``Lookahead.simulate``'s: the candidate, then ``depth`` decisions of
the continuation, scored by the board difference. Here a candidate gets several, each with its
own streams (playout j of every candidate replays j's streams: common random numbers across the
candidates, so two candidates are compared on the same futures), and playout j's opponent is one
of a set (``opponents[(seed + j) mod len]``). Each playout's score is the board difference, or
tanh(difference / ``value_scale``) on a fixed scale; a candidate's score is the mean of its
playouts.

Sequential halving (Karnin, Koren & Somekh 2013; Gumbel AlphaZero's root, Danihelka et al. 2022):
with a budget of N x K playouts and R = ceil(log2 N) rounds, each round gives every surviving
candidate floor(budget left / (rounds left x survivors)) playouts (at least one) and keeps the
better half by mean, so the budget goes to the close candidates (N 8, K 4: 8 x 1, 4 x 3, 2 x 6). The player's own pick (candidate 0) is always
kept: it is the default a challenger must beat by more than ``keep``.

With ``confirm`` C, a move that leaves the own pick is played again against it and the next-best
finalist (``CONFIRM_RIVALS`` others in all), C more playouts each on fresh streams, and those alone
choose (``confirm``).

With every option at its default (one playout, no halving, the battle's opponent, raw board,
keep 0, no confirmation) the move is exactly ``Lookahead.choose``'s: the highest score, ties to the earliest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shared.search.spec import SearchSpec


@dataclass
class Evaluation:
    """One searched decision: ``means`` (k,) float64 each candidate's mean score (score units:
    tower HP, or tanh units under ``value_scale``), ``visits`` (k,) int64 its playouts, ``index``
    the candidate played, ``root`` the searched root value (the played candidate's mean)."""

    means: np.ndarray
    visits: np.ndarray
    index: int

    @property
    def root(self) -> float:
        return float(self.means[self.index])


def playout_seed(seed: int, j: int) -> int:
    """The seed of playout ``j`` of a decision searched at ``seed``: ``seed`` itself for j = 0
    (the one-playout search's streams, unchanged), else drawn from ``(seed, 3, j)``."""
    if j == 0:
        return int(seed)
    return int(np.random.default_rng((int(seed), 3, int(j))).integers(0, 2**63 - 1))


def score(board: np.ndarray, value_scale: float) -> np.ndarray:
    """Each playout's score: the board difference ``board`` (float64, tower HP), or
    tanh(board / ``value_scale``) in [-1, 1] when ``value_scale`` > 0."""
    board = np.asarray(board, np.float64)
    return np.tanh(board / value_scale) if value_scale > 0 else board


def pick(means: np.ndarray, alive: np.ndarray, keep: float) -> int:
    """The candidate played: the best mean among ``alive`` (ties to the earliest), unless it beats
    candidate 0 (the player's own pick) by ``keep`` or less, then 0."""
    masked = np.where(alive, np.asarray(means, np.float64), -np.inf)
    best = int(np.argmax(masked))
    return 0 if masked[best] <= masked[0] + keep else best


def pick_scores(means: np.ndarray, visits: np.ndarray, keep: float) -> tuple[np.ndarray, np.ndarray]:
    """What ``pick`` chose among once a search is done: ((k,) bool the survivors, the candidates
    with the most playouts ``visits``; (k,) the means, in their dtype, candidate 0's raised by
    ``keep``). The best of the survivors' scores is the move (ties to candidate 0)."""
    visits = np.asarray(visits)
    scores = np.array(means, copy=True)
    scores[0] += keep
    return visits == visits.max(), scores


def pick_margin(means: np.ndarray, visits: np.ndarray, keep: float) -> float:
    """How clear ``pick``'s choice was: the best of ``pick_scores``' survivor scores minus the
    runner-up's (so a margin of exactly ``keep`` is a tie kept for the player's own pick); 0.0 with
    one survivor. The same rule as ``royalefleet.clone.search_margins`` over recorded scores."""
    alive, scores = pick_scores(np.asarray(means, np.float64), visits, keep)
    top = np.sort(scores[alive])[::-1]
    return float(top[0] - top[1]) if len(top) > 1 else 0.0


def survivors(means: np.ndarray, alive: np.ndarray) -> np.ndarray:
    """``alive`` (k,) bool cut to the better half (ceil) by mean, ties to the earlier, candidate 0
    always among them."""
    idx = np.flatnonzero(alive)
    keep_n = math.ceil(len(idx) / 2)
    order = idx[np.argsort(-np.asarray(means)[idx], kind="stable")]
    chosen = list(order[:keep_n])
    if 0 not in chosen:
        chosen = chosen[: keep_n - 1] + [0]
    out = np.zeros(len(alive), bool)
    out[chosen] = True
    return out


def schedule(k: int, spec: SearchSpec) -> list[int]:
    """Playouts per surviving candidate in each round: ``[playouts]`` without halving, else one
    entry per round of sequential halving over ``k`` candidates (budget k x playouts)."""
    if not spec.halving or k <= 2:
        return [spec.playouts]
    rounds = math.ceil(math.log2(k))
    budget, out, alive, spent = k * spec.playouts, [], k, 0
    for r in range(rounds):
        share = (budget - spent) // (rounds - r)  # what is left, spread over the rounds left
        out.append(max(1, share // alive))
        spent += out[-1] * alive
        alive = math.ceil(alive / 2)
    return out


def evaluate(lookahead, env, seat: str, candidates: list[int], opponents: list, seed: int,
             spec: SearchSpec, seen: np.ndarray | None = None) -> Evaluation:
    """Search one decision of ``seat`` in ``env`` over ``candidates`` (distinct legal ids, the
    player's own pick first) with ``lookahead`` (a ``Lookahead``), playout j's other seat played by
    ``opponents[(seed + j) mod len]`` (opponent models as ``Lookahead.simulate`` takes them).
    Under ``spec.redeal`` playout j starts from the battle with the enemy's cards not in ``seen``
    ((n_cards,) bool, the seat's ``enemy_cards_seen``; ValueError when None) redealt from playout
    j's seed, the same deal for every candidate (``Lookahead.redealt``).
    Counts one searched decision in ``lookahead.stats``."""
    k = len(candidates)
    sums, visits = np.zeros(k), np.zeros(k, np.int64)
    alive = np.ones(k, bool)
    saved = lookahead.save(env, seat)
    if spec.redeal and seen is None:
        raise ValueError("a search with redeal=1 needs the seat's enemy_cards_seen (seen)")
    deals: dict[int, tuple] = {}

    def playouts(idx: np.ndarray, js: range, sums: np.ndarray) -> None:
        """Add each of playouts ``js``' scores of candidates ``idx`` to ``sums[idx]``, in turn."""
        for j in js:
            opponent = opponents[(int(seed) + j) % len(opponents)]
            at = saved
            if spec.redeal:  # the same deal for playout j in every round
                if j not in deals:
                    deals[j] = lookahead.redealt(saved, seat, seen, playout_seed(seed, j))
                at = deals[j]
            board = lookahead.simulate(env, seat, [int(candidates[i]) for i in idx], opponent, playout_seed(seed, j),
                                       count=False, saved=at).board
            sums[idx] += score(board, spec.value_scale)

    rounds = schedule(k, spec)
    entrants = alive  # the last two rounds' entrants: where a confirmation draws its rivals
    for r, per in enumerate(rounds):
        if r == len(rounds) - 2:
            entrants = alive
        idx = np.flatnonzero(alive)
        start = int(visits[idx[0]])
        playouts(idx, range(start, start + per), sums)
        visits[idx] += per
        if r < len(rounds) - 1:
            alive = survivors(sums / np.maximum(visits, 1), alive)
    means = sums / np.maximum(visits, 1)
    index = pick(means, alive, spec.keep)
    if spec.confirm and index != 0:
        index = confirm(means, visits, entrants, playouts, spec)
        lookahead.stats.unconfirmed += int(index == 0)
    lookahead.stats.decisions += 1
    lookahead.stats.chose_other += int(index != 0)
    return Evaluation(means=means, visits=visits, index=index)


CONFIRM_RIVALS = 2
"""How many candidates besides the player's own pick a confirmation plays again: the best by mean
of the last two rounds' entrants (the departure the search chose among them). Two, because a
clear departure's label that does not repeat mostly goes to another departure (docs/search.md,
"Confirming a departure"), not back to the own pick."""


def confirm(means: np.ndarray, visits: np.ndarray, entrants: np.ndarray, playouts, spec: SearchSpec) -> int:
    """Play a departure again against its rivals on fresh streams and let those decide: the
    player's own pick and the ``CONFIRM_RIVALS`` best others by mean among ``entrants`` ((k,) bool,
    the last two halving rounds' entrants; every candidate without halving) get ``spec.confirm``
    more playouts each, on playout streams none of them has seen (j from the most playouts
    onwards, common to all), and the move is ``pick`` over those fresh means alone: a departure
    stands only if it beats the own pick there by more than ``spec.keep``. The search chose its
    departure because its playouts scored high, so its mean is biased upward (the winner's curse);
    fresh playouts are not. ``means`` and ``visits`` ((k,) float64 / int64, updated in place) give
    the contenders their fresh means and the most visits, so ``pick`` over the recorded scores
    (``pick_scores``) makes the same move. ``playouts(idx, js, sums)`` adds candidates ``idx``'s
    scores over playouts ``js`` to ``sums[idx]`` (``evaluate``'s). Returns the move's candidate
    index (0: the own pick)."""
    others = np.flatnonzero(entrants)
    others = others[others != 0]
    rivals = others[np.argsort(-means[others], kind="stable")][:CONFIRM_RIVALS]
    contenders = np.concatenate([[0], np.sort(rivals)]).astype(np.int64)
    start = int(visits.max())
    fresh = np.zeros(len(means))
    playouts(contenders, range(start, start + spec.confirm), fresh)
    means[contenders] = fresh[contenders] / spec.confirm
    visits[contenders] = start + spec.confirm
    alive = np.zeros(len(means), bool)
    alive[contenders] = True
    return pick(means, alive, spec.keep)
