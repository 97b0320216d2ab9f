"""Expert iteration's search targets: AlphaZero's book (``alphazero.book.SearchBook``: the
candidates, the checks of each reported search, the counts) with the target taken on a fixed
value scale and the search's root value kept.

For each search the book accepts (its candidates, keys and move checked as AlphaZero checks
them), the scores q (k,) of its candidates become

* fixed-scale scores s: q itself under ``alphazero.leaf_value = "critic"`` (n-step returns with
  V(leaf), the critic's units) or ``alphazero.value_scale`` > 0 (the rollouts' means are already
  tanh(board / ``alphazero.value_scale``)), else tanh(q / ``expert_iteration.value_scale``)
  (``shared.search.targets.fixed_scale``: a 1-HP difference stays small);
* the policy target ``shared.search.targets.margin_policy(log prior, candidates, s, c_scale,
  keep)``: mass moves from the prior only toward a candidate that beats the prior's own pick
  (the first candidate, the top Gumbel key) by more than ``keep``;
* the root value: s of the move played (``shared.search.targets.root_value``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from services.learner.alphazero.book import SearchBook, SearchTarget
from shared.search.targets import fixed_scale, margin_policy, root_value


@dataclass
class Searched:
    """One accepted search beside its target: ``root`` the root value (fixed scale), ``prior``
    float32 (n,) the behaviour prior's log-probabilities over the target's legal ids, ``move``
    the move played."""

    root: float
    prior: np.ndarray
    move: int


@dataclass
class ExpitBook(SearchBook):
    """``SearchBook`` with fixed-scale margin targets and root values (module docstring)."""

    target_c_scale: float = 0.3
    keep: float = 0.3
    value_scale: float = 2000.0
    critic_scores: bool = False
    searched: dict[tuple[int, int], Searched] = field(default_factory=dict)

    def begin(self, reward_divisor: float = 1.0) -> None:
        super().begin(reward_divisor)
        self.searched.clear()

    def scores(self, q: np.ndarray) -> np.ndarray:
        """(k,) float64 fixed-scale scores of raw scores ``q`` (module docstring)."""
        q = np.asarray(q, np.float64)
        return q if self.critic_scores else fixed_scale(q, self.value_scale)

    def complete(self, cycle: int, slots: np.ndarray, candidates: np.ndarray, q: np.ndarray,
                 moves: np.ndarray) -> list[tuple[int, int, float]]:
        """``SearchBook.complete``, then each accepted search's target replaced by the margin
        target and its root value kept (``searched``)."""
        held = {int(s): self.pending.get((cycle, int(s))) for s in np.asarray(slots).tolist()}
        score_of = {int(s): row for s, row in zip(np.asarray(slots).tolist(), q)}
        out = super().complete(cycle, slots, candidates, q, moves)
        for slot, move, _ in out:
            p = held[slot]
            assert p is not None  # complete accepted it: it was pending
            s = self.scores(np.asarray(score_of[slot][: len(p.candidates)]))
            pi = margin_policy(p.log_prior, p.candidates, s, c_scale=self.target_c_scale, keep=self.keep)
            old = self.targets[(cycle, slot)]
            ids = old.ids.astype(np.int64)
            probs = pi[ids]
            nz = probs > 0
            entropy = float(-(probs[nz] * np.log(probs[nz])).sum())
            kl = float((probs[nz] * (np.log(probs[nz]) - p.log_prior[ids][nz])).sum())
            self.targets[(cycle, slot)] = SearchTarget(old.ids, probs.astype(np.float32), entropy, kl, old.changed)
            at = int(np.flatnonzero(p.candidates == move)[0])
            self.searched[(cycle, slot)] = Searched(root_value(s, at), p.log_prior[ids].astype(np.float32), move)
        return out
