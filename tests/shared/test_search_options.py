"""The search's options (``,p=K,sh=1,cont=,opp=,vs=,keep=``), its sequential halving and its move
rule, on fake playouts whose scores are known."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shared.evaluation import check_player
from shared.search.halving import (CONFIRM_RIVALS, evaluate, pick, pick_margin, pick_scores, playout_seed, schedule,
                                   score, survivors)
from shared.search.lookahead import Playouts, SearchStats
from shared.search.spec import DEFAULT_DEPTH, SearchSpec, split_search, with_search


def test_every_option_round_trips_through_the_id_in_canonical_order():
    base, spec = split_search("scripted:defend+search:8:20,keep=0.30,vs=2000,opp=defend/random_legal,cont=self,"
                              "sh=1,p=4")
    assert base == "scripted:defend"
    assert spec == SearchSpec(8, 20, playouts=4, halving=True, cont="self", opponents=("defend", "random_legal"),
                              value_scale=2000.0, keep=0.3)
    assert with_search(base, spec) == ("scripted:defend+search:8:20,p=4,sh=1,cont=self,opp=defend/random_legal,"
                                       "vs=2000,keep=0.3")
    # defaults written out are dropped: the id is the original search's
    base, spec = split_search(f"snap:x+search:8:{DEFAULT_DEPTH},p=1,sh=0,cont=random")
    assert with_search(base, spec) == "snap:x+search:8" and spec == SearchSpec(8)
    assert check_player("scripted:defend+search:8,p=4,opp=defend") is None
    base, spec = split_search("scripted:defend+search:12,confirm=6,cand=plans,redeal=1")
    assert spec == SearchSpec(12, cand="plans", redeal=True, confirm=6)
    assert with_search(base, spec) == "scripted:defend+search:12,cand=plans,redeal=1,confirm=6"
    assert split_search("x+search:8,confirm=0")[1] == SearchSpec(8)


@pytest.mark.parametrize("bad, why", [
    ("x+search:8,p=0", "p='0': playouts per candidate are 1..64"),
    ("x+search:8,p=65", "p='65': playouts per candidate are 1..64"),
    ("x+search:8,sh=2", "sh='2': sequential halving is sh=1 (on) or sh=0 (off)"),
    ("x+search:8,cont=mcts", "cont='mcts': the continuation is one of noop, random_legal, random, first-affordable, "
                             "defend, push, patient, self"),
    ("x+search:8,opp=defend/defend", "opp='defend/defend': simulated opponents are distinct names of"),
    ("x+search:8,opp=self", "opp='self': simulated opponents are distinct names of"),
    ("x+search:8,vs=-5", "vs='-5' must be a finite number >= 0"),
    ("x+search:8,keep=nan", "keep='nan' must be a finite number >= 0"),
    ("x+search:8,keep=abc", "keep='abc' is not a number"),
    ("x+search:8,p=2,p=3", "option 'p' given twice"),
    ("x+search:8,confirm=65", "confirm='65': confirming playouts are 0 (off) to 64"),
    ("x+search:8,confirm=-1", "confirm='-1': confirming playouts are 0 (off) to 64"),
    ("x+search:8,depth=3", "option 'depth=3': expected name=value with name one of p, sh, cont, opp, vs, keep"),
])
def test_a_bad_option_is_refused_naming_it_and_its_range(bad, why):
    with pytest.raises(ValueError) as exc:
        split_search(bad)
    assert str(exc.value).startswith(f"player {bad!r}: {why}")


def test_halving_spends_the_budget_of_n_times_k_playouts_over_ceil_log2_n_rounds():
    assert schedule(8, SearchSpec(8, playouts=4)) == [4]  # no halving: every candidate its K playouts
    # 32 playouts over 3 rounds: 8 x 1, then the 24 left: 4 x 3 and 2 x 6
    assert schedule(8, SearchSpec(8, playouts=4, halving=True)) == [1, 3, 6]
    assert schedule(2, SearchSpec(2, playouts=3, halving=True)) == [3]
    for k in range(3, 65):
        for p in (1, 2, 4, 8):
            per, alive, spent = schedule(k, SearchSpec(k, playouts=p, halving=True)), k, 0
            for n in per:
                spent, alive = spent + n * alive, -(-alive // 2)
            # never over budget, unless one playout a survivor a round is already more
            assert spent <= max(k * p, sum(-(-k // 2 ** r) for r in range(len(per)))), (k, p)
            assert spent >= k * p - 2 * (len(per) + 1) or spent == sum(-(-k // 2 ** r) for r in range(len(per)))
            assert len(per) == int(np.ceil(np.log2(k)))


def test_survivors_keep_the_better_half_and_always_the_players_own_pick():
    means = np.array([-5.0, 3.0, 1.0, 9.0, 2.0])
    assert survivors(means, np.ones(5, bool)).tolist() == [True, True, False, True, False]
    assert survivors(np.array([9.0, 1.0, 2.0, 3.0]), np.ones(4, bool)).tolist() == [True, False, False, True]


def test_the_move_leaves_the_own_pick_only_for_a_difference_above_keep():
    means = np.array([0.125, 0.375, 0.25])  # exact in binary: 1 beats 0 by exactly 0.25
    alive = np.ones(3, bool)
    assert pick(means, alive, 0.0) == 1
    assert pick(means, alive, 0.2) == 1
    assert pick(means, alive, 0.25) == 0  # by exactly keep is not enough
    assert pick(means, alive, 0.3) == 0
    assert pick(np.array([0.0, 0.0]), np.ones(2, bool), 0.0) == 0  # a tie is the player's
    assert pick(np.array([0.0, 5.0]), np.array([True, False]), 0.0) == 0  # an eliminated one cannot win


def test_the_fixed_scale_is_tanh_of_the_board_difference():
    assert score(np.array([0.0, 2000.0, -1e6]), 2000.0) == pytest.approx([0.0, np.tanh(1.0), -1.0])
    assert score(np.array([3.0, -7.0]), 0.0).tolist() == [3.0, -7.0]


class _FakeLookahead:
    """Playouts whose board difference is ``true[candidate] + noise(playout seed)``: the same noise
    for every candidate of a playout (common random numbers), recorded per call."""

    def __init__(self, true: dict, noise: float = 0.0):
        self.true, self.noise, self.calls, self.stats = true, noise, [], SearchStats()

    def save(self, env, seat):
        return ("snap", 0.0)

    def simulate(self, env, seat, candidates, opponent, seed, *, count=True, saved=None):
        self.calls.append((tuple(candidates), opponent, seed))
        eps = np.random.default_rng(seed).normal(0.0, self.noise) if self.noise else 0.0
        return Playouts(np.array([self.true[c] + eps for c in candidates], np.float64))


def test_evaluate_without_options_is_one_playout_each_and_the_best_board_ties_to_the_first():
    fake = _FakeLookahead({0: 0.0, 5: 300.0, 9: 300.0, 2: -50.0})
    ev = evaluate(fake, None, "blue", [2, 0, 5, 9], ["battle-opponent"], 77, SearchSpec(4))
    assert fake.calls == [((2, 0, 5, 9), "battle-opponent", 77)]  # one playout on the decision's own seed
    assert ev.index == 2 and ev.visits.tolist() == [1, 1, 1, 1] and ev.root == 300.0
    assert fake.stats.decisions == 1 and fake.stats.chose_other == 1


def test_evaluate_halves_toward_the_close_candidates_with_own_seeds_and_rotating_opponents():
    true = {0: 0.0, 1: 900.0, 2: 1000.0, 3: -400.0, 4: -300.0, 5: 100.0, 6: -900.0, 7: 50.0}
    fake = _FakeLookahead(true)
    spec = SearchSpec(8, playouts=4, halving=True, opponents=("defend", "random"), value_scale=2000.0)
    ev = evaluate(fake, None, "red", list(range(8)), ["d", "r"], 10, spec)
    assert ev.visits.tolist() == [10, 4, 10, 1, 1, 4, 1, 1]
    assert ev.index == 2  # the best survives every round and wins
    assert ev.means[2] == pytest.approx(np.tanh(0.5))
    seeds = [c[2] for c in fake.calls]
    assert seeds[0] == 10 and len(set(seeds)) == max(ev.visits)  # playout j: one seed for every candidate
    assert seeds == [playout_seed(10, j) for j in range(len(seeds))]
    assert [c[1] for c in fake.calls] == [["d", "r"][(10 + j) % 2] for j in range(len(seeds))]
    # round 1 everyone, round 2 the better half with the own pick kept: {0, 1, 2, 5}, round 3 {0, 2}
    assert [c[0] for c in fake.calls] == [tuple(range(8))] + [(0, 1, 2, 5)] * 3 + [(0, 2)] * 6


def test_under_pure_noise_keep_leaves_the_own_pick_and_two_seeds_agree():
    """Candidates all equal, each playout +-N(0, 600 HP): without keep the move is whichever
    candidate the noise favours (two seeds rarely agree); with p=4, halving, the fixed scale and
    keep 0.3 the player's own pick is kept at nearly every decision (two seeds agree on >= 90 %)."""
    rng = np.random.default_rng(5)

    class _Noisy(_FakeLookahead):
        def simulate(self, env, seat, candidates, opponent, seed, *, count=True, saved=None):
            g = np.random.default_rng(seed)
            return Playouts(g.normal(0.0, 600.0, len(candidates)))

    old, new = SearchSpec(8), SearchSpec(8, playouts=4, halving=True, value_scale=2000.0, keep=0.3)
    agree = {"old": 0, "new": 0}
    for _ in range(200):
        s1, s2 = (int(x) for x in rng.integers(0, 2**62, 2))
        for name, spec in (("old", old), ("new", new)):
            a = evaluate(_Noisy({}), None, "blue", list(range(8)), [None], s1, spec).index
            b = evaluate(_Noisy({}), None, "blue", list(range(8)), [None], s2, spec).index
            agree[name] += int(a == b)
    assert agree["old"] < 60  # ~1/8 by chance
    assert agree["new"] >= 180  # 192 of 200 as written (the old rule: 18)


