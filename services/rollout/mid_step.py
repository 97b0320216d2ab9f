"""The rollout's requests in the middle of a searched step, answered by the learner's central
inference (docs/protocol.md, "A rollout's life", step 4): ``LeafQuery`` -> ``LeafValues``, the
search's leaves valued by the critic (``alphazero.leaf_value = "critic"``), and ``SimActQuery``
-> ``SimActions``, a network opponent's moves inside the simulations (``alphazero.sim_opponent
= "battle"``).

The rollout sends a query and waits for the answer of the same (iteration, cycle, shard[, seq])
before it goes on. Whatever else the learner sends meanwhile (another shard's
Step, an answer given up on) waits in ``backlog`` and is handled next, in order; a Close or
Refused ends the wait at once (and is handled first), and so does a Rejoin for this rollout: a
learner that restarted since the question (killed with it unanswered) does not know it, and
says so to the heartbeats the wait keeps sending (``keepalive``). No answer within the round
timeout raises ``MidStepTimeout``. Torch-free, like the rest of the rollout.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import zmq

from shared.messages import Close, LeafQuery, LeafValues, ProtocolError, Refused, Rejoin, SimActions, SimActQuery


class MidStepTimeout(RuntimeError):
    """The learner did not answer a mid-step query within ``rollout.round_timeout_s``."""


class Stopping(Exception):
    """The wait ended without an answer: a stop was requested (no args), or a Close, a Refused
    or a Rejoin for this rollout came instead (its message as the arg, first in the backlog)."""


class MidStepQueries:
    """``ask`` and ``act`` over the rollout's DEALER ``sock``: ``send(body, arrays)`` sends and
    ``recv()`` takes the next message as (message, arrays), or None for one that does not decode
    (the rollout's own, which counts it)."""

    def __init__(self, sock, send: Callable, recv: Callable[[], tuple | None], metrics=None,
                 keepalive: Callable[[], None] | None = None):
        self.sock, self.send, self.recv = sock, send, recv
        self.keepalive = keepalive
        """Called every wake of a wait (the rollout's heartbeat when one is due): a learner that
        restarted meanwhile answers it with a Rejoin, which ends the wait at once."""
        self.metrics = metrics
        """``RolloutMetrics`` or None: questions asked, timed out, and the one awaiting its answer
        now (``royalefleet_rollout_mid_step_waiting``, what ``royalefleet chaos`` aims its
        mid-question kills at)."""
        self.backlog: deque = deque()
        """(message, arrays) received while a step waited for an answer: handled next, in order."""

    def ask(self, query: LeafQuery, rows: np.ndarray, returns: np.ndarray, discounts: np.ndarray, timeout_s: float,
            stop_requested: Callable[[], bool]) -> np.ndarray:
        """Send ``query`` with its arrays (``rows`` uint8 (n, row_bytes), ``returns`` and
        ``discounts`` (n,)) and wait for its ``LeafValues``. Returns ``leaf_q`` (n,) float32.
        Raises as ``request``."""
        q = self.request(query, {"leaf_rows": rows, "leaf_return": np.asarray(returns, np.float64),
                                 "leaf_discount": np.asarray(discounts, np.float64)},
                         LeafValues, "leaf_q", len(rows), timeout_s, stop_requested)
        if not np.isfinite(q).all():
            raise ProtocolError("arrays", "leaf_values: leaf_q holds a value that is not finite")
        return q

    def act(self, query: SimActQuery, rows: np.ndarray, uniforms: np.ndarray, timeout_s: float,
            stop_requested: Callable[[], bool]) -> np.ndarray:
        """Send ``query`` with ``rows`` uint8 (n, row_bytes) and ``uniforms`` (n,) and wait for its
        ``SimActions``. Returns ``sim_actions`` (n,) int16. Raises as ``request``."""
        return self.request(query, {"sim_rows": rows, "sim_uniforms": np.asarray(uniforms, np.float64)},
                            SimActions, "sim_actions", len(rows), timeout_s, stop_requested)

    def request(self, query, arrays: dict, answer: type, name: str, n: int, timeout_s: float,
                stop_requested: Callable[[], bool]) -> np.ndarray:
        """Send ``query`` + ``arrays``; wait for the ``answer`` message of the same iteration,
        cycle, shard (and seq, where it has one) and return its array ``name`` of shape (n,).
        Raises ``MidStepTimeout`` after ``timeout_s``, ProtocolError for an answer of another
        shape, ``Stopping`` on a stop request or a Close/Refused."""
        m = self.metrics
        if m is not None:
            m.mid_step_questions.inc()
            m.mid_step_waiting.set(1)
        try:
            return self._await(query, arrays, answer, name, n, timeout_s, stop_requested)
        except MidStepTimeout:
            if m is not None:
                m.mid_step_timeouts.inc()
            raise
        except Stopping as exc:
            if m is not None and exc.args and isinstance(exc.args[0], Rejoin):
                m.mid_step_rejoins.inc()
            raise
        finally:
            if m is not None:
                m.mid_step_waiting.set(0)

    def _await(self, query, arrays: dict, answer: type, name: str, n: int, timeout_s: float,
               stop_requested: Callable[[], bool]) -> np.ndarray:
        key = _key(query)
        self.send(query, arrays)
        deadline = time.monotonic() + timeout_s
        while not stop_requested():
            left = deadline - time.monotonic()
            if left <= 0:
                raise MidStepTimeout(f"no {answer.__name__} from the learner within {timeout_s:.0f} s "
                                  f"(rollout.round_timeout_s) for iteration {query.iteration} cycle {query.cycle} "
                                  f"shard {query.shard}")
            received = self.recv() if self.sock.poll(max(1, int(min(left, 0.2) * 1000)), zmq.POLLIN) else None
            if self.keepalive is not None:
                self.keepalive()
            if received is None:
                continue
            msg, got = received
            if isinstance(msg, answer) and _key(msg) == key:
                out = got.get(name)
                if out is None or out.shape != (n,):
                    raise ProtocolError("arrays", f"{answer.__name__} for {n} rows must carry {name} ({n},), got "
                                                  f"{None if out is None else out.shape}")
                return out
            if isinstance(msg, (Close, Refused)) or (  # the learner is done with this rollout, or does not
                    isinstance(msg, Rejoin) and msg.instance in ("", query.instance)):  # know it: no answer will come
                self.backlog.appendleft((msg, got))
                raise Stopping(msg)
            self.backlog.append((msg, got))
        raise Stopping


def _key(msg) -> tuple:
    return msg.iteration, msg.cycle, msg.shard, getattr(msg, "seq", 0)


@dataclass
class StepLearner:
    """The learner as one searched step sees it (``ShardSearch.run``): its queries carry the
    step's (iteration, cycle, shard) and the rollout's ``instance``; ``seq`` numbers its
    ``SimActQuery``s."""

    queries: MidStepQueries
    instance: str
    iteration: int
    cycle: int
    shard: int
    timeout_s: float
    stop_requested: Callable[[], bool]
    seq: int = 0

    def value_leaves(self, rows: np.ndarray, returns: np.ndarray, discounts: np.ndarray) -> np.ndarray:
        """The leaves' scores (n,) float32 from the learner's critic (``LeafQuery``)."""
        return self.queries.ask(LeafQuery(instance=self.instance, iteration=self.iteration, cycle=self.cycle,
                                          shard=self.shard), rows, returns, discounts, self.timeout_s,
                                self.stop_requested)

    def act(self, player: str, battle: int, ordinal: int, rows: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
        """``player``'s actions (n,) int16 at ``rows`` sampled at ``uniforms`` (``SimActQuery``)."""
        query = SimActQuery(instance=self.instance, iteration=self.iteration, cycle=self.cycle, shard=self.shard,
                            seq=self.seq, player=player, battle=battle, ordinal=ordinal)
        self.seq += 1
        return self.queries.act(query, rows, uniforms, self.timeout_s, self.stop_requested)
