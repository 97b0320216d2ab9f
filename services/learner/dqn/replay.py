"""Prioritized replay of packed rows (Schaul et al. 2016, "Prioritized Experience Replay",
proportional variant).

Each stored record holds the codec's bytes of its two observations (uint8, ``row_bytes`` each:
the mask bits inside them are its legality, so no CSR is stored), its action, reward sum,
discount, flags, bootstrap masks (one bit per head, drawn once at insertion and stored with the
record) and its priority. A ring of ``capacity`` records: the oldest is overwritten.

* New records enter at the running maximum priority (1.0 before any TD error is written).
* ``sample`` draws B records with P(i) = p_i^alpha / sum_j p_j^alpha by inverse CDF down a sum
  tree of p^alpha (``SumTree``: O(B log capacity) a minibatch) and importance weights
  w_i = (N P(i))^-beta / max_j (N P(j))^-beta, the max over every stored record (the tree's
  minimum), so w <= 1.
* ``update_priorities`` writes |TD error| + ``eps`` back after each minibatch and raises the
  running max.

``state_dict``/``load_state_dict`` carry everything (records, priorities, cursor, running max,
insertion clock) so a resumed run samples the same buffer exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.learner.dqn.windows import Windows

SCALAR_BYTES = 8 + 4 + 4 + 1 + 1 + 4 + 1 + 4 + 8 + 8
"""Per-record bytes besides the rows and masks: action int64, reward and discount float32,
can_bootstrap and done bool, player int32, behaviour head int8 and epsilon float32, insertion
step int64, priority float64."""


def record_bytes(row_bytes: int, heads: int) -> int:
    """Bytes one stored record costs: two packed rows, the scalars, one byte per head's mask."""
    return 2 * row_bytes + SCALAR_BYTES + heads


def check_budget(capacity: int, row_bytes: int, heads: int, budget_mb: float) -> int:
    """The buffer's bytes, checked against ``dqn.replay_memory_mb`` before anything is
    allocated. Raises ValueError naming both fields and the largest capacity that fits."""
    if capacity < 1:
        raise ValueError(f"dqn.replay_capacity must be >= 1, got {capacity}")
    need = capacity * record_bytes(row_bytes, heads)
    budget = budget_mb * 2**20
    if need > budget:
        fits = int(budget) // record_bytes(row_bytes, heads)
        raise ValueError(
            f"dqn.replay_capacity {capacity} records x {record_bytes(row_bytes, heads)} B ({need / 2**20:.1f} MiB) "
            f"exceeds dqn.replay_memory_mb {budget_mb}: lower dqn.replay_capacity to at most {fits} "
            "or raise dqn.replay_memory_mb")
    return need


@dataclass(frozen=True)
class Sample:
    """One minibatch: ``index`` (B,) int64 buffer positions (pass them back to
    ``update_priorities``), ``weights`` (B,) float32 importance weights, and the records."""

    index: np.ndarray
    weights: np.ndarray
    obs: np.ndarray
    next_obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    discounts: np.ndarray
    can_bootstrap: np.ndarray
    dones: np.ndarray
    players: np.ndarray
    masks: np.ndarray  # (B, heads) float32
    acted_heads: np.ndarray  # (B,) int8: the head the behaviour acted by
    epsilons: np.ndarray  # (B,) float32: the epsilon it acted under
    age: np.ndarray  # (B,) int64: insertions since the record was stored


