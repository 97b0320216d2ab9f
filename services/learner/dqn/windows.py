"""n-step windows over one seat's own decisions (seed 000's ``DqnBatch`` tail rules).

A window starting at decision t spans k = min(n, T - t) decisions of the SAME seat (its own
decisions, not environment ticks: a frozen or scripted opponent's moves are part of the
environment) and carries

    rewards   = sum_{j<k} gamma^j r_{t+j}      r_i: the reward after decision i
    discounts = gamma^k                         when it can bootstrap, else exactly 0
    next      = obs of decision t + k, or the episode's final observation when t + k == T

Tail rules. Mid-episode every window has k = n and bootstraps from the next decision. At a
TRUNCATION (a simultaneous game: the truncated state is the seat's own and has legal actions)
the last windows are n, n-1, ..., 1 decisions long and bootstrap from the final observation. At
a TERMINATION the windows that reach the end cannot bootstrap: discount 0, ``can_bootstrap``
false, an empty next legal slice, and their target is the reward sum alone.

The estimator is uncorrected off-policy (Rainbow's convention): the window's intermediate
actions came from the behaviour policy, so n is kept small (``dqn.n_step``, default 3).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from shared.codec import legal_counts


@dataclass(frozen=True)
class WindowSpec:
    """Window ``i`` of an episode: decisions ``start[i] .. start[i] + span[i] - 1``; its next
    observation is decision ``start[i] + span[i]``'s, or the final one when that equals T."""

    start: np.ndarray  # (W,) int64
    span: np.ndarray  # (W,) int64, k
    rewards: np.ndarray  # (W,) float64
    discounts: np.ndarray  # (W,) float64
    can_bootstrap: np.ndarray  # (W,) bool
    dones: np.ndarray  # (W,) bool: the window reaches the episode's end


def feed_rectangle(builder: "WindowBuilder", rect, heads: np.ndarray | None = None, epsilon: float = 0.0) -> int:
    """Push one iteration's learner decisions (``services.learner.rectangle.Rectangle``) into
    ``builder`` in (cycle, slot) order: a trainable cell is a decision; its step's
    ``terminated``/``truncated`` ends the slot's episode (a truncation bootstraps from
    ``rect.final_rows``); a learner cell whose step never arrived drops the slot's open
    decisions. Episodes that go on past cycle T - 1 stay open: the next iteration's cycle 0 is
    their next decision. ``heads`` (T, R): the head each cell acted by (None: 0); ``epsilon``: the
    iteration's. Returns the decisions dropped."""
    trainable = rect.trainable()
    learner = rect.learner_cells()[:-1]
    dropped = 0
    for t in range(rect.T):
        for r in map(int, np.flatnonzero(learner[t])):
            if not trainable[t, r]:
                dropped += builder.discard(r)
                continue
            head = 0 if heads is None else int(heads[t, r])
            builder.push(r, Decision(rect.rows[t, r].copy(), int(rect.actions[t, r]), float(rect.reward[t, r]), r,
                                     head, epsilon))
            if rect.terminated[t, r]:
                builder.end(r, "terminated", None)
            elif rect.truncated[t, r]:
                builder.end(r, "truncated", rect.final_rows[(t, r)])
    return dropped


def episode_windows(rewards: np.ndarray, n: int, gamma: float, *, ended: str | None) -> WindowSpec:
    """The windows of one seat's decisions ``rewards`` (T,) under the tail rule ``ended``:
    ``"terminated"``, ``"truncated"``, or None (the episode goes on: only full windows whose
    next decision is already in ``rewards`` are emitted, i.e. starts 0 .. T - n - 1).

    Raises ValueError for n < 1, gamma outside [0, 1], or an unknown ``ended``."""
    if n < 1:
        raise ValueError(f"n-step windows need n >= 1, got {n} (dqn.n_step)")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1], got {gamma}")
    if ended not in (None, "terminated", "truncated"):
        raise ValueError(f"ended must be 'terminated', 'truncated' or None, got {ended!r}")
    r = np.asarray(rewards, np.float64)
    T = len(r)
    n_windows = T if ended else max(0, T - n)
    start = np.arange(n_windows, dtype=np.int64)
    span = np.minimum(n, T - start)
    powers = gamma ** np.arange(n, dtype=np.float64)
    sums = np.array([float(np.dot(powers[:k], r[t:t + k])) for t, k in zip(start, span)], np.float64)
    reaches_end = start + span == T
    can_bootstrap = ~(reaches_end & (ended == "terminated"))
    discounts = np.where(can_bootstrap, gamma ** span.astype(np.float64), 0.0)
    return WindowSpec(start, span, sums, discounts, can_bootstrap, reaches_end & (ended is not None))


@dataclass
class Decision:
    """One seat decision as the learner holds it: its packed observation row, the action taken,
    the reward that followed, and the per-row behaviour facts recorded with it."""

    row: np.ndarray  # uint8 (row_bytes,)
    action: int
    reward: float
    player: int
    head: int = 0
    """The ensemble head the behaviour acted by (Thompson), or under epsilon-greedy 0 at one head
    and ``behaviour.MEAN_HEAD`` (-1) at K > 1 (it acted by the heads' mean)."""
    epsilon: float = 0.0
    """The epsilon the behaviour acted under."""


