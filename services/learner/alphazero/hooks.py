"""The AlphaZero learner's part in the rounds (``round_hooks.RoundHooks``): the search's
candidates in each Step (``SearchBook.propose``), the scores and moves the next round reports
(``SearchBook.complete``), the rollout's search costs (``SearchBook.count_round``) and the
questions asked in the middle of a searched step (``mid_step.MidStepAnswers``, bounded by the
simulations each Step started)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from services.learner.alphazero.book import SearchBook
from services.learner.alphazero.mid_step import MidStepAnswers

if TYPE_CHECKING:
    from services.learner.fleet import Member
    from services.learner.round_hooks import CollectionView
    from shared.messages import LeafQuery, Round, SimActQuery


class SearchRounds:
    """``RoundHooks`` over one run's ``SearchBook`` (module docstring)."""

    def __init__(self, book: SearchBook):
        self.book = book
        self.answers = MidStepAnswers(book)

    def step_arrays(self, policy, iteration: int, cycle: int, member: Member, shard: int, learner: np.ndarray,
                    local: np.ndarray, rows: np.ndarray, n_legal: np.ndarray) -> dict[str, np.ndarray]:
        """The choice rows' candidates (``SearchBook.propose``); records how many simulations
        the Step starts, the bound of its mid-step queries."""
        out = self.book.propose(policy, iteration, cycle, learner, local, rows, n_legal)
        simulations = int(np.count_nonzero(out["search_candidates"] >= 0)) if out else 0
        self.answers.step_sent(member, shard, iteration, cycle, simulations)
        return out

    def round_arrived(self, body: Round) -> None:
        self.book.count_round(body)

    def step_closed(self, cycle: int, slots: np.ndarray, candidates, q, moves) -> list[tuple[int, int, float]]:
        return self.book.complete(cycle, slots, candidates, q, moves)

    def on_query(self, view: CollectionView, member: Member, body: LeafQuery | SimActQuery, arrays: dict) -> None:
        self.answers.on_query(view, member, body, arrays)
