"""Curricula as components (issue 31 item 2): ``env.state_mutator`` and ``env.done_condition``
by dotted path with kwargs, refused at load naming the field; a mid-game start changes how a
rollout's training battle starts while the evaluation env starts every match as the default
does; the start is a pure function of the named reset seed; the end conditions go to the slot
their role names; and the run identity changes with the curriculum."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from shared.config import ConfigError, EnvConfig, load_config
from shared.curricula import END_FIELD, START_FIELD, end_slots
from shared.envs import build_env
from shared.evaluation import eval_env_config
from shared.identity import env_spec_digest_of

KING, PRINCESS = 4824, 3052
"""RustEngine's crown tower max hp (read off ``battle_state.players[i].tower_max_hp`` of a
default start; asserted below, so a new engine build fails here first)."""

MID = {"cls": "royalegym.MidGameStateMutator",
       "kwargs": {"tick_range": [2000, 2000], "elixir_milli_range": [9000, 9000], "max_tower_hp": [KING, PRINCESS],
                  "tower_hp_percent": [50, 50], "tower_down_prob": 0.0}}
"""A mid-game start with every draw pinned: tick 2000 (100 s of the 180 s regulation at 50 ms a
tick), 9.0 elixir each, every crown tower at half its max hp (2412 king, 1526 princess)."""


def problems_of(env_doc) -> list[str]:
    with pytest.raises(ConfigError) as err:
        load_config({"profile": "tiny", "env": env_doc})
    return err.value.problems


def start_of(env):
    s = env.battle_state
    return s.tick, [p.elixir_milli for p in s.players], [list(p.tower_hp) for p in s.players]


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("doc, expected", [
    ({"state_mutator": {"cls": "royalegym.NoSuchMutator"}},
     "env.state_mutator.cls: module 'royalegym' has no 'NoSuchMutator'"),
    ({"state_mutator": {"cls": "mybot.starts.Drill"}},
     "env.state_mutator.cls: module 'mybot.starts' is not listed in env.extra_component_modules"),
    ({"state_mutator": {"cls": "royalegym.MidGameStateMutator", "kwargs": {**MID["kwargs"], "tick_rnge": [0, 1]}}},
     "env.state_mutator.kwargs: ['elixir_milli_range', 'max_tower_hp', 'tick_range', 'tick_rnge', 'tower_down_prob', "
     "'tower_hp_percent'] do not fit royalegym.MidGameStateMutator"),
    ({"state_mutator": {"cls": "royalegym.FirstCrownCondition"}},
     "env.state_mutator: royalegym.FirstCrownCondition built a royalegym.done_condition.FirstCrownCondition, "
     "not a RoyaleGym StateMutator"),
    ({"state_mutator": {"cls": "royalegym.SnapshotStateMutator", "kwargs": {"snapshots": "/nonexistent/bank.msgpack"}}},
     "env.state_mutator: royalegym.SnapshotStateMutator(...) refused its kwargs: FileNotFoundError"),
    ({"state_mutator": {"cls": "royalegym.WeightedStateMutator", "kwargs": {"mutators": [
        {"cls": "royalegym.DefaultStateMutator", "weight": 1}, {"cls": "royalegym.MidGameStateMutator", "weight": -1}]}}},
     "env.state_mutator.kwargs.mutators[1].weight: -1; give a finite number >= 0"),
    ({"state_mutator": {"cls": "royalegym.WeightedStateMutator", "kwargs": {"mutators": [
        {"cls": "royalegym.MidGameStateMutatr", "weight": 1}]}}},
     "env.state_mutator.kwargs.mutators[0].cls: module 'royalegym' has no 'MidGameStateMutatr'"),
    ({"state_mutator": {"cls": "royalegym.ScriptedBoardStateMutator",
                        "kwargs": {"spawns": [{"team": 0, "card": "Knigt", "x": 9000, "y": 9000}]}}},
     "env.state_mutator.kwargs.spawns[0].card: 'Knigt' is not in the engine's catalogue"),
    ({"state_mutator": {"cls": "royalegym.ScriptedBoardStateMutator",
                        "kwargs": {"spawns": [], "tower_hp": [[0, 100, 100], [100, 100, 100]]}}},
     "env.state_mutator: its first start (generator seeded 0) was refused: ValueError"),
    ({"state_mutator": MID, "deck": ["Knight", "Archers", "Giant", "Minions", "Fireball", "Zap", "Cannon", "Musketeer"]},
     "env.state_mutator: set together with env.deck; the mutator deals the decks, so give it 'decks'"),
    ({"done_condition": {"cls": "royalegym.TickLimitCondition", "kwargs": {"max_ticks": 100}}},
     "env.done_condition.kwargs: ['max_ticks'] do not fit royalegym.TickLimitCondition"),
    ({"done_condition": {"cls": "royalegym.FirstCrown"}},
     "env.done_condition.cls: module 'royalegym' has no 'FirstCrown'"),
    ({"done_condition": {"cls": "royalegym.AnyCondition", "kwargs": {"conditions": [
        {"cls": "royalegym.FirstCrownCondition"}, {"cls": "royalegym.TickLimitCondition", "kwargs": {"max_tick": 9}}]}}},
     "env.done_condition: combines terminations and truncations"),
    ({"done_condition": {"cls": "royalegym.DefaultStateMutator"}},
     "env.done_condition: royalegym.DefaultStateMutator built a royalegym.state_mutator.DefaultStateMutator, "
     "not a RoyaleGym DoneCondition"),
])
def test_a_curriculum_that_cannot_be_built_is_refused_at_load_naming_the_field(doc, expected):
    found = problems_of(doc)
    assert any(p.startswith(expected) for p in found), found


def test_a_condition_without_a_role_is_refused_naming_both_roles():
    from royalegym import DoneCondition

    from shared.components import ComponentError
    from shared.curricula import role_of

    class Whenever(DoneCondition):
        def is_done(self, state):
            return False

    with pytest.raises(ComponentError, match=r"env.done_condition: .*Whenever declares no role; subclass "
                                             r"royalegym.TerminationCondition .* or royalegym.TruncationCondition"):
        role_of(Whenever())


# ----------------------------------------------------------------------------- starts


def test_a_mid_game_start_applies_to_a_rollout_battle_and_never_to_the_evaluation_env():
    from services.rollout.battles import Shard
    from shared.messages import Assignment

    cfg = load_config({"profile": "tiny", "env": {"state_mutator": MID}})
    shard = Shard(0, cfg.env, 1, None, 7, 0.9, True)
    shard.table[(3, 0)] = Assignment(3, 0, "scripted", "scripted:random_legal", 0)
    shard.start([3], [0])
    battle = shard.battles[0]
    half_king, half_princess = KING * 50 // 100, PRINCESS * 50 // 100
    assert start_of(battle.env) == (2000, [9000, 9000], [[half_king, half_princess, half_princess]] * 2)
    assert battle.tick == 0  # a row's tick 0 still marks an episode's first row (services/learner/frame_history.py)

    plain = build_env(load_config({"profile": "tiny"}).env)
    ev = build_env(eval_env_config(cfg.env))
    for seed in (3, 11):
        plain.reset(seed=seed)
        ev.reset(seed=seed)
        assert start_of(ev) == start_of(plain)
        tick, elixir, hp = start_of(ev)
        assert tick == 0 and hp == [[KING, PRINCESS, PRINCESS]] * 2
        assert [list(p.tower_max_hp) for p in ev.battle_state.players] == [[KING, PRINCESS, PRINCESS]] * 2
    assert ev.truncation is None  # and full matches: no step limit, no done condition
    assert type(ev.termination).__name__ == "GameOverCondition"


def test_an_evaluation_game_on_a_training_env_with_a_mid_game_start_is_refused():
    from services.evaluator.games import GameError, decision_cap, play_game
    from services.evaluator.players import ScriptedPlayer

    cfg = load_config({"profile": "tiny", "env": {"state_mutator": MID}})
    noop = ScriptedPlayer("scripted:noop", 0.9)
    with pytest.raises(GameError, match="job 0 seed 0 side 0: the evaluation match started at tick 2000, not 0"):
        play_game(build_env(msgspec.structs.replace(cfg.env, max_steps=0)), noop, noop, job=0, seed=0, side=0,
                  env_seed=1, master_seed=7, max_decisions=decision_cap(cfg.env.decision_ms))


def test_the_evaluation_config_drops_both_curriculum_fields_and_the_step_limit():
    env = load_config({"profile": "tiny", "env": {
        "state_mutator": MID, "done_condition": {"cls": "royalegym.FirstCrownCondition"}}}).env
    ev = eval_env_config(env)
    assert (ev.state_mutator, ev.done_condition, ev.max_steps) == (None, None, 0)
    assert ev.reward_weights == env.reward_weights and ev.decision_ms == env.decision_ms


def test_a_drawn_start_is_a_pure_function_of_the_reset_seed():
    mix = {"cls": "royalegym.WeightedStateMutator", "kwargs": {"mutators": [
        {"cls": "royalegym.DefaultStateMutator", "weight": 1},
        {"cls": "royalegym.MidGameStateMutator", "weight": 3, "kwargs": {
            "tick_range": [600, 3000], "elixir_milli_range": [2000, 10000], "max_tower_hp": [KING, PRINCESS],
            "tower_hp_percent": [20, 100], "tower_down_prob": 0.3}}]}}
    env_cfg = load_config({"profile": "tiny", "env": {"state_mutator": mix}}).env
    a, b = build_env(env_cfg), build_env(env_cfg)
    starts = []
    for seed in range(8):
        a.reset(seed=seed)
        b.reset(seed=100 + seed)
        b.reset(seed=seed)  # another draw first changes nothing: the seed alone decides
        assert start_of(a) == start_of(b)
        assert a.engine.state_hash() == b.engine.state_hash()
        starts.append(start_of(a))
    mid = [s for s in starts if s[0] != 0]
    assert 0 < len(mid) < 8  # both parts of the mix are drawn over 8 seeds (p(all one part) < 0.1)
    assert all(600 <= s[0] <= 3000 and all(2000 <= e <= 10000 for e in s[1]) for s in mid)


def test_a_scripted_board_names_its_units_by_card():
    board = {"cls": "royalegym.ScriptedBoardStateMutator", "kwargs": {
        "spawns": [{"team": 1, "card": "Knight", "x": 9000, "y": 26000}], "elixir_milli": [4000, 7000]}}
    env = build_env(load_config({"profile": "tiny", "env": {"state_mutator": board}}).env)
    env.reset(seed=5)
    s = env.battle_state
    knight = {c.name: c.card_id for c in env.engine.cards()}["Knight"]
    units = [e for e in s.entities if getattr(e, "card_id", None) == knight]
    assert len(units) == 1 and units[0].team == 1
    assert [p.elixir_milli for p in s.players] == [4000, 7000]


# ----------------------------------------------------------------------------- ends


def test_each_condition_goes_to_the_slot_its_role_names():
    from royalegym import FirstCrownCondition, GameOverCondition, StepLimitCondition, TickLimitCondition

    term, trunc = end_slots(480, FirstCrownCondition())
    assert [type(c) for c in term.conditions] == [GameOverCondition, FirstCrownCondition]
    assert type(trunc) is StepLimitCondition and trunc.max_steps == 480
    term, trunc = end_slots(480, TickLimitCondition(max_tick=700))
    assert type(term) is GameOverCondition
    assert [type(c) for c in trunc.conditions] == [StepLimitCondition, TickLimitCondition]
    term, trunc = end_slots(0, TickLimitCondition(max_tick=700))
    assert type(trunc) is TickLimitCondition
    assert end_slots(0)[1] is None


def test_a_tick_limit_truncates_a_training_episode_and_keeps_the_step_counter_a_saved_state_reads():
    cfg = load_config({"profile": "tiny", "env": {
        "done_condition": {"cls": "royalegym.TickLimitCondition", "kwargs": {"max_tick": 50}}}})
    env = build_env(cfg.env)
    env.reset(seed=1)
    ends = []
    for step in range(1, 8):  # 10 ticks a decision at decision_ms 500: tick 50 after the 5th
        _, _, term, trunc, _ = env.step({"blue": 0, "red": 0})
        ends.append((step, term["blue"], trunc["blue"]))
        if term["blue"] or trunc["blue"]:
            break
    assert ends[-1] == (5, False, True)
    assert env.truncation.steps == 5  # services/rollout/battle_state.py saves and restores it
    env.truncation.steps = 2
    assert env.truncation.limit.steps == 2


# ----------------------------------------------------------------------------- identity


def test_the_env_digest_changes_with_the_curriculum_and_not_without_one():
    plain = load_config({"profile": "tiny"}).env
    # the default env's digest before the fields existed (commit c72d512): unset fields leave it
    assert env_spec_digest_of(EnvConfig()) == DEFAULT_ENV_DIGEST
    mid = load_config({"profile": "tiny", "env": {"state_mutator": MID}}).env
    other = msgspec.structs.replace(
        mid, state_mutator=msgspec.structs.replace(mid.state_mutator, kwargs={**MID["kwargs"], "tower_down_prob": 0.5}))
    crown = load_config({"profile": "tiny", "env": {"done_condition": {"cls": "royalegym.FirstCrownCondition"}}}).env
    digests = [env_spec_digest_of(e) for e in (plain, mid, other, crown)]
    assert len(set(digests)) == 4, digests


DEFAULT_ENV_DIGEST = "492cab8131df7583"


def test_the_run_id_changes_with_the_curriculum_and_a_users_start_is_user_code():
    from shared.components import user_packages
    from shared.config import ComponentSpec
    from shared.identity import compute_identity, identity_differences, run_id
    from shared.messages import EngineBuild

    engine = EngineBuild(engine_class="royalegym.rust_engine.RustEngine", calibration_digest="c", build_digest="b",
                         binary_sha256="e", cards_digest="k", royalegym_version="0.1.25")

    def ident(env_doc):
        return compute_identity(load_config({"profile": "tiny", "env": env_doc}), engine=engine, obs_digest="o",
                                action_digest="a", codec_table_digest="t", device_kind="cpu:x86_64", torch_version="2")

    plain, mid = ident({}), ident({"state_mutator": MID})
    assert run_id(plain) != run_id(mid)
    assert set(identity_differences(plain, mid)) == {"env_spec_digest"}
    env = msgspec.structs.replace(EnvConfig(), state_mutator=ComponentSpec(cls="mybot_q.starts.Drill"),
                                  done_condition=ComponentSpec(cls="royalegym.FirstCrownCondition"),
                                  extra_component_modules=["mybot_q"])
    assert user_packages(env) == ["mybot_q"]


def test_a_battle_restored_mid_episode_keeps_its_mid_game_start_and_is_cut_where_it_would_have_been():
    """A rollout's saved battle state (services/rollout/battle_state.py) under both curricula: the
    restored battle goes on as the one that never stopped, and the step limit OR-ed with the
    tick limit is cut at the same decision (its counter is ``truncation.steps``)."""
    from services.rollout import battle_state
    from services.rollout.battles import Shard
    from shared.envs import make_scripted
    from shared.messages import Assignment
    from shared.preflight import run_preflight

    cfg = load_config({"profile": "tiny", "env": {"max_steps": 12, "state_mutator": MID, "done_condition": {
        "cls": "royalegym.TickLimitCondition", "kwargs": {"max_tick": 10**6}}}})
    pf = run_preflight(cfg.env, 7)

    def shard():
        s = Shard(0, cfg.env, 1, pf.codec, 7, 0.9, True)
        for k in (0, 1):  # the episode that ends, and the one that begins after it
            s.table[(4, k)] = Assignment(4, k, "mirror", "learner", -1)
        s.set_gamma(0.99)
        return s

    straight = shard()
    straight.start([4], [0])
    assert start_of(straight.battles[0].env)[0] == 2000
    noop = np.zeros(2, np.int16)
    for _ in range(5):
        straight.step(noop)
    blob = battle_state.save(straight.battles[0], pf.engine)
    resumed = shard()
    battle_state.restore(resumed.battles[0], blob, battle_id=4, engine_build=pf.engine,
                         make_scripted=lambda o: make_scripted(o, 0.9))
    assert resumed.battles[0].env.truncation.steps == 5
    cut = []
    for step in range(6, 13):
        ra, rb = straight.step(noop), resumed.step(noop)
        assert np.array_equal(ra.truncated, rb.truncated) and np.array_equal(ra.reward, rb.reward), step
        cut.append(bool(rb.truncated.any()))
    assert cut == [False] * 6 + [True]  # the 12th decision of the episode, not the 12th after the restore
    assert ra.episodes == rb.episodes and len(rb.episodes) == 2
