"""The rollout's one mid-step request: a searched step's leaves valued by the learner's critic
(``alphazero.leaf_value = "critic"``; docs/protocol.md, "A rollout's life", step 4).

The rollout sends ``LeafQuery`` and waits for the ``LeafValues`` of the same (iteration, cycle,
shard) before it chooses its moves. Whatever else the learner sends meanwhile (another shard's
Step, an answer given up on) waits in ``backlog`` and is handled next, in order; a Close or
Refused ends the wait at once (and is handled first); no answer within the round timeout raises
``LeafTimeout``. Torch-free, like the rest of the rollout.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import numpy as np
import zmq

from shared import transport
from shared.messages import Close, LeafQuery, LeafValues, ProtocolError, Refused


class LeafTimeout(RuntimeError):
    """The learner did not answer a ``LeafQuery`` within ``rollout.round_timeout_s``."""


class Stopping(Exception):
    """The wait ended without an answer: a stop was requested (no args), or a Close or Refused
    came instead (its message as the arg, first in the backlog)."""


class LeafQueries:
    """``ask`` over the rollout's DEALER ``sock``; ``send(body, arrays)`` sends, ``refused(exc)``
    counts an undecodable message, ``heard()`` notes that the learner spoke."""

    def __init__(self, sock, decoder, send: Callable, refused: Callable[[ProtocolError], None],
                 heard: Callable[[], None]):
        self.sock, self.decoder, self.send, self.refused, self.heard = sock, decoder, send, refused, heard
        self.backlog: deque = deque()
        """(message, arrays) received while a step waited for its ``LeafValues``: handled next, in order."""

    def ask(self, query: LeafQuery, rows: np.ndarray, returns: np.ndarray, discounts: np.ndarray, timeout_s: float,
            stop_requested: Callable[[], bool]) -> np.ndarray:
        """Send ``query`` with its arrays (``rows`` uint8 (n, row_bytes), ``returns`` and
        ``discounts`` (n,)) and wait for its ``LeafValues``. Returns ``leaf_q`` (n,) float32.
        Raises ``LeafTimeout`` after ``timeout_s``, ProtocolError for an answer that is not
        (n,) finite, ``Stopping`` on a stop request or a Close/Refused."""
        key = (query.iteration, query.cycle, query.shard)
        self.send(query, {"leaf_rows": rows, "leaf_return": np.asarray(returns, np.float64),
                          "leaf_discount": np.asarray(discounts, np.float64)})
        deadline = time.monotonic() + timeout_s
        while not stop_requested():
            left = deadline - time.monotonic()
            if left <= 0:
                raise LeafTimeout(f"no leaf values from the learner within {timeout_s:.0f} s (rollout.round_timeout_s) "
                                  f"for iteration {query.iteration} cycle {query.cycle} shard {query.shard}")
            if not self.sock.poll(max(1, int(min(left, 0.2) * 1000)), zmq.POLLIN):
                continue
            try:
                _, msg, arrays = transport.recv(self.sock, self.decoder)
            except ProtocolError as exc:
                self.refused(exc)
                continue
            self.heard()
            if isinstance(msg, LeafValues) and (msg.iteration, msg.cycle, msg.shard) == key:
                q = arrays.get("leaf_q")
                if q is None or q.shape != (len(rows),) or not np.isfinite(q).all():
                    raise ProtocolError("arrays", f"leaf_values for {len(rows)} leaves must be leaf_q ({len(rows)},) "
                                                  f"finite float32, got {None if q is None else q.shape}")
                return q
            if isinstance(msg, (Close, Refused)):  # the learner is done with this rollout: no answer will come
                self.backlog.appendleft((msg, arrays))
                raise Stopping(msg)
            self.backlog.append((msg, arrays))
        raise Stopping
