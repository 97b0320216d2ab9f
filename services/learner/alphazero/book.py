"""The learner's half of the rollouts' search (Gumbel AlphaZero's root; services/rollout/search.py).

Answering a round (``propose``): for every learner row with more than the no-op legal, the
live actor's prior over the legal set (one forward over the round's choice rows: central
inference, batched like every round), Gumbel noise from
``search/gumbel/iteration/{i}/cycle/{t}/slot/{s}``, and the top-k of g + log prior as the
candidates (the no-op in place of the k-th when it was not drawn); under
``alphazero.candidates_from`` "plans" the draw's first (the prior's own sample), the no-op and
each card's plan moves instead (``plan_candidates_of``). The Step carries them and their keys,
and the row waits in ``pending``. Under playout-cap randomisation
(``alphazero.full_search_share`` below 1; KataGo, Wu 2019, sec. 3.1) a coin from
``search/full/iteration/{i}/cycle/{t}/slot/{s}`` first decides each choice row: with probability
the share it is proposed as above, else it is ``fast``: left out of the Step's search arrays, so
the rollout plays the prior's own sampled move with no simulation, and the row stays value-only.

When the round after that step arrives (``complete``): each searched row's scores and move; the
target is Gumbel MuZero's completed-Q policy (``shared.search.targets.completed_q_policy``) and
the move is checked against the rule the rollout applies (``gumbel_move_index``). A row whose
candidates, keys or move disagree with what was sent is a malformed search: counted
(``refused``) and trained value-only; so is a report for a row that was not proposed (a ``fast``
row among them): a fast row never gets a target. ``SearchBook`` keeps each searched cell's target for the
update.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from shared.search.lookahead import candidates_with_noop, gumbel_top_k, mode_first
from shared.search.plans import plan_candidates
from shared.search.spec import RolloutSearch
from shared.search.targets import completed_q_policy, gumbel_move_index
from shared.seeding import stream


@dataclass
class SearchTarget:
    """One searched cell: ``ids`` int16 (n,) its legal set (ascending), ``probs`` float32 (n,)
    the improved policy over it; ``entropy`` and ``kl_prior`` (nats) of that target;
    ``changed``: the move is not the candidate the prior's Gumbel draw put first."""

    ids: np.ndarray
    probs: np.ndarray
    entropy: float
    kl_prior: float
    changed: bool


@dataclass
class _Pending:
    log_prior: np.ndarray
    candidates: np.ndarray
    keys: np.ndarray
    prior_action: int = -1
    """The action the live actor sampled for the row at inference (what the network plays
    without the search); -1: not given."""


def rollout_search_of(a) -> RolloutSearch:
    """The rollouts' search of ``a`` (an ``AlphaZeroConfig``): its candidates, depth, move rule
    and mid-step answers, and the ``+search`` players' options (``playouts``, ``halving``,
    ``continuation``, ``sim_opponents``, ``value_scale``, ``keep``, ``redeal``)."""
    options = {"playouts": a.playouts, "halving": a.halving, "cont": a.continuation,
               "opponents": tuple(a.sim_opponents), "value_scale": a.value_scale, "keep": a.keep, "redeal": a.redeal}
    defaults = RolloutSearch(candidates=a.candidates)
    # only the options set: one at its default is not sent, so the Welcome's bytes are as before they existed
    # (msgspec's omit_defaults leaves out a default by identity, not by value, for a float)
    return RolloutSearch(candidates=a.candidates, depth=a.depth, c_scale=a.c_scale, leaf_value=a.leaf_value,
                         sim_opponent=a.sim_opponent,
                         **{k: v for k, v in options.items() if v != getattr(defaults, k)})


def move_agrees(move_index: int, q: np.ndarray, keys: np.ndarray, c_scale: float, keep: float | None) -> bool:
    """Whether the rollout's move (``move_index`` among the candidates) follows the rule it was
    sent: Gumbel + sigma(min-max ``q``) over ``keys`` (``gumbel_move_index``) when ``keep`` is
    None; else the players' (``shared.search.halving.pick``): the first candidate, or one whose
    mean ``q`` beats the first's by more than ``keep`` (under halving the survivors are not
    reported, so this is the rule's necessary condition; float32 scores, so a 1e-6 relative
    tolerance)."""
    if keep is None:
        return move_index == gumbel_move_index(keys, q, c_scale=c_scale)
    if move_index == 0:
        return True
    q = np.asarray(q, np.float64)
    return bool(q[move_index] >= q[0] + keep - 1e-6 * max(1.0, abs(float(q[0]))))


