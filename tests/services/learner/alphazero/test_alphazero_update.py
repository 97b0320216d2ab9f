"""The AlphaZero learner's pure parts by hand-worked numbers: the completed-Q improved policy and
Gumbel AlphaZero's move (shared/search/targets.py), the search book's Gumbel-top-k candidates and
its targets (services/learner/alphazero/book.py), one update step
(services/learner/alphazero/update.py) whose weights after an SGD step of lr 1 are worked out by
hand, and replay's refusal of a searched learner seat."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from services.learner.alphazero.book import SearchBook, gumbel_candidates
from services.learner.alphazero.update import az_update
from shared.batches import AlphaZeroBatch, PackedObs
from shared.search.targets import completed_q_policy, gumbel_move_index, searched_move
from shared.seeding import stream

LOG_PRIOR = np.array([math.log(0.5), math.log(0.25), math.log(0.25), -np.inf])  # action 3 illegal


def test_completed_q_policy_by_hand():
    # candidates {0, 1} scored 0 and 10; v_mix = (0.5 * 0 + 0.25 * 10) / 0.75 = 10/3 for action 2;
    # rescaled [0, 1, 1/3]; sigma = (50 + 1) * 0.1 * that = [0, 5.1, 1.7];
    # pi ~ [0.5, 0.25 e^5.1, 0.25 e^1.7] = [0.5, 41.005475, 1.368487] / 42.873962
    pi = completed_q_policy(LOG_PRIOR, np.array([0, 1]), np.array([0.0, 10.0]), c_scale=0.1)
    np.testing.assert_allclose(pi, [0.011662, 0.956421, 0.031919, 0.0], atol=2e-6)
    # every candidate scored the same: nothing learned, the target is the prior
    np.testing.assert_allclose(completed_q_policy(LOG_PRIOR, np.array([0, 2]), np.array([7.0, 7.0]), c_scale=0.1),
                               [0.5, 0.25, 0.25, 0.0], atol=1e-12)
    with pytest.raises(ValueError, match="distinct legal"):
        completed_q_policy(LOG_PRIOR, np.array([0, 3]), np.array([0.0, 1.0]), c_scale=0.1)


def test_searched_move_inverse_cdf_over_the_candidates():
    pi = np.array([0.011662, 0.956421, 0.031919, 0.0])
    # over candidates [0, 1]: cdf [0.011662 / 0.968083, 1] = [0.012047, 1]
    assert searched_move(pi, np.array([0, 1]), 0.012) == 0
    assert searched_move(pi, np.array([0, 1]), 0.0121) == 1
    assert searched_move(pi, np.array([0, 1]), 0.999999) == 1


class _Model(torch.nn.Module):
    """logits = W (a (3,) parameter), V = b: the update's arithmetic with nothing else in it."""

    def __init__(self):
        super().__init__()
        self.actor = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(3))])
        self.critic = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(()))])

    def actor_logits(self, obs):
        return self.actor[0].expand(len(obs["x"]), 3)

    def value(self, obs):
        return self.critic[0].expand(len(obs["x"]))


def _batch(weights, ids, offsets, targets, z):
    n = len(z)
    return AlphaZeroBatch(obs=PackedObs(np.zeros((n, 2), np.uint8), np.arange(n), 1, 3), players=np.zeros(n, np.int32),
                          policy_targets=np.asarray(targets, np.float32), value_targets=np.asarray(z, np.float32),
                          policy_weights=np.asarray(weights, np.float32), legal_ids=np.asarray(ids, np.int16),
                          legal_offsets=np.asarray(offsets, np.int64), n_actions=3)


PPO = SimpleNamespace(n_epochs=1, batch_size=2, minibatch_size=2, vf_coef=0.5, max_grad_norm=100.0)


def _run(batch):
    model = _Model()
    opts = torch.optim.SGD(model.actor.parameters(), lr=1.0), torch.optim.SGD(model.critic.parameters(), lr=1.0)
    stats = az_update(model, *opts, batch, lambda cells: {"x": torch.zeros(len(cells))}, PPO,
                      lambda e: np.random.default_rng(e), torch.device("cpu"))
    return model, stats


