"""One iteration's rounds (``rounds.CollectionRun``) without a socket: a scripted rollout
answers each Step with the next round through a stand-in ``poll``, and every Step sent is
recorded. The actions are checked against the named uniform stream drawn here by hand."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from services.learner.rounds import Arrival, CollectionRun, Collector, FiledRound, HeldRound
from services.learner.fleet import Fleet, Member
from services.learner.rectangle import Rectangle
from services.learner.alphazero.book import SearchBook
from services.learner.alphazero.rounds import SearchRounds
from shared.messages import GROUP_LEARNER, GROUP_SCRIPTED, EngineBuild, LeafQuery, LeafValues, Round, Step
from shared.seeding import stream

ENGINE = EngineBuild(engine_class="royalegym.rust_engine.RustEngine", calibration_digest="c", build_digest="b",
                     binary_sha256="e42383517b50bfe1", cards_digest="k", royalegym_version="0.1.25")
SEED, ITERATION, T = 7, 1, 2
ROW_BYTES, MASK_OFFSET = 6, 4
BATTLES = 2  # one shard of two battles: slots 0..3, seat 0 the learner's, seat 1 scripted


class UniformPolicy:
    """Picks action floor(u * n_legal) for each row: what ``Policy.act`` does for a uniform
    policy; log-prob -log(n_legal). Records the rows of each call."""

    def __init__(self):
        self.model = SimpleNamespace(actor=torch.nn.Linear(1, 1))
        self.calls: list[int] = []

    def act(self, rows, n_legal, u, history=None):
        self.calls.append(len(rows))
        return (u * n_legal).astype(np.int64), -np.log(n_legal.astype(np.float32))


def round_arrays(cycle: int) -> dict:
    """Cycle ``cycle``'s arrays: the learner seats (0 and 2) hold rows whose mask has 3 legal
    actions at cycle 0, 2 after; reward 1 per learner seat past cycle 0."""
    n = 2 * BATTLES
    group = np.array([GROUP_LEARNER, GROUP_SCRIPTED] * BATTLES, np.int8)
    rows = np.zeros((BATTLES, ROW_BYTES), np.uint8)
    rows[:, 0] = 10 * cycle + np.arange(BATTLES)  # tells the rows apart
    rows[:, MASK_OFFSET] = 0b111 if cycle == 0 else 0b11
    return {"group": group, "tick": np.full(n, cycle, np.int32), "ordinal": np.zeros(n, np.int32), "rows": rows,
            "reward": np.where(group == GROUP_LEARNER, float(cycle > 0), 0).astype(np.float32),
            "terminated": np.zeros(n, np.uint8), "truncated": np.zeros(n, np.uint8),
            "deploy_status": np.full(n, -1, np.int8), "final_slots": np.zeros(0, np.int16),
            "final_rows": np.zeros((0, ROW_BYTES), np.uint8)}


@pytest.fixture
def rig():
    """A fleet of one ready member, its collector with a scripted rollout in place of the socket."""
    return make_rig()


def make_rig(round_hooks=None, refused_counter=None):
    """``rig``'s fleet and scripted rollout, the collector built with ``round_hooks`` (the
    algorithm's part in the rounds) and ``refused_counter``."""
    fleet = Fleet()
    fleet.add(Member("a", b"id-a", BATTLES, 1, "h", 1, ready=True))
    members = fleet.arrange()
    slot_map = fleet.slot_map(members)
    said: list[str] = []
    collector = Collector(None, None, fleet, lambda codec: None, ENGINE, said.append, refused_counter,
                          round_hooks=round_hooks)
    steps: list[tuple[Step, np.ndarray]] = []
    inbox: list[tuple[Round, dict]] = [(Round(instance="a", iteration=ITERATION, cycle=0, shard=0), round_arrays(0))]

    def send(identity, body, arrays=None):
        assert identity == b"id-a"
        steps.append((body, arrays["actions"]))
        if body.cycle + 1 <= T:  # the rollout steps and answers with the next cycle
            inbox.append((Round(instance="a", iteration=ITERATION, cycle=body.cycle + 1, shard=0),
                          round_arrays(body.cycle + 1)))
        return True

    def poll(timeout_ms, on_round, on_leaves=None):
        n = len(inbox)
        while inbox:
            body, arrays = inbox.pop(0)
            on_round(fleet.get(body.instance), body, arrays)
        return n

    collector.send, collector.poll = send, poll
    rect = Rectangle(T, slot_map.n_slots, ROW_BYTES, MASK_OFFSET)
    return SimpleNamespace(fleet=fleet, members=members, slot_map=slot_map, collector=collector, steps=steps,
                           rect=rect, said=said, inbox=inbox)