def test_the_pick_margin_is_the_best_survivor_over_the_runner_up_with_keep_on_the_own_pick():
    # survivors 0 and 1 (4 playouts each); candidate 2 lost a round (its 0.9 of 2 playouts does not count)
    assert pick_margin(np.array([0.1, 0.3, 0.9]), np.array([4, 4, 2]), 0.1) == pytest.approx(0.1)
    assert pick_margin(np.array([0.1, 0.6, 0.9]), np.array([4, 4, 2]), 0.1) == pytest.approx(0.4)
    assert pick_margin(np.array([0.5, 0.2, 0.1]), np.array([4, 4, 4]), 0.0) == pytest.approx(0.3)
    assert pick_margin(np.array([0.5, 0.2]), np.array([3, 1]), 0.1) == 0.0  # one survivor



class _LuckyLookahead(_FakeLookahead):
    """``true`` board differences, plus ``luck[c]`` on the playouts numbered below ``lucky_below``
    of the decision searched at ``seed0`` (playout j is recognised by its seed): a candidate that
    looks good on the search's own playouts and not on fresh ones."""

    def __init__(self, true: dict, luck: dict, seed0: int, lucky_below: int):
        super().__init__(true)
        self.j_of = {playout_seed(seed0, j): j for j in range(128)}
        self.luck, self.lucky_below = luck, lucky_below

    def simulate(self, env, seat, candidates, opponent, seed, *, count=True, saved=None):
        j = self.j_of[seed]
        self.calls.append((tuple(candidates), opponent, j))
        return Playouts(np.array([self.true[c] + (self.luck.get(c, 0.0) if j < self.lucky_below else 0.0)
                                  for c in candidates], np.float64))


