"""An algorithm's part in the rounds, declared (``algorithm.Algorithm.round_hooks``), and the
small view of a running collection it may use.

The collection (``rounds.CollectionRun``) files rounds, infers the learner's rows and sends each
round its Step for every algorithm alike. An algorithm that asks the rollouts for more (the
AlphaZero learner's search: ``alphazero/rounds.py``) does it through ``RoundHooks``:

* ``step_arrays``: extra arrays of a Step (the search's candidates), from the rows just inferred;
* ``round_arrived`` and ``step_closed``: what the next round reports back (the search's cost,
  its scores and moves), and the moves and log-probs the rectangle keeps for those cells;
* ``on_query``: a question a rollout asks in the middle of a step (``LeafQuery``,
  ``SimActQuery``), answered through the ``CollectionView`` it is handed, never the run's
  own fields.

Importing this module imports no torch and nothing of the learner's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from services.learner.fleet import Member
    from shared.messages import Assignment, LeafQuery, Round, SimActQuery


class CollectionView(Protocol):
    """What an answer in the middle of a step may see and do of the collection running."""

    iteration: int
    row_bytes: int

    @property
    def policy(self):
        """What infers the collection's rows (``act``, ``values``, ``legal_log_probs``)."""
        ...

    def holds(self, member: Member) -> bool:
        """Whether ``member`` is one of this collection's (False: it registered since)."""
        ...

    def awaited_cycle(self, member: Member, shard: int) -> int | None:
        """The cycle of the Step last sent to ``member``'s ``shard`` whose round has not come
        yet; None when none is awaited (no Step sent yet, or the shard is done)."""
        ...

    def at_work(self, member: Member, shard: int) -> None:
        """The shard is at work on its step: its round is due a round timeout from now."""
        ...

    def refuse(self, reason: str, text: str) -> None:
        """Count a refused message under ``reason`` (``royalefleet_learner_messages_refused``)
        and log ``text`` (rate-limited)."""
        ...

    def send(self, member: Member, body, arrays: dict) -> bool:
        """Send ``body`` and ``arrays`` to ``member``; False (said) when it could not go."""
        ...

    def legal_counts(self, rows: np.ndarray) -> np.ndarray:
        """(n,) int64 legal actions of packed rows (n, row_bytes)."""
        ...

    def assignment(self, battle: int, ordinal: int) -> Assignment | None:
        """The pool assignment of ``battle``'s episode ``ordinal`` (None: none)."""
        ...

    def play_frozen(self, battle: int, ordinal: int, rows: np.ndarray, n_legal: np.ndarray,
                    uniforms: np.ndarray) -> np.ndarray:
        """(n,) actions of the pool snapshot assigned to ``battle``'s episode ``ordinal`` at
        ``rows``, sampled at ``uniforms`` (the no-op where it cannot play)."""
        ...

    def count_inference(self, seconds: float) -> None:
        """Add ``seconds`` to the collection's inference time."""
        ...


class RoundHooks(Protocol):
    """An algorithm's part in the rounds (module docstring)."""

    def step_arrays(self, policy, iteration: int, cycle: int, member: Member, shard: int, learner: np.ndarray,
                    local: np.ndarray, rows: np.ndarray, n_legal: np.ndarray, actions: np.ndarray) -> dict[str, np.ndarray]:
        """Extra arrays of the Step answering ``member``'s ``shard`` at ``cycle``: ``learner``
        (m,) its learner slots (global), ``local`` (m,) their indices in the round, ``rows``
        (m, row_bytes), ``n_legal`` (m,) and ``actions`` (m,) (what central inference sampled)
        theirs. Empty dict: none."""
        ...

    def round_arrived(self, body: Round) -> None:
        """A round came over the wire (its rollout's reported costs)."""
        ...

    def step_closed(self, cycle: int, slots: np.ndarray, candidates, q, moves) -> list[tuple[int, int, float]]:
        """What the round closing ``cycle``'s step reports for its ``slots`` (global); returns
        (slot, action, log-prob) of the cells whose action and log-prob it sets."""
        ...

    def on_query(self, view: CollectionView, member: Member, body: LeafQuery | SimActQuery, arrays: dict) -> None:
        """Answer a question asked in the middle of a step (or refuse it through ``view``)."""
        ...