def gumbel_candidates(log_prior: np.ndarray, k: int, rng: np.random.Generator,
                      own_argmax: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(candidates int64 (min(k, legal),), keys float64): the top-k legal actions of
    g + ``log_prior`` (``shared.search.lookahead.gumbel_top_k``: g ~ Gumbel(0, 1), one per legal
    action in ascending id order), in key order, with the no-op (0) in place of the last when it
    was not drawn and is legal (``candidates_with_noop``), and each candidate's key g + log prior.
    The keys are the draw ``gumbel_top_k`` makes, read from a copy of ``rng`` taken before it.
    ``own_argmax`` (``alphazero.own_pick`` "argmax"): the prior's argmax first (the own pick the
    players' move rule keeps), then the draw's others in key order."""
    lp = np.asarray(log_prior, np.float64)
    legal = np.flatnonzero(np.isfinite(lp))
    g = copy.deepcopy(rng).gumbel(size=len(legal))  # the same draw, in the same order
    drawn = gumbel_top_k(lp, k, rng)
    if own_argmax:
        drawn = mode_first(drawn, lp, k)
    cand = np.asarray(candidates_with_noop(drawn, k) if 0 in legal else drawn[:k], np.int64)
    return cand, lp[cand] + g[np.searchsorted(legal, cand)]


def plan_candidates_of(log_prior: np.ndarray, k: int, rng: np.random.Generator,
                       grid: tuple[int, int, int], own_argmax: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(candidates int64 (min(k, legal),), keys float64) under ``alphazero.candidates_from``
    "plans": the prior's own sample (the first of ``gumbel_top_k``, as ``gumbel_candidates``
    draws it), the no-op, each hand slot's plan moves, then random legal plays from ``rng``
    (``shared.search.plans.plan_candidates``, as a ``snap:<id>+search:...,cand=plans`` player
    draws them); each key g + log prior of the same Gumbel draw. ``grid`` (hand slots, height,
    width): the head's layout, so the legal mask's grid part is the plans' mask planes.
    ``own_argmax`` (``alphazero.own_pick`` "argmax"): the own pick is the prior's argmax instead
    (the sample is still drawn, so the rest of the draw is the same)."""
    lp = np.asarray(log_prior, np.float64)
    legal = np.flatnonzero(np.isfinite(lp))
    g = copy.deepcopy(rng).gumbel(size=len(legal))
    own = int(gumbel_top_k(lp, 1, rng)[0])
    if own_argmax:
        own = int(np.argmax(lp))
    slots, height, width = grid
    planes = np.isfinite(lp[1 : 1 + slots * height * width]).reshape(slots, height, width)
    cand = np.asarray(plan_candidates(own, planes, legal, k, rng), np.int64)
    return cand, lp[cand] + g[np.searchsorted(legal, cand)]


@dataclass
class SearchBook:
    """Search targets of one iteration by (cycle, global slot); ``begin`` empties it."""

    c_scale: float
    candidates: int
    master_seed: int
    move_keep: float | None = None
    """The rollouts' move rule: None, Gumbel AlphaZero's (``gumbel_move_index``); a margin, the
    ``+search`` players' pick with that ``keep`` (``alphazero`` section's stable options,
    ``AlphaZeroConfig.stable``)."""
    targets: dict[tuple[int, int], SearchTarget] = field(default_factory=dict)
    pending: dict[tuple[int, int], _Pending] = field(default_factory=dict)
    refused: int = 0
    sim_seconds: float = 0.0
    sim_steps: int = 0
    simulations: int = 0
    env_seconds: float = 0.0
    reward_divisor: float = 1.0
    """What the critic's returns are scaled by this iteration (``ReturnScaler.divisor``, 1
    without ``advantage.standardize_rewards``): a leaf's simulated rewards are divided by it."""
    critic_leaves: int = 0
    """Leaves valued by ``leaf_values`` this iteration (``alphazero.leaf_value`` "critic")."""
    opponent_rows: int = 0
    """A network opponent's simulated decisions answered this iteration (``SimActQuery``)."""
    prior_noop: int = 0
    """Searched decisions whose prior's own sample (``propose``'s ``actions``) was the no-op."""
    move_noop: int = 0
    """Searched decisions whose move (the search's) was the no-op."""
    prior_agree: int = 0
    """Searched decisions whose move is the prior's own sample."""
    prior_seen: int = 0
    """Searched decisions whose prior's sample was given (the three counts' denominator)."""
    full_share: float = 1.0
    """``alphazero.full_search_share``: the probability a choice row is searched fully (module
    docstring); 1 draws no coin."""
    fast: set[tuple[int, int]] = field(default_factory=set)
    """(cycle, global slot) of the choice rows the coin gave the unsearched policy this iteration."""
    proposed: int = 0
    """Choice rows proposed for a full search this iteration (their candidates sent)."""
    plans: bool = False
    """``alphazero.candidates_from`` "plans": candidates by ``plan_candidates_of`` (the head's
    grid the policy's ``action_grid``), not ``gumbel_candidates``."""
    own_argmax: bool = False
    """``alphazero.own_pick`` "argmax": the first candidate (the own pick) is the prior's argmax."""

    def begin(self, reward_divisor: float = 1.0) -> None:
        """Empty the book for an iteration whose rewards the critic sees divided by ``reward_divisor``."""
        self.targets.clear()
        self.pending.clear()
        self.refused = self.sim_steps = self.simulations = self.critic_leaves = self.opponent_rows = 0
        self.prior_noop = self.move_noop = self.prior_agree = self.prior_seen = self.proposed = 0
        self.fast.clear()
        self.sim_seconds = self.env_seconds = 0.0
        self.reward_divisor = float(reward_divisor)

    def leaf_values(self, policy, rows: np.ndarray | None, returns: np.ndarray | None, discounts: np.ndarray | None,
                    row_bytes: int) -> np.ndarray:
        """A ``LeafQuery``'s scores: (n,) float32 ``returns / reward_divisor + discounts * V(rows)``,
        the n-step return of each simulated candidate with the live critic at its leaf
        (``rows`` uint8 (n, ``row_bytes``), ``returns`` and ``discounts`` float64 (n,)). One
        forward over the query's rows in its order: its composition is the rollout's, so a
        resumed run values the same rows the same. Raises ValueError naming the array for
        arrays of other shapes, non-finite returns or discounts outside [0, 1]."""
        if rows is None or returns is None or discounts is None:
            raise ValueError("a leaf query carries leaf_rows, leaf_return and leaf_discount")
        n = len(rows)
        if rows.shape != (n, row_bytes) or not n:
            raise ValueError(f"leaf_rows is {rows.shape}, expected (n > 0, {row_bytes})")
        for name, a in (("leaf_return", returns), ("leaf_discount", discounts)):
            if a.shape != (n,) or not np.isfinite(a).all():
                raise ValueError(f"{name} must be ({n},) finite, got {a.shape}")
        if (discounts < 0).any() or (discounts > 1).any():
            raise ValueError("leaf_discount must lie in [0, 1]")
        values = policy.values(np.ascontiguousarray(rows)).astype(np.float64)
        self.critic_leaves += n
        return (returns / self.reward_divisor + discounts * values).astype(np.float32)

    def count_round(self, body) -> None:
        """A round's search cost and stepping time, as its rollout reported them (a ``Round``)."""
        self.sim_seconds += body.search_seconds
        self.sim_steps += body.search_steps
        self.env_seconds += body.env_seconds

    def propose(self, policy, iteration: int, cycle: int, learner: np.ndarray, local: np.ndarray, rows: np.ndarray,
                n_legal: np.ndarray, actions: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The Step's search arrays for one round: ``learner`` (m,) its learner slots (global),
        ``local`` (m,) the same slots' indices in the round, ``rows`` (m, row_bytes) and
        ``n_legal`` (m,) theirs; ``actions`` (m,), when given, the live actor's own samples of
        those rows (what the network plays: counted beside the search's moves, ``row``). Empty
        dict when no row has a choice, or the coin searches none (``full_search``)."""
        choice = np.flatnonzero(n_legal > 1)
        if self.full_share < 1.0 and len(choice):
            full = np.asarray([self.full_search(iteration, cycle, int(learner[j])) for j in choice.tolist()], bool)
            self.fast.update((cycle, int(learner[j])) for j in choice[~full].tolist())
            choice = choice[full]
        if not len(choice):
            return {}
        self.proposed += len(choice)
        lps = policy.legal_log_probs(rows[choice])
        k = self.candidates
        grid = policy.action_grid if self.plans else None  # the head's layout, once a round
        cands = np.full((len(choice), k), -1, np.int16)
        keys = np.zeros((len(choice), k), np.float32)
        for n, (j, lp) in enumerate(zip(choice.tolist(), lps)):
            slot = int(learner[j])
            rng = stream(self.master_seed, "search/gumbel/iteration/{iteration}/cycle/{cycle}/slot/{slot}",
                         iteration=iteration, cycle=cycle, slot=slot)
            if grid is not None:
                cand, key = plan_candidates_of(lp, k, rng, grid, self.own_argmax)
            else:
                cand, key = gumbel_candidates(lp, k, rng, self.own_argmax)
            cands[n, : len(cand)], keys[n, : len(cand)] = cand, key
            prior = -1 if actions is None else int(actions[j])
            self.pending[(cycle, slot)] = _Pending(lp, cand, keys[n, : len(cand)].copy(), prior)
        return {"search_slots": np.asarray(local, np.int16)[choice], "search_candidates": cands, "search_keys": keys}

    def full_search(self, iteration: int, cycle: int, slot: int) -> bool:
        """The playout-cap coin of one choice row (global ``slot`` of ``cycle``): True (search it
        fully) with probability ``full_share``, one uniform of
        ``search/full/iteration/{iteration}/cycle/{cycle}/slot/{slot}``, so every process and a
        resumed run draw the same coin for the same row."""
        u = stream(self.master_seed, "search/full/iteration/{iteration}/cycle/{cycle}/slot/{slot}",
                   iteration=iteration, cycle=cycle, slot=slot).random()
        return bool(u < self.full_share)

    def complete(self, cycle: int, slots: np.ndarray, candidates: np.ndarray, q: np.ndarray,
                 moves: np.ndarray) -> list[tuple[int, int, float]]:
        """The search of ``cycle``'s step as the next round reported it: ``slots`` (s,) global,
        ``candidates`` (s, k), ``q`` (s, k), ``moves`` (s,). Returns (slot, move, log prior of
        the move) of every search accepted (its target kept)."""
        out = []
        for slot, row, score, move in zip(np.asarray(slots).tolist(), candidates, q, np.asarray(moves).tolist()):
            p = self.pending.pop((cycle, int(slot)), None)
            n = 0 if p is None else len(p.candidates)
            if (p is None or not np.array_equal(np.asarray(row[:n], np.int64), p.candidates) or (row[n:] != -1).any()
                    or not self._move_agrees(p, int(move), score[:n])
                    or not np.isfinite(score[:n]).all()):
                self.refused += 1
                continue
            qn = np.asarray(score[:n], np.float64)
            pi = completed_q_policy(p.log_prior, p.candidates, qn, c_scale=self.c_scale)
            ids = np.flatnonzero(np.isfinite(p.log_prior))
            probs = pi[ids]
            nz = probs > 0
            entropy = float(-(probs[nz] * np.log(probs[nz])).sum())
            kl = float((probs[nz] * (np.log(probs[nz]) - p.log_prior[ids][nz])).sum())
            self.targets[(cycle, int(slot))] = SearchTarget(ids.astype(np.int16), probs.astype(np.float32), entropy,
                                                            kl, int(move) != int(p.candidates[0]))
            self.simulations += n
            if p.prior_action >= 0:  # the network's own play beside the search's
                self.prior_seen += 1
                self.prior_noop += p.prior_action == 0
                self.move_noop += int(move) == 0
                self.prior_agree += p.prior_action == int(move)
            out.append((int(slot), int(move), float(p.log_prior[int(move)])))
        return out

    def _move_agrees(self, p: _Pending, move: int, q: np.ndarray) -> bool:
        at = np.flatnonzero(p.candidates == move)
        return bool(len(at)) and move_agrees(int(at[0]), q, p.keys, self.c_scale, self.move_keep)

    def row(self, collect_seconds: float, env_steps: int) -> dict[str, float]:
        """The iteration's ``search/`` keys and its ``throughput/`` ones (wall-clock: left out
        of verify-resume's comparison). ``env_steps``: the battles' own decisions collected.
        Rows still pending (a lost shard's) are counted in ``search/refused``."""
        out = {"search/sim_steps": float(self.sim_steps), "search/refused": float(self.refused + len(self.pending))}
        if self.critic_leaves:
            out["search/critic_leaves"] = float(self.critic_leaves)
        if self.opponent_rows:
            out["search/opponent_rows"] = float(self.opponent_rows)
        n = len(self.targets)
        out["search/decisions"] = float(n)
        if self.full_share < 1.0:  # playout-cap randomisation: the coin's realised share (absent at 1)
            out["search/fast_decisions"] = float(len(self.fast))
            if self.proposed + len(self.fast):
                out["search/full_frac"] = self.proposed / (self.proposed + len(self.fast))
        if collect_seconds > 0:
            out["throughput/searched_decisions_per_second"] = n / collect_seconds
            out["throughput/engine_steps_per_second"] = (env_steps + self.sim_steps) / collect_seconds
        if self.sim_seconds + self.env_seconds > 0:
            out["throughput/search_time_frac"] = self.sim_seconds / (self.sim_seconds + self.env_seconds)
        if n:
            # (cycle, slot) order, never arrival order: the means are float sums, and two
            # rollouts' rounds arrive in either order (verify-resume compares these keys)
            t = [self.targets[key] for key in sorted(self.targets)]
            out["search/simulations_per_decision"] = self.simulations / n
            out["search/target_entropy"] = float(np.mean([x.entropy for x in t]))
            out["search/target_kl_prior"] = float(np.mean([x.kl_prior for x in t]))
            out["search/changed_frac"] = float(np.mean([x.changed for x in t]))
        if self.prior_seen:  # what the network plays without the search, beside what the search played
            out["search/prior_noop_rate"] = self.prior_noop / self.prior_seen
            out["search/move_noop_rate"] = self.move_noop / self.prior_seen
            out["search/prior_agree_frac"] = self.prior_agree / self.prior_seen
        return out