def test_a_collection_files_every_cycle_and_answers_each_round_with_the_streams_actions(rig):
    policy = UniformPolicy()
    stats = rig.collector.collect(ITERATION, rig.members, rig.slot_map, rig.rect, policy, SEED, 5.0)
    learner = np.array([0, 2])
    for t, n_legal in ((0, 3), (1, 2)):
        u = stream(SEED, "act/iteration/{iteration}/cycle/{cycle}", iteration=ITERATION, cycle=t).random(4)
        want = np.floor(u[learner] * n_legal).astype(np.int64)
        assert rig.rect.actions[t, learner].tolist() == want.tolist()
        assert rig.rect.acted[t].tolist() == [True, False, True, False]
        np.testing.assert_allclose(rig.rect.log_probs[t, learner], -np.log(n_legal))
        step, actions = rig.steps[t]
        assert (step.iteration, step.cycle, step.shard) == (ITERATION, t, 0)
        assert actions.dtype == np.int16 and actions.tolist() == [want[0], 0, want[1], 0]
    assert len(rig.steps) == T  # cycle T is held, never answered this iteration
    assert rig.rect.reward[:, learner].tolist() == [[1.0, 1.0], [1.0, 1.0]]  # the steps cycles 1 and 2 closed
    assert stats.rounds == T + 1 and stats.env_steps == T * BATTLES and stats.batch_rows == [2, 2]
    assert policy.calls == [2, 2] and stats.lost == [] and stats.refused == 0
    held = rig.members[0].held[0]
    assert isinstance(held, HeldRound) and held.body.cycle == T and held.arrays.rows[0, 0] == 10 * T


def test_a_held_round_is_the_next_iterations_cycle_zero(rig):
    rig.collector.collect(ITERATION, rig.members, rig.slot_map, rig.rect, UniformPolicy(), SEED, 5.0)
    member = rig.members[0]
    member.fresh = False
    rect2 = Rectangle(T, rig.slot_map.n_slots, ROW_BYTES, MASK_OFFSET)
    run = CollectionRun(rig.collector, ITERATION + 1, rig.members, rig.slot_map, rect2, UniformPolicy(), SEED, 5.0)
    assert member.held == {} and [h.body.cycle for _, h in run.held] == [T]
    run.file_round(Arrival(member, Round(instance="a", iteration=ITERATION + 1, cycle=0, shard=0),
                           run.held[0][1].arrays.observation_half().arrays()), ITERATION + 1, from_wire=False)
    assert rect2.rows[0, 0, 0] == 10 * T  # the held rows, filed as cycle 0
    assert [(r.cycle, r.learner.tolist()) for r in run.ready] == [(0, [0, 2])]


def test_file_round_refuses_a_round_out_of_order_and_a_stranger(rig):
    run = CollectionRun(rig.collector, ITERATION, rig.members, rig.slot_map, rig.rect, UniformPolicy(), SEED, 5.0)
    member = rig.members[0]
    late = Arrival(member, Round(instance="a", iteration=ITERATION, cycle=1, shard=0), round_arrays(1))
    assert run.file_round(late, ITERATION) is None
    stranger = Arrival(member, Round(instance="a", iteration=ITERATION, cycle=0, shard=3), round_arrays(0))
    assert run.file_round(stranger, ITERATION) is None
    assert rig.collector.refused_count == 2 and run.ready == []
    filed = run.file_round(Arrival(member, Round(instance="a", iteration=ITERATION, cycle=0, shard=0),
                                   round_arrays(0)), ITERATION)
    assert isinstance(filed, FiledRound) and filed.cycle == 0 and run.expected[("a", 0)] == 1
    assert filed.learner.tolist() == [0, 2] and len(filed.frozen_slots) == 0
    assert rig.fleet.ordinal == {0: 0, 1: 0}


def test_a_malformed_round_is_refused_and_the_shard_waits_for_a_good_one(rig):
    run = CollectionRun(rig.collector, ITERATION, rig.members, rig.slot_map, rig.rect, UniformPolicy(), SEED, 5.0)
    bad = round_arrays(0)
    bad["group"] = bad["group"][:3]
    assert run.file_round(Arrival(rig.members[0], Round(instance="a", iteration=ITERATION, cycle=0, shard=0), bad),
                          ITERATION) is None
    assert rig.collector.refused_count == 1 and run.expected[("a", 0)] == 0


def test_a_shard_past_its_deadline_loses_its_member(rig):
    run = CollectionRun(rig.collector, ITERATION, rig.members, rig.slot_map, rig.rect, UniformPolicy(), SEED, 5.0)
    run.deadline[("a", 0)] -= 10.0
    run.check_deadlines()
    assert rig.members[0].lost and run.stats.lost == ["a"]
    assert rig.said == ["rollout a@h:1 missed the round deadline (5 s) at cycle 0 of shard 0; its slots are "
                        "invalid for the rest of iteration 1"]