@dataclass(frozen=True)
class Windows:
    """Completed windows ready for replay (W records): ``obs``/``next_obs`` uint8
    ``(W, row_bytes)`` (``next_obs`` all zero where it cannot bootstrap), ``actions`` int64,
    ``rewards``/``discounts`` float32, ``can_bootstrap``/``dones`` bool, ``players`` int32,
    ``span`` int64 (k); ``heads`` int8 and ``epsilons`` float32: the behaviour's head and epsilon
    at the window's first decision (the one whose action is trained)."""

    obs: np.ndarray
    next_obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    discounts: np.ndarray
    can_bootstrap: np.ndarray
    dones: np.ndarray
    players: np.ndarray
    span: np.ndarray
    heads: np.ndarray
    epsilons: np.ndarray

    def __len__(self) -> int:
        return len(self.actions)


class WindowBuilder:
    """Streams each slot's decisions into n-step windows across iterations (an episode spans
    many rectangles). ``push`` one decision per slot and cycle; ``end`` a slot's episode with
    its tail rule. A window is emitted as soon as its next observation is known, so the set of
    windows equals ``episode_windows`` over the whole episode (tests/services/learner/dqn/
    test_dqn.py checks it).

    With ``mask_offset`` (where a packed row's mask bits start) a window whose next row has no
    legal action (``shared.codec.legal_counts`` 0) cannot bootstrap either, whatever the tail
    rule: seed 000's ``can_bootstrap`` is true exactly when the next legal slice is non-empty."""

    def __init__(self, n: int, gamma: float, row_bytes: int, mask_offset: int | None = None):
        episode_windows(np.zeros(0), n, gamma, ended=None)  # validates n and gamma
        self.n, self.gamma, self.row_bytes, self.mask_offset = n, gamma, row_bytes, mask_offset
        self.pending: dict[int, deque[Decision]] = {}
        self._out: list[tuple] = []

    def push(self, slot: int, decision: Decision) -> None:
        q = self.pending.setdefault(slot, deque())
        q.append(decision)
        if len(q) > self.n:
            self._emit(list(q)[: self.n], q[self.n].row, "open")
            q.popleft()

    def end(self, slot: int, ended: str, final_row: np.ndarray | None) -> None:
        """Close ``slot``'s episode: ``ended`` is ``"terminated"`` (``final_row`` ignored) or
        ``"truncated"`` (``final_row``: the truncated observation, uint8 (row_bytes,))."""
        if ended not in ("terminated", "truncated"):
            raise ValueError(f"ended must be 'terminated' or 'truncated', got {ended!r}")
        if ended == "truncated" and final_row is None:
            raise ValueError("a truncated episode needs its final observation row to bootstrap from")
        q = list(self.pending.pop(slot, ()))
        for i in range(len(q)):
            self._emit(q[i:], final_row, ended)

    def discard(self, slot: int) -> int:
        """Drop ``slot``'s open decisions (a lost step: their next observation will never be
        known). Returns how many were dropped (no window is emitted for them)."""
        return len(self.pending.pop(slot, ()))

    def state_dict(self) -> dict:
        """The open decisions per slot, for the checkpoint: a resume continues every window."""
        return {int(slot): [(d.row.copy(), d.action, d.reward, d.player, d.head, d.epsilon) for d in q]
                for slot, q in self.pending.items()}

    def load_state_dict(self, state: dict) -> None:
        self.pending = {int(slot): deque(Decision(np.asarray(row, np.uint8), int(a), float(r), int(p), int(h), float(e))
                                             for row, a, r, p, h, e in q)
                        for slot, q in state.items()}

    def _emit(self, decisions: list[Decision], next_row, rule: str) -> None:
        k = len(decisions)
        rewards = sum(self.gamma ** j * d.reward for j, d in enumerate(decisions))
        can = rule != "terminated"
        if can and self.mask_offset is not None:
            can = bool(legal_counts(np.asarray(next_row)[None], self.mask_offset)[0] > 0)
        nxt = next_row if can else np.zeros(self.row_bytes, np.uint8)
        self._out.append((decisions[0].row, nxt, decisions[0].action, rewards, self.gamma ** k if can else 0.0, can,
                          rule != "open", decisions[0].player, k, decisions[0].head, decisions[0].epsilon))

    def drain(self) -> Windows:
        """The windows completed since the last drain, in completion order."""
        out, self._out = self._out, []
        rb = self.row_bytes
        if not out:
            z = np.zeros(0)
            return Windows(np.zeros((0, rb), np.uint8), np.zeros((0, rb), np.uint8), z.astype(np.int64),
                           z.astype(np.float32), z.astype(np.float32), z.astype(bool), z.astype(bool),
                           z.astype(np.int32), z.astype(np.int64), z.astype(np.int8), z.astype(np.float32))
        cols = list(zip(*out))
        return Windows(np.stack(cols[0]).astype(np.uint8), np.stack(cols[1]).astype(np.uint8),
                       np.array(cols[2], np.int64), np.array(cols[3], np.float32), np.array(cols[4], np.float32),
                       np.array(cols[5], bool), np.array(cols[6], bool), np.array(cols[7], np.int32),
                       np.array(cols[8], np.int64), np.array(cols[9], np.int8), np.array(cols[10], np.float32))
