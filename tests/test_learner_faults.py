"""The learner under faults (issue 12): a ghost rollout, a ladder that does not answer, a run
whose checkpoints do not verify, a torn last row, a disk that refuses every save."""

from __future__ import annotations

import time
import types

import msgspec
import pytest
import zmq
from prometheus_client import CollectorRegistry, Counter

from services.learner.collect import Collector
from services.learner.fleet import Fleet, Member
from services.learner.service import JOIN_WAIT_S, Learner
from shared import transport
from shared.config import load_config
from shared.messages import ProtocolError, Decoder, EngineBuild, Heartbeat, Hello, Rejoin, ToLearner, ToRollout
from tests.stack import free_ports

ENGINE = EngineBuild(engine_class="royalegym.rust_engine.RustEngine", calibration_digest="c", build_digest="b",
                     binary_sha256="e42383517b50bfe1", cards_digest="k", royalegym_version="0.1.25")


# ----------------------------------------------------------------------------- item 5: ghost rollouts


def test_forget_unready_forgets_only_members_past_the_deadline_that_never_said_ready():
    fleet = Fleet()
    now = 1000.0
    ghost = Member("ghost", b"g", 2, 1, "h", 1, registered=now - 31)
    slow = Member("slow", b"s", 2, 1, "h", 2, registered=now - 29)
    ready = Member("ready", b"r", 2, 1, "h", 3, registered=now - 500, ready=True)
    for m in (ghost, slow, ready):
        fleet.add(m)
    assert fleet.forget_unready(30.0, now) == [ghost]
    assert ghost.lost and not slow.lost and not ready.lost
    assert (fleet.forgotten_total, fleet.lost_total) == (1, 1)
    assert fleet.forget_unready(30.0, now) == []  # counted once
    assert fleet.forget_unready(30.0, now + 2) == [slow] and fleet.forgotten_total == 2
    assert [m.instance for m in fleet.arrange()] == ["ready"]


def _hello(client, instance: str, pid: int) -> None:
    transport.send(client, Hello(instance=instance, host="h", pid=pid, battles=2, shards=1, engine=ENGINE))


def test_a_boundary_does_not_wait_for_a_rollout_killed_while_building():
    """A rollout that said Hello and was killed before it said ready (a ghost): the boundary
    after its join wait forgets it (counted, said) and starts at once with the ready one;
    the ghost, should it speak again, is told to rejoin. Before the fix every boundary waited
    JOIN_WAIT_S (30 s) for it."""
    port = free_ports(1)[0]
    server = transport.bind_router(f"tcp://127.0.0.1:{port}")
    said: list[str] = []
    fleet = Fleet()
    collector = Collector(server, Decoder(ToLearner), fleet, lambda: None, ENGINE, said.append)
    live, ghost = (transport.connect_dealer(f"tcp://127.0.0.1:{port}") for _ in range(2))
    registry = CollectorRegistry()
    learner = types.SimpleNamespace(
        cfg=load_config({"profile": "tiny"}), fleet=fleet, collector=collector, stopping=False, first_iteration=False,
        min_rollouts=1, say=said.append,
        metrics=types.SimpleNamespace(rollouts_forgotten=Counter("forgotten", "x", registry=registry)))
    try:
        _hello(live, "live", 1)
        _hello(ghost, "ghost", 2)
        deadline = time.monotonic() + 10
        while len(fleet.members) < 2 and time.monotonic() < deadline:
            collector.poll(100, lambda *a: None)
        transport.send(live, Heartbeat(instance="live", state="ready"))
        while not fleet.members["live"].ready and time.monotonic() < deadline:
            collector.poll(100, lambda *a: None)
        fleet.members["ghost"].registered -= JOIN_WAIT_S + 1  # said Hello a join wait ago, never ready since
        t0 = time.monotonic()
        members = Learner.wait_for_rollouts(learner)
        waited = time.monotonic() - t0
        assert [m.instance for m in members] == ["live"]
        assert waited < 5.0, f"the boundary waited {waited:.1f} s for a ghost"
        assert fleet.forgotten_total == 1 and registry.get_sample_value("forgotten_total") == 1
        assert any(s.startswith("learner: forgot rollout ghost@h:2") for s in said), said
        # the ghost, alive after all, speaks: it is told to rejoin (and joins again, built).
        transport.send(ghost, Heartbeat(instance="ghost", state="ready"))
        collector.poll(500, lambda *a: None)
        assert ghost.poll(5000, zmq.POLLIN)
        replies = []
        while ghost.poll(200, zmq.POLLIN):
            try:
                replies.append(transport.recv(ghost, Decoder(ToRollout))[1])
            except ProtocolError:
                pass  # the Welcome of this test's learner is a stub (None)
        assert isinstance(replies[-1], Rejoin) and replies[-1].instance == "ghost"
    finally:
        for s in (live, ghost):
            s.close(0)
        server.close(0)
