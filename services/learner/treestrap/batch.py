"""TreeStrap's batch (seed 000's ``TreeStrapBatch``) and its targets, built from expert
iteration's replay.

Seed 000: ``obs`` (records, observation_size), ``players`` (records,), ``targets`` (records,
heads, actions) "searched action targets for each ensemble head", ``masks`` (records, heads)
float32 bootstrap membership; "compute an action loss for each record/head pair, multiply it by
masks, and reduce over the included pairs". Here one search answers each decision, so every
head's target of a record is that search's target: ``search`` holds it once over the row's legal
set (CSR, head frame) instead of K dense copies (docs/design.md, "TreeStrap"). ``proposal`` is the
same rows with the Thompson target (``ensemble.thompson_probs``) as their policy target: what
the actor's policy head trains toward.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shared.batches import AlphaZeroBatch


@dataclass
class TreeStrapBatch:
    """``search``: the rows (packed obs, players, legal CSR) with the search's target and the value
    target; ``proposal``: the same rows and CSR with the Thompson target; ``masks`` float32
    (records, heads) in {0, 1}; ``heads_target``: what every head trains toward, the same rows
    with the search's target over the legal set (None: ``search`` itself) or over the searched
    candidates only (``candidate_batch``). Raises ValueError when the batches disagree in rows or
    the proposal's legal sets, or the masks' shape or values are wrong."""

    search: AlphaZeroBatch
    proposal: AlphaZeroBatch
    masks: np.ndarray
    heads_target: AlphaZeroBatch | None = None

    def __post_init__(self):
        s, p, n = self.search, self.proposal, len(self.search)
        if len(p) != n or not np.array_equal(s.legal_offsets, p.legal_offsets) or not np.array_equal(s.legal_ids, p.legal_ids):
            raise ValueError("TreeStrapBatch: the proposal batch must hold the search batch's rows and legal sets")
        m = np.asarray(self.masks)
        if m.ndim != 2 or len(m) != n or m.shape[1] < 1:
            raise ValueError(f"TreeStrapBatch.masks has shape {m.shape}, expected ({n}, heads >= 1)")
        if not np.isin(m, (0.0, 1.0)).all():
            raise ValueError("TreeStrapBatch.masks must hold 0 or 1 (bootstrap membership)")
        self.masks = m.astype(np.float32)
        if self.heads_target is None:
            self.heads_target = s
        elif len(self.heads_target) != n:
            raise ValueError(f"TreeStrapBatch.heads_target has {len(self.heads_target)} rows, the search {n}")

    def __len__(self) -> int:
        return len(self.search)

    @property
    def heads(self) -> int:
        return int(self.masks.shape[1])


def candidate_positions(legal_ids: np.ndarray, legal_offsets: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """int64 (n, k): the CSR position (index into ``legal_ids``) of each row's candidate, -1 for a
    padded one (``candidates`` int (n, k), -1 padding). Raises ValueError naming the row whose
    candidate is not in its legal set."""
    c = np.asarray(candidates, np.int64)
    out = np.full(c.shape, -1, np.int64)
    for i in range(len(c)):
        lo, hi = int(legal_offsets[i]), int(legal_offsets[i + 1])
        ids = legal_ids[lo:hi].astype(np.int64)
        real = c[i] >= 0
        at = np.searchsorted(ids, c[i][real])
        if (at >= len(ids)).any() or (ids[np.minimum(at, len(ids) - 1)] != c[i][real]).any():
            raise ValueError(f"row {i}: candidates {c[i][real].tolist()} are not all in its legal set")
        out[i, real] = lo + at
    return out


def proposal_batch(search: AlphaZeroBatch, positions: np.ndarray, probs: np.ndarray) -> AlphaZeroBatch:
    """``search``'s rows with the policy target ``probs`` (n, k) (each row sums to 1) placed at the
    candidates' CSR ``positions`` (n, k) (``candidate_positions``) and 0 elsewhere."""
    target = np.zeros(len(search.legal_ids), np.float32)
    real = positions >= 0
    np.add.at(target, positions[real], probs[real].astype(np.float32))
    return AlphaZeroBatch(obs=search.obs, players=search.players, policy_targets=target,
                          value_targets=search.value_targets, policy_weights=search.policy_weights,
                          legal_ids=search.legal_ids, legal_offsets=search.legal_offsets, n_actions=search.n_actions)


def search_top(search: AlphaZeroBatch, positions: np.ndarray) -> np.ndarray:
    """int64 (n,): per row, the candidate index with the largest search target (ties: the lower)."""
    t = np.where(positions >= 0, search.policy_targets[np.maximum(positions, 0)], -np.inf)
    return np.argmax(t, axis=1)


def candidate_batch(search: AlphaZeroBatch, candidates: np.ndarray, positions: np.ndarray) -> AlphaZeroBatch:
    """``search``'s rows with each row's policy set narrowed to its searched candidates (ascending
    ids) and the search's target there renormalised to sum to 1 (uniform over the candidates where
    it puts no mass on any): a head then learns to rank what the search compared, the set the
    Thompson choice is taken among (docs/treestrap.md, ``treestrap.head_support``)."""
    ids, probs, counts = [], [], np.zeros(len(search), np.int64)
    for i in range(len(search)):
        real = candidates[i] >= 0
        order = np.argsort(candidates[i][real], kind="stable")
        c, pos = candidates[i][real][order], positions[i][real][order]
        t = search.policy_targets[pos].astype(np.float64)
        t = t / t.sum() if t.sum() > 0 else np.full(len(c), 1.0 / len(c))
        ids.append(c.astype(np.int16))
        probs.append(t.astype(np.float32))
        counts[i] = len(c)
    offsets = np.zeros(len(search) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return AlphaZeroBatch(obs=search.obs, players=search.players, policy_targets=np.concatenate(probs),
                          value_targets=search.value_targets, policy_weights=search.policy_weights,
                          legal_ids=np.concatenate(ids), legal_offsets=offsets, n_actions=search.n_actions)
