"""A battle's exact state: saved at a boundary and restored into freshly built battles, it goes on
byte for byte as the battle that never stopped (mirror battles and a mask-only scripted seat, its
random stream at its position, across an episode's end); a state that must not be loaded is
refused by reason before anything is touched; the learner's book refuses states whose sha256,
engine build or battle id do not verify, and hands the rest back by global battle id."""

from __future__ import annotations

import hashlib

import msgspec
import numpy as np
import pytest

from services.learner.battle_states import INDEX_FILE, STATES_FILE, BattleStateBook
from services.learner.fleet import Fleet, Member
from services.rollout import battle_state
from services.rollout.battles import Shard
from shared.config import load_config
from shared.envs import make_scripted
from shared.messages import Assignment, EngineBuild, StatesSet

SEED = 7
NOOP_PROB = 0.7


@pytest.fixture(scope="module")
def pf():
    from shared.preflight import run_preflight

    return run_preflight(load_config({"profile": "tiny"}).env, SEED)


def _shard(pf, ids):
    cfg = load_config({"profile": "tiny"})  # episodes cut at 40 decisions
    shard = Shard(0, cfg.env, len(ids), pf.codec, SEED, NOOP_PROB, True)
    for b in ids:
        for k in range(4):
            if b % 3 == 0:
                a = Assignment(b, k, "mirror", "learner", -1)
            else:  # the learner on one seat, random-legal on the other (mask-only, its own stream)
                a = Assignment(b, k, "scripted", "scripted:random_legal", b % 2)
            shard.table[(b, k)] = a
    shard.set_gamma(0.99)
    return shard


def _actions(shard, rng):
    out = np.zeros(shard.n_slots, np.int16)
    for i, b in enumerate(shard.battles):
        for seat, name in enumerate(("blue", "red")):
            legal = np.flatnonzero(b.obs[name]["action_mask"])
            out[2 * i + seat] = legal[rng.integers(len(legal))] if rng.random() < 0.3 else 0
    return out


def _restore(battle, blob, bid, engine):
    return battle_state.restore(battle, blob, battle_id=bid, engine_build=engine,
                                make_scripted=lambda o: make_scripted(o, NOOP_PROB))


@pytest.mark.slow
def test_a_restored_battle_continues_byte_for_byte_across_an_episode_end(pf):
    ids = [0, 1, 2]
    straight = _shard(pf, ids)
    straight.start(ids, [0, 0, 0])
    rng = np.random.default_rng(1)
    for _ in range(23):  # mid-episode (40 decisions an episode): nothing ends at the boundary
        straight.step(_actions(straight, rng))
    assert [sorted(b.env._mask_only) for b in straight.battles] == [[], ["blue"], ["red"]]  # mask-only scripted seats
    blobs = [battle_state.save(b, pf.engine) for b in straight.battles]
    resumed = _shard(pf, ids)
    for battle, blob, bid in zip(resumed.battles, blobs, ids):
        s = _restore(battle, blob, bid, pf.engine)
        assert (s.ordinal, s.env.episode_steps) == (0, 23)
    # the scripted stream goes on from its position, not from the start of its name
    assert resumed.battles[1].rng.random() == straight.battles[1].rng.random()
    resumed.battles[1].rng.bit_generator.state = straight.battles[1].rng.bit_generator.state
    first_a, first_b = straight.observe(), resumed.observe()
    for key, value in first_a.arrays().items():
        assert np.array_equal(value, first_b.arrays()[key]), key
    ended = 0
    for step in range(30):  # past the 40-decision cap: the episodes end and the next ones begin
        x = _actions(straight, rng)
        ra, rb = straight.step(x), resumed.step(x)
        for key, value in ra.arrays().items():
            assert np.array_equal(value, rb.arrays()[key]), (step, key)
        assert ra.episodes == rb.episodes, step
        ended += len(ra.episodes)
    assert ended == 6 and [b.ordinal for b in resumed.battles] == [1, 1, 1]
    assert [b.env.engine.state_hash() for b in straight.battles] == [b.env.engine.state_hash() for b in resumed.battles]


