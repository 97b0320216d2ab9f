"""The learner's answers in the middle of a searched step (docs/protocol.md, "A rollout's life",
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
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from services.learner.fleet import Member
from services.learner.frozen import FrozenStats
from shared.messages import LeafQuery, LeafValues, SimActions, SimActQuery

if TYPE_CHECKING:
    from services.learner.rounds import CollectionRun


class MidStepAnswers:
    """The answers of one collection (``rounds.CollectionRun``, which hands over its parts)."""

    def __init__(self, run: CollectionRun):
        self.run = run

    def on_query(self, member: Member, body: LeafQuery | SimActQuery, arrays: dict) -> None:
        """``Collector.poll``'s ``on_mid_step``: answer ``body`` (a LeafQuery or SimActQuery)."""
        run, c = self.run, self.run.collector
        book = c.search_book
        if member.instance not in run.by_instance:
            return  # registered during this iteration: it has no step to search
        if (book is None or body.iteration != run.iteration
                or run.expected.get((member.instance, body.shard)) != body.cycle + 1 or body.cycle + 1 > run.rect.T):
            c._refused("unexpected", f"{type(body).__name__} {body.iteration}/{body.cycle} shard {body.shard} from "
                                     f"{member.label()}; its step was not the last one sent")
            return
        # the rollout is at work on that step: its round is due a round timeout after its last question
        run.deadline[(member.instance, body.shard)] = time.monotonic() + run.round_timeout_s
        t0 = time.perf_counter()
        answer: LeafValues | SimActions
        try:
            if isinstance(body, LeafQuery):
                q = book.leaf_values(run.policy, arrays.get("leaf_rows"), arrays.get("leaf_return"),
                                              arrays.get("leaf_discount"), run.rect.row_bytes)
                answer, out = LeafValues(iteration=body.iteration, cycle=body.cycle, shard=body.shard), {"leaf_q": q}
            else:
                actions = self.sim_actions(body, arrays.get("sim_rows"), arrays.get("sim_uniforms"))
                book.opponent_rows += len(actions)
                answer = SimActions(iteration=body.iteration, cycle=body.cycle, shard=body.shard, seq=body.seq)
                out = {"sim_actions": actions}
        except ValueError as exc:
            c._refused("arrays", f"malformed {type(body).__name__} from {member.label()}: {exc}")
            return
        run.stats.inference_seconds += time.perf_counter() - t0
        if not c.send(member.identity, answer, out):
            c.say(f"could not send {type(answer).__name__} to {member.label()}")

    def sim_actions(self, body: SimActQuery, rows: np.ndarray | None, uniforms: np.ndarray | None) -> np.ndarray:
        """(n,) int16: ``body.player``'s actions at ``rows`` (uint8 (n, row_bytes)) sampled at
        ``uniforms`` ((n,) in [0, 1)). Raises ValueError naming what is wrong: the arrays'
        shapes or values, or a player that is not the opponent of the episode's assignment."""
        run, c = self.run, self.run.collector
        if rows is None or uniforms is None:
            raise ValueError("a sim act query carries sim_rows and sim_uniforms")
        n = len(rows)
        if not n or rows.shape != (n, run.rect.row_bytes):
            raise ValueError(f"sim_rows is {rows.shape}, expected (n > 0, {run.rect.row_bytes})")
        if uniforms.shape != (n,) or not np.isfinite(uniforms).all() or (uniforms < 0).any() or (uniforms >= 1).any():
            raise ValueError(f"sim_uniforms must be ({n},) in [0, 1), got {uniforms.shape}")
        a = c.fleet.assignment(body.battle, body.ordinal)
        if a is None or a.opponent != body.player:
            held = None if a is None else a.opponent
            raise ValueError(f"player {body.player!r} is not the opponent of battle {body.battle} episode "
                             f"{body.ordinal} ({held!r})")
        rows = np.ascontiguousarray(rows)
        n_legal = run.rect.legal_counts(rows)
        if a.opponent == "learner":  # a mirror battle: the live actor, as at the battle's own decisions
            actions, _ = run.policy.act(rows, n_legal, uniforms)
        else:  # the episode's pool snapshot, as it plays the frozen seat (its no-op counted apart)
            actions, _ = c._play_frozen(run.frozen, FrozenStats(), np.full(n, body.battle), np.full(n, body.ordinal),
                                        rows, n_legal, uniforms)
        return np.asarray(actions, np.int16)