def test_a_departure_that_fresh_playouts_do_not_repeat_is_not_played():
    """Candidate 5 is lucky on the halving's 4 playouts (+1,500 HP) and worth nothing more than the own
    pick on fresh ones: the halving plays it, confirm=3 plays the own pick, from three fresh playouts
    (j 4, 5, 6) of the own pick and the two best others of the last two rounds (5 and 7), and the
    recorded means and visits make the same move under the pick rule."""
    true = {c: 0.0 for c in range(12)}
    true[7] = 300.0  # a real but small gain: under keep in tanh units (tanh(0.15) = 0.149 < 0.2)
    spec = SearchSpec(12, playouts=2, halving=True, value_scale=2000.0, keep=0.2)
    plain = evaluate(_LuckyLookahead(true, {5: 1500.0}, 99, 4), None, "blue", list(range(12)), ["d"], 99, spec)
    assert plain.index == 5 and plain.visits.max() == 4
    fake = _LuckyLookahead(true, {5: 1500.0}, 99, 4)
    ev = evaluate(fake, None, "blue", list(range(12)), ["d"], 99, replace(spec, confirm=3))
    assert ev.index == 0 and fake.stats.unconfirmed == 1 and fake.stats.chose_other == 0
    assert fake.calls[-3:] == [((0, 5, 7), "d", 4), ((0, 5, 7), "d", 5), ((0, 5, 7), "d", 6)]
    assert {c[2] for c in fake.calls[:-3]} == {0, 1, 2, 3}  # the halving's own playouts, none reused
    assert ev.visits[[0, 5, 7]].tolist() == [7, 7, 7] and ev.visits.max() == 7
    assert ev.means[[0, 5, 7]] == pytest.approx([0.0, 0.0, np.tanh(0.15)])  # the fresh playouts alone
    alive, scores = pick_scores(ev.means, ev.visits, spec.keep)
    assert np.flatnonzero(alive).tolist() == [0, 5, 7] and int(np.argmax(np.where(alive, scores, -np.inf))) == 0


