"""The rows a clone trains on, read from demonstration sets (shared/demos.py).

Of every shard only what training uses is kept in memory, as the shard is read:

* choice rows (more than the no-op legal) whose teacher action is legal under the row's mask:
  the actor's rows, and the critic's. A choice row whose action our mask refuses is left out
  and COUNTED (``illegal_left_out``): its cross-entropy would be infinite.
* forced rows (only the no-op legal: ~93 % of a set): nothing for the actor (their
  log-probability is 0 whatever the weights). For the critic one in ``forced_stride`` of them is
  kept (by decision index), so the critic sees the waiting states too without their weight.

Validation is split by battle (stream ``clone/split``): every row of a battle is on one side.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shared.demos import DemoDigests, DemoManifest, read_manifest, read_shard, refuse_digests
from shared.search.halving import pick_scores

VALIDATION_FRACTION = 0.1
"""The share of battles held out for validation and early stopping (at least one battle)."""


@dataclass
class CloneRows:
    """Rows kept for training, one entry per row (n rows)."""

    observations: np.ndarray  # (n, row_bytes) uint8
    actions: np.ndarray  # (n,) int64, head frame
    returns: np.ndarray  # (n,) float32
    battles: np.ndarray  # (n,) int64: (set index << 32) + battle id, a battle's key across sets
    choice: np.ndarray  # (n,) bool: an actor row
    illegal_left_out: int
    forced_rows: int
    manifests: list[DemoManifest]
    search_actions: np.ndarray | None = None
    """(n, K) int64: the candidates a searching teacher chose among (``search_choices``), -1
    padding; None when no set was searched."""
    search_scores: np.ndarray | None = None
    """(n, K) float32: each candidate's score under the teacher's pick rule, -inf padding."""

    def take(self, index: np.ndarray) -> CloneRows:
        search = {} if self.search_actions is None else dict(search_actions=self.search_actions[index],
                                                              search_scores=self.search_scores[index])
        return CloneRows(self.observations[index], self.actions[index], self.returns[index], self.battles[index],
                         self.choice[index], self.illegal_left_out, self.forced_rows, self.manifests, **search)

    @property
    def digest(self) -> str:
        """The demonstrations' digest: sha256 (16 hex) of the sets' digests in order."""
        import hashlib

        return hashlib.sha256(",".join(m.digest for m in self.manifests).encode()).hexdigest()[:16]


def resolve_set(name: str, demos_root: Path) -> Path:
    """A set by name (a folder under the run's ``demos/``) or by path. Raises FileNotFoundError
    naming both places looked in and the run's sets."""
    for candidate in (demos_root / name, Path(name)):
        if candidate.is_dir():
            return candidate
    have = sorted(p.name for p in demos_root.iterdir() if p.is_dir()) if demos_root.is_dir() else []
    raise FileNotFoundError(f"no demonstration set {name!r} under {demos_root} nor at that path; this run has: "
                            f"{', '.join(have) if have else 'none (royalefleet demos record)'}")


def load_rows(folders: list[Path], digests: DemoDigests, survivors_only: bool = True) -> CloneRows:
    """The training rows of every set in ``folders``, with a searching teacher's candidates and
    scores (``search_choices``; ``survivors_only`` passed on) where a set kept them. Raises
    DemosError (a digest that differs from the run's, named by field; a shard that does not
    verify)."""
    parts, manifests, illegal, forced_total, searched = [], [], 0, 0, []
    for k, folder in enumerate(folders):
        m = read_manifest(folder)
        refuse_digests(str(folder), m.digests, digests)
        manifests.append(m)
        stride = max(1, round(m.forced_rows / max(m.choice_rows, 1)))
        for s in m.shards:
            a = read_shard(folder / s.file, s.sha256, digests)
            choice = ~a["forced"]
            illegal += int((choice & ~a["action_legal"]).sum())
            forced_total += int(a["forced"].sum())
            keep = (choice & a["action_legal"]) | (a["forced"] & (a["decisions"] % stride == 0))
            parts.append((a["observations"][keep], a["actions"][keep], a["returns"][keep],
                          (np.int64(k) << 32) + a["battles"][keep], choice[keep]))
            kept = np.flatnonzero(keep)
            searched.append(search_choices(a, kept, survivors_only) if "search_offsets" in a else len(kept))
    cols = [np.concatenate([p[i] for p in parts]) for i in range(5)]
    search = {}
    if any(not isinstance(x, int) for x in searched):
        width = max(x[0].shape[1] for x in searched if not isinstance(x, int))
        acts, scores = zip(*(_padded(x, width) for x in searched))
        search = dict(search_actions=np.concatenate(acts), search_scores=np.concatenate(scores))
    return CloneRows(*cols, illegal_left_out=illegal, forced_rows=forced_total, manifests=manifests, **search)


def search_choices(arrays: dict[str, np.ndarray], rows: np.ndarray, survivors_only: bool = True
                   ) -> tuple[np.ndarray, np.ndarray]:
    """((r, K) int64 candidates, (r, K) float32 scores) of ``rows`` of a shard's arrays with
    ``shared.demos.SEARCH_ARRAYS``, scored as the teacher's pick rule scores them
    (``shared.search.halving.pick``: the mean, its own pick's raised by ``keep``). With
    ``survivors_only`` the candidates are those the rule chose among (the survivors of sequential
    halving: those with the most playouts), so the best score is the teacher's move; else every
    candidate searched (a loser's mean is of fewer playouts). K is the most candidates of a row;
    padding is -1 and -inf, and a row that was not searched is all padding."""
    off = arrays["search_offsets"]
    chosen = []
    for r in rows:
        lo, hi = int(off[r]), int(off[r + 1])
        if hi == lo:
            chosen.append(None)
            continue
        alive, means = pick_scores(arrays["search_means"][lo:hi].astype(np.float32), arrays["search_visits"][lo:hi],
                                   arrays["search_keep"][r])
        kept = alive if survivors_only else np.ones(hi - lo, bool)
        chosen.append((arrays["search_actions"][lo:hi][kept], means[kept]))
    width = max([1] + [len(c[0]) for c in chosen if c is not None])
    acts = np.full((len(rows), width), -1, np.int64)
    scores = np.full((len(rows), width), -np.inf, np.float32)
    for i, c in enumerate(chosen):
        if c is not None:
            acts[i, :len(c[0])], scores[i, :len(c[0])] = c
    return acts, scores


def _padded(x, width: int) -> tuple[np.ndarray, np.ndarray]:
    """``search_choices``' pair widened to ``width`` columns; an int n: n rows of padding."""
    if isinstance(x, int):
        return np.full((x, width), -1, np.int64), np.full((x, width), -np.inf, np.float32)
    acts, scores = x
    pad = width - acts.shape[1]
    return (np.pad(acts, ((0, 0), (0, pad)), constant_values=-1),
            np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf))


