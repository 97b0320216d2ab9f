"""The AlphaZero learner's pure parts by hand-worked numbers: the completed-Q improved policy and
the searched move (shared/search/targets.py), the search book's targets and moves
(services/learner/alphazero/book.py), and one update step (services/learner/alphazero/update.py)
whose weights after an SGD step of lr 1 are worked out by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from services.learner.alphazero.book import SearchBook
from services.learner.alphazero.update import az_update
from shared.batches import AlphaZeroBatch, PackedObs
from shared.search.targets import completed_q_policy, searched_move

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


def test_the_book_replaces_a_searched_move_and_keeps_its_target():
    book = SearchBook(c_scale=0.1)
    search = SimpleNamespace(search_slots=np.array([1, 0], np.int16),  # local slot 0 is forced: refused
                             search_candidates=np.array([[0, 1], [0, 2]], np.int16),
                             search_q=np.array([[0.0, 10.0], [0.0, 0.0]], np.float32))
    slots = np.array([40, 41])  # the shard's global slots; both learner seats (a mirror)
    actions, log_probs = book.apply(_Policy(), 5, slots, slots, np.zeros((2, 4), np.uint8), np.array([1, 3]),
                                    np.array([0.3, 0.5]), search, np.array([0, 2]), np.array([0.0, -1.386294], np.float32))
    assert actions.tolist() == [0, 1]  # slot 41: u 0.5 over [0.012047, 1] -> candidate 1
    assert log_probs[1] == pytest.approx(math.log(0.25))
    assert book.refused == 1 and list(book.targets) == [(5, 41)]
    t = book.targets[(5, 41)]
    assert t.ids.tolist() == [0, 1, 2] and t.changed
    np.testing.assert_allclose(t.probs, [0.011662, 0.956421, 0.031919], atol=2e-6)
    book.count_round(SimpleNamespace(search_seconds=3.0, search_steps=30, env_seconds=1.0))
    row = book.row(collect_seconds=2.0, env_steps=10)
    assert row["search/decisions"] == 1.0 and row["throughput/searched_decisions_per_second"] == 0.5
    assert row["throughput/engine_steps_per_second"] == 20.0 and row["throughput/search_time_frac"] == 0.75
    assert row["search/simulations_per_decision"] == 2.0


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
