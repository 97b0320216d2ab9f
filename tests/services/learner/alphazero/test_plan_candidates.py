"""``alphazero.candidates_from`` "plans": the learner names the prior's own sample, the no-op and
each card's plan moves as a searched decision's candidates (the ``+search`` players'
``cand=plans``), worked out by hand on a small grid; the own pick is the one the Gumbel draw of
``candidates_from`` "prior" would put first, so switching the source changes the rivals only."""

from __future__ import annotations

import numpy as np

from services.learner.alphazero.book import SearchBook, gumbel_candidates, plan_candidates_of
from shared.seeding import stream

GRID = (2, 4, 3)  # hand slots, height, width: actions 1 + slot * 12 + y * 3 + x, 25 in all


def _log_prior(legal: list[int], own: int) -> np.ndarray:
    """A prior on ``legal`` that samples ``own`` but for a Gumbel gap of 60 nats (p ~ 1e-26)."""
    lp = np.full(25, -np.inf)
    lp[legal] = -60.0
    lp[own] = 0.0
    return lp


def test_the_candidates_are_the_own_pick_the_noop_then_the_plans_of_each_slot_with_a_legal_cell():
    # slot 0: every cell legal; slot 1: only (y=3, x=0) (its enemy half: no anchor, both lane cells the same)
    legal = [0] + list(range(1, 13)) + [1 + 12 + 3 * 3 + 0]
    cand, keys = plan_candidates_of(_log_prior(legal, own=7), 6, np.random.default_rng(0), GRID)
    # slot 0: anchor nearest (y 1, x 1) in its own half -> 1 + 1*3 + 1 = 5; forward right (3, 2) -> 12;
    # forward left (3, 0) -> 10; slot 1: (3, 0) -> 1 + 12 + 9 = 22
    assert cand.tolist() == [7, 0, 5, 12, 10, 22]
    assert keys.dtype == np.float64 and keys.shape == (6,) and np.isfinite(keys).all()
    assert keys[0] == keys.max()  # the own pick is the draw's top key


def test_fewer_plans_than_candidates_fill_with_distinct_random_legal_plays():
    legal = [0] + list(range(1, 13))
    for seed in range(50):
        cand, _ = plan_candidates_of(_log_prior(legal, own=2), 8, np.random.default_rng(seed), GRID)
        assert cand[:5].tolist() == [2, 0, 5, 12, 10]
        assert len(set(cand.tolist())) == 8 and set(cand.tolist()) <= set(legal)


def test_the_own_pick_is_the_prior_sources_first_candidate_over_many_draws():
    rng = np.random.default_rng(7)
    for trial in range(200):
        lp = np.full(25, -np.inf)
        legal = np.sort(rng.choice(25, size=int(rng.integers(3, 25)), replace=False))
        lp[legal] = np.log(rng.dirichlet(np.ones(len(legal))))
        a, b = np.random.default_rng((trial, 1)), np.random.default_rng((trial, 1))
        plans, plan_keys = plan_candidates_of(lp, 4, a, GRID)
        prior, prior_keys = gumbel_candidates(lp, 4, b)
        assert plans[0] == prior[0] and plan_keys[0] == prior_keys[0]
        assert set(plans.tolist()) <= set(legal.tolist())


class _Policy:
    action_grid = GRID

    def __init__(self, lp: np.ndarray):
        self.lp = lp

    def legal_log_probs(self, rows):
        return np.tile(self.lp, (len(rows), 1))


def test_the_book_sends_the_plans_and_keeps_them_pending_for_the_check():
    legal = [0] + list(range(1, 13))
    lp = _log_prior(legal, own=9)
    book = SearchBook(c_scale=0.1, candidates=5, master_seed=11, move_keep=0.1, plans=True)
    req = book.propose(_Policy(lp), 3, 2, np.array([40]), np.array([0]), np.zeros((1, 4), np.uint8),
                       np.array([len(legal)]))
    want, keys = plan_candidates_of(lp, 5, stream(11, "search/gumbel/iteration/{iteration}/cycle/{cycle}/slot/{slot}",
                                                  iteration=3, cycle=2, slot=40), GRID)
    assert want.tolist() == [9, 0, 5, 12, 10]
    assert req["search_candidates"].tolist() == [want.tolist()]
    assert np.allclose(req["search_keys"][0], keys.astype(np.float32))
    assert book.pending[(2, 40)].candidates.tolist() == want.tolist()


def test_own_pick_argmax_puts_the_priors_mode_first_and_keeps_the_rest_of_the_draw():
    """``alphazero.own_pick`` "argmax": the first candidate is the prior's argmax, then the no-op
    and the plan cells (5, 12, 10 on this grid) as with the sample, or the Gumbel draw's others in
    key order (the no-op in place of the last when not drawn), over many random priors."""
    from shared.search.lookahead import candidates_with_noop, gumbel_top_k

    legal = [0] + list(range(1, 13))
    rng = np.random.default_rng(3)
    for trial in range(100):
        lp = np.full(25, -np.inf)
        lp[legal] = np.log(rng.dirichlet(np.ones(len(legal))))
        mode = int(np.argmax(lp))
        plans, _ = plan_candidates_of(lp, 6, np.random.default_rng((trial, 2)), GRID, own_argmax=True)
        prefix = [mode] + [c for c in (0, 5, 12, 10) if c != mode]
        assert plans.tolist()[: len(prefix)] == prefix and len(set(plans.tolist())) == 6
        drawn, keys = gumbel_candidates(lp, 4, np.random.default_rng((trial, 2)), own_argmax=True)
        raw = gumbel_top_k(lp, 4, np.random.default_rng((trial, 2)))
        want = candidates_with_noop(np.concatenate([[mode], raw[raw != mode][:3]]).astype(np.int64), 4)
        assert drawn.tolist() == list(want) and drawn[0] == mode
        assert keys.shape == (4,) and np.isfinite(keys).all()


def test_the_book_with_own_pick_argmax_sends_the_mode_first():
    legal = [0] + list(range(1, 13))
    lp = np.full(25, -np.inf)
    lp[legal] = np.log(np.arange(1, 14) / np.arange(1, 14).sum())  # the mode is 12, the last legal
    book = SearchBook(c_scale=0.1, candidates=5, master_seed=11, move_keep=0.1, plans=True, own_argmax=True)
    req = book.propose(_Policy(lp), 3, 2, np.array([40]), np.array([0]), np.zeros((1, 4), np.uint8),
                       np.array([len(legal)]))
    assert req["search_candidates"].tolist() == [[12, 0, 5, 10, req["search_candidates"][0][4]]]
    assert req["search_candidates"][0][4] not in (12, 0, 5, 10)