@pytest.mark.slow
def test_a_state_that_must_not_load_is_refused_by_reason(pf):
    shard = _shard(pf, [5])
    shard.start([5], [0])
    for _ in range(12):
        shard.step(np.zeros(2, np.int16))
    blob = battle_state.save(shard.battles[0], pf.engine)
    state = battle_state.decode(blob)
    target = _shard(pf, [5]).battles[0]

    def refused(bad_blob, *, battle_id=5, engine=pf.engine):
        with pytest.raises(battle_state.StateRefused) as info:
            _restore(target, bad_blob, battle_id, engine)
        return info.value

    assert refused(blob, battle_id=6).reason == "battle"
    other = msgspec.structs.replace(pf.engine, binary_sha256="04d42611db5d6e5a")
    exc = refused(blob, engine=other)
    assert exc.reason == "engine" and "04d42611db5d6e5a" in str(exc)
    assert refused(b"\x81\xa1x\x01").reason == "format"
    assert refused(msgspec.msgpack.encode(msgspec.structs.replace(state, format=99))).reason == "format"
    assert target.battle_id == -1  # refused before anything was loaded
    wrong_hash = msgspec.structs.replace(state, engine_hash=state.engine_hash ^ 1)
    assert refused(msgspec.msgpack.encode(wrong_hash)).reason == "hash"
    torn = msgspec.structs.replace(state, engine=state.engine[: len(state.engine) // 2])
    assert refused(msgspec.msgpack.encode(torn)).reason in ("load", "hash")
    # the saved gamma is part of the state and is taken; a potential that differs is refused
    other_gamma = msgspec.structs.replace(state, potentials=["1|" + p.split("|", 1)[1] for p in state.potentials])
    bad_phi = msgspec.structs.replace(state, potentials=[p + "1" for p in state.potentials])
    assert refused(msgspec.msgpack.encode(bad_phi)).reason == "potentials"
    _restore(target, msgspec.msgpack.encode(other_gamma), 5, pf.engine)
    assert [t.gamma for t in battle_state._potential_terms(target.env.reward_fn)] == [1.0, 1.0, 1.0]
    _restore(target, blob, 5, pf.engine)  # and the good one loads into the same battle afterwards
    assert target.env.engine.state_hash() == shard.battles[0].env.engine.state_hash()


# ---------------------------------------------------------------------- the learner's book

ENGINE = EngineBuild(engine_class="royalegym.rust_engine.RustEngine", calibration_digest="c", build_digest="b",
                     binary_sha256="e42383517b50bfe1", cards_digest="k", royalegym_version="0.1.25")


def _fake_state(battle: int, ordinal: int, steps: int) -> bytes:
    # the fields the learner reads; the rest of a real state is opaque to it
    return msgspec.msgpack.encode({"battle": battle, "ordinal": ordinal, "env": {"episode_steps": steps},
                                   "assignment": [battle, ordinal, "mirror", "learner", -1], "engine": b"x" * battle})


def _book_with(states: dict[int, bytes]) -> dict[str, bytes]:
    book = BattleStateBook(ENGINE, say=lambda s: None)
    book.current, book.iteration = dict(states), 4
    return book.files()


def test_the_index_describes_every_state():
    files = _book_with({3: _fake_state(3, 2, 17), 1: _fake_state(1, 5, 0)})
    index = msgspec.json.decode(files[INDEX_FILE])
    assert [(e["battle"], e["ordinal"], e["decisions"], e["bytes"]) for e in index["battles"]] == [
        (1, 5, 0, len(_fake_state(1, 5, 0))), (3, 2, 17, len(_fake_state(3, 2, 17)))]
    assert index["battles"][1]["sha256"] == hashlib.sha256(_fake_state(3, 2, 17)).hexdigest()


def test_states_that_do_not_verify_are_refused_and_counted():
    files = _book_with({b: _fake_state(b, 1, 9) for b in range(4)})
    states = msgspec.msgpack.decode(files[STATES_FILE])
    states["2"] = states["2"][:-1] + b"y"  # one byte changed: its sha256 no longer matches
    states["9"] = _fake_state(9, 1, 9)  # filed under an id the index does not list
    files[STATES_FILE] = msgspec.msgpack.encode(states)
    said = []
    book = BattleStateBook(ENGINE, say=said.append)
    book.load(files)
    assert sorted(book.recorded) == [0, 1, 3]
    assert book.resume_counts["resume/battles_refused"] == 2
    assert any("battle 2" in s and "sha256" in s for s in said) and any("'9'" in s for s in said)
    torn = dict(files, **{STATES_FILE: files[STATES_FILE][:-3]})  # the states file cut short
    book.load(torn)
    assert book.recorded == {} and book.resume_counts["resume/battles_refused"] == 4
    other = BattleStateBook(msgspec.structs.replace(ENGINE, build_digest="zz"), say=said.append)
    other.load(_book_with({0: _fake_state(0, 1, 9)}))
    assert other.recorded == {} and other.resume_counts["resume/battles_refused"] == 1


class _Collector:
    """Answers every SetState at once, as a rollout would: restoring all but ``refuse``."""

    def __init__(self, book, sent, refuse=()):
        self.book, self.sent, self.refuse = book, sent, set(refuse)

    def poll(self, timeout_ms, on_round):
        for member, msg in self.sent:
            ok = [b for b, s in zip(msg.battles, msg.states) if s and b not in self.refuse]
            bad = [b for b, s in zip(msg.battles, msg.states) if s and b in self.refuse]
            self.book.on_message(member, StatesSet(instance=member.instance, iteration=msg.iteration, restored=ok,
                                                   refused=bad, reasons=["hash: test"] * len(bad)))
        self.sent.clear()


def test_recorded_battles_go_back_by_global_id_and_the_unheld_are_kept(monkeypatch):
    from services.learner import battle_states

    book = BattleStateBook(ENGINE, say=lambda s: None)
    book.load(_book_with({b: _fake_state(b, 3, 11) for b in range(8)}))
    fleet = Fleet()
    # another fleet shape than the checkpoint's: one rollout of 3 battles (ids 0-2) and one of 2 (ids 5, 6)
    members = [Member("a", b"a", 3, 1, "h", 1, battle_ids=[0, 1, 2], active=True),
               Member("b", b"b", 2, 1, "h", 2, battle_ids=[5, 6], active=True)]
    for m in members:
        fleet.add(m)
    sent = []
    by_identity = {m.identity: m for m in members}
    monkeypatch.setattr(battle_states.transport, "send",
                        lambda sock, msg, identity: sent.append((by_identity[identity], msg)))
    restored = book.hand_out(None, _Collector(book, sent, refuse={6}), members, fleet, 5, 1.0)
    assert restored == {0, 1, 2, 5}
    assert fleet.ordinal == {0: 3, 1: 3, 2: 3, 5: 3}  # 6 was refused: it starts afresh at its own ordinal
    assert fleet.assignments[(5, 3)] == Assignment(5, 3, "mirror", "learner", -1)
    assert sorted(book.recorded) == [3, 4, 7]  # nobody holds them: kept for a later rollout
    keys = book.row_keys()
    assert (keys["resume/battles_restored"], keys["resume/battles_refused"], keys["resume/battles_unheld"]) == (4, 1, 3)
    # the next checkpoint still carries the unheld battles' states, unchanged
    book.current = {0: _fake_state(0, 4, 2)}
    kept = msgspec.msgpack.decode(book.files()[STATES_FILE])
    assert sorted(kept) == ["0", "3", "4", "7"] and kept["3"] == _fake_state(3, 3, 11)
    assert "resume/battles_restored" not in book.row_keys()  # once, in the first row after the resume