def test_one_update_step_by_hand():
    # row 0: legal {0, 1}, target [0.75, 0.25], weight 1; row 1: value-only. z = [1, 3].
    model, stats = _run(_batch([1.0, 0.0], [0, 1], [0, 2, 2], [0.75, 0.25], [1.0, 3.0]))
    # p = softmax over {0, 1} of [0, 0] = [0.5, 0.5]: CE = ln 2; d CE / d logits = p - pi = [-0.25, 0.25, 0]
    assert stats["az/policy_loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert stats["az/kl_target"] == pytest.approx(math.log(2) - (-(0.75 * math.log(0.75) + 0.25 * math.log(0.25))), abs=1e-6)
    np.testing.assert_allclose(model.actor[0].detach().numpy(), [0.25, -0.25, 0.0], atol=1e-7)
    # value: 0.5 * ((0 - 1)^2 + (0 - 3)^2) / 2; d/db = 0.5 * 2 * ((0 - 1) + (0 - 3)) / 2 = -2 -> b = 2
    assert model.critic[0].item() == pytest.approx(2.0)
    assert stats["az/value_loss"] == pytest.approx(5.0)
    assert stats["az/policy_rows"] == 1.0 and stats["az/actor_optimizer_steps"] == 1.0


def test_value_only_rows_leave_the_actor_alone():
    model, stats = _run(_batch([0.0, 0.0], [], [0, 0, 0], [], [1.0, 3.0]))
    np.testing.assert_array_equal(model.actor[0].detach().numpy(), [0.0, 0.0, 0.0])
    assert "az/policy_loss" not in stats and stats["az/actor_optimizer_steps"] == 0.0
    assert model.critic[0].item() == pytest.approx(2.0)


class _Policy:
    def legal_log_probs(self, rows):
        return np.tile(LOG_PRIOR, (len(rows), 1))


def test_gumbel_move_index_by_hand():
    # keys [0, -1], q [0, 10]: sigma = 5.1 * [0, 1] -> [0, 4.1]: candidate 1
    assert gumbel_move_index(np.array([0.0, -1.0]), np.array([0.0, 10.0]), c_scale=0.1) == 1
    # keys [0, -6]: [0, -0.9]: candidate 0; tied scores: the keys alone decide
    assert gumbel_move_index(np.array([0.0, -6.0]), np.array([0.0, 10.0]), c_scale=0.1) == 0
    assert gumbel_move_index(np.array([-2.0, -1.0]), np.array([3.0, 3.0]), c_scale=0.1) == 1


def test_gumbel_candidates_are_the_top_k_of_the_keys_with_the_no_op():
    lp = np.log(np.array([0.01, 0.5, 0.29, 0.2]))
    rng = np.random.default_rng(4)
    g = np.random.default_rng(4).gumbel(size=4)
    cand, keys = gumbel_candidates(lp, 2, rng)
    top = np.argsort(-(lp + g), kind="stable")[:2]
    want = top if 0 in top else np.array([top[0], 0])
    assert cand.tolist() == want.tolist()
    np.testing.assert_allclose(keys, (lp + g)[want])
    assert gumbel_candidates(np.array([0.0, -np.inf]), 8, rng)[0].tolist() == [0]


def test_the_books_candidates_are_the_searchs_gumbel_top_k_over_many_priors():
    """One Gumbel-top-k (issue 36): over 500 random priors (illegal actions among them, the no-op
    legal or not), k and seeds, the book's candidates are ``shared.search.lookahead``'s draw on
    the same stream with the no-op put last when legal and not drawn, and each key is the
    candidate's log prior plus its Gumbel noise."""
    from shared.search.lookahead import gumbel_top_k

    r = np.random.default_rng(36)
    for _ in range(500):
        A, k, seed = int(r.integers(1, 12)), int(r.integers(1, 6)), int(r.integers(2**31))
        legal = r.random(A) < 0.6
        legal[0] = r.random() < 0.9
        legal[int(r.integers(A))] = True
        lp = np.full(A, -np.inf)
        lp[legal] = np.log(r.dirichlet(np.ones(int(legal.sum()))))
        cand, keys = gumbel_candidates(lp, k, np.random.default_rng(seed))
        drawn = gumbel_top_k(lp, k, np.random.default_rng(seed)).tolist()
        want = drawn if 0 in drawn or not legal[0] else drawn[: k - 1] + [0]
        assert cand.tolist() == want
        g = np.random.default_rng(seed).gumbel(size=int(legal.sum()))
        np.testing.assert_array_equal(keys, lp[cand] + g[np.searchsorted(np.flatnonzero(legal), cand)])


def test_the_book_proposes_candidates_and_completes_the_target_when_the_scores_arrive():
    book = SearchBook(c_scale=0.1, candidates=2, master_seed=9)
    learner, local = np.array([40, 41]), np.array([0, 1])  # a mirror battle's two seats
    req = book.propose(_Policy(), 3, 5, learner, local, np.zeros((2, 4), np.uint8), np.array([1, 3]))
    assert req["search_slots"].tolist() == [1]  # slot 40 is forced: not searched
    cand = req["search_candidates"][0]
    assert 0 in cand.tolist() and len(set(cand.tolist())) == 2 and set(cand.tolist()) <= {0, 1, 2}
    g = stream(9, "search/gumbel/iteration/{iteration}/cycle/{cycle}/slot/{slot}", iteration=3, cycle=5,
               slot=41).gumbel(size=3)
    np.testing.assert_allclose(req["search_keys"][0], (LOG_PRIOR[:3] + g)[cand], rtol=1e-6)
    # the rollout scored candidate cand[1] 10 and the no-op-or-other 0 and played the rule's move
    q = np.array([[0.0, 10.0]], np.float32)
    move = int(cand[gumbel_move_index(req["search_keys"][0], q[0], c_scale=0.1)])
    wrong = book.complete(5, np.array([41]), cand[None], q, np.array([int(cand[0]) if move != cand[0] else int(cand[1])]))
    assert wrong == [] and book.refused == 1  # a move the rule would not play is refused
    book.propose(_Policy(), 3, 5, learner, local, np.zeros((2, 4), np.uint8), np.array([1, 3]))
    done = book.complete(5, np.array([41]), cand[None], q, np.array([move]))
    assert done == [(41, move, pytest.approx(float(LOG_PRIOR[move])))]
    t = book.targets[(5, 41)]
    np.testing.assert_allclose(t.probs, completed_q_policy(LOG_PRIOR, cand, q[0].astype(np.float64), c_scale=0.1)[:3],
                               rtol=1e-6)
    book.count_round(SimpleNamespace(search_seconds=3.0, search_steps=30, env_seconds=1.0))
    row = book.row(collect_seconds=2.0, env_steps=10)
    assert row["search/decisions"] == 1.0 and row["throughput/searched_decisions_per_second"] == 0.5
    assert row["throughput/engine_steps_per_second"] == 20.0 and row["throughput/search_time_frac"] == 0.75
    assert row["search/simulations_per_decision"] == 2.0 and row["search/refused"] == 1.0


def test_the_row_reports_the_prior_the_network_plays_beside_the_searched_move():
    """Issue 37 item 4: three searched decisions whose live-actor samples were 0, 0 and 2 and
    whose moves were 0, 1 and 2: the prior played the no-op on 2/3, the search on 1/3, and they
    agreed on 2/3. A book not given the samples reports none of the three keys."""
    book = SearchBook(c_scale=0.1, candidates=3, master_seed=9)
    rows, n_legal = np.zeros((3, 4), np.uint8), np.array([3, 3, 3])
    slots = np.array([10, 11, 12])
    req = book.propose(_Policy(), 1, 0, slots, np.arange(3), rows, n_legal, np.array([0, 0, 2]))
    cands, keys = req["search_candidates"], req["search_keys"]
    want = {10: 0, 11: 1, 12: 2}  # the move each slot's scores make the rule play
    q = np.zeros((3, 3), np.float32)
    for i, slot in enumerate(slots.tolist()):
        q[i, cands[i].tolist().index(want[slot])] = 1e3  # a large score: the rule plays that candidate
    moves = np.array([int(cands[i][gumbel_move_index(keys[i], q[i], c_scale=0.1)]) for i in range(3)])
    assert moves.tolist() == [0, 1, 2]
    assert len(book.complete(0, slots, cands, q, moves)) == 3
    row = book.row(collect_seconds=1.0, env_steps=3)
    assert (row["search/prior_noop_rate"], row["search/move_noop_rate"], row["search/prior_agree_frac"]) == (
        2 / 3, 1 / 3, 2 / 3)
    book.begin()
    book.propose(_Policy(), 1, 0, slots, np.arange(3), rows, n_legal)
    book.complete(0, slots, cands, q, moves)
    assert not {"search/prior_noop_rate", "search/move_noop_rate", "search/prior_agree_frac"} & set(book.row(1.0, 3))


def test_replay_refuses_a_learner_seat_of_an_alphazero_run_by_name(tmp_path):
    from royalefleet.replay_training import NotReplayable, plan
    from shared.config import load_config
    from shared.messages import EpisodeProvenance, EpisodeRecord

    rec = EpisodeRecord(battle=0, ordinal=0, seat="blue", role="scripted", player="learner", opponent="scripted:noop",
                        outcome=1, truncated=False, episode_steps=3, episode_ticks=30, own_crowns=0, enemy_crowns=0,
                        own_tower_hp_frac=1.0, enemy_tower_hp_frac=1.0, elixir_leak_steps=0, elixir_count_exact=True,
                        cards_played=0, undiscounted_return=0.0, iteration=1,
                        provenance=EpisodeProvenance(spans=[]))
    cfg = load_config({"profile": "tiny", "learner": {"algorithm": "alphazero"}})
    with pytest.raises(NotReplayable, match=r"blue \(learner\): its choice decisions played the rollouts' search"):
        plan(cfg, [SimpleNamespace(record=rec)], rec, tmp_path, None)


def test_the_books_means_do_not_depend_on_the_order_rounds_arrived_in():
    from services.learner.alphazero.book import SearchTarget

    # entropies 1e16, -1e16, 1 summed in (cycle, slot) order: (1e16 - 1e16) + 1 = 1 -> mean 1/3;
    # in arrival order 1, -1e16, 1e16 the 1 is lost: mean 0
    values = {(0, 0): 1e16, (0, 1): -1e16, (0, 2): 1.0}
    rows = []
    for keys in (sorted(values), sorted(values, reverse=True)):
        book = SearchBook(c_scale=0.1, candidates=2, master_seed=0)
        book.targets = {k: SearchTarget(np.arange(2, dtype=np.int16), np.full(2, 0.5, np.float32), values[k], 0.0, False)
                        for k in keys}
        rows.append(book.row(collect_seconds=1.0, env_steps=1))
    assert rows[0]["search/target_entropy"] == rows[1]["search/target_entropy"] == 1 / 3


def test_leaf_values_are_the_n_step_return_with_the_critic_at_the_leaf_by_hand():
    """A LeafQuery's scores: returns / reward divisor + discount * V(leaf), worked by hand, with
    the critic's forward over the query's rows in their order; malformed arrays are refused by name."""
    seen = []

    class Critic:
        def values(self, rows):
            seen.append(rows.copy())
            return np.array([2.0, -1.0, 0.5], np.float32)

    book = SearchBook(c_scale=0.1, candidates=2, master_seed=0)
    book.begin(reward_divisor=4.0)
    rows = np.arange(12, dtype=np.uint8).reshape(3, 4)
    q = book.leaf_values(Critic(), rows, np.array([1.0, -2.0, 0.0]), np.array([0.5, 0.0, 1.0]), row_bytes=4)
    # 1/4 + 0.5*2 = 1.25; -2/4 + 0 = -0.5; 0 + 1*0.5 = 0.5
    np.testing.assert_array_equal(q, np.array([1.25, -0.5, 0.5], np.float32))
    assert q.dtype == np.float32 and book.critic_leaves == 3
    np.testing.assert_array_equal(seen[0], rows)
    assert book.row(1.0, 10)["search/critic_leaves"] == 3.0
    for args, match in [((rows[:, :3], np.zeros(3), np.zeros(3)), r"leaf_rows is \(3, 3\), expected"),
                        ((rows, np.array([0.0, np.nan, 0.0]), np.zeros(3)), "leaf_return must be"),
                        ((rows, np.zeros(3), np.zeros(2)), "leaf_discount must be"),
                        ((rows, np.zeros(3), np.array([0.0, 1.5, 0.0])), r"leaf_discount must lie in \[0, 1\]"),
                        ((None, np.zeros(3), np.zeros(3)), "carries leaf_rows")]:
        with pytest.raises(ValueError, match=match):
            book.leaf_values(Critic(), *args, row_bytes=4)
    assert book.critic_leaves == 3  # a refused query values nothing
    book.begin()
    assert book.reward_divisor == 1.0 and "search/critic_leaves" not in book.row(1.0, 10)
