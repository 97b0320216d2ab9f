"""Where each training episode's decisions were taken: the learner's stamp for ``royalefleet replay``.

A learner seat's action at cycle ``t`` of iteration ``i`` is the inverse-CDF sample, on uniform
``stream("act/iteration/{i}/cycle/{t}").random(R)[slot]``, of the actor's forward over the
shard-round's choice rows (services/learner/rounds.py); a frozen seat's the same with stream
``act/frozen/iteration/{i}/cycle/{t}`` and its snapshot's actor, rows grouped by snapshot
(services/learner/frozen.py). To play such a seat again one needs, per decision: the
iteration, the cycle, the slot, the actor's weights, and (measured: a CPU forward rounds a
row's logits differently with the batch size and the row's place in it, never with the other
rows' contents) the batch size and the row's index in it.

``ProvenanceTracker`` follows every battle's episode in flight across cycles and iterations and
stamps each finished ``EpisodeRecord`` with an ``EpisodeProvenance``: its ``DecisionSpan``s (one
per iteration it spanned) and its seat's ``InferredChoice``s. An episode whose every decision
it did not see (a learner restarted mid-episode) or whose count disagrees with the record's
``episode_steps`` is left unstamped: replay then says it cannot reproduce it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from shared.messages import DecisionSpan, EpisodeProvenance, InferredChoice


def actor_digest(actor) -> str:
    """sha256[:16] of the actor's weights as a checkpoint stores them (``actor/model.safetensors``,
    ``shared.nn.statefiles.module_to_bytes``), so replay can match a checkpoint's file byte for byte."""
    from shared.nn.statefiles import module_to_bytes

    return hashlib.sha256(module_to_bytes(actor)).hexdigest()[:16]


def forwarded_rows(n_legal: np.ndarray, groups: list | None = None) -> list[tuple[int, int, int]]:
    """(row, batch size, index in batch) of each row ``shared.nn.policy.Policy.act`` forwards:
    rows with more than the no-op legal (``n_legal > 1``), in row order, one batch per group
    (``groups[i]``: the snapshot id of row ``i``, as ``FrozenActors.play`` groups them; None:
    one batch). Python over the forwarded rows only: most rounds forward none or a few."""
    rows = np.flatnonzero(np.asarray(n_legal) > 1).tolist()
    if groups is None:
        return [(i, len(rows), k) for k, i in enumerate(rows)]
    size: dict = {}
    for i in rows:
        size[groups[i]] = size.get(groups[i], 0) + 1
    seen: dict = {}
    out = []
    for i in rows:
        k = seen[groups[i]] = seen.get(groups[i], -1) + 1
        out.append((i, size[groups[i]], k))
    return out


def choice_batches(n_legal: np.ndarray, groups: list | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``forwarded_rows`` as arrays over all rows: (batch size, index in batch), int64 (n,);
    rows that are not forwarded get (0, -1)."""
    n = len(n_legal)
    batch, index = np.zeros(n, np.int64), np.full(n, -1, np.int64)
    for i, size, k in forwarded_rows(n_legal, groups):
        batch[i], index[i] = size, k
    return batch, index


_GAP = 10**9
"""A span's decision count where the tracker missed decisions: no record's count matches it."""


@dataclass
class _InFlight:
    ordinal: int
    spans: list = field(default_factory=list)
    """[iteration, first cycle, decisions, position, actor digest] per span, mutable while the
    episode runs (built into ``DecisionSpan``s once, when it is stamped)."""
    decisions: int = 0
    """Decisions seen so far (the spans' sum)."""
    choices: tuple = field(default_factory=lambda: ([], []))


class ProvenanceTracker:
    """Follows each battle's episode in flight; see the module docstring."""

    def __init__(self):
        self.battles: dict[int, _InFlight] = {}
        self.iteration, self.digest = -1, ""
        self.unstamped = 0
        """Finished episodes (seat records) left without provenance since the start."""

    def begin(self, iteration: int, actor) -> None:
        """An iteration's collection starts with ``actor`` (its weights are fixed until it ends)."""
        self.iteration, self.digest = iteration, actor_digest(actor)

    def stamp(self, episodes) -> None:
        """Give each finished ``EpisodeRecord`` its provenance, when every decision was seen."""
        for ep in episodes:
            f = self.battles.get(ep.battle)
            if f is None or f.ordinal != ep.ordinal or f.decisions != ep.episode_steps:
                self.unstamped += 1
                continue
            seat = 0 if ep.seat == "blue" else 1
            ep.provenance = EpisodeProvenance(spans=[DecisionSpan(*s) for s in f.spans],
                                              choices=list(f.choices[seat]))

    def observe(self, cycle: int, battle_ids: np.ndarray, slots: np.ndarray, ordinals: np.ndarray, restarted: bool,
                inferred: list[tuple[np.ndarray, np.ndarray, np.ndarray, list | None]]) -> None:
        """One shard-round's decisions at ``cycle`` (< T). ``battle_ids`` (n_battles,) global ids in
        slot order; ``slots`` the shard's global slots (local slot ``2 * i + seat``); ``ordinals``
        per local slot; ``restarted``: the shard's battles were (re)started for this round
        (a fresh member's cycle 0). ``inferred``: per forward kind (the learner's rows, the
        frozen rows), (global slots, legal counts, actions, snapshot id per row or None[, place]);
        ``place`` (offset, total), when the learner's rows shared a batched forward with other
        rounds' (``rounds.infer_rounds``): the forward's choice rows and where this round's began.
        On the per-round path: one pass over the shard's battles, plain ints, no structs."""
        positions = slots[::2] // 2
        it = self.iteration
        for position, b, k in zip(positions.tolist(), battle_ids[positions].tolist(), ordinals[::2].tolist()):
            f = self.battles.get(b)
            if f is None or f.ordinal != k or restarted:
                f = self.battles[b] = _InFlight(k)
            last = f.spans[-1] if f.spans else None
            if last is not None and last[0] == it and last[3] == position and last[1] + last[2] == cycle:
                last[2] += 1
                f.decisions += 1
            elif last is None or cycle == 0:
                f.spans.append([it, cycle, 1, position, self.digest])
                f.decisions += 1
            else:  # a gap: decisions this tracker did not see; the episode cannot be stamped
                f.spans.append([it, cycle, _GAP, position, self.digest])
                f.decisions += _GAP
        for entry in inferred:
            gslots, n_legal, actions, groups = entry[:4]
            place = entry[4] if len(entry) > 4 else None
            for i, size, k in forwarded_rows(n_legal, groups):
                if place is not None:  # a batched forward (collect.infer_rounds): its size, this row's place in it
                    size, k = place[1], place[0] + k
                s = int(gslots[i])
                f = self.battles.get(int(battle_ids[s // 2]))
                if f is not None:
                    f.choices[s % 2].append(InferredChoice(f.decisions - 1, size, k, int(actions[i])))
