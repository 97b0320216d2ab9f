"""The DQN behaviour policy over the Q rows of the central inference.

* ``epsilon``: a linear schedule from ``start`` to ``floor`` over ``decay_iterations`` learner
  iterations, then the floor (``dqn.epsilon_*``).
* ``epsilon_greedy``: with probability epsilon a uniform draw over the row's LEGAL set,
  otherwise the masked argmax of its Q row (``targets.masked_argmax``). Both draws come from the
  cycle's uniforms, so a cycle's actions are a pure function of (Q rows, legality, uniforms).
* ``thompson_head``: one ensemble head per (slot, episode), drawn once from a named stream; the
  episode acts greedily by that head (Osband et al. 2016, bootstrapped DQN), still exploring
  with probability epsilon. In the service the slot is the seat ``2 * battle id + seat`` and
  the episode its ordinal (``thompson_heads`` over central inference's ``EPISODE_KEYS``), so
  the draw is a pure function of the run's seed and the episode's identity: it changes exactly
  when a seat's ordinal does, and a resumed run (which continues or restarts an episode at the
  same ordinal) draws the same head without any state of its own.

Every record carries the head its first decision acted by (``MEAN_HEAD`` under epsilon-greedy
at K > 1: the heads' mean) and the epsilon it acted under.
"""

from __future__ import annotations

import numpy as np
import torch

from services.learner.dqn.targets import masked_argmax
from shared.seeding import stream


def epsilon(iteration: int, *, start: float, floor: float, decay_iterations: int) -> float:
    """Linear from ``start`` at iteration 0 to ``floor`` at ``decay_iterations``, then ``floor``."""
    if decay_iterations <= 0 or iteration >= decay_iterations:
        return floor
    return start + (floor - start) * iteration / decay_iterations


