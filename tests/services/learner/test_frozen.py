"""The learner's frozen-actor LRU (services/learner/frozen.py): capacity and eviction order,
the fp16 -> float32 upcast, refusal of a snapshot of another architecture naming the field,
load failures that never wait twice, the checkpoint fetcher's answers, and the metric keys."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
import torch
from torch import nn

from services.learner.frozen import (
    NOOP_REASONS, SPEC_DIGESTS, FrozenActors, FrozenStats, SnapshotUnavailable, check_spec, checkpoint_fetcher,
    frozen_metrics,
)
from shared import transport
from shared.messages import Error, NotFound, SnapshotLoaded
from shared.metric_schema import schema_key
from shared.nn.snapshot import ARCH_HINT
from shared.nn.statefiles import module_to_bytes

RUN = {"arch_digest": "a" * 16, "obs_digest": "b" * 16, "codec_table_digest": "c" * 16}


def linear(seed: int) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(3, 2)


def spec(**changes) -> bytes:
    return msgspec.json.encode({**RUN, "iteration": 4, "env_steps": 1000, "dtype": "float16", **changes})


class Store:
    """A fake checkpoint service: snapshot id -> (fp16 actor bytes, spec bytes); counts fetches."""

    def __init__(self, **snapshots):
        self.snapshots = snapshots
        self.fetches: list[str] = []

    def __call__(self, sid: str):
        self.fetches.append(sid)
        item = self.snapshots.get(sid)
        if isinstance(item, SnapshotUnavailable):
            raise item
        if item is None:
            raise SnapshotUnavailable("not_found", f"snapshot {sid}: no such snapshot")
        return item


def fp16_snapshot(seed: int, **spec_changes):
    return module_to_bytes(linear(seed).half()), spec(**spec_changes)


def actors(store, capacity=2, lines=None):
    return FrozenActors(capacity, store, lambda: nn.Linear(3, 2), RUN, codec=None, device=torch.device("cpu"),
                        say=(lines.append if lines is not None else lambda s: None))


def test_the_lru_holds_at_most_capacity_and_evicts_the_least_recently_used():
    store = Store(**{k: fp16_snapshot(i) for i, k in enumerate("abcd")})
    lru = actors(store, capacity=2)
    lru.get("a"), lru.get("b"), lru.get("a")   # a is now the most recently used
    assert lru.resident == ["b", "a"] and (lru.loads, lru.hits) == (2, 1)
    lru.get("c")                                # evicts b, the least recently used
    assert lru.resident == ["a", "c"]
    lru.get("b")                                # b is loaded again: a miss, and a goes
    assert lru.resident == ["c", "b"]
    assert store.fetches == ["a", "b", "c", "b"]
    assert (lru.loads, lru.hits, lru.load_failures) == (4, 1, 0)
    for k in "abcd":
        lru.get(k)
        assert len(lru.resident) <= 2
    lru.new_iteration()
    assert (lru.loads, lru.hits, lru.load_failures) == (0, 0, 0) and lru.resident == ["c", "d"]


def test_a_capacity_below_one_or_missing_digests_are_refused():
    with pytest.raises(ValueError, match="capacity 0: must be >= 1"):
        FrozenActors(0, Store(), nn.Module, RUN, None, "cpu")
    with pytest.raises(ValueError, match=r"lack \['codec_table_digest'\]"):
        FrozenActors(1, Store(), nn.Module, {k: RUN[k] for k in SPEC_DIGESTS[:2]}, None, "cpu")


def test_the_actor_is_the_fp16_weights_upcast_to_float32_and_frozen():
    source = linear(7)
    store = Store(a=(module_to_bytes(source.half()), spec()))
    actor = actors(store).get("a").model.actor
    assert actor.weight.dtype == torch.float32 and not actor.weight.requires_grad and not actor.training
    # Exactly the fp16 values (fp16 -> fp32 is exact), not the float32 ones before the halving.
    assert torch.equal(actor.weight, source.weight.half().float())


@pytest.mark.parametrize("field", SPEC_DIGESTS)
def test_a_digest_mismatch_is_refused_naming_the_field(field):
    lines: list[str] = []
    store = Store(a=fp16_snapshot(0, **{field: "f" * 16}))
    lru = actors(store, lines=lines)
    with pytest.raises(SnapshotUnavailable) as info:
        lru.get("a")
    assert info.value.reason == "digest_mismatch"
    hint = ARCH_HINT if field == "arch_digest" else ""
    assert str(info.value) == (f"snapshot a: spec {field} is {'f' * 16!r}, this run's is {RUN[field]!r}{hint}; a snapshot "
                               "of another architecture, observation layout or codec cannot play in this run "
                               "(remove it from the pool)")
    assert lru.resident == [] and lru.load_failures == 1
    assert lines == [f"learner: snapshot a cannot play this iteration (digest_mismatch): {info.value}"]


def test_a_spec_without_a_digest_is_refused_naming_it():
    doc = {**RUN}
    del doc["obs_digest"]
    with pytest.raises(SnapshotUnavailable, match="spec obs_digest is None, this run's is 'bbbbbbbbbbbbbbbb'"):
        check_spec("s", msgspec.json.encode(doc), RUN)
    with pytest.raises(SnapshotUnavailable, match="spec.json is not a JSON object") as info:
        check_spec("s", b"[1, 2]", RUN)
    assert info.value.reason == "bad_weights"


def test_a_load_failure_is_remembered_for_the_iteration_and_retried_after():
    store = Store(a=SnapshotUnavailable("timeout", "snapshot a: checkpoint service did not answer within 30 s"))
    lru = actors(store)
    for _ in range(3):
        with pytest.raises(SnapshotUnavailable, match="did not answer within 30 s"):
            lru.get("a")
    assert store.fetches == ["a"]          # one deadline per iteration, never one per round
    assert lru.load_failures == 1
    store.snapshots["a"] = fp16_snapshot(0)
    lru.new_iteration()                     # the service is back: asked again
    lru.get("a")
    assert store.fetches == ["a", "a"] and lru.resident == ["a"] and lru.loads == 1


def test_weights_of_another_shape_are_bad_weights():
    store = Store(a=(module_to_bytes(nn.Linear(4, 2).half()), spec()))
    with pytest.raises(SnapshotUnavailable, match="does not load into this run's architecture") as info:
        actors(store).get("a")
    assert info.value.reason == "bad_weights"
    # float32 weights are refused too: the snapshot format is fp16.
    store = Store(a=(module_to_bytes(nn.Linear(3, 2)), spec()))
    with pytest.raises(SnapshotUnavailable, match="holds torch.float32, the module has torch.float16"):
        actors(store).get("a")


def test_prefetch_never_raises_and_play_names_why_a_seat_played_the_noop():
    store = Store(bad=fp16_snapshot(0, arch_digest="x"))
    lru = actors(store)
    lru.prefetch(["missing", "bad", "missing"])
    assert store.fetches == ["missing", "bad"] and lru.load_failures == 2
    rows = np.zeros((3, 4), np.uint8)
    acts, reasons = lru.play(["missing", None, "bad"], rows, np.full(3, 5), np.zeros(3))
    assert acts.tolist() == [0, 0, 0]
    assert reasons == ["not_found", "no_assignment", "digest_mismatch"]
    assert store.fetches == ["missing", "bad"]  # remembered: no second fetch
    assert set(reasons) <= set(NOOP_REASONS)


class FakeClient:
    def __init__(self, reply):
        self.reply = reply
        self.sent = []

    def next_id(self):
        return 7

    def request(self, body, arrays=None, *, timeout_s=None):
        self.sent.append((body, timeout_s))
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


def test_the_checkpoint_fetcher_maps_every_answer():
    actor = np.frombuffer(b"weights", np.uint8)
    ok = FakeClient((SnapshotLoaded(request_id=7, snapshot_id="s", spec=b"{}"), {"actor": actor}))
    assert checkpoint_fetcher(ok, "run", 2.5)("s") == (b"weights", b"{}")
    body, timeout = ok.sent[0]
    assert (body.run_name, body.snapshot_id, timeout) == ("run", "s", 2.5)
    cases = [
        (FakeClient((NotFound(request_id=7, reason="run 'run' has no snapshot s"), {})), "not_found",
         "snapshot s: run 'run' has no snapshot s; is it in runs/run/snapshots/?"),
        (FakeClient((Error(request_id=7, reason="corrupt index"), {})), "refused",
         "snapshot s: the checkpoint service refused it: corrupt index"),
        (FakeClient(transport.ServiceTimeout("checkpoint service at tcp://x did not answer within 2 s")), "timeout",
         "snapshot s: checkpoint service at tcp://x did not answer within 2 s"),
    ]
    for client, reason, text in cases:
        with pytest.raises(SnapshotUnavailable) as info:
            checkpoint_fetcher(client, "run", 2.0)("s")
        assert (info.value.reason, str(info.value)) == (reason, text)


def test_frozen_metrics_by_hand_and_in_the_schema():
    stats = FrozenStats(rows=10, seconds=0.25)
    stats.noop("timeout", 3, 1)
    stats.noop("timeout", 3, 1)
    stats.noop("no_assignment", 5, 0)
    lru = actors(Store(a=fp16_snapshot(0)))
    lru.get("a"), lru.get("a")
    row = frozen_metrics(stats, lru, episodes_unreported=4)
    assert row == {
        "time/frozen_inference": 0.25, "health/frozen_rows": 10, "health/frozen_noop_rows": 3,
        "health/frozen_noop_rows_by_reason/no_assignment": 1, "health/frozen_noop_rows_by_reason/timeout": 2,
        "health/frozen_episodes_unreported": 4, "health/frozen_loads": 1, "health/frozen_hits": 1,
        "health/frozen_load_failures": 0, "health/frozen_resident": 1,
    }
    assert stats.tainted == {(3, 1), (5, 0)}
    assert [k for k in row if schema_key(k) is None] == []


def test_the_learner_keeps_each_episode_s_assignment_as_the_rollout_applies_it():
    """Which snapshot holds a frozen seat: a running battle keeps the assignment of the episode
    in flight even if a later plan answers differently (the pool changed); a restarted battle
    takes the new one; finished episodes and battles nobody runs are dropped."""
    from services.learner.fleet import Fleet, Member
    from shared.messages import Assignment

    fleet = Fleet()
    running = Member("r", b"r", 2, 1, "h", 1, battle_ids=[0, 1], active=True, fresh=False)
    fresh = Member("f", b"f", 1, 1, "h", 2, battle_ids=[2], active=True, fresh=True)
    first = [Assignment(b, k, "pool", f"snap:{b}{k}old", 0) for b in (0, 1, 2, 9) for k in (3, 4, 5)]
    fleet.record_plan([running, fresh], first)
    fleet.ordinal.update({0: 4, 1: 3, 2: 4})  # battles 0 and 2 moved on to ordinal 4
    second = [Assignment(b, k, "pool", f"snap:{b}{k}new", 0) for b in (0, 1, 2) for k in (3, 4, 5, 6)]
    fleet.record_plan([running, fresh], second)
    got = {k: a.opponent for k, a in fleet.assignments.items()}
    assert got == {
        (0, 4): "snap:04old", (0, 5): "snap:05new", (0, 6): "snap:06new",   # in flight: kept
        (1, 3): "snap:13old", (1, 4): "snap:14new", (1, 5): "snap:15new", (1, 6): "snap:16new",
        (2, 4): "snap:24new", (2, 5): "snap:25new", (2, 6): "snap:26new",   # restarted: the new one
    }
    assert fleet.assignment(0, 4).opponent == "snap:04old" and fleet.assignment(9, 3) is None


def test_a_boundary_loads_the_snapshots_in_flight_first_up_to_the_lru_size():
    from services.learner.fleet import Fleet, Member
    from services.learner.frozen import plan_snapshots
    from shared.messages import Assignment

    fleet = Fleet()
    m = Member("r", b"r", 3, 1, "h", 1, battle_ids=[0, 1, 2], active=True, fresh=True)
    plan = [Assignment(0, 0, "pool", "snap:zz", 0), Assignment(0, 1, "pool", "snap:aa", 0),
            Assignment(1, 0, "scripted", "scripted:noop", 1), Assignment(1, 1, "pool", "snap:mm", 1),
            Assignment(2, 0, "mirror", "learner", -1), Assignment(2, 1, "pool", "snap:zz", 0)]
    fleet.record_plan([m], plan)
    assert plan_snapshots(fleet, [0, 1, 2], 4) == ["zz", "aa", "mm"]   # zz is in flight (ordinal 0)
    assert plan_snapshots(fleet, [0, 1, 2], 2) == ["zz", "aa"]
    assert plan_snapshots(fleet, [1, 2], 4) == ["mm", "zz"]           # battle 0 not in this iteration
