"""The rollout's mid-step requests (alphazero.leaf_value "critic", sim_opponent "battle"): it
sends its search's leaves in a ``LeafQuery`` and waits for the ``LeafValues`` of the same
(iteration, cycle, shard); a ``SimActQuery`` waits for the ``SimActions`` of its seq; what
else arrives meanwhile (another shard's Step, a stale answer) waits in its backlog, in order; a
Close ends the wait at once; no answer ends it after ``rollout.round_timeout_s`` with an error
naming the step. Over a real ROUTER on loopback."""

from __future__ import annotations

import threading
import numpy as np
import pytest

from services.rollout.mid_step import MidStepTimeout, Stopping
from services.rollout.service import RolloutService
from shared import transport
from shared.messages import Close, Decoder, LeafQuery, LeafValues, SimActions, SimActQuery, Step, ToLearner

ROWS = np.arange(10, dtype=np.uint8).reshape(2, 5)


@pytest.fixture
def pair():
    router = transport.bind_router("tcp://127.0.0.1:*")
    address = router.getsockopt_string(transport.zmq.LAST_ENDPOINT)
    rollout = RolloutService(address, battles=2, shards=1, say=lambda line: None)
    yield router, rollout
    rollout.close()
    router.close(linger=0)


def _ask(rollout):
    out = {}

    def run():
        try:
            query = LeafQuery(instance=rollout.instance, iteration=3, cycle=4, shard=1)
            out["q"] = rollout.mid_step.ask(query, ROWS, np.array([0.5, -1.0]), np.array([0.9, 0.0]), 1.0,
                                                lambda: False)
        except Exception as exc:  # noqa: BLE001  (handed to the test thread)
            out["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def _query(router):
    assert router.poll(5000)
    identity, body, arrays = transport.recv(router, Decoder(ToLearner), router=True)
    return identity, body, arrays


def test_the_answer_of_its_own_step_ends_the_wait_and_the_rest_waits_in_order(pair):
    router, rollout = pair
    thread, out = _ask(rollout)
    identity, body, arrays = _query(router)
    assert isinstance(body, LeafQuery) and (body.iteration, body.cycle, body.shard) == (3, 4, 1)
    m = rollout.metrics  # the question is outstanding: what royalefleet chaos aims its kills at
    assert (m.mid_step_questions._value.get(), m.mid_step_waiting._value.get()) == (1, 1)
    np.testing.assert_array_equal(arrays["leaf_rows"], ROWS)
    assert arrays["leaf_return"].tolist() == [0.5, -1.0] and arrays["leaf_discount"].tolist() == [0.9, 0.0]
    other = Step(iteration=3, cycle=4, shard=0)
    transport.send(router, other, {"actions": np.zeros(4, np.int16)}, identity=identity)
    stale = LeafValues(iteration=3, cycle=3, shard=1)
    transport.send(router, stale, {"leaf_q": np.zeros(2, np.float32)}, identity=identity)
    transport.send(router, LeafValues(iteration=3, cycle=4, shard=1), {"leaf_q": np.array([1.5, -2.0], np.float32)},
                   identity=identity)
    thread.join(5)
    assert "error" not in out and out["q"].tolist() == [1.5, -2.0]
    assert (m.mid_step_waiting._value.get(), m.mid_step_timeouts._value.get()) == (0, 0)
    assert [type(m) for m, _ in rollout.mid_step.backlog] == [Step, LeafValues]
    assert rollout.mid_step.backlog[0][0] == other and rollout.mid_step.backlog[1][0] == stale


def test_a_close_ends_the_wait_and_is_handled_first(pair):
    router, rollout = pair
    thread, out = _ask(rollout)
    identity, _, _ = _query(router)
    transport.send(router, Step(iteration=3, cycle=4, shard=0), {"actions": np.zeros(4, np.int16)}, identity=identity)
    transport.send(router, Close(reason="learner stopping"), identity=identity)
    thread.join(5)
    assert isinstance(out["error"], Stopping) and out["error"].args
    assert [type(m) for m, _ in rollout.mid_step.backlog] == [Close, Step]


def test_no_answer_gives_up_after_the_round_timeout_naming_the_step(pair):
    router, rollout = pair
    thread, out = _ask(rollout)
    _query(router)
    thread.join(5)
    assert isinstance(out["error"], MidStepTimeout)
    assert str(out["error"]) == ("no LeafValues from the learner within 1 s (rollout.round_timeout_s) for "
                                 "iteration 3 cycle 4 shard 1")
    m = rollout.metrics
    assert (m.mid_step_questions._value.get(), m.mid_step_timeouts._value.get(), m.mid_step_waiting._value.get()) == (
        1, 1, 0)


def test_a_restarted_learners_rejoin_ends_the_wait_at_once_and_an_old_instances_waits(pair):
    """The learner killed with the question unanswered: its successor does not know this rollout
    and answers the heartbeats the wait keeps sending with a Rejoin, which ends the wait (well
    before the round timeout); a Rejoin drawn by an older instance's heartbeat does not. Handling
    it drops what the dead learner sent meanwhile (another shard's Step: played under the new
    instance, its questions went unanswered for a round timeout and its battles' recorded states
    were refused, found by royalefleet chaos) and says Hello under a new instance."""
    import time
    from types import SimpleNamespace

    from shared.messages import Heartbeat, Rejoin

    router, rollout = pair
    from shared.config import EnvConfig

    # what keepalive and the Hello read
    rollout.welcome = SimpleNamespace(rollout=SimpleNamespace(heartbeat_s=0.05), env=EnvConfig())
    out = {}

    def run():
        try:
            query = LeafQuery(instance=rollout.instance, iteration=3, cycle=4, shard=1)
            rollout.mid_step.ask(query, ROWS, np.zeros(2), np.zeros(2), 30.0, lambda: False)
        except Exception as exc:  # noqa: BLE001  (handed to the test thread)
            out["error"] = exc

    t0 = time.monotonic()
    thread = threading.Thread(target=run)
    thread.start()
    identity, _, _ = _query(router)
    beat = _query(router)[1]  # the wait's keepalive: a heartbeat once heartbeat_s has passed
    assert beat == Heartbeat(instance=rollout.instance, state="ready")
    old = Rejoin(reason="this learner does not know instance x", instance="x")
    mine = Rejoin(reason="this learner does not know instance " + rollout.instance, instance=rollout.instance)
    stale_step = Step(iteration=3, cycle=4, shard=0)  # the dead learner's, sent before it died
    transport.send(router, stale_step, {"actions": np.zeros(4, np.int16)}, identity=identity)
    transport.send(router, old, identity=identity)
    transport.send(router, mine, identity=identity)
    thread.join(5)
    assert isinstance(out["error"], Stopping) and out["error"].args == (mine,) and time.monotonic() - t0 < 5
    assert [m for m, _ in rollout.mid_step.backlog] == [mine, stale_step, old]  # the Rejoin handled first
    m = rollout.metrics
    assert (m.mid_step_rejoins._value.get(), m.mid_step_timeouts._value.get(), m.mid_step_waiting._value.get()) == (
        1, 0, 0)
    before = rollout.instance
    assert rollout._dispatch(*rollout.mid_step.backlog.popleft()) is None  # as run() handles it next
    assert not rollout.mid_step.backlog and rollout.instance != before
    hello = _query(router)[1]
    while isinstance(hello, Heartbeat):
        hello = _query(router)[1]
    assert type(hello).__name__ == "Hello" and hello.instance == rollout.instance


def test_an_answer_of_the_wrong_length_is_a_protocol_error(pair):
    router, rollout = pair
    thread, out = _ask(rollout)
    identity, _, _ = _query(router)
    transport.send(router, LeafValues(iteration=3, cycle=4, shard=1), {"leaf_q": np.zeros(3, np.float32)},
                   identity=identity)
    thread.join(5)
    assert type(out["error"]).__name__ == "ProtocolError" and "leaf_q (2,)" in str(out["error"])


def test_a_sim_act_query_waits_for_the_answer_of_its_own_seq(pair):
    router, rollout = pair
    out = {}
    query = SimActQuery(instance=rollout.instance, iteration=3, cycle=4, shard=1, seq=2, player="learner", battle=5,
                        ordinal=7)
    thread = threading.Thread(target=lambda: out.update(a=rollout.mid_step.act(
        query, ROWS, np.array([0.25, 0.5]), 1.0, lambda: False)))
    thread.start()
    identity, body, arrays = _query(router)
    assert body == query and arrays["sim_uniforms"].tolist() == [0.25, 0.5]
    np.testing.assert_array_equal(arrays["sim_rows"], ROWS)
    transport.send(router, SimActions(iteration=3, cycle=4, shard=1, seq=1), {"sim_actions": np.zeros(2, np.int16)},
                   identity=identity)  # an earlier query's answer: not this one
    transport.send(router, SimActions(iteration=3, cycle=4, shard=1, seq=2), {"sim_actions": np.array([0, 9], np.int16)},
                   identity=identity)
    thread.join(5)
    assert out["a"].tolist() == [0, 9] and [type(m) for m, _ in rollout.mid_step.backlog] == [SimActions]