def test_a_stop_ends_the_collection_before_the_next_pass(rig):
    rig.collector.stop_requested = True
    stats = rig.collector.collect(ITERATION, rig.members, rig.slot_map, rig.rect, UniformPolicy(), SEED, 5.0)
    assert stats.rounds == 0 and rig.steps == [] and len(rig.inbox) == 1  # cycle 0 never polled


def test_a_leaf_query_of_the_step_just_sent_is_valued_and_answered_and_any_other_is_refused():
    """alphazero.leaf_value "critic": the rollout, in the middle of the Step of cycle t, sends its
    search's leaves; the collection values them with the live critic (return / reward divisor +
    discount x V) and answers LeafValues at once. A query for a step not sent, or malformed, is
    refused and not answered."""
    book = SearchBook(c_scale=0.1, candidates=2, master_seed=0)
    book.begin(reward_divisor=2.0)
    hooks = SearchRounds(book)
    rig = make_rig(hooks)
    policy = UniformPolicy()
    policy.values = lambda rows: rows[:, 0].astype(np.float32)  # V(leaf) = its first byte
    run = CollectionRun(rig.collector, ITERATION, rig.members, rig.slot_map, rig.rect, policy, SEED, 5.0)
    member = rig.members[0]
    run.file_round(Arrival(member, Round(instance="a", iteration=ITERATION, cycle=0, shard=0), round_arrays(0)),
                   ITERATION)
    hooks.answers.step_sent(member, 0, ITERATION, 0, 2)  # the Step of cycle 0 started two simulations
    sent = []
    rig.collector.send = lambda identity, body, arrays=None: sent.append((identity, body, arrays)) or True
    rows = np.zeros((2, ROW_BYTES), np.uint8)
    rows[:, 0] = [3, 5]
    leaves = {"leaf_rows": rows, "leaf_return": np.array([1.0, -1.0]), "leaf_discount": np.array([0.5, 0.0])}
    run.deadline[("a", 0)] = 0.0  # long past: a question shows the shard at work, and moves it
    run.on_mid_step(member, LeafQuery(instance="a", iteration=ITERATION, cycle=0, shard=0), leaves)
    assert run.deadline[("a", 0)] > time.monotonic() + 4.0  # the round timeout here is 5 s
    identity, body, arrays = sent[0]
    assert identity == b"id-a" and isinstance(body, LeafValues)
    assert (body.iteration, body.cycle, body.shard) == (ITERATION, 0, 0)
    assert arrays["leaf_q"].tolist() == [2.0, -0.5]  # 1/2 + 0.5 x 3; -1/2 + 0 x 5
    for query in (LeafQuery(instance="a", iteration=ITERATION, cycle=1, shard=0),  # its step not sent yet
                  LeafQuery(instance="a", iteration=ITERATION + 1, cycle=0, shard=0)):
        run.on_mid_step(member, query, leaves)
    run.on_mid_step(member, LeafQuery(instance="a", iteration=ITERATION, cycle=0, shard=0),
                          leaves | {"leaf_rows": rows[:, :5]})
    assert len(sent) == 1 and rig.collector.refused_count == 3 and book.critic_leaves == 2
    assert any("malformed LeafQuery" in line and "leaf_rows is (2, 5)" in line for line in rig.said)


