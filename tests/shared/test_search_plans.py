"""``cand=plans``: the plan moves are the rungs' own picks per card, and the option round-trips."""

import numpy as np
import pytest

from shared.search.plans import plan_candidates, slot_plans
from shared.search.spec import split_search


def _rung_pick(rung, planes):
    from royalegym.opponents import DefendOpponent, PushOpponent

    bot = {"defend": DefendOpponent(), "push": PushOpponent(), "push-left": PushOpponent(mirror=True)}[rung]
    return bot.act({"mask_planes": planes}, None, np.random.default_rng(0))


def test_plans_are_the_rungs_picks_for_each_single_card_hand():
    """With one playable slot, its plans are exactly defend's, push's and mirrored push's picks
    (RoyaleGym's own bots, over 200 random legality planes of the real 4 x 32 x 18 grid)."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        planes = np.zeros((4, 32, 18), np.int8)
        slot = int(rng.integers(4))
        planes[slot] = rng.random((32, 18)) < rng.uniform(0.02, 0.6)
        if not planes[slot].any():
            continue
        plans = slot_plans(planes)
        want = [_rung_pick(r, planes) for r in ("defend", "push", "push-left")]
        if not planes[slot][:16].any():  # no own-half cell: defend passes this slot (no-op here)
            assert want[0] == 0
            want = want[1:]
        assert plans == list(dict.fromkeys(want))


def test_plans_cover_every_slot_in_order():
    planes = np.zeros((4, 32, 18), np.int8)
    planes[1, 3, 4] = planes[1, 20, 2] = 1  # slot 1: anchor (3,4), forward cell (20,2) both lanes
    planes[3, 10, 9] = 1  # slot 3: one cell, all three plans the same
    hw = 32 * 18
    assert slot_plans(planes) == [1 + hw + 3 * 18 + 4, 1 + hw + 20 * 18 + 2, 1 + 3 * hw + 10 * 18 + 9]


def test_candidates_own_noop_plans_then_random_fill():
    planes = np.zeros((4, 32, 18), np.int8)
    planes[0, 8, 8] = planes[0, 8, 9] = planes[0, 12, 0] = 1
    legal = np.flatnonzero(np.concatenate([[1], planes.reshape(-1)]))
    own = 1 + 8 * 18 + 9
    got = plan_candidates(own, planes, legal, 8, np.random.default_rng(0))
    # own, the no-op, the anchor (8,8) (nearest (8, 8.5): x=8 wins the tie on x), forward (12,0) for both lanes
    assert got == [own, 0, 1 + 8 * 18 + 8, 1 + 12 * 18]
    assert plan_candidates(own, planes, legal, 2, np.random.default_rng(0)) == [own, 0]


def test_cand_option_round_trips_and_refuses_unknown():
    base, spec = split_search("scripted:defend+search:8:20,p=2,keep=0.1,cand=plans")
    assert (base, spec.cand, spec.suffix()) == ("scripted:defend", "plans", "+search:8:20,p=2,keep=0.1,cand=plans")
    assert split_search("scripted:defend+search:8,cand=random")[1].suffix() == "+search:8"
    with pytest.raises(ValueError, match=r"cand='tiles': candidates come from one of random, plans"):
        split_search("scripted:defend+search:8,cand=tiles")


def test_a_snapshot_searching_with_plans_tries_its_sample_then_the_plans():
    """A snapshot's own pick under ``cand=plans`` is its policy's sample (the Gumbel draw's first,
    as without plans); the plan moves follow it, not the rest of the Gumbel draw."""
    from services.evaluator.searched import SearchedPlayer, SearchedSeat
    from shared.search.lookahead import gumbel_top_k

    planes = np.zeros((4, 32, 18), np.int8)
    planes[1, 3, 4] = planes[1, 20, 2] = planes[2, 5, 5] = 1
    mask = np.concatenate([[1], planes.reshape(-1)]).astype(np.int8)
    lp = np.full(mask.size, -np.inf)
    legal = np.flatnonzero(mask)
    lp[legal] = np.log(np.arange(1, legal.size + 1) / np.arange(1, legal.size + 1).sum())

    class Policy:
        frame_stack = 1

    class Snapshot:
        id, policy = "snap:0123456789abcdef", Policy()

        def log_probs(self, obs):
            return lp

    _, spec = split_search("snap:0123456789abcdef+search:8,cand=plans")
    player = SearchedPlayer("snap:0123456789abcdef+search:8,cand=plans", Snapshot(), spec, None)
    seat = SearchedSeat(player, env=None, seat="blue", opponents=[])
    tried = []
    seat._search = lambda candidates, seed: tried.append((candidates, seed)) or candidates[0]
    hw = 32 * 18
    plans = [1 + hw + 3 * 18 + 4, 1 + hw + 20 * 18 + 2, 1 + 2 * hw + 5 * 18 + 5]  # the three legal tiles above
    for s in range(20):
        got = seat.act({"action_mask": mask, "mask_planes": planes}, np.random.default_rng(s))
        candidates, seed = tried[-1]
        own = int(gumbel_top_k(lp, 1, np.random.default_rng((seed, 0)))[0])
        assert candidates == [own, 0] + [a for a in plans if a != own] and got == own
    # own=argmax: the own pick is the policy's mode (legal[-1], the most likely), on every seed;
    # the plans follow it as before, and without plans the Gumbel draw's others follow it
    mode = int(legal[-1])
    for cand, tail in (("cand=plans,own=argmax", "plans"), ("own=argmax", "draw")):
        _, spec = split_search(f"snap:0123456789abcdef+search:3,{cand}")
        seat = SearchedSeat(SearchedPlayer(f"snap:0123456789abcdef+search:3,{cand}", Snapshot(), spec, None),
                            env=None, seat="blue", opponents=[])
        seat._search = lambda candidates, seed: tried.append((list(candidates), seed)) or candidates[0]
        for s in range(20):
            got = seat.act({"action_mask": mask, "mask_planes": planes}, np.random.default_rng(s))
            candidates, seed = tried[-1]
            assert candidates[0] == mode and got == mode and 0 in candidates and len(candidates) == 3
            if tail == "plans":
                assert candidates == [mode, 0, plans[0]]
            else:
                from shared.search.lookahead import candidates_with_noop

                drawn = gumbel_top_k(lp, 3, np.random.default_rng((seed, 0)))
                rivals = [int(a) for a in drawn if a != mode][:2]
                assert candidates == candidates_with_noop(np.array([mode, *rivals]), 3)


def test_own_argmax_round_trips_and_is_a_snapshots_option_only():
    from shared.evaluation import check_player

    base, spec = split_search("snap:0123456789abcdef+search:12:20,own=argmax,cand=plans,redeal=1")
    assert spec.own == "argmax"
    assert spec.suffix() == "+search:12:20,cand=plans,redeal=1,own=argmax"
    assert split_search("snap:0123456789abcdef+search:8,own=sample")[1].suffix() == "+search:8"
    with pytest.raises(ValueError, match=r"own='mode': a snapshot's own pick is one of sample, argmax"):
        split_search("snap:0123456789abcdef+search:8,own=mode")
    assert check_player("snap:0123456789abcdef+search:8,own=argmax") is None
    assert check_player("scripted:defend+search:8,own=argmax") == (
        "player 'scripted:defend+search:8,own=argmax': own=argmax picks from a network's policy; only a snapshot "
        "has one (snap:<id>+search:N,...,own=argmax)")

