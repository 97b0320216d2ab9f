"""Where each training episode's decisions were taken: the learner's stamp for ``royalefleet replay``.

A learner seat's action at cycle ``t`` of iteration ``i`` is the inverse-CDF sample, on uniform
``stream("act/iteration/{i}/cycle/{t}").random(R)[slot]``, of the actor's forward over the
shard-round's choice rows (services/learner/collect.py); a frozen seat's the same with stream
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


def choice_batches(n_legal: np.ndarray, groups: list | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(batch size, index in batch) of each row as ``shared.nn.policy.Policy.act`` forwards them:
    rows with more than the no-op legal (``n_legal > 1``), in row order, one batch per group
    (``groups[i]``: the snapshot id of row ``i``, as ``FrozenActors.play`` groups them; None:
    one batch). Rows that are not forwarded get (0, -1)."""
    n = len(n_legal)
    batch, index = np.zeros(n, np.int64), np.full(n, -1, np.int64)
    keys = [None] * n if groups is None else list(groups)
    for key in dict.fromkeys(keys):
        rows = [i for i in range(n) if keys[i] == key and n_legal[i] > 1]
        for k, i in enumerate(rows):
            batch[i], index[i] = len(rows), k
    return batch, index


@dataclass
class _InFlight:
    ordinal: int
    spans: list = field(default_factory=list)
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
            if f is None or f.ordinal != ep.ordinal or sum(s.decisions for s in f.spans) != ep.episode_steps:
                self.unstamped += 1
                continue
            seat = 0 if ep.seat == "blue" else 1
            ep.provenance = EpisodeProvenance(spans=list(f.spans), choices=list(f.choices[seat]))

    def observe(self, cycle: int, battle_ids: np.ndarray, slots: np.ndarray, ordinals: np.ndarray, restarted: bool,
                inferred: list[tuple[np.ndarray, np.ndarray, np.ndarray, list | None]]) -> None:
        """One shard-round's decisions at ``cycle`` (< T). ``battle_ids`` (n_battles,) global ids in
        slot order; ``slots`` the shard's global slots (local slot ``2 * i + seat``); ``ordinals``
        per local slot; ``restarted``: the shard's battles were (re)started for this round
        (a fresh member's cycle 0). ``inferred``: per forward kind (the learner's rows, the
        frozen rows), (global slots, legal counts, actions, snapshot id per row or None)."""
        for i in range(len(slots) // 2):
            position = int(slots[2 * i]) // 2
            b, k = int(battle_ids[position]), int(ordinals[2 * i])
            f = self.battles.get(b)
            if f is None or f.ordinal != k or restarted:
                f = self.battles[b] = _InFlight(k)
            last = f.spans[-1] if f.spans else None
            if last is not None and last.iteration == self.iteration and last.position == position \
                    and last.first_cycle + last.decisions == cycle:
                f.spans[-1] = DecisionSpan(last.iteration, last.first_cycle, last.decisions + 1, position, self.digest)
            elif last is None or cycle == 0:
                f.spans.append(DecisionSpan(self.iteration, cycle, 1, position, self.digest))
            else:  # a gap: decisions this tracker did not see; the episode cannot be stamped
                f.spans.append(DecisionSpan(self.iteration, cycle, 10**9, position, self.digest))
        for gslots, n_legal, actions, groups in inferred:
            if not len(gslots):
                continue
            batch, index = choice_batches(np.asarray(n_legal), groups)
            for s, bsz, idx, a in zip(gslots, batch, index, actions):
                if bsz == 0:
                    continue
                position, seat = int(s) // 2, int(s) % 2
                f = self.battles.get(int(battle_ids[position]))
                if f is not None:
                    decision = sum(sp.decisions for sp in f.spans) - 1
                    f.choices[seat].append(InferredChoice(decision, int(bsz), int(idx), int(a)))