def test_a_sim_act_query_is_answered_by_the_episodes_opponent_and_a_stranger_player_is_refused():
    """alphazero.sim_opponent "battle": a mirror battle's simulated opponent is the live actor,
    sampled at the query's uniforms (the uniform policy here: floor(u x legal)); a pool episode's
    is its snapshot (no frozen actors loaded here: the no-op); a player that is not the episode's
    opponent, or a uniform outside [0, 1), is refused by name and not answered."""
    from shared.messages import Assignment, SimActions, SimActQuery

    hooks = SearchRounds(SearchBook(c_scale=0.1, candidates=2, master_seed=0))
    rig = make_rig(hooks)
    rig.fleet.assignments[(0, 0)] = Assignment(0, 0, "mirror", "learner", -1)
    rig.fleet.assignments[(1, 0)] = Assignment(1, 0, "pool", "snap:0123456789abcdef", 0)
    run = CollectionRun(rig.collector, ITERATION, rig.members, rig.slot_map, rig.rect, UniformPolicy(), SEED, 5.0)
    member = rig.members[0]
    run.file_round(Arrival(member, Round(instance="a", iteration=ITERATION, cycle=0, shard=0), round_arrays(0)),
                   ITERATION)
    hooks.answers.step_sent(member, 0, ITERATION, 0, 2)
    sent = []
    rig.collector.send = lambda identity, body, arrays=None: sent.append((body, arrays)) or True
    rows = round_arrays(0)["rows"]  # 3 legal actions each
    good = {"sim_rows": rows, "sim_uniforms": np.array([0.1, 0.9])}

    def ask(player, battle, seq, arrays):
        run.on_mid_step(member, SimActQuery(instance="a", iteration=ITERATION, cycle=0, shard=0, seq=seq,
                                                  player=player, battle=battle, ordinal=0), arrays)

    ask("learner", 0, 0, good)
    ask("snap:0123456789abcdef", 1, 1, good)
    assert [(type(b), b.seq, a["sim_actions"].tolist()) for b, a in sent] == [(SimActions, 0, [0, 2]),
                                                                              (SimActions, 1, [0, 0])]
    assert sent[0][1]["sim_actions"].dtype == np.int16 and hooks.book.opponent_rows == 4
    ask("learner", 1, 2, good)  # battle 1's episode is a pool one
    ask("learner", 0, 3, good | {"sim_uniforms": np.array([0.1, 1.0])})
    assert len(sent) == 2 and rig.collector.refused_count == 2
    assert any("player 'learner' is not the opponent of battle 1 episode 0 ('snap:0123456789abcdef')" in line
               for line in rig.said)


def test_a_query_asks_at_most_one_row_of_each_simulation_its_step_started():
    """alphazero (issue 37, item 6): the Step of cycle 0 names 2 candidates for each of the
    round's 2 choice rows, so it starts 4 simulations; a LeafQuery of 4 leaves and a SimActQuery
    of 4 decisions are answered, one row more is refused unread (reason query_size, counted in
    royalefleet_learner_messages_refused, the sizes named), and so is any query of a step that
    started none."""
    from services.learner.metrics import LearnerMetrics
    from shared.messages import Assignment, SimActQuery

    metrics = LearnerMetrics(None)
    hooks = SearchRounds(SearchBook(c_scale=0.1, candidates=2, master_seed=0))
    rig = make_rig(hooks, metrics.refused)
    rig.fleet.assignments[(0, 0)] = Assignment(0, 0, "mirror", "learner", -1)
    policy = UniformPolicy()
    policy.legal_log_probs = lambda rows: [np.array([np.log(1 / 3)] * 3 + [-np.inf] * 5) for _ in rows]
    policy.values = lambda rows: np.zeros(len(rows), np.float32)
    run = CollectionRun(rig.collector, ITERATION, rig.members, rig.slot_map, rig.rect, policy, SEED, 5.0)
    member = rig.members[0]
    run.file_round(Arrival(member, Round(instance="a", iteration=ITERATION, cycle=0, shard=0), round_arrays(0)),
                   ITERATION)
    run.answer_ready()  # the Step of cycle 0, with its search arrays
    assert (hooks.answers.allowance(member, LeafQuery(instance="a", iteration=ITERATION, cycle=0, shard=0))
            == 4 == int(np.count_nonzero(rig.collector.round_hooks.book.pending[(0, 0)].candidates >= 0)) * 2)
    sent = []
    rig.collector.send = lambda identity, body, arrays=None: sent.append((body, arrays)) or True

    def leaves(n):
        return {"leaf_rows": np.zeros((n, ROW_BYTES), np.uint8), "leaf_return": np.zeros(n),
                "leaf_discount": np.ones(n)}

    def sims(n):
        return {"sim_rows": np.tile(round_arrays(0)["rows"][:1], (n, 1)), "sim_uniforms": np.full(n, 0.5)}

    leaf = LeafQuery(instance="a", iteration=ITERATION, cycle=0, shard=0)
    sim = SimActQuery(instance="a", iteration=ITERATION, cycle=0, shard=0, seq=0, player="learner", battle=0,
                      ordinal=0)
    refused = metrics.refused.labels("query_size")
    for body, arrays in ((leaf, leaves(4)), (sim, sims(4)), (leaf, leaves(5)), (sim, sims(64))):
        run.on_mid_step(member, body, arrays)
    assert [len(next(iter(a.values()))) for _, a in sent] == [4, 4]
    assert refused._value.get() == 2 and rig.collector.refused_count == 2
    assert any("LeafQuery 1/0 shard 0 from a@h:1 carries 5 rows; its step started 4 simulation(s)" in line
               for line in rig.said)
    hooks.answers.step_sent(member, 0, ITERATION, 0, 0)  # a Step that searched nothing
    run.on_mid_step(member, leaf, leaves(1))
    assert len(sent) == 2 and refused._value.get() == 3