def test_a_departure_that_repeats_stands_and_a_kept_own_pick_is_not_confirmed():
    true = {c: 0.0 for c in range(12)}
    true[3] = 1500.0
    spec = SearchSpec(12, playouts=2, halving=True, value_scale=2000.0, keep=0.2, confirm=3)
    fake = _LuckyLookahead(true, {}, 7, 0)
    ev = evaluate(fake, None, "red", list(range(12)), ["d"], 7, spec)
    assert ev.index == 3 and fake.stats.unconfirmed == 0 and fake.stats.chose_other == 1
    assert ev.means[3] == pytest.approx(np.tanh(0.75)) and ev.visits[3] == 7
    assert len(fake.calls[-1][0]) == 1 + CONFIRM_RIVALS
    # nothing beats the own pick: no confirming playouts at all
    fake = _LuckyLookahead({c: 0.0 for c in range(12)}, {}, 7, 0)
    ev = evaluate(fake, None, "red", list(range(12)), ["d"], 7, spec)
    assert ev.index == 0 and ev.visits.max() == 4 and max(c[2] for c in fake.calls) == 3


def test_under_pure_noise_confirmation_leaves_the_own_pick_far_more_often():
    """Equal candidates, each playout +-N(0, 600 HP) for every candidate apart: most departures the
    halving makes on noise are not repeated by six fresh playouts (as written: 272 of 400 decisions
    leave the own pick without confirmation, 109 with it)."""
    rng = np.random.default_rng(11)

    class _Noisy(_FakeLookahead):
        def simulate(self, env, seat, candidates, opponent, seed, *, count=True, saved=None):
            return Playouts(np.random.default_rng(seed).normal(0.0, 600.0, len(candidates)))

    spec = SearchSpec(12, playouts=2, halving=True, value_scale=2000.0, keep=0.1)
    left = {0: 0, 6: 0}
    for _ in range(400):
        seed = int(rng.integers(0, 2**62))
        for c in left:
            left[c] += int(evaluate(_Noisy({}), None, "blue", list(range(12)), [None], seed,
                                    replace(spec, confirm=c)).index != 0)
    assert left[0] > 200 and left[6] < left[0] / 2, left
