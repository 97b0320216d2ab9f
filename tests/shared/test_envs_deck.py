"""env.deck: a fixed deck for both seats, checked by name against the engine's catalogue."""

import numpy as np
import pytest

from shared.config import EnvConfig, check_consistency, cpu
from shared.envs import build_env

STARTER = ("Knight", "Archer", "Giant", "Minions", "Fireball", "Zap", "Cannon", "Musketeer")
STARTER_IDS = {0, 1, 3, 5, 108, 116, 93, 14}  # RoyaleGym's STARTER_DECK card ids (royalegym-notes §1)
DECK_FIELD = slice(1183, 1328)  # own_deck in the vector layout (tests/shared/nn/test_model.py VECTOR_FIELDS)
HAND_FIELD = slice(2, 586)  # own_hand_cards: 4 one-hot slots of 146


def cards_seen(obs) -> set[int]:
    hand = obs["vector"][HAND_FIELD].reshape(4, -1).argmax(axis=1)
    return set(np.flatnonzero(obs["vector"][DECK_FIELD]).tolist()) | set(hand.tolist())


def test_a_fixed_deck_is_dealt_to_both_seats_every_episode():
    env = build_env(EnvConfig(deck=STARTER, max_steps=10))
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        for seat in ("blue", "red"):
            assert cards_seen(obs[seat]) <= STARTER_IDS, (seed, seat, cards_seen(obs[seat]))


def test_the_default_deals_random_decks():
    env = build_env(EnvConfig(max_steps=10))
    seen = set()
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        seen |= cards_seen(obs["blue"])
    assert not seen <= STARTER_IDS


def test_an_unknown_card_name_is_refused_with_close_matches():
    with pytest.raises(ValueError, match=r"env.deck: unknown card name\(s\) \['Knigt'\] \('Knigt': did you mean \['Knight'"):
        build_env(EnvConfig(deck=STARTER[:7] + ("Knigt",)))


@pytest.mark.parametrize("deck", [STARTER[:7], STARTER[:7] + ("Knight",)])
def test_a_deck_of_other_than_8_different_cards_is_refused_at_config_load(deck):
    cfg = cpu()
    bad = type(cfg.env)(deck=deck)
    problems = check_consistency(type(cfg)(env=bad))
    assert f"env.deck: {list(deck)} must be 8 different card names (or empty for random decks)" in problems


# ----------------------------------------------------------------------------- env.seat_decks

HOG = ("HogRider", "Musketeer", "Cannon", "Skeletons", "Fireball", "Log", "Knight", "Zap")


def _curriculum(**kw):
    from shared.config import SeatDecks

    return EnvConfig(max_steps=10, seat_decks=SeatDecks(**kw))


def test_a_curriculum_deals_the_learners_deck_where_the_learner_sits_against_the_field():
    from shared.envs import dealt_deck, seat_deal

    cfg = _curriculum(deck=STARTER, field=[HOG])
    env = build_env(cfg)
    for learner_seat in (0, 1):
        env.state_mutator.inner = seat_deal(cfg, learner_seat)
        for seed in range(3):
            obs, _ = env.reset(seed=seed)
            assert sorted(dealt_deck(env, learner_seat)) == sorted(STARTER)
            assert sorted(dealt_deck(env, 1 - learner_seat)) == sorted(HOG)
            assert cards_seen(obs[("blue", "red")[learner_seat]]) <= STARTER_IDS
    env.state_mutator.inner = seat_deal(cfg, -1)  # a mirror battle: the learner's deck on both seats
    env.reset(seed=5)
    assert dealt_deck(env, 0) == dealt_deck(env, 1) and sorted(dealt_deck(env, 0)) == sorted(STARTER)


def test_the_deal_is_a_pure_function_of_the_reset_seed_and_weights_by_repetition():
    from shared.envs import dealt_deck, seat_deal

    cfg = _curriculum(deck=STARTER, field=[HOG, HOG, HOG, STARTER])
    first, second = build_env(cfg), build_env(cfg)
    first.state_mutator.inner, second.state_mutator.inner = seat_deal(cfg, 0), seat_deal(cfg, 0)
    red = []
    for seed in range(40):
        first.reset(seed=seed)
        second.reset(seed=1000 + seed)
        second.reset(seed=seed)  # another history before it: the same deal all the same
        assert dealt_deck(first, 1) == dealt_deck(second, 1)
        red.append(sorted(dealt_deck(first, 1)) == sorted(HOG))
    # HogRider listed 3 times in 4: 40 draws at p = 0.75 land in [20, 38] with probability > 0.9999
    assert 20 <= sum(red) <= 38


def test_a_field_of_none_deals_random_decks_to_the_other_seat():
    from shared.envs import dealt_deck, seat_deal

    cfg = _curriculum(deck=STARTER, field=None)
    env = build_env(cfg)
    env.state_mutator.inner = seat_deal(cfg, 1)
    others = set()
    for seed in range(4):
        env.reset(seed=seed)
        assert sorted(dealt_deck(env, 1)) == sorted(STARTER)
        others.add(tuple(sorted(dealt_deck(env, 0))))
        assert len(set(dealt_deck(env, 0))) == 8
    assert len(others) == 4


def test_a_bad_curriculum_is_refused_at_load_naming_the_field():
    from shared.config import ConfigError, load_config

    with pytest.raises(ConfigError) as err:
        load_config({"profile": "tiny", "env": {"deck": list(STARTER), "seat_decks": {
            "deck": list(STARTER), "field": [["Knight"] * 8], "kwargs": {"mirror_p": 0.5},
            "cls": "mybot.decks.Mine"}}})
    assert err.value.problems == [
        "env.seat_decks: set together with env.deck; the curriculum deals the learner's deck, so leave env.deck empty",
        "env.seat_decks.field[0]: ['Knight', 'Knight', 'Knight', 'Knight', 'Knight', 'Knight', 'Knight', 'Knight'] "
        "must be 8 different card names",
        "env.seat_decks.kwargs: ['mirror_p'] are decided by the deal itself; remove them (set deck, field and shuffle "
        "on env.seat_decks)",
        "env.seat_decks.cls: module 'mybot.decks' is not listed in env.extra_component_modules (listed: []); add "
        "'mybot' there to allow it (and allow it on this machine: ROYALEFLEET_ALLOW_MODULES or --allow-module)",
    ]
    with pytest.raises(ValueError, match=r"env.seat_decks.field\[0\]: unknown card name\(s\) \['Hogrider'\]"):
        build_env(_curriculum(deck=STARTER, field=[("Hogrider",) + HOG[1:]]))


def test_the_curriculum_is_in_the_identity_and_the_allow_list_is_not():
    from shared.config import SeatDecks
    from shared.identity import env_spec_digest_of

    plain = EnvConfig()
    assert env_spec_digest_of(plain) == env_spec_digest_of(EnvConfig(extra_component_modules=["mybot"]))
    a = env_spec_digest_of(EnvConfig(seat_decks=SeatDecks(deck=STARTER)))
    b = env_spec_digest_of(EnvConfig(seat_decks=SeatDecks(deck=STARTER, field=[HOG])))
    assert len({env_spec_digest_of(plain), a, b}) == 3