class SumTree:
    """Sums and minima of ``capacity`` non-negative leaves, vectorised over a batch of leaves
    or queries. ``set`` is O(k log n) for k leaves; ``find`` is inverse CDF, O(B log n)."""

    def __init__(self, capacity: int):
        self.n = 1 << max(1, (capacity - 1).bit_length())
        self.sum = np.zeros(2 * self.n, np.float64)
        self.min = np.full(2 * self.n, np.inf, np.float64)

    def set(self, leaves: np.ndarray, values: np.ndarray) -> None:
        pos = np.asarray(leaves, np.int64) + self.n
        self.sum[pos] = values
        self.min[pos] = values
        pos = np.unique(pos // 2)
        while len(pos) and pos[0] >= 1:
            self.sum[pos] = self.sum[2 * pos] + self.sum[2 * pos + 1]
            self.min[pos] = np.minimum(self.min[2 * pos], self.min[2 * pos + 1])
            if pos[0] == 1:
                break
            pos = np.unique(pos // 2)

    @property
    def total(self) -> float:
        return float(self.sum[1])

    def find(self, u: np.ndarray) -> np.ndarray:
        """Leaf i with prefix(i) <= u < prefix(i + 1) for each u in [0, total)."""
        u = np.asarray(u, np.float64).copy()
        i = np.ones(len(u), np.int64)
        while i[0] < self.n:
            left = 2 * i
            right = u >= self.sum[left]
            u = np.where(right, u - self.sum[left], u)
            i = np.where(right, left + 1, left)
        return i - self.n


class PrioritizedReplay:
    _ARRAYS = ("obs", "next_obs", "actions", "rewards", "discounts", "can_bootstrap", "dones", "players", "masks",
               "acted_heads", "epsilons", "inserted_at", "priority")

    def __init__(self, capacity: int, row_bytes: int, heads: int, *, alpha: float, beta: float,
                 eps: float = 1e-6, budget_mb: float = float("inf")):
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"dqn.per_alpha must lie in [0, 1], got {alpha}")
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"dqn.per_beta must lie in [0, 1], got {beta}")
        self.nbytes = check_budget(capacity, row_bytes, heads, budget_mb)
        self.capacity, self.row_bytes, self.heads = capacity, row_bytes, heads
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self.obs = np.zeros((capacity, row_bytes), np.uint8)
        self.next_obs = np.zeros((capacity, row_bytes), np.uint8)
        self.actions = np.zeros(capacity, np.int64)
        self.rewards = np.zeros(capacity, np.float32)
        self.discounts = np.zeros(capacity, np.float32)
        self.can_bootstrap = np.zeros(capacity, bool)
        self.dones = np.zeros(capacity, bool)
        self.players = np.zeros(capacity, np.int32)
        self.masks = np.zeros((capacity, heads), np.uint8)
        self.acted_heads = np.zeros(capacity, np.int8)
        self.epsilons = np.zeros(capacity, np.float32)
        self.inserted_at = np.zeros(capacity, np.int64)
        self.priority = np.zeros(capacity, np.float64)
        self.tree = SumTree(capacity)
        """p^alpha of every stored record (empty slots 0)."""
        self.size = 0
        self.cursor = 0
        self.clock = 0
        """Records ever inserted: a record's age is ``clock - inserted_at``."""
        self.max_priority = 1.0

    def __len__(self) -> int:
        return self.size

    def add(self, windows: Windows, masks: np.ndarray) -> np.ndarray:
        """Store ``windows`` with their bootstrap ``masks`` (W, heads) (0/1), each at the running
        max priority. Returns the (W,) buffer positions written."""
        w = len(windows)
        if masks.shape != (w, self.heads):
            raise ValueError(f"bootstrap masks have shape {masks.shape}, expected ({w}, {self.heads})")
        if windows.obs.shape[1:] != (self.row_bytes,):
            raise ValueError(f"windows carry rows of {windows.obs.shape[1:]} bytes, the buffer holds {self.row_bytes}")
        pos = (self.cursor + np.arange(w)) % self.capacity
        first = self.clock
        self.clock += w
        if w > self.capacity:  # only the newest capacity records survive
            keep = slice(w - self.capacity, w)
            windows = Windows(*(getattr(windows, f)[keep] for f in Windows.__dataclass_fields__))
            masks, pos, first, w = masks[keep], pos[keep], first + w - self.capacity, self.capacity
        self.obs[pos] = windows.obs
        self.next_obs[pos] = windows.next_obs
        self.actions[pos] = windows.actions
        self.rewards[pos] = windows.rewards
        self.discounts[pos] = windows.discounts
        self.can_bootstrap[pos] = windows.can_bootstrap
        self.dones[pos] = windows.dones
        self.players[pos] = windows.players
        self.masks[pos] = masks
        self.acted_heads[pos] = windows.heads
        self.epsilons[pos] = windows.epsilons
        self.inserted_at[pos] = first + np.arange(w)
        self.priority[pos] = self.max_priority
        self.tree.set(pos, np.full(len(pos), self.max_priority ** self.alpha))
        self.cursor = int((pos[-1] + 1) % self.capacity) if w else self.cursor
        self.size = min(self.capacity, self.size + w)
        return pos

    def probabilities(self) -> np.ndarray:
        """(size,) float64 P(i) over the stored records."""
        return self.tree.sum[self.tree.n : self.tree.n + self.size] / self.tree.total

    def sample(self, batch: int, rng: np.random.Generator) -> Sample:
        """B records drawn with replacement by priority (module docstring). Raises ValueError
        on an empty buffer."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        total = self.tree.total
        # Rounding in the tree's sums can send a query just past the last record: clamp it.
        index = np.minimum(self.tree.find(rng.random(batch) * total), self.size - 1)
        p = self.tree.sum[self.tree.n + index] / total
        w = (self.size * p) ** -self.beta
        w_max = (self.size * self.tree.min[1] / total) ** -self.beta
        return Sample(index.astype(np.int64), (w / w_max).astype(np.float32), self.obs[index], self.next_obs[index],
                      self.actions[index], self.rewards[index], self.discounts[index], self.can_bootstrap[index],
                      self.dones[index], self.players[index], self.masks[index].astype(np.float32),
                      self.acted_heads[index], self.epsilons[index], self.clock - self.inserted_at[index])

    def update_priorities(self, index: np.ndarray, td_abs: np.ndarray) -> None:
        """p_i = |TD_i| + eps for the sampled ``index``; raises the running max. A record drawn
        twice in one minibatch keeps the last write."""
        td_abs = np.asarray(td_abs, np.float64)
        if not np.all(np.isfinite(td_abs)):
            raise ValueError("non-finite |TD error| written back to the replay priorities")
        self.priority[index] = td_abs + self.eps
        self.tree.set(index, self.priority[index] ** self.alpha)
        self.max_priority = max(self.max_priority, float(self.priority[index].max()))

    def priority_spread(self) -> float | None:
        """max / min stored priority (``dqn/priority_spread``); None when empty."""
        if not self.size:
            return None
        p = self.priority[: self.size]
        return float(p.max() / p.min())

    def state_dict(self) -> dict:
        """Everything a resume needs, as numpy arrays and ints (only the stored prefix)."""
        state = {name: getattr(self, name)[: self.size].copy() for name in self._ARRAYS}
        state.update(size=self.size, cursor=self.cursor, clock=self.clock, max_priority=self.max_priority,
                     capacity=self.capacity, row_bytes=self.row_bytes, heads=self.heads)
        return state

    def load_state_dict(self, state: dict) -> None:
        for key in ("capacity", "row_bytes", "heads"):
            if state[key] != getattr(self, key):
                raise ValueError(f"replay checkpoint has {key} {state[key]}, this run's buffer has {getattr(self, key)}: "
                                 f"resume with the same dqn.replay_capacity, observation codec and dqn.heads")
        n = int(state["size"])
        for name in self._ARRAYS:
            getattr(self, name)[:n] = state[name]
        self.size, self.cursor, self.clock = n, int(state["cursor"]), int(state["clock"])
        self.tree = SumTree(self.capacity)
        self.tree.set(np.arange(n), self.priority[:n] ** self.alpha)
        self.max_priority = float(state["max_priority"])
