"""The AlphaZero learner's part in the rounds (``round_hooks.RoundHooks``): ``SearchRounds``
puts the search's candidates in each Step (``SearchBook.propose``), takes the scores and moves
the next round reports (``SearchBook.complete``) and the rollout's search costs
(``SearchBook.count_round``), and answers the questions asked in the middle of a searched step
(``MidStepAnswers``, below).

The learner's answers in the middle of a searched step (docs/protocol.md, "A rollout's life",
step 4): the rollout, between the Step of cycle t and its round, asks for

* ``LeafQuery`` -> ``LeafValues``: its search's leaves valued by the live critic
  (``alphazero.leaf_value = "critic"``; ``SearchBook.leaf_values``);
* ``SimActQuery`` -> ``SimActions``: a network opponent's moves inside its simulations
  (``alphazero.sim_opponent = "battle"``): the live actor for the learner's own seat of a
  mirror battle, the pool snapshot of the episode's assignment for a frozen one.

Each is answered at once with one forward over the query's rows in the rollout's order, so a
resumed run (the same saved battle, weights and streams) gets the same answers. A query moves
its shard's round deadline to a round timeout from now: a step that asks many questions (31 a
searched slot against a network opponent) is at work, not lost. A query for a
step that is not the one just sent to that shard, or with malformed arrays, is refused (counted
by reason) and not answered: the rollout gives up after ``rollout.round_timeout_s``.

A query asks at most what its step allows: one row for each simulation the Step started (its
searched slots x their candidates, ``SearchRounds.step_arrays`` records them), a ``LeafQuery``
one leaf of each, a ``SimActQuery`` one decision of each. A larger one is refused unread (reason
``query_size``, its sizes named): the forward a rollout can make the learner run is bounded by
its step, no longer only by the message limit.

The answers see the collection only through ``round_hooks.CollectionView``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from shared.messages import LeafQuery, LeafValues, SimActions, SimActQuery

if TYPE_CHECKING:
    from services.learner.alphazero.book import SearchBook
    from services.learner.fleet import Member
    from services.learner.round_hooks import CollectionView
    from shared.messages import Round


class MidStepAnswers:
    """The answers of one run's searched steps (module docstring), over its ``book``."""

    def __init__(self, book: SearchBook):
        self.book = book
        self.allowed: dict[tuple[str, int], tuple[int, int, int]] = {}
        """(instance, shard) -> (iteration, cycle, simulations) of the last Step sent to it."""

    def step_sent(self, member: Member, shard: int, iteration: int, cycle: int, simulations: int) -> None:
        """The Step of (``iteration``, ``cycle``) to ``member``'s ``shard`` started
        ``simulations`` simulations (its searched slots x their candidates; 0: none)."""
        self.allowed[(member.instance, shard)] = (iteration, cycle, simulations)

    def allowance(self, member: Member, body: LeafQuery | SimActQuery) -> int:
        """The most rows ``body`` may carry: the simulations of its step (0 when that step
        started none, or is not the one recorded)."""
        iteration, cycle, n = self.allowed.get((member.instance, body.shard), (-1, -1, 0))
        return n if (iteration, cycle) == (body.iteration, body.cycle) else 0

    def on_query(self, view: CollectionView, member: Member, body: LeafQuery | SimActQuery, arrays: dict) -> None:
        """Answer ``body`` (a LeafQuery or SimActQuery) through ``view``, or refuse it."""
        kind = type(body).__name__
        if not view.holds(member):
            return  # registered during this iteration: it has no step to search
        awaited = view.awaited_cycle(member, body.shard)
        if awaited is None or body.iteration != view.iteration or awaited != body.cycle:
            view.refuse("unexpected", f"{kind} {body.iteration}/{body.cycle} shard {body.shard} from "
                                      f"{member.label()}; its step was not the last one sent")
            return
        rows = arrays.get("leaf_rows" if isinstance(body, LeafQuery) else "sim_rows")
        n, allowed = (0 if rows is None else len(rows)), self.allowance(member, body)
        if n > allowed:
            view.refuse("query_size", f"{kind} {body.iteration}/{body.cycle} shard {body.shard} from {member.label()} "
                                      f"carries {n} rows; its step started {allowed} simulation(s) (searched slots x "
                                      "candidates), one row of each at most")
            return
        # the rollout is at work on that step: its round is due a round timeout after its last question
        view.at_work(member, body.shard)
        t0 = time.perf_counter()
        answer: LeafValues | SimActions
        try:
            if isinstance(body, LeafQuery):
                q = self.book.leaf_values(view.policy, rows, arrays.get("leaf_return"), arrays.get("leaf_discount"),
                                          view.row_bytes)
                answer, out = LeafValues(iteration=body.iteration, cycle=body.cycle, shard=body.shard), {"leaf_q": q}
            else:
                actions = self.sim_actions(view, body, rows, arrays.get("sim_uniforms"))
                self.book.opponent_rows += len(actions)
                answer = SimActions(iteration=body.iteration, cycle=body.cycle, shard=body.shard, seq=body.seq)
                out = {"sim_actions": actions}
        except ValueError as exc:
            view.refuse("arrays", f"malformed {kind} from {member.label()}: {exc}")
            return
        view.count_inference(time.perf_counter() - t0)
        view.send(member, answer, out)

    @staticmethod
    def sim_actions(view: CollectionView, body: SimActQuery, rows: np.ndarray | None,
                    uniforms: np.ndarray | None) -> np.ndarray:
        """(n,) int16: ``body.player``'s actions at ``rows`` (uint8 (n, row_bytes)) sampled at
        ``uniforms`` ((n,) in [0, 1)). Raises ValueError naming what is wrong: the arrays'
        shapes or values, or a player that is not the opponent of the episode's assignment."""
        if rows is None or uniforms is None:
            raise ValueError("a sim act query carries sim_rows and sim_uniforms")
        n = len(rows)
        if not n or rows.shape != (n, view.row_bytes):
            raise ValueError(f"sim_rows is {rows.shape}, expected (n > 0, {view.row_bytes})")
        if uniforms.shape != (n,) or not np.isfinite(uniforms).all() or (uniforms < 0).any() or (uniforms >= 1).any():
            raise ValueError(f"sim_uniforms must be ({n},) in [0, 1), got {uniforms.shape}")
        a = view.assignment(body.battle, body.ordinal)
        if a is None or a.opponent != body.player:
            held = None if a is None else a.opponent
            raise ValueError(f"player {body.player!r} is not the opponent of battle {body.battle} episode "
                             f"{body.ordinal} ({held!r})")
        rows = np.ascontiguousarray(rows)
        n_legal = view.legal_counts(rows)
        if a.opponent == "learner":  # a mirror battle: the live actor, as at the battle's own decisions
            actions, _ = view.policy.act(rows, n_legal, uniforms)
        else:  # the episode's pool snapshot, as it plays the frozen seat (its no-op counted apart)
            actions = view.play_frozen(body.battle, body.ordinal, rows, n_legal, uniforms)
        return np.asarray(actions, np.int16)


