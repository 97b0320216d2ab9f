"""The learner's half of the rollouts' search: at a searched row the prior is the live actor's
(one extra forward over the round's searched rows, central inference like every round), the
target is the completed-Q improved policy and the move is drawn from it over the candidates
(``shared.search.targets``). ``SearchBook`` keeps each searched cell's target for the update.

A searched round (``Welcome.search``) carries ``search_slots`` (local slots), and per slot its
``search_candidates`` (-1 pads) and ``search_q``. A slot that is not a learner seat with more
than the no-op legal, or whose candidates are not distinct legal actions, is a malformed search:
it is counted (``refused``) and the row is trained as value-only, acted as the policy sampled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shared.search.targets import completed_q_policy, searched_move


@dataclass
class SearchTarget:
    """One searched cell: ``ids`` int16 (n,) its legal set (ascending), ``probs`` float32 (n,)
    the improved policy over it; ``entropy`` and ``kl_prior`` (nats) of that target;
    ``changed``: the search moved off the action the prior sampled."""

    ids: np.ndarray
    probs: np.ndarray
    entropy: float
    kl_prior: float
    changed: bool


@dataclass
class SearchBook:
    """Search targets of one iteration by (cycle, global slot); ``begin`` empties it."""

    c_scale: float
    targets: dict[tuple[int, int], SearchTarget] = field(default_factory=dict)
    refused: int = 0
    sim_seconds: float = 0.0
    sim_steps: int = 0
    simulations: int = 0
    env_seconds: float = 0.0

    def begin(self) -> None:
        self.targets.clear()
        self.refused = self.sim_steps = self.simulations = 0
        self.sim_seconds = self.env_seconds = 0.0

    def count_round(self, body) -> None:
        """A round's search cost and stepping time, as its rollout reported them (a ``Round``)."""
        self.sim_seconds += body.search_seconds
        self.sim_steps += body.search_steps
        self.env_seconds += body.env_seconds

    def apply(self, policy, cycle: int, slots: np.ndarray, learner: np.ndarray, rows: np.ndarray, n_legal: np.ndarray,
              uniforms: np.ndarray, search, actions: np.ndarray, log_probs: np.ndarray):
        """The round's actions with the searched ones replaced: ``slots`` (n,) the shard's global
        slots in round order, ``learner`` (m,) its learner slots (global) with ``rows``,
        ``n_legal``, ``uniforms``, ``actions`` and ``log_probs`` (m,) aligned to them;
        ``search``: the round's ``RoundArrays`` (its ``search_*`` arrays). Returns (actions,
        log_probs) (new arrays; a searched row's log-prob is its move's under the prior)."""
        actions, log_probs = actions.copy(), log_probs.copy()
        where = {int(g): j for j, g in enumerate(learner)}
        picked = []
        for k, local in enumerate(np.asarray(search.search_slots, np.int64)):
            j = where.get(int(slots[local])) if 0 <= local < len(slots) else None
            if j is None or n_legal[j] <= 1:
                self.refused += 1
                continue
            picked.append((k, j))
        if not picked:
            return actions, log_probs
        lp_all = policy.legal_log_probs(rows[[j for _, j in picked]])
        for (k, j), lp in zip(picked, lp_all):
            cand = search.search_candidates[k]
            valid = cand >= 0
            cand, q = cand[valid].astype(np.int64), search.search_q[k][valid].astype(np.float64)
            try:
                pi = completed_q_policy(lp, cand, q, c_scale=self.c_scale)
            except ValueError:
                self.refused += 1
                continue
            move = searched_move(pi, cand, float(uniforms[j]))
            ids = np.flatnonzero(np.isfinite(lp))
            p = pi[ids]
            nz = p > 0
            entropy = float(-(p[nz] * np.log(p[nz])).sum())
            kl = float((p[nz] * (np.log(p[nz]) - lp[ids][nz])).sum())
            self.targets[(cycle, int(learner[j]))] = SearchTarget(ids.astype(np.int16), p.astype(np.float32), entropy, kl,
                                                                  move != int(actions[j]))
            self.simulations += len(cand)
            actions[j], log_probs[j] = move, np.float32(lp[move])
        return actions, log_probs

    def row(self, collect_seconds: float, env_steps: int) -> dict[str, float]:
        """The iteration's ``search/`` keys and its ``throughput/`` ones (wall-clock: left out
        of verify-resume's comparison). ``env_steps``: the battles' own decisions collected."""
        out = {"search/sim_steps": float(self.sim_steps), "search/refused": float(self.refused)}
        n = len(self.targets)
        out["search/decisions"] = float(n)
        if collect_seconds > 0:
            out["throughput/searched_decisions_per_second"] = n / collect_seconds
            out["throughput/engine_steps_per_second"] = (env_steps + self.sim_steps) / collect_seconds
        if self.sim_seconds + self.env_seconds > 0:
            out["throughput/search_time_frac"] = self.sim_seconds / (self.sim_seconds + self.env_seconds)
        if n:
            t = list(self.targets.values())
            out["search/simulations_per_decision"] = self.simulations / n
            out["search/target_entropy"] = float(np.mean([x.entropy for x in t]))
            out["search/target_kl_prior"] = float(np.mean([x.kl_prior for x in t]))
            out["search/changed_frac"] = float(np.mean([x.changed for x in t]))
        return out
