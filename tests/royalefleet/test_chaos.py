"""``royalefleet chaos`` (royalefleet/chaos.py): its schedule and its hostile messages, checked
fast; and one full run on a `tiny` stack (slow): at least 10 SIGKILLs over every service, the
faults that are on, and hostile bursts to every socket, after which every promise holds."""

from __future__ import annotations

import random
from collections import Counter

import pytest

import zmq

from royalefleet import chaos
from royalefleet.launcher import GIVE_UP_QUICK_EXITS
from shared import transport
from shared.messages import Decoder, ProtocolError, ToCheckpoint, ToLadder, ToLearner
from tests.stack import free_ports


@pytest.mark.parametrize("seed", range(20))
def test_the_schedule_kills_every_service_and_the_learner_less_than_the_launcher_gives_up_for(seed):
    events = chaos.schedule(random.Random(seed), 12, chaos.default_faults())
    kinds = [arg for what, arg in events if what == "kill"]
    by_name = {f.name: f for f in chaos.FAULTS}
    learner_faults = [arg for what, arg in events if what == "fault" and by_name[arg].kills_learner]
    learner_kills = max(2, len(learner_faults))  # each learner-killing fault takes a learner kill
    assert len(kinds) + len(learner_faults) == 10 + learner_kills
    assert Counter(kinds) + Counter({"learner": len(learner_faults)}) == Counter(
        checkpoint=2, ladder=2, learner=learner_kills, rollout=4, evaluator=2)
    assert len(learner_faults) + kinds.count("learner") < GIVE_UP_QUICK_EXITS - 1  # room for one crash more
    assert sorted(arg for what, arg in events if what == "fault") == sorted(chaos.default_faults())
    bursts = Counter(arg for what, arg in events if what == "hostile")
    assert sum(bursts.values()) == 10 + learner_kills and min(bursts.values()) >= 4 and len(bursts) == 3
    assert events == chaos.schedule(random.Random(seed), 12, chaos.default_faults())  # the seed fixes it


def test_faults_not_yet_fixed_are_off_and_named_with_their_item():
    off = {f.name: f.needs_item for f in chaos.FAULTS if f.needs_item is not None}
    assert set(chaos.default_faults()).isdisjoint(off)
    assert all(1 <= item <= 15 for item in off.values())
    with pytest.raises(ValueError, match="unknown fault"):
        chaos.run_chaos(None, faults=["no_such_fault"])


def test_the_mid_question_kills_are_on_only_where_the_rollouts_search_and_refused_elsewhere():
    mid = ["rollout_mid_question", "learner_mid_question"]
    assert not set(mid) & set(chaos.default_faults()) and not set(mid) & set(chaos.default_faults("dqn"))
    for algorithm in ("alphazero", "expert_iteration"):
        assert chaos.default_faults(algorithm) == chaos.default_faults() + mid
    with pytest.raises(ValueError, match=r"\['learner_mid_question'\] need rollouts that search: --algorithm 'ppo' "
                                         r"asks no mid-step questions; use one of alphazero, expert_iteration"):
        chaos.run_chaos(None, faults=["learner_mid_question"])


@pytest.mark.parametrize("seed", range(10))
def test_the_learners_mid_question_kill_takes_one_of_the_schedules_learner_kills(seed):
    faults = chaos.default_faults("expert_iteration")
    events = chaos.schedule(random.Random(seed), 12, faults)
    by_name = {f.name: f for f in chaos.FAULTS}
    learner = [arg for what, arg in events if what == "fault" and by_name[arg].kills_learner]
    assert "learner_mid_question" in learner and "rollout_mid_question" in [a for w, a in events if w == "fault"]
    # it waits until the learner has run QUICK_EXIT_S: not a quick exit, so not counted toward giving up
    quick = len(learner) - 1 + sum(1 for what, arg in events if what == "kill" and arg == "learner")
    assert quick < GIVE_UP_QUICK_EXITS - 1


def test_a_process_age_is_read_from_proc():
    import os
    import time

    from royalefleet.chaos_mid_step import process_age_s

    import subprocess

    child = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.3)
        young, old = process_age_s(child.pid), process_age_s(os.getpid())
        assert 0.2 < young < 5.0 and old > young  # the test process started before its child
    finally:
        child.kill()
        child.wait()


def test_free_port_run_finds_consecutive_free_ports():
    import socket

    base = chaos.free_port_run(3)
    for port in range(base, base + 3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: binds


@pytest.mark.parametrize("service, union", [("learner", ToLearner), ("ladder", ToLadder),
                                            ("checkpoint", ToCheckpoint)])
def test_every_hostile_message_is_refused_on_a_real_socket_with_its_reason(service, union):
    """Through a ROUTER bound as the services bind theirs (MAXMSGSIZE = the chaos stack's
    max_message_mb) and ``transport.recv``, as the services read: each message is refused with
    the reason it was made for, and the socket reads the next one."""
    rng = random.Random(5)
    port = free_ports(1)[0]
    router = transport.bind_router(f"tcp://127.0.0.1:{port}", max_bytes=chaos.MAX_MESSAGE_MB << 20)
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    decoder = Decoder(union)
    try:
        reasons = []
        for _ in range(5):
            for reason, frames in chaos.must_refuse(rng, service, "chaos"):
                dealer.send_multipart(frames)
                assert router.poll(5000, zmq.POLLIN), reason
                with pytest.raises(ProtocolError) as exc:
                    transport.recv(router, decoder, router=True)
                assert exc.value.reason == reason, (reason, str(exc.value))
                reasons.append(reason)
        assert set(reasons) == {"undecodable", "version", "unknown_kind", "frames", "arrays", "nesting", "oversized"}
    finally:
        dealer.close(0)
        router.close(0)


@pytest.mark.slow
def test_a_tiny_stack_holds_under_kills_faults_and_hostile_messages(tmp_path):
    figures, problems = chaos.run_chaos(tmp_path, seed=1, kills=12, say=print)
    assert not problems, "\n".join(problems)
    assert figures.kills >= 12 and figures.restarts >= figures.kills
    sent = sum(figures.refused_sent.values())
    assert sent >= 12 * 40 and sum(figures.refused_counted.values()) == sent
    assert set(figures.refused_counted) == {"learner", "ladder", "checkpoint"}
    assert sorted(figures.faults) == sorted(chaos.default_faults())
    # the corrupt newest checkpoint sent the resume back one checkpoint: at least one retrained
    assert figures.retrained >= 1 and figures.iterations >= 4
    print(chaos.describe(figures))