def split_by_battle(rows: CloneRows, master_seed: int, fraction: float = VALIDATION_FRACTION):
    """(train, validation): a ``fraction`` of the battles (at least one, and at least one left
    to train on), drawn from stream ``clone/split``. Raises ValueError with fewer than 2 battles."""
    from shared.seeding import stream

    keys = np.unique(rows.battles)
    if len(keys) < 2:
        raise ValueError(f"{len(keys)} battle(s) in the demonstrations: a split by battle needs at least 2")
    n_val = min(len(keys) - 1, max(1, int(round(fraction * len(keys)))))
    held = stream(master_seed, "clone/split").permutation(keys)[:n_val]
    val = np.isin(rows.battles, held)
    return rows.take(np.flatnonzero(~val)), rows.take(np.flatnonzero(val))


def first_slot_share(rows: CloneRows, codec, hand_slots: int) -> tuple[float, int]:
    """(share, n): of the choice rows where the teacher played a card while two or more hand
    slots had a legal tile (n of them), the share on which it played the lowest such slot.
    RoyaleGym's rungs always do (share 1.0); a player indifferent to hand order would do so on
    about 1 / (playable slots) of them. (0.0, 0) without such rows.

    The action encoding is ``shared.envs.ObsSpec``'s: 0 the no-op, then ``1 + slot * H * W +
    tile`` (``codec.table``'s height and width)."""
    obs = rows.observations[rows.choice]
    actions = rows.actions[rows.choice]
    if not len(actions):
        return 0.0, 0
    hw = codec.table.height * codec.table.width
    grid = 1 + hand_slots * hw
    mask = np.unpackbits(obs[:, codec.omask:], axis=1, count=grid, bitorder="little").astype(bool)
    playable = mask[:, 1:].reshape(len(actions), hand_slots, hw).any(axis=2)  # (n, P)
    played = (actions >= 1) & (actions < grid)
    considered = played & (playable.sum(axis=1) >= 2)
    if not considered.any():
        return 0.0, 0
    first = playable[considered].argmax(axis=1)
    slot = (actions[considered] - 1) // hw
    return float(np.mean(slot == first)), int(considered.sum())
