"""Frozen pool snapshots playing their seats: an LRU of loaded actors, and their inference.

A pool battle's opponent seat (``GROUP_FROZEN``, shared.messages) is played by a snapshot
``snap:<id>``: the learner infers its action here, with that snapshot's actor, and never trains
on its rows (the reference's ``discard_opponent_rows``, royalelearn-facts 4).

* **Loading.** A snapshot is fetched from the checkpoint service (``LoadSnapshot``; the store
  verifies the bytes against the content id), then checked and loaded by ``shared.nn.snapshot``
  (the evaluator's loader too): its spec must hold every digest in ``SPEC_DIGESTS`` equal to the
  run's, or it is refused naming the field, and its fp16 weights (``PoolClient.snapshot_actor`` in
  services/learner/pool_client.py) are loaded into an actor of the run's architecture.
* **Residency.** At most ``capacity`` actors are held, least recently used evicted first
  (``ladder.pool.max_resident_opponents + 2``: the reference's loaded-policy LRU,
  royalelearn-facts 6.2). Each is held already upcast to float32 on the learner's device: the
  values are exactly the fp16 weights (fp16 -> fp32 is exact), and one upcast copy per load
  saves one per round.
* **Inference.** ``shared.nn.policy.Policy.act``, the live policy's own masked-distribution
  sampling (forced rows skip the forward; inverse CDF on the caller's uniforms), so a frozen
  seat is as deterministic as a learner seat: the collector draws its uniforms from stream
  ``act/frozen/iteration/{i}/cycle/{t}``, indexed by slot.
* **Failure.** A snapshot that cannot be loaded (not found, refused, the deadline passed, a
  digest mismatch, bad weights) raises ``SnapshotUnavailable`` and is remembered as unavailable
  until the next iteration (``new_iteration``): one deadline per snapshot per iteration at
  most, never a wait per round. What the collector does then: see ``FrozenStats``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from shared.nn import snapshot as snapshots
from shared.nn.snapshot import SPEC_DIGESTS

NOOP_REASONS = ("not_found", "refused", "timeout", "digest_mismatch", "bad_weights", "no_assignment", "no_actors")
"""Why a frozen seat played the no-op instead of its snapshot (``FrozenStats.noop_rows``)."""


class SnapshotUnavailable(Exception):
    """A snapshot cannot play. ``reason`` is one of NOOP_REASONS; the text names the snapshot,
    what was wrong and what to do."""

    def __init__(self, reason: str, text: str):
        self.reason = reason
        super().__init__(text)


def check_spec(snapshot_id: str, spec: bytes, expected: dict[str, str]) -> dict:
    """The decoded spec of ``snapshot_id`` (``shared.nn.snapshot.check_spec``), or
    SnapshotUnavailable: "digest_mismatch" naming every field of ``expected`` it lacks or holds
    differently, "bad_weights" for a spec that is not a JSON object or names another dtype."""
    try:
        return snapshots.check_spec(snapshot_id, spec, expected)
    except snapshots.SnapshotSpecError as exc:
        if exc.digest_mismatch:
            raise SnapshotUnavailable(
                "digest_mismatch", f"{exc}; a snapshot of another architecture, observation layout or codec "
                "cannot play in this run (remove it from the pool)") from None
        raise SnapshotUnavailable("bad_weights", str(exc)) from None


class FrozenActors:
    """The LRU of frozen actors and their inference (see the module docstring).

    Args:
        capacity: most actors held (>= 1).
        fetch: snapshot id -> (actor.safetensors bytes, spec.json bytes); raises
            SnapshotUnavailable (see ``checkpoint_fetcher``).
        build: () -> an empty actor of the run's architecture on the CPU (float32; weights are
            overwritten): ``shared.nn.snapshot.actor_builder``.
        expected: spec field -> the run's value, for every field of SPEC_DIGESTS.
        codec: the run's ``shared.codec.Codec`` (rows are packed with it).
        device: the learner's torch device.
    """

    def __init__(self, capacity: int, fetch: Callable[[str], tuple[bytes, bytes]], build: Callable[[], object],
                 expected: dict[str, str], codec, device, say=print):
        if capacity < 1:
            raise ValueError(f"frozen actor capacity {capacity}: must be >= 1")
        missing = [k for k in SPEC_DIGESTS if k not in expected]
        if missing:
            raise ValueError(f"expected digests lack {missing}; give every field of SPEC_DIGESTS")
        self.capacity, self.fetch, self.build, self.expected = capacity, fetch, build, dict(expected)
        self.codec, self.device, self.say = codec, device, say
        self._resident: OrderedDict[str, object] = OrderedDict()  # id -> Policy, least recently used first
        self._failed: dict[str, SnapshotUnavailable] = {}
        self.loads = self.hits = self.load_failures = 0
        """This iteration's counts (reset by ``new_iteration``): actors loaded, lookups served
        from the LRU, and loads that failed."""

    @property
    def resident(self) -> list[str]:
        """Snapshot ids held, least recently used first."""
        return list(self._resident)

    def counts(self) -> FrozenCounts:
        """The load counts now (a collection's, kept before an overlapped boundary resets them)."""
        return FrozenCounts(self.loads, self.hits, self.load_failures, self.resident)

    def new_iteration(self) -> None:
        """Reset the counts, and forget the failures: a snapshot refused last iteration is asked
        for again (the checkpoint service may be back)."""
        self.loads = self.hits = self.load_failures = 0
        self._failed.clear()

    def get(self, snapshot_id: str):
        """The ``Policy`` of one snapshot's actor (float32, on the device), loading it if it is
        not resident. Raises SnapshotUnavailable (remembered for the rest of the iteration)."""
        if snapshot_id in self._resident:
            self._resident.move_to_end(snapshot_id)
            self.hits += 1
            return self._resident[snapshot_id]
        if snapshot_id in self._failed:
            raise self._failed[snapshot_id]
        try:
            policy = self._load(snapshot_id)
        except SnapshotUnavailable as exc:
            self.load_failures += 1
            self._failed[snapshot_id] = exc
            self.say(f"learner: snapshot {snapshot_id} cannot play this iteration ({exc.reason}): {exc}")
            raise
        self.loads += 1
        self._resident[snapshot_id] = policy
        while len(self._resident) > self.capacity:
            self._resident.popitem(last=False)
        return policy

    def _load(self, snapshot_id: str):
        from shared.nn.policy import Policy

        actor_bytes, spec = self.fetch(snapshot_id)
        check_spec(snapshot_id, spec, {k: self.expected[k] for k in SPEC_DIGESTS})
        try:
            actor = snapshots.load_frozen_actor(snapshot_id, actor_bytes, self.build, self.device)
        except snapshots.SnapshotWeightsError as exc:
            raise SnapshotUnavailable("bad_weights", str(exc)) from None
        return Policy(snapshots.ActorOnly(actor), self.codec, self.device)

    def prefetch(self, snapshot_ids) -> None:
        """Load the listed snapshots now (at a boundary, so the collection meets no load);
        failures are remembered and printed, never raised."""
        for sid in dict.fromkeys(snapshot_ids):
            try:
                self.get(sid)
            except SnapshotUnavailable:
                pass

    def play(self, snapshot_ids: list[str | None], rows: np.ndarray, n_legal: np.ndarray,
             uniforms: np.ndarray, history=None) -> tuple[np.ndarray, list[str | None]]:
        """Actions for frozen seats: row ``i`` (packed, uint8 (B, row_bytes)) is played by
        snapshot ``snapshot_ids[i]`` with uniform ``uniforms[i]`` (float64, (B,)); ``n_legal``
        (B,) int are its legal-action counts; ``history`` the rows' ``shared.nn.frame_stack.History``
        under frame stacking (None otherwise). Rows are grouped by snapshot (in sorted id order,
        each group in row order), so a batch depends on the rows, not on arrival.

        Returns (actions (B,) int64, per row None or the reason it played the no-op instead:
        ``no_assignment`` for a None id, else the load failure's reason)."""
        actions = np.zeros(len(rows), np.int64)
        reasons: list[str | None] = [None] * len(rows)
        by_id: dict[str, list[int]] = {}
        for i, sid in enumerate(snapshot_ids):
            if sid is None:
                reasons[i] = "no_assignment"
            else:
                by_id.setdefault(sid, []).append(i)
        for sid in sorted(by_id):
            idx = np.asarray(by_id[sid])
            try:
                policy = self.get(sid)
            except SnapshotUnavailable as exc:
                for i in idx.tolist():
                    reasons[i] = exc.reason
                continue
            a, _ = policy.act(rows[idx], n_legal[idx], uniforms[idx], None if history is None else history.take(idx))
            actions[idx] = a
        return actions, reasons


@dataclass
class FrozenStats:
    """One iteration's frozen seats, as the collector saw them.

    A seat whose snapshot cannot play plays the no-op instead, counted here by reason. Chosen
    over failing the battle because a failed battle would also void the LEARNER's seat (its
    cells invalid, the rectangle short) for a fault of the opponent's, and the no-op is always
    legal, so the battle goes on and nothing waits. But the episode is then not a game against
    that snapshot: ``tainted`` lists its (battle, ordinal), and the learner keeps those
    episodes out of the result log, where they would misstate the snapshot's strength (PFSP
    and the ratings read it)."""

    rows: int = 0
    """Frozen-seat rows received and answered (inferred or no-op), cycles 0..T-1."""
    seconds: float = 0.0
    noop_rows: dict[str, int] = field(default_factory=dict)
    tainted: set[tuple[int, int]] = field(default_factory=set)

    def noop(self, reason: str, battle: int, ordinal: int) -> None:
        self.noop_rows[reason] = self.noop_rows.get(reason, 0) + 1
        self.tainted.add((battle, ordinal))


class FrozenCounts(NamedTuple):
    """``FrozenActors``' load counts at one moment (``FrozenActors.counts``)."""

    loads: int
    hits: int
    load_failures: int
    resident: list[str]


def frozen_metrics(stats: FrozenStats, actors: FrozenActors | FrozenCounts | None, episodes_unreported: int) -> dict:
    """The iteration's frozen-seat keys of the metric row (shared/metric_schema.py); ``actors``
    (the actors or their counts) adds the load counts."""
    row = {
        "time/frozen_inference": stats.seconds,
        "health/frozen_rows": stats.rows,
        "health/frozen_noop_rows": sum(stats.noop_rows.values()),
        "health/frozen_episodes_unreported": episodes_unreported,
    }
    for reason, n in sorted(stats.noop_rows.items()):
        row[f"health/frozen_noop_rows_by_reason/{reason}"] = n
    if actors is not None:
        row.update({"health/frozen_loads": actors.loads, "health/frozen_hits": actors.hits,
                    "health/frozen_load_failures": actors.load_failures,
                    "health/frozen_resident": len(actors.resident)})
    return row


def plan_snapshots(fleet, battles: list[int], limit: int) -> list[str]:
    """The snapshot ids a boundary should load, at most ``limit``: those holding a seat in the
    episode each battle is in now (``fleet.ordinal``), then those of its later planned
    episodes, each list in sorted order. ``fleet`` is a ``services.learner.fleet.Fleet`` whose
    plan is recorded."""
    from shared.messages import snapshot_of

    now: set[str] = set()
    later: set[str] = set()
    listed = set(battles)
    for (b, k), a in fleet.assignments.items():
        sid = snapshot_of(a.opponent)
        if sid is not None and b in listed:
            (now if k == fleet.ordinal.get(b, 0) else later).add(sid)
    return (sorted(now) + sorted(later - now))[:limit]


def checkpoint_fetcher(client, run_name: str, timeout_s: float) -> Callable[[str], tuple[bytes, bytes]]:
    """``fetch`` for FrozenActors over the checkpoint service: ``LoadSnapshot`` with a deadline
    of ``timeout_s``. ``client`` is a ``shared.transport.Client`` decoding ``FromCheckpoint``."""
    from shared import transport
    from shared.messages import LoadSnapshot, NotFound, SnapshotLoaded

    def fetch(snapshot_id: str) -> tuple[bytes, bytes]:
        try:
            reply, arrays = client.request(LoadSnapshot(request_id=client.next_id(), run_name=run_name,
                                                        snapshot_id=snapshot_id), timeout_s=timeout_s)
        except transport.ServiceTimeout as exc:
            raise SnapshotUnavailable("timeout", f"snapshot {snapshot_id}: {exc}") from None
        if isinstance(reply, SnapshotLoaded) and "actor" in arrays:
            return bytes(arrays["actor"]), reply.spec
        if isinstance(reply, NotFound):
            raise SnapshotUnavailable("not_found", f"snapshot {snapshot_id}: {reply.reason}; is it in "
                                      f"runs/{run_name}/snapshots/?")
        raise SnapshotUnavailable("refused", f"snapshot {snapshot_id}: the checkpoint service refused it: "
                                  f"{getattr(reply, 'reason', reply)}")

    return fetch
