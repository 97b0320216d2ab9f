"""What a rollout's Hello may claim (services/learner/admission.py), and the learner's collector
refusing, counting and logging a Hello it cannot serve (issue 12, item 3)."""

from __future__ import annotations

import math

import pytest
import zmq
from prometheus_client import CollectorRegistry, Counter

from services.learner.admission import (
    MEMORY_SHARE, RECTANGLE_SLOT_BYTES, ROUND_OVERHEAD_BYTES, HelloLimits, plan_size, rectangle_bytes,
)
from services.learner.rounds import Collector
from services.learner.fleet import Fleet
from shared import transport
from shared.config import profile
from shared.matchmaking import MAX_PLAN_ASSIGNMENTS
from shared.messages import Decoder, EngineBuild, FromLadder, Hello, Refused, ToLearner, ToRollout

ENGINE = EngineBuild(engine_class="RustEngine", calibration_digest="cal", build_digest="bd",
                     binary_sha256="ab" * 32, cards_digest="cd", royalegym_version="0.1.25")
ROW_BYTES = 3000


def hello(battles: int, shards: int = 1, instance: str = "r1") -> Hello:
    return Hello(instance=instance, host="h", pid=1, battles=battles, shards=shards, engine=ENGINE)


def test_plan_size_is_the_learners_formula():
    cfg = profile("tiny")
    for n in (1, 2, 7, 16, 1000, 40_000):
        mirror = round(n * cfg.ladder.mix[0] / sum(cfg.ladder.mix))  # within one of role_counts' share
        cycles, rows, lookahead = plan_size(cfg, n)
        assert abs(rows - n - mirror) <= 1
        assert cycles == max(1, math.ceil(cfg.ppo.timesteps_per_iteration / rows))
        assert lookahead == math.ceil((cycles + 1) / min(10, cfg.env.max_steps or 10)) + 2
        assert rectangle_bytes(cfg, n, ROW_BYTES) == (cycles + 1) * 2 * n * (ROW_BYTES + RECTANGLE_SLOT_BYTES)


def test_absurd_battles_are_refused_naming_the_field_and_the_ladder_limit():
    cfg = profile("tiny")
    limits = HelloLimits(cfg, ROW_BYTES, memory_budget=None)
    text = limits.refusal(hello(50_000, 50), fleet_battles=0)
    _, _, lookahead = plan_size(cfg, 50_000)
    assert text == (f"Hello.battles=50000: the fleet would run 50000 battles, and their plan (50000 x lookahead "
                    f"{lookahead} = {50_000 * lookahead} assignments) is over the ladder's {MAX_PLAN_ASSIGNMENTS} "
                    f"per request (battles at most 1000000); the fleet runs 0 battles now: start this rollout with fewer")
    # the fleet's total counts: what fits alone does not fit beside an existing member
    fits = max(n for n in range(1000, 40_000, 1000) if n * plan_size(cfg, n)[2] <= MAX_PLAN_ASSIGNMENTS)
    assert fits == 33_000  # lookahead 3 at T = 1
    assert limits.refusal(hello(fits, 10), fleet_battles=0) is None
    assert limits.refusal(hello(fits + 1000, 10), fleet_battles=0).startswith("Hello.battles=34000: the fleet would run")
    assert "the fleet runs 30000 battles now" in limits.refusal(hello(fits, 10), fleet_battles=30_000)


def test_shape_shard_size_and_memory_are_refused_by_name():
    cfg = profile("tiny")
    limits = HelloLimits(cfg, ROW_BYTES, memory_budget=None)
    assert limits.refusal(hello(10, 3), 0) == "Hello.battles=10 must be a positive multiple of Hello.shards=3"
    assert limits.refusal(hello(0, 1), 0) == "Hello.battles=0 must be a positive multiple of Hello.shards=1"
    assert limits.refusal(hello(4, 0), 0) == "Hello.battles=4 must be a positive multiple of Hello.shards=0"
    # one shard of 6,000 battles: 4 x 6000 x 3000 bytes + overhead = 68.7 MiB > 64 MiB
    per_shard_most = ((cfg.services.max_message_mb << 20) - ROUND_OVERHEAD_BYTES) // (4 * ROW_BYTES)
    text = limits.refusal(hello(6000, 1), 0)
    assert text.startswith("Hello.battles=6000 in Hello.shards=1: a shard's round could carry 68.7 MiB, over "
                           "services.max_message_mb=64") and text.endswith(f"at most {per_shard_most} battles per shard (more shards)")
    assert limits.refusal(hello(per_shard_most, 1), 0) is None
    small = HelloLimits(cfg, ROW_BYTES, memory_budget=1 << 20)
    need = rectangle_bytes(cfg, 64, ROW_BYTES)
    assert need == 1_170_432 > 1 << 20
    assert small.refusal(hello(32, 4), 0) is None
    assert small.refusal(hello(64, 4), 0) == (
        "Hello.battles=64: the fleet would run 64 battles, whose iteration needs 1.1 MiB of rollout "
        f"memory, over this learner's budget of 1.0 MiB ({MEMORY_SHARE:.0%} of the memory available at start); "
        "start this rollout with fewer battles")
    assert HelloLimits.at_start(cfg, ROW_BYTES).refusal(hello(16, 2), 0) is None  # the shipped sizes pass


def test_the_collector_refuses_counts_and_logs_an_absurd_hello_and_keeps_serving():
    # Before: the Hello of 50,000 battles was registered, and the learner died at the boundary.
    ctx = zmq.Context()
    said: list[str] = []
    registry = CollectorRegistry()
    counter = Counter("refused", "", ["reason"], registry=registry)
    router = transport.bind_router("tcp://127.0.0.1:*", ctx=ctx)
    dealer = transport.connect_dealer(router.getsockopt_string(zmq.LAST_ENDPOINT), ctx=ctx)
    try:
        fleet = Fleet()
        collector = Collector(router, Decoder(ToLearner), fleet, lambda codec: pytest.fail("welcomed"), ENGINE,
                              said.append, counter, HelloLimits(profile("tiny"), ROW_BYTES, memory_budget=None))
        for k in range(5):
            assert transport.send(dealer, hello(50_000, 50, instance=f"big{k}\x1b[31m"))
        handled = 0
        while handled < 5:
            handled += collector.poll(5000, lambda *a: None)
        assert fleet.members == {}
        replies = []
        while dealer.poll(2000) and len(replies) < 5:
            _, reply, _ = transport.recv(dealer, Decoder(ToRollout))
            replies.append(reply)
        assert len(replies) == 5 and all(isinstance(r, Refused) for r in replies)
        assert replies[0].reason.startswith("Hello.battles=50000: the fleet would run 50000 battles")
        assert registry.get_sample_value("refused_total", {"reason": "hello"}) == 5
        assert len(said) == 1 and "\x1b" not in said[0] and "big0\\x1b[31m@h" in said[0]  # one line, escaped
    finally:
        dealer.close(0)
        router.close(0)
        ctx.term()