class SearchRounds:
    """``RoundHooks`` over one run's ``SearchBook`` (module docstring)."""

    def __init__(self, book: SearchBook):
        self.book = book
        self.answers = MidStepAnswers(book)

    def step_arrays(self, policy, iteration: int, cycle: int, member: Member, shard: int, learner: np.ndarray,
                    local: np.ndarray, rows: np.ndarray, n_legal: np.ndarray, actions: np.ndarray) -> dict[str, np.ndarray]:
        """The choice rows' candidates (``SearchBook.propose``, which keeps the live actor's own
        ``actions`` beside them); records how many simulations the Step starts, the bound of its
        mid-step queries."""
        out = self.book.propose(policy, iteration, cycle, learner, local, rows, n_legal, actions)
        simulations = int(np.count_nonzero(out["search_candidates"] >= 0)) if out else 0
        self.answers.step_sent(member, shard, iteration, cycle, simulations)
        return out

    def round_arrived(self, body: Round) -> None:
        self.book.count_round(body)

    def step_closed(self, cycle: int, slots: np.ndarray, candidates, q, moves) -> list[tuple[int, int, float]]:
        return self.book.complete(cycle, slots, candidates, q, moves)

    def on_query(self, view: CollectionView, member: Member, body: LeafQuery | SimActQuery, arrays: dict) -> None:
        self.answers.on_query(view, member, body, arrays)
