"""redeal=1: the enemy's cards the searching seat has not seen are redealt in each playout's copy
of the battle (shared/search/hidden.py), on real RoyaleGym battles."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shared.search.hidden import SaveIds, redeal
from shared.search.spec import SearchSpec, split_search, with_search


@pytest.fixture(scope="module")
def ids():
    from royalegym import RustEngine

    return SaveIds.read(RustEngine())


def _battle(seed: int, steps: int):
    """A battle after ``steps`` decisions of red playing random legal plays (blue waits), and
    blue's observation then."""
    from royalegym import ClashParallelEnv, RustEngine

    env = ClashParallelEnv(RustEngine())
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        legal = np.flatnonzero(obs["red"]["action_mask"])
        red = int(rng.choice(legal)) if rng.random() < 0.3 else 0
        obs, _, term, trunc, _ = env.step({"blue": 0, "red": red})
        assert not (term["blue"] or trunc["blue"])
    return env, obs["blue"]


def _seen(env, obs):
    return obs["vector"][env.obs_builder.vector_offsets()["enemy_cards_seen"]] > 0


def test_save_ids_map_every_dealt_hand_back_to_the_catalogue_ids(ids):
    from royalegym import ClashParallelEnv, RustEngine

    assert len(ids.to_save) == len(set(ids.to_save.values())) == 145  # every card, distinct ids
    assert len(ids.dealable) == 136 and len(ids.champions) == 8  # royalegym-notes: 136 non-event cards
    env = ClashParallelEnv(RustEngine())
    for seed in range(5):  # random deals the ids were not read from
        env.reset(seed=100 + seed)
        saved = json.loads(env.engine.save_state())
        for team in (0, 1):
            hand = [ids.to_catalogue[x] for x in saved["players"][team]["hand"]]
            assert hand == list(env.engine.state().players[team].hand)


def test_redeal_keeps_the_seen_cards_in_place_and_deals_the_rest_unseen(ids):
    from royalegym import RustEngine

    env, obs = _battle(5, 60)
    seen = _seen(env, obs)
    blob = env.engine.save_state()
    before = json.loads(blob)
    old = [ids.to_catalogue[x] for x in before["players"][1]["hand"] + before["players"][1]["queue"]]
    assert 0 < sum(seen[c] for c in old) < 8  # some of red's cards seen, some not
    new_blob = redeal(blob, 1, seen, np.random.default_rng(1), ids, RustEngine())
    after = json.loads(new_blob)
    new = [ids.to_catalogue[x] for x in after["players"][1]["hand"] + after["players"][1]["queue"]]
    for c_old, c_new in zip(old, new):
        if seen[c_old]:
            assert c_new == c_old  # a seen card stays where it is
        else:
            assert not seen[c_new] and c_new in ids.dealable
    assert len(set(new)) == 8 and sum(c in ids.champions for c in new) <= 1
    assert sorted(after["decks"][1]) == sorted(ids.names[c] for c in new)
    assert after["players"][0] == before["players"][0]  # the searching seat's own cards are its own
    assert after["ents"] == before["ents"] and after["players"][1]["mana"] == before["players"][1]["mana"]
    loaded = RustEngine()
    loaded.load_state(new_blob)  # loads: its state hash rebuilt
    assert list(loaded.state().players[1].hand) == new[:4]
    assert redeal(blob, 1, seen, np.random.default_rng(1), ids, RustEngine()) == new_blob  # a seed, a deal
    assert redeal(blob, 1, seen, np.random.default_rng(2), ids, RustEngine()) != new_blob
    every = np.ones_like(seen)
    assert redeal(blob, 1, every, np.random.default_rng(1), ids, RustEngine()) == blob  # nothing hidden


def test_an_empty_hand_slot_stays_empty_and_the_queue_keeps_its_length(ids):
    """Just after a play the saved hand holds an empty slot (``EMPTY``) and the queue five cards:
    both seats play random legal moves half the time, seed 0, and blue played at decision 10."""
    from royalegym import ClashParallelEnv, RustEngine

    from shared.search.hidden import EMPTY

    env = ClashParallelEnv(RustEngine())
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(11):
        acts = {}
        for seat in ("blue", "red"):
            legal = np.flatnonzero(obs[seat]["action_mask"])
            acts[seat] = int(rng.choice(legal)) if rng.random() < 0.5 else 0
        obs, *_ = env.step(acts)
    blob = env.engine.save_state()
    blue = json.loads(blob)["players"][0]
    assert EMPTY in blue["hand"] and len(blue["queue"]) == 5
    new = json.loads(redeal(blob, 0, _seen(env, obs["red"]), np.random.default_rng(3), ids, RustEngine()))
    hand, queue = new["players"][0]["hand"], new["players"][0]["queue"]
    assert [x == EMPTY for x in hand] == [x == EMPTY for x in blue["hand"]] and len(queue) == 5
    assert hand + queue != blue["hand"] + blue["queue"]  # cards red has not seen played: redealt


def test_redeal_is_an_option_of_the_suffix_and_needs_the_seen_cards():
    from shared.search.halving import evaluate

    base, spec = split_search("scripted:defend+search:8,p=2,redeal=1")
    assert spec == SearchSpec(8, playouts=2, redeal=True)
    assert with_search(base, spec) == "scripted:defend+search:8,p=2,redeal=1"
    assert split_search("scripted:defend+search:8,redeal=0")[1] == SearchSpec(8)
    with pytest.raises(ValueError, match=r"redeal='yes': redealing the enemy's unseen cards is redeal=1 \(on\) or "
                                         r"redeal=0 \(off\)"):
        split_search("scripted:defend+search:8,redeal=yes")

    class _Saves:
        stats = None

        def save(self, env, seat):
            return None, 0.0

    with pytest.raises(ValueError, match="a search with redeal=1 needs the seat's enemy_cards_seen"):
        evaluate(_Saves(), None, "blue", [0, 1], [None], 3, spec)


@pytest.mark.slow
def test_a_searched_player_that_redeals_plays_a_battle_the_same_twice(tmp_path):
    import contextlib
    import io

    from royalefleet.cli import main

    player = "scripted:defend+search:4:6,p=2,redeal=1"
    outs = []
    for k in range(2):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["eval", player, "scripted:random_legal", "--games", "2", "--profile", "tiny",
                         "--runs-dir", str(tmp_path / str(k))]) == 0
        # the score, and what the search spent (its searched and simulated decisions)
        outs.append([line.strip() for line in out.getvalue().splitlines()
                     if " vs scripted:random_legal: score " in line or "simulated decisions" in line])
    assert len(outs[0]) == 2 and "searched decisions" in outs[0][1]
    spent = lambda line: line.split(";")[0]  # noqa: E731 (the seconds after it vary)
    assert outs[0][0] == outs[1][0] and spent(outs[0][1]) == spent(outs[1][1])
