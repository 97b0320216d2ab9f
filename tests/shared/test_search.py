"""The search's pure parts: the player-id suffix, the leaf value, Gumbel-top-k candidates."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from shared.evaluation import check_player
from shared.search.lookahead import CROWN_VALUE, WIN_VALUE, board_value, candidates_with_noop, gumbel_top_k
from shared.search.spec import DEFAULT_DEPTH, SearchSpec, split_search, with_search


def test_the_suffix_names_candidates_and_depth_and_drops_the_default_depth():
    assert split_search("snap:0123456789abcdef") == ("snap:0123456789abcdef", None)
    assert split_search("snap:0123456789abcdef+search:8") == ("snap:0123456789abcdef", SearchSpec(8, DEFAULT_DEPTH))
    assert split_search("latest+search:16:12") == ("latest", SearchSpec(16, 12))
    assert with_search("snap:x", SearchSpec(8, DEFAULT_DEPTH)) == "snap:x+search:8"
    assert with_search("snap:x", SearchSpec(8, 12)) == "snap:x+search:8:12"
    assert with_search("snap:x", None) == "snap:x"
    # canonical: the default depth written out resolves to the short id
    base, spec = split_search(f"scripted:defend+search:4:{DEFAULT_DEPTH}")
    assert with_search(base, spec) == "scripted:defend+search:4"


@pytest.mark.parametrize("bad", ["snap:x+search:", "snap:x+search:1", "snap:x+search:65", "snap:x+search:8:0",
                                 "snap:x+search:8:241", "+search:8", "snap:x+search:8+search:8", "snap:x+search:a"])
def test_a_malformed_suffix_is_refused_with_the_grammar(bad):
    with pytest.raises(ValueError) as exc:
        split_search(bad)
    assert str(exc.value).startswith(f"player {bad!r}: expected <player>+search:N or <player>+search:N:D")
    assert check_player(bad) == str(exc.value)


def test_check_player_takes_a_search_suffix_on_every_kind_of_player():
    assert check_player("snap:0123456789abcdef+search:8") is None
    assert check_player("scripted:defend+search:8:20") is None
    assert check_player("snap:XYZ+search:8") == ("player 'snap:XYZ': a snapshot id is 16 lowercase hex characters "
                                                 "(snap:<snapshot_id>)")
    assert check_player("scripted:nobody+search:8").startswith("player 'scripted:nobody': expected snap:")


def _state(blue_hp, red_hp, crowns=(0, 0), over=False, winner=0):
    players = [SimpleNamespace(tower_hp=list(blue_hp), crowns=crowns[0]),
               SimpleNamespace(tower_hp=list(red_hp), crowns=crowns[1])]
    return SimpleNamespace(players=players, game_over=over, winner=winner)


def test_board_value_is_tower_hp_and_crowns_from_the_seats_side():
    s = _state([4000, 2000, 0], [4000, 2500, 2500], crowns=(0, 1))
    # blue: 6000 - 9000 - 5000 (a crown down); red the exact opposite
    assert board_value(s, 0) == 6000 - 9000 - CROWN_VALUE == -8000.0
    assert board_value(s, 1) == 8000.0
    won = _state([4000, 2000, 0], [0, 0, 0], crowns=(3, 1), over=True, winner=0)
    assert board_value(won, 0) == 6000 + 2 * CROWN_VALUE + WIN_VALUE
    assert board_value(won, 1) == -(6000 + 2 * CROWN_VALUE + WIN_VALUE)
    draw = _state([1, 1, 1], [1, 1, 1], over=True, winner=2)
    assert board_value(draw, 0) == board_value(draw, 1) == 0.0


def test_gumbel_top_k_draws_distinct_legal_actions_and_its_first_is_a_policy_sample():
    probs = np.array([0.5, 0.3, 0.0, 0.2])
    lp = np.where(probs > 0, np.log(np.where(probs > 0, probs, 1)), -np.inf)
    rng = np.random.default_rng(7)
    firsts = np.zeros(4)
    n = 20_000
    for _ in range(n):
        drawn = gumbel_top_k(lp, 3, rng)
        assert sorted(drawn.tolist()) == [0, 1, 3]  # every legal action once, the illegal never
        firsts[drawn[0]] += 1
    # the first draw is a sample of the categorical: within 4 standard errors of each probability
    se = np.sqrt(probs * (1 - probs) / n)
    assert np.all(np.abs(firsts / n - probs) <= 4 * se + 1e-12)
    assert gumbel_top_k(lp, 2, np.random.default_rng(0)).shape == (2,)


def test_the_no_op_is_always_a_candidate():
    assert candidates_with_noop(np.array([5, 9, 2]), 3) == [5, 9, 0]
    assert candidates_with_noop(np.array([5, 0, 2]), 3) == [5, 0, 2]
    assert candidates_with_noop(np.array([5, 9, 2, 0]), 2) == [5, 0]
    assert candidates_with_noop(np.array([0]), 4) == [0]
