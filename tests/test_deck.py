"""env.deck: a fixed deck for both seats, checked by name against the engine's catalogue."""

import numpy as np
import pytest

from shared.config import EnvConfig, check_consistency, cpu
from shared.envs import build_env

STARTER = ("Knight", "Archer", "Giant", "Minions", "Fireball", "Zap", "Cannon", "Musketeer")
STARTER_IDS = {0, 1, 3, 5, 108, 116, 93, 14}  # RoyaleGym's STARTER_DECK card ids (royalegym-notes §1)
DECK_FIELD = slice(1183, 1328)  # own_deck in the vector layout (tests/test_model.py VECTOR_FIELDS)
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