def epsilon_greedy(q: torch.Tensor, legal: torch.Tensor, eps: float, uniforms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(actions int64 (B,), explored bool (B,)). ``q`` (B, A), ``legal`` (B, A) bool with at
    least one legal entry per row, ``uniforms`` (B, 2) in [0, 1): column 0 decides explore
    (u < eps), column 1 picks the legal id floor(u * n_legal) in ascending id order."""
    legal_np = legal.cpu().numpy()
    n_legal = legal_np.sum(axis=1)
    if (n_legal == 0).any():
        raise ValueError(f"epsilon_greedy: row {int(np.flatnonzero(n_legal == 0)[0])} has no legal action")
    greedy = masked_argmax(q, legal).cpu().numpy().astype(np.int64)
    explored = uniforms[:, 0] < eps
    pick = np.minimum((uniforms[:, 1] * n_legal).astype(np.int64), n_legal - 1)
    ranks = np.cumsum(legal_np, axis=1) - 1  # rank of each legal id within its row
    random_ids = np.argmax(legal_np & (ranks == pick[:, None]), axis=1)
    return np.where(explored, random_ids, greedy), explored


def thompson_head(master_seed: int, slot: int, episode: int, heads: int) -> int:
    """The head that slot ``slot`` acts by during its ``episode``-th episode, in 0..heads-1."""
    return int(stream(master_seed, "dqn/thompson/slot/{slot}/episode/{episode}", slot=slot,
                      episode=episode).integers(heads))


EPISODE_KEYS = ("cycle", "slot", "battle", "seat", "ordinal")
"""The columns of the (n, 5) int64 ``episodes`` array central inference hands a policy that
``acts_by_episode`` (services/learner/rounds.py): each row's rectangle cell (cycle, slot) and
its episode's identity (battle id, seat, ordinal)."""

MEAN_HEAD = -1
"""The head recorded for a decision acted by the mean over K > 1 heads (epsilon-greedy)."""


def thompson_heads(master_seed: int, episodes: np.ndarray, heads: int, cache: dict | None = None) -> np.ndarray:
    """(n,) int64 heads for the rows of ``episodes`` ((n, 5) int64, ``EPISODE_KEYS``):
    ``thompson_head(master_seed, 2 * battle + seat, ordinal, heads)`` per row. ``cache``
    (slot, ordinal) -> head spares deriving a stream per row for an episode already drawn."""
    e = np.asarray(episodes, np.int64).reshape(-1, len(EPISODE_KEYS))
    cache = {} if cache is None else cache
    out = np.empty(len(e), np.int64)
    for i, (b, s, o) in enumerate(e[:, 2:].tolist()):
        key = (2 * b + s, o)
        if key not in cache:
            cache[key] = thompson_head(master_seed, key[0], key[1], heads)
        out[i] = cache[key]
    return out


def bootstrap_masks(rng: np.random.Generator, records: int, heads: int, p: float) -> np.ndarray:
    """uint8 (records, heads) Bernoulli(p) membership, drawn once at insertion (``dqn.bootstrap_p``;
    p = 1 trains every head on every record)."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"dqn.bootstrap_p must lie in (0, 1], got {p}")
    return (rng.random((records, heads)) < p).astype(np.uint8)


def explore_pick(uniforms: np.ndarray, eps: float, n_legal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Epsilon-greedy from ONE uniform per row, the (B,) uniforms central inference already
    draws per slot (``act/iteration/{i}/cycle/{c}``): explore iff u < eps, and then u / eps is
    itself uniform on [0, 1), so the legal rank is floor(u / eps * n_legal). Returns
    (explored (B,) bool, rank (B,) int64; meaningful where explored)."""
    explored = uniforms < eps
    scaled = np.where(explored, uniforms / max(eps, np.finfo(np.float64).tiny), 0.0)
    rank = np.minimum((scaled * n_legal).astype(np.int64), np.maximum(n_legal - 1, 0))
    return explored, rank


class DqnBehaviour:
    """The behaviour policy with central inference's interface: ``act(rows, n_legal, uniforms)``
    -> (actions (B,) int64, log_probs (B,) float32, all 0: DQN needs none).

    With ``thompson = (master_seed, K)`` the policy ``acts_by_episode``: central inference hands
    it each row's ``episodes`` keys and each row acts by its episode's ``thompson_heads`` head
    (refused without the keys).

    ``q_rows(rows) -> ((B, K, A) tensor, (B, A) bool legal)`` is the Q network's forward on
    packed rows. Forced rows (only the no-op legal) are not forwarded, as under PPO. A choice row
    explores by ``explore_pick``; otherwise it takes the masked argmax of head ``heads[b]``
    (Thompson: the slot's head for this episode) or, without ``heads``, of the mean over heads.
    ``last`` keeps the explored flags and heads of the latest call for the row
    (``update.behaviour_stats``)."""

    def __init__(self, q_rows, eps: float, *, thompson: tuple[int, int] | None = None, mean_head: int = 0):
        self.q_rows, self.eps, self.thompson, self.mean_head = q_rows, eps, thompson, mean_head
        self.acts_by_episode = thompson is not None
        self._drawn: dict[tuple[int, int], int] = {}  # (slot, ordinal) -> head, this behaviour's episodes
        """Whether central inference must pass ``episodes`` (services/learner/rounds.py)."""
        self.last: dict[str, np.ndarray] = {}

    @torch.no_grad()
    def act(self, rows: np.ndarray, n_legal: np.ndarray, uniforms: np.ndarray, heads: np.ndarray | None = None,
            *, history=None, episodes: np.ndarray | None = None):
        if history is not None:  # the config refuses obs.frame_stack > 1 with dqn at load
            raise ValueError("the DQN behaviour policy reads one frame; obs.frame_stack must be 1")
        if self.thompson is not None and heads is None:
            if episodes is None:
                raise ValueError("the Thompson behaviour acts by each episode's head: central inference must pass "
                                 "the rows' episodes (EPISODE_KEYS)")
            heads = thompson_heads(self.thompson[0], episodes, self.thompson[1], self._drawn)
        B = len(rows)
        actions = np.zeros(B, np.int64)
        explored = np.zeros(B, bool)
        choice = np.flatnonzero(n_legal > 1)
        if len(choice):
            q, legal = self.q_rows(rows[choice])
            if heads is None:
                row_q = q.mean(dim=1)
            else:
                row_q = q[torch.arange(len(choice)), torch.as_tensor(heads[choice], dtype=torch.int64)]
            greedy = masked_argmax(row_q, legal).cpu().numpy()
            legal_np = legal.cpu().numpy()
            ex, rank = explore_pick(uniforms[choice], self.eps, n_legal[choice])
            ranks = np.cumsum(legal_np, axis=1) - 1
            random_ids = np.argmax(legal_np & (ranks == rank[:, None]), axis=1)
            actions[choice] = np.where(ex, random_ids, greedy)
            explored[choice] = ex
        self.last = {"explored": explored,
                     "heads": np.full(B, self.mean_head, np.int64) if heads is None else np.asarray(heads, np.int64)}
        return actions, np.zeros(B, np.float32)
