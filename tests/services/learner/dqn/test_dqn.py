"""The DQN learner's pure parts, against cases worked by hand (issue 17's tests):
n-step windows at an episode's tail, CSR legality against the mask bits, the Double DQN target
where online and target disagree, prioritized replay (running max, sampling frequencies with a
fixed seed, importance weights, resume), ensemble bootstrap masks, the behaviour policy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from services.learner.dqn.behaviour import bootstrap_masks, epsilon, epsilon_greedy, thompson_head
from services.learner.dqn.network import QEnsemble, make_target, sync_due, sync_target
from services.learner.dqn.replay import PrioritizedReplay, check_budget, record_bytes
from services.learner.dqn.targets import double_dqn_target, ensemble_td_loss, masked_argmax, priorities_from_td
from services.learner.dqn.windows import Decision, WindowBuilder, episode_windows
from shared.batches import DqnBatch, PackedObs, PpoBatch, csr_from_mask, dense_from_csr

GAMMA = 0.5
REWARDS = np.array([1.0, 2.0, 3.0, 4.0, 5.0])


# --- n-step windows ------------------------------------------------------------------------


def test_truncation_after_five_decisions_gives_windows_3_3_3_2_1_that_bootstrap():
    w = episode_windows(REWARDS, 3, GAMMA, ended="truncated")
    assert w.start.tolist() == [0, 1, 2, 3, 4]
    assert w.span.tolist() == [3, 3, 3, 2, 1]
    assert w.discounts.tolist() == [0.125, 0.125, 0.125, 0.25, 0.5]  # gamma^3, ^3, ^3, ^2, ^1
    assert w.can_bootstrap.tolist() == [True] * 5
    # 1 + .5*2 + .25*3; 2 + .5*3 + .25*4; 3 + .5*4 + .25*5; 4 + .5*5; 5
    assert w.rewards.tolist() == [2.75, 4.5, 6.25, 6.5, 5.0]
    assert w.dones.tolist() == [False, False, True, True, True]


def test_termination_after_five_decisions_the_windows_reaching_the_end_cannot_bootstrap():
    w = episode_windows(REWARDS, 3, GAMMA, ended="terminated")
    assert w.span.tolist() == [3, 3, 3, 2, 1]
    assert w.discounts.tolist() == [0.125, 0.125, 0.0, 0.0, 0.0]
    assert w.can_bootstrap.tolist() == [True, True, False, False, False]
    assert w.rewards.tolist() == [2.75, 4.5, 6.25, 6.5, 5.0]


def test_an_open_episode_emits_only_full_windows_whose_next_decision_is_known():
    w = episode_windows(REWARDS, 3, GAMMA, ended=None)
    assert w.start.tolist() == [0, 1] and w.span.tolist() == [3, 3]
    assert w.discounts.tolist() == [0.125, 0.125] and not w.dones.any()
    assert episode_windows(REWARDS, 1, 0.9, ended="truncated").rewards.tolist() == REWARDS.tolist()


def test_bad_window_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match=r"n >= 1, got 0 \(dqn.n_step\)"):
        episode_windows(REWARDS, 0, GAMMA, ended=None)
    with pytest.raises(ValueError, match="gamma must lie in"):
        episode_windows(REWARDS, 3, 1.5, ended=None)
    with pytest.raises(ValueError, match="'done'"):
        episode_windows(REWARDS, 3, GAMMA, ended="done")


@pytest.mark.parametrize("ended", ["terminated", "truncated"])
def test_streamed_windows_equal_the_whole_episode_windows(ended):
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 5):
        for T in (1, 2, 3, 4, 9):
            rewards = rng.normal(size=T)
            rows = rng.integers(0, 256, size=(T + 1, 6), dtype=np.uint8)  # row T: the final observation
            builder = WindowBuilder(n, 0.9, 6)
            for t in range(T):
                builder.push(4, Decision(rows[t], int(t), float(rewards[t]), 4))
                if t == 1:  # a drain mid-episode loses nothing
                    early = builder.drain()
            builder.end(4, ended, rows[T])
            got = builder.drain()
            if T > 1:
                got = type(got)(*(np.concatenate([getattr(early, f), getattr(got, f)]) for f in got.__dataclass_fields__))
            want = episode_windows(rewards, n, 0.9, ended=ended)
            order = np.argsort(got.actions, kind="stable")  # actions hold the start index here
            assert got.actions[order].tolist() == want.start.tolist()
            np.testing.assert_allclose(got.rewards[order], want.rewards, rtol=1e-6)
            np.testing.assert_allclose(got.discounts[order], want.discounts, rtol=1e-6)
            assert got.can_bootstrap[order].tolist() == want.can_bootstrap.tolist()
            assert got.span[order].tolist() == want.span.tolist()
            assert np.array_equal(got.obs[order], rows[want.start])
            nxt = np.where(want.can_bootstrap[:, None], rows[want.start + want.span], 0)
            assert np.array_equal(got.next_obs[order], nxt)


# --- CSR legality --------------------------------------------------------------------------


def _packed(mask: np.ndarray, prefix: int = 5) -> np.ndarray:
    body = np.arange(len(mask) * prefix, dtype=np.uint8).reshape(len(mask), prefix)
    return np.concatenate([body, np.packbits(mask, axis=1, bitorder="little")], axis=1)


def test_csr_slices_equal_the_mask_bits_for_every_record():
    rng = np.random.default_rng(3)
    A = 2305
    mask = rng.random((40, A)) < rng.random((40, 1)) * 0.05
    mask[::7] = False  # some rows with no legal action: empty slices
    mask[:, 0] |= rng.random(40) < 0.5
    obs = PackedObs(_packed(mask), np.arange(40)[::-1].copy(), 5, A)
    ids, offsets = obs.legal_csr()
    assert ids.dtype == np.int16 and offsets[0] == 0 and offsets[-1] == mask.sum()
    for i, row in enumerate(obs.index):
        assert ids[offsets[i]:offsets[i + 1]].tolist() == np.flatnonzero(mask[row]).tolist()
    assert np.array_equal(dense_from_csr(ids, offsets, A), mask[obs.index])


def test_an_empty_next_slice_is_exactly_can_bootstrap_false():
    A = 11
    windows = episode_windows(REWARDS, 3, GAMMA, ended="terminated")
    legal = np.ones((5, A), bool)
    next_mask = np.where(windows.can_bootstrap[:, None], legal, False)  # terminal next rows carry no bits
    ids, off = csr_from_mask(legal)
    nids, noff = csr_from_mask(next_mask)
    assert ((np.diff(noff) > 0) == windows.can_bootstrap).all()
    kw = dict(obs=np.zeros((5, 4), np.uint8), next_obs=np.zeros((5, 4), np.uint8), players=np.zeros(5, np.int32),
              actions=np.zeros(5, np.int64), rewards=windows.rewards.astype(np.float32), dones=windows.dones,
              discounts=windows.discounts.astype(np.float32), masks=np.ones((5, 2), np.float32),
              legal_ids=ids, legal_offsets=off, next_legal_ids=nids, next_legal_offsets=noff, n_actions=A)
    batch = DqnBatch(can_bootstrap=windows.can_bootstrap, **kw)
    assert batch.heads == 2 and len(batch) == 5
    flipped = windows.can_bootstrap.copy()
    flipped[0] = False
    with pytest.raises(ValueError, match=r"can_bootstrap\[0\] is False but the next legal slice has 11 ids"):
        DqnBatch(can_bootstrap=flipped, **kw)
    kw["discounts"] = np.full(5, 0.125, np.float32)
    with pytest.raises(ValueError, match=r"discounts\[2\] is 0.125 where can_bootstrap is false"):
        DqnBatch(can_bootstrap=windows.can_bootstrap, **kw)


def test_ppo_batch_legality_is_the_csr_of_its_rows_mask_bits_and_checks_lengths():
    mask = np.zeros((3, 9), bool)
    mask[0, [0]] = mask[1, [0, 3, 8]] = mask[2, [0, 1]] = True
    obs = PackedObs(_packed(mask), np.array([2, 0, 1]), 5, 9)
    f32 = np.zeros(3, np.float32)
    batch = PpoBatch(obs, np.zeros(3, np.int32), np.zeros(3, np.int64), f32, f32, f32, f32,
                     mask.sum(1)[[2, 0, 1]].astype(np.int32), np.zeros(3, np.int8), {})
    assert batch.legal_ids.tolist() == [0, 1, 0, 0, 3, 8] and batch.legal_offsets.tolist() == [0, 2, 3, 6]
    with pytest.raises(ValueError, match="PpoBatch.values has 2 records, PpoBatch.actions has 3"):
        PpoBatch(obs, np.zeros(3, np.int32), np.zeros(3, np.int64), f32, f32, f32, f32[:2],
                 np.ones(3, np.int32), np.zeros(3, np.int8), {})
    with pytest.raises(ValueError, match="do not hold n_actions 17 bits"):
        PackedObs(_packed(mask), np.array([0]), 5, 17)


# --- the Double DQN target -----------------------------------------------------------------


def test_double_dqn_chooses_by_online_and_evaluates_by_target():
    online = torch.tensor([[[1.0, 5.0, 2.0]]])  # argmax: action 1
    target = torch.tensor([[[10.0, 0.0, 3.0]]])  # its own argmax would be action 0 (10)
    r, d, can = torch.tensor([1.0]), torch.tensor([0.9]), torch.tensor([True])
    all_legal = torch.tensor([[True, True, True]])
    assert double_dqn_target(r, d, can, online, target, all_legal).tolist() == [[1.0]]  # 1 + .9 * Q_target[1] = 1 + 0
    no_1 = torch.tensor([[True, False, True]])  # online's argmax over the legal set is now 2
    assert double_dqn_target(r, d, can, online, target, no_1).item() == pytest.approx(1.0 + 0.9 * 3.0)


def test_double_dqn_per_head_and_no_nan_where_the_next_slice_is_empty():
    online = torch.tensor([[[0.0, 1.0], [1.0, 0.0]], [[0.0, 1.0], [1.0, 0.0]]], dtype=torch.float16)
    target = torch.tensor([[[7.0, 3.0], [7.0, 3.0]], [[7.0, 3.0], [7.0, 3.0]]], dtype=torch.float16)
    legal = torch.tensor([[True, True], [False, False]])
    y = double_dqn_target(torch.tensor([2.0, -1.0]), torch.tensor([0.5, 0.0]), torch.tensor([True, False]),
                          online, target, legal)
    assert y.dtype == torch.float16 and torch.isfinite(y).all()
    assert y.tolist() == [[2.0 + 0.5 * 3.0, 2.0 + 0.5 * 7.0], [-1.0, -1.0]]


def test_masked_argmax_fills_with_the_dtype_minimum():
    q = torch.tensor([[-60000.0, -65504.0, 3.0]], dtype=torch.float16)
    assert masked_argmax(q, torch.tensor([[True, True, False]])).item() == 0  # -1e9 would be -inf in fp16
    assert masked_argmax(torch.tensor([[1.0, 9.0, 2.0]]), torch.tensor([[True, False, True]])).item() == 2


# --- prioritized replay --------------------------------------------------------------------


def _windows(n: int, row_bytes: int = 4, start: int = 0):
    builder = WindowBuilder(1, 0.9, row_bytes)
    for t in range(n):
        builder.push(t, Decision(np.full(row_bytes, (start + t) % 256, np.uint8), start + t, float(start + t), t))
        builder.end(t, "truncated", np.zeros(row_bytes, np.uint8))
    return builder.drain()


def test_the_behaviour_head_and_epsilon_travel_with_each_record():
    from services.learner.dqn.windows import feed_rectangle
    from services.learner.rectangle import Rectangle
    from shared.messages import GROUP_LEARNER

    rect = Rectangle(2, 2, 3, 2)
    rect.group[:] = GROUP_LEARNER
    rect.obs_valid[:] = rect.step_valid[:] = rect.acted[:] = True
    rect.rows[..., 2] = 1
    rect.terminated[1] = True
    b = WindowBuilder(1, 0.9, 3, mask_offset=2)
    feed_rectangle(b, rect, heads=np.array([[3, 1], [2, 0]]), epsilon=0.3)
    w = b.drain()
    buf = PrioritizedReplay(8, 3, 1, alpha=1.0, beta=1.0)
    buf.add(w, np.ones((len(w), 1), np.uint8))
    s = buf.sample(50, np.random.default_rng(0))
    assert sorted(zip(w.players.tolist(), w.heads.tolist())) == [(0, 2), (0, 3), (1, 0), (1, 1)]
    assert np.allclose(w.epsilons, 0.3) and sorted(buf.acted_heads[:4].tolist()) == [0, 1, 2, 3]
    assert np.array_equal(s.acted_heads, buf.acted_heads[s.index]) and np.allclose(s.epsilons, 0.3)


def test_new_rows_enter_at_the_running_max_priority():
    buf = PrioritizedReplay(8, 4, 2, alpha=1.0, beta=1.0)
    buf.add(_windows(4), np.ones((4, 2), np.uint8))
    assert buf.priority[:4].tolist() == [1.0] * 4
    buf.update_priorities(np.array([0, 2]), np.array([5.0, 0.5]))
    assert buf.max_priority == pytest.approx(5.0 + 1e-6)
    pos = buf.add(_windows(2, start=4), np.ones((2, 2), np.uint8))
    assert pos.tolist() == [4, 5] and buf.priority[4:6].tolist() == [5.0 + 1e-6] * 2
    buf.update_priorities(np.array([1]), np.array([2.0]))  # a lower write leaves the max where it was
    assert buf.max_priority == pytest.approx(5.0 + 1e-6)


def test_sampling_frequencies_follow_priorities_with_a_fixed_seed():
    buf = PrioritizedReplay(4, 4, 1, alpha=1.0, beta=1.0, eps=0.0)
    buf.add(_windows(4), np.ones((4, 1), np.uint8))
    buf.update_priorities(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_allclose(buf.probabilities(), [0.1, 0.2, 0.3, 0.4])
    draws = 200_000
    s = buf.sample(draws, np.random.default_rng(0))
    freq = np.bincount(s.index, minlength=4) / draws
    sigma = np.sqrt(0.4 * 0.6 / draws)  # the largest binomial sd
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=5 * sigma)
    # w_i = (N P_i)^-beta / (N P_min)^-beta = P_min / P_i at beta 1
    np.testing.assert_allclose(s.weights[:50], (0.1 / np.array([0.1, 0.2, 0.3, 0.4]))[s.index[:50]], rtol=1e-6)
    buf = PrioritizedReplay(4, 4, 1, alpha=0.5, beta=1.0, eps=0.0)  # p^0.5 / sum p^0.5
    buf.add(_windows(4), np.ones((4, 1), np.uint8))
    buf.update_priorities(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    sq = np.sqrt([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(buf.probabilities(), sq / sq.sum())
    freq = np.bincount(buf.sample(draws, np.random.default_rng(1)).index, minlength=4) / draws
    np.testing.assert_allclose(freq, sq / sq.sum(), atol=5 * sigma)


def test_replay_ring_ages_and_resume_continue_the_same_buffer():
    buf = PrioritizedReplay(5, 4, 3, alpha=0.6, beta=0.4)
    rng = np.random.default_rng(5)
    buf.add(_windows(7), bootstrap_masks(rng, 7, 3, 0.5))  # 7 into 5: the first two are overwritten
    assert len(buf) == 5 and buf.cursor == 2 and buf.clock == 7
    assert sorted(buf.actions.tolist()) == [2, 3, 4, 5, 6]
    buf.update_priorities(np.array([0, 3]), np.array([0.2, 3.0]))
    twin = PrioritizedReplay(5, 4, 3, alpha=0.6, beta=0.4)
    twin.load_state_dict(buf.state_dict())
    a, b = buf.sample(64, np.random.default_rng(9)), twin.sample(64, np.random.default_rng(9))
    for f in a.__dataclass_fields__:
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert a.age.min() >= 1 and a.age.max() <= 5
    with pytest.raises(ValueError, match="replay checkpoint has heads 3, this run's buffer has 2"):
        PrioritizedReplay(5, 4, 2, alpha=0.6, beta=0.4).load_state_dict(buf.state_dict())


def test_the_sum_tree_samples_like_the_cumulative_sum_over_many_random_priorities():
    from services.learner.dqn.replay import SumTree

    rng = np.random.default_rng(8)
    for capacity in (1, 2, 3, 7, 100, 1000):
        tree = SumTree(capacity)
        values = rng.random(capacity) * 10
        tree.set(np.arange(capacity), values)
        k = rng.integers(0, capacity, 5)
        values[k] = rng.random(5)  # a second write moves only those leaves' paths
        tree.set(k, values[k])
        assert tree.total == pytest.approx(values.sum()) and tree.min[1] == values.min()
        u = rng.random(500) * values.sum()
        want = np.minimum(np.searchsorted(np.cumsum(values), u, side="right"), capacity - 1)
        assert np.array_equal(tree.find(u), want)


def test_the_memory_budget_is_checked_before_anything_is_allocated():
    assert record_bytes(100, 4) == 2 * 100 + 43 + 4
    assert check_budget(1000, 100, 4, 1.0) == 247_000
    with pytest.raises(ValueError, match=r"dqn.replay_capacity 10000 records x 247 B .* exceeds dqn.replay_memory_mb 1.0: "
                                         r"lower dqn.replay_capacity to at most 4245"):
        PrioritizedReplay(10_000, 100, 4, alpha=0.6, beta=0.4, budget_mb=1.0)


# --- ensemble bootstrap masks --------------------------------------------------------------


def _ensemble(seed=0, dueling=False):
    torch.manual_seed(seed)
    return QEnsemble(torch.nn.Identity(), 4, 3, 2, dueling=dueling)


@pytest.mark.parametrize("dueling", [False, True])
def test_a_record_outside_head_h_contributes_nothing_to_its_loss_or_gradient(dueling):
    x = torch.tensor([[1.0, 0.5, -1.0, 2.0], [0.3, -0.2, 0.7, 1.0]])
    actions = torch.tensor([2, 0])
    masks = torch.tensor([[0.0, 1.0], [1.0, 1.0]])  # record 0 is outside head 0's sample
    weights = torch.tensor([1.0, 0.5])

    def head_grads(targets):
        net = _ensemble(dueling=dueling)
        loss, _ = ensemble_td_loss(net(x), actions, targets, masks, weights)
        loss.backward()
        w = net.advantage.weight.grad.view(2, 3, 4)
        return loss.item(), w[0].clone(), w[1].clone()

    base = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    moved = base.clone()
    moved[0, 0] = 1000.0  # record 0's head-0 target: outside the sample, so nothing may change
    l0, g0, g1 = head_grads(base)
    l1, h0, h1 = head_grads(moved)
    assert l0 == l1 and torch.equal(g0, h0) and torch.equal(g1, h1)
    moved[0, 1] = 1000.0  # record 0 does train head 1
    _, k0, k1 = head_grads(moved)
    assert torch.equal(g0, k0) and not torch.equal(g1, k1)
    net = _ensemble(dueling=dueling)
    loss, _ = ensemble_td_loss(net(x), actions, base, torch.tensor([[0.0, 1.0], [0.0, 1.0]]), weights)
    loss.backward()
    assert torch.count_nonzero(net.advantage.weight.grad.view(2, 3, 4)[0]) == 0


def test_td_loss_value_and_priorities_by_hand():
    q = torch.tensor([[[1.0, 2.0], [0.0, 4.0]]])  # B=1, K=2, A=2
    loss, td = ensemble_td_loss(q, torch.tensor([1]), torch.tensor([[2.5, 1.0]]), torch.tensor([[1.0, 1.0]]),
                                torch.tensor([0.5]))
    assert td.tolist() == [[0.5, -3.0]]
    assert loss.item() == pytest.approx(0.5 * (0.5 * 0.25 + (3.0 - 0.5)) / 2)  # huber(0.5)=.125, huber(3)=2.5
    assert priorities_from_td(td, torch.tensor([[0.0, 1.0]])).tolist() == [3.0]
    assert priorities_from_td(td, torch.tensor([[0.0, 0.0]])).tolist() == [1.75]


def test_target_network_is_a_frozen_copy_synced_every_period():
    online = _ensemble()
    target = make_target(online)
    assert not any(p.requires_grad for p in target.parameters())
    with torch.no_grad():
        online.advantage.bias.add_(1.0)
    assert not torch.equal(online.advantage.bias, target.advantage.bias)
    assert [s for s in range(1, 11) if sync_due(s, 4)] == [4, 8]
    sync_target(online, target)
    assert torch.equal(online.advantage.bias, target.advantage.bias)
    with pytest.raises(ValueError, match="dqn.target_update_period must be >= 1, got 0"):
        sync_due(3, 0)


# --- behaviour ----------------------------------------------------------------------------


def test_epsilon_schedule_is_linear_to_its_floor():
    kw = dict(start=1.0, floor=0.05, decay_iterations=10)
    assert [epsilon(i, **kw) for i in (0, 5, 10, 50)] == [1.0, 0.525, 0.05, 0.05]


def test_epsilon_greedy_explores_uniformly_over_the_legal_set_only():
    q = torch.tensor([[0.0, 9.0, 1.0, 2.0]]).repeat(4000, 1)
    legal = torch.tensor([[True, False, True, True]]).repeat(4000, 1)
    u = np.random.default_rng(2).random((4000, 2))
    greedy, explored = epsilon_greedy(q, legal, 0.0, u)
    assert (greedy == 3).all() and not explored.any()  # 9.0 is illegal
    acts, explored = epsilon_greedy(q, legal, 1.0, u)
    assert explored.all() and set(acts.tolist()) == {0, 2, 3}
    assert np.array_equal(acts, np.array([0, 2, 3])[(u[:, 1] * 3).astype(int)])
    mixed, explored = epsilon_greedy(q, legal, 0.25, u)
    assert abs(explored.mean() - 0.25) < 0.03 and (mixed[~explored] == 3).all()


def test_thompson_heads_are_a_pure_function_of_seed_slot_and_episode():
    heads = [thompson_head(11, slot, ep, 5) for slot in range(4) for ep in range(50)]
    assert heads == [thompson_head(11, slot, ep, 5) for slot in range(4) for ep in range(50)]
    assert set(heads) == {0, 1, 2, 3, 4}
    counts = np.bincount(heads, minlength=5)
    assert counts.min() > 20  # 200 draws over 5 heads: each ~40
    m = bootstrap_masks(np.random.default_rng(0), 10_000, 3, 0.5)
    assert m.dtype == np.uint8 and abs(m.mean() - 0.5) < 0.02
    assert bootstrap_masks(np.random.default_rng(0), 7, 3, 1.0).all()


# --- the PPO seam --------------------------------------------------------------------------


def test_ppo_batch_holds_the_trainable_cells_in_cycle_slot_order_by_reference():
    from services.learner.advantages import Advantages
    from services.learner.rectangle import Rectangle
    from services.learner.ppo.learner import ppo_batch

    rng = np.random.default_rng(4)
    T, R, A = 3, 4, 13
    rect = Rectangle(T, R, 5 + 2, 5)
    mask = rng.random((T + 1, R, A)) < 0.4
    mask[..., 0] = True
    rect.rows[:] = _packed(mask.reshape(-1, A)).reshape(T + 1, R, 7)
    rect.actions[:] = rng.integers(0, A, (T, R))
    rect.log_probs[:] = rng.normal(size=(T, R))
    rect.n_legal[:] = mask.sum(-1)
    rect.policy_lag[:] = rng.integers(0, 2, (T, R))
    trainable = rng.random((T, R)) < 0.6
    adv = Advantages(values=rng.normal(size=(T + 1, R)).astype(np.float32), final_values=np.zeros((T, R), np.float32),
                     advantages=rng.normal(size=(T, R)).astype(np.float32),
                     returns=rng.normal(size=(T, R)).astype(np.float32), trainable=trainable, nan_trips=0)
    batch = ppo_batch(rect, adv, A)
    t, r = np.nonzero(trainable)
    assert len(batch) == trainable.sum() and batch.players.tolist() == r.tolist()
    for name, want in (("actions", rect.actions), ("behavior_log_probs", rect.log_probs), ("advantages", adv.advantages),
                       ("returns", adv.returns), ("values", adv.values[:-1]), ("n_legal", rect.n_legal[:-1]),
                       ("policy_lag", rect.policy_lag)):
        assert np.array_equal(getattr(batch, name), want[t, r]), name
    assert batch.obs.rows.base is not None and np.shares_memory(batch.obs.rows, rect.rows)
    assert np.array_equal(batch.obs.packed(), rect.rows[t, r])
    for i, (ti, ri) in enumerate(zip(t, r)):
        assert batch.legal_ids[batch.legal_offsets[i]:batch.legal_offsets[i + 1]].tolist() == np.flatnonzero(mask[ti, ri]).tolist()


# --- one update over replay ----------------------------------------------------------------


def test_dqn_update_learns_terminal_rewards_writes_priorities_and_syncs_the_target():
    from services.learner.dqn.update import DqnUpdateSpec, behaviour_stats, dqn_batch, dqn_update
    from services.learner.dqn.windows import Windows

    A, F, W = 5, 4, 64
    rng = np.random.default_rng(0)
    feats = rng.integers(0, 256, (W, F), dtype=np.uint8)
    legal = rng.random((W, A)) < 0.6
    legal[:, 0] = True
    obs = np.concatenate([feats, np.packbits(legal, axis=1, bitorder="little")], axis=1)
    actions = np.array([rng.choice(np.flatnonzero(m)) for m in legal])
    value = np.array([0.0, 0.1, 0.2, 0.3, 0.4], np.float32)
    z = np.zeros(W)
    windows = Windows(obs, np.zeros_like(obs), actions.astype(np.int64), value[actions], z.astype(np.float32),
                      z.astype(bool), np.ones(W, bool), z.astype(np.int32), np.ones(W, np.int64), z.astype(np.int8),
                      z.astype(np.float32))
    replay = PrioritizedReplay(128, F + 1, 2, alpha=0.6, beta=0.4)
    replay.add(windows, np.ones((W, 2), np.uint8))
    batch = dqn_batch(replay.sample(8, np.random.default_rng(1)), F, A)
    assert not batch.can_bootstrap.any() and batch.next_legal_offsets.tolist() == [0] * 9

    torch.manual_seed(0)
    trunk = torch.nn.Sequential(torch.nn.Linear(F, 32), torch.nn.ReLU())
    online = QEnsemble(trunk, 32, A, 2)
    target = make_target(online)
    opt = torch.optim.Adam(online.parameters(), lr=1e-2)
    to_obs = lambda rows: torch.as_tensor(rows[:, :F], dtype=torch.float32) / 255.0  # noqa: E731
    spec = DqnUpdateSpec(steps=150, batch_size=32, target_period=50, max_grad_norm=10.0)
    stats = dqn_update(online, target, opt, replay, spec, np.random.default_rng(2), to_obs, mask_offset=F,
                       n_actions=A, steps_before=0, device="cpu")
    assert stats["dqn/target_syncs"] == 3.0 and stats["dqn/optimizer_steps"] == 150.0
    assert stats["dqn/replay_size"] == 64.0 and stats["dqn/replay_age_mean"] > 0
    assert "dqn/overestimation" in stats and stats["dqn/priority_spread"] > 1.0
    assert (replay.priority[:W] != 1.0).all() and np.isfinite(list(stats.values())).all()
    with torch.no_grad():
        q = online(to_obs(obs))  # (W, 2, A)
    err = (q[np.arange(W), :, actions] - torch.as_tensor(value[actions])[:, None]).abs()
    assert float(err.mean()) < 0.03, float(err.mean())
    stats2 = dqn_update(online, target, opt, replay, DqnUpdateSpec(20, 32, 50, 10.0), np.random.default_rng(3),
                        to_obs, mask_offset=F, n_actions=A, steps_before=150, device="cpu")
    assert stats2["dqn/target_syncs"] == 0.0 and stats2["dqn/td_error_abs"] < 0.05

    b = behaviour_stats(np.array([True, False, False, False]), np.array([3, 0, 0, 2]), np.array([4, 1, 5, 6]),
                        np.array([1, 1, 0, 1]), 0.05, 0.05)
    assert b == {"dqn/epsilon": 0.05, "dqn/at_epsilon_floor": 1.0, "dqn/heads_used": 2.0,
                 "dqn/explore_frac": 1 / 3, "dqn/greedy_noop_frac": 0.5}


def test_behaviour_acts_from_one_uniform_per_slot_like_central_inference():
    from services.learner.dqn.behaviour import DqnBehaviour, explore_pick

    ex, rank = explore_pick(np.array([0.0, 0.049, 0.05, 0.9, 0.025]), 0.1, np.array([4, 4, 4, 4, 3]))
    assert ex.tolist() == [True, True, True, False, True]
    assert rank.tolist()[:3] == [0, 1, 2] and rank[4] == 0  # floor(u / eps * n): 0, 1.96, 2.0; .25*3 = .75
    q = torch.tensor([[[0.0, 5.0, 1.0, 2.0], [0.0, 1.0, 9.0, 2.0]]]).repeat(3, 1, 1)  # (3, K=2, A=4)
    legal = torch.tensor([[True, False, True, True]]).repeat(3, 1)
    calls = []

    def q_rows(rows):
        calls.append(len(rows))
        return q[: len(rows)], legal[: len(rows)]

    pol = DqnBehaviour(q_rows, eps=0.1)
    rows = np.zeros((4, 3), np.uint8)
    n_legal = np.array([3, 1, 3, 3])
    acts, logp = pol.act(rows, n_legal, np.array([0.5, 0.0, 0.5, 0.01]))
    assert calls == [3]  # the forced row is not forwarded
    # mean over heads: [0, 3, 5, 2] masked (1 illegal) -> 2; row 3 explores: rank floor(.1 * 3) = 0 -> id 0
    assert acts.tolist() == [2, 0, 2, 0] and not logp.any()
    assert pol.last["explored"].tolist() == [False, False, False, True]
    acts, _ = pol.act(rows, n_legal, np.array([0.5, 0.5, 0.5, 0.5]), heads=np.array([0, 0, 1, 0]))
    assert acts.tolist() == [3, 0, 2, 3]  # head 0: [0, -, 1, 2] -> 3; head 1 -> 2


def test_a_next_row_without_legal_actions_cannot_bootstrap_whatever_the_tail_rule():
    b = WindowBuilder(2, 0.5, 3, mask_offset=2)
    rows = np.array([[1, 1, 1], [2, 2, 0], [3, 3, 1]], np.uint8)  # row 1's mask byte is empty
    for t in range(2):
        b.push(0, Decision(rows[t], t, 1.0, 0))
    b.end(0, "truncated", rows[2])
    b.push(1, Decision(rows[0], 0, 1.0, 1))
    b.end(1, "truncated", rows[1])
    w = b.drain()
    assert w.can_bootstrap.tolist() == [True, True, False]
    assert w.discounts.tolist() == [0.25, 0.5, 0.0] and not w.next_obs[2].any()


def test_a_rectangle_feeds_windows_across_iterations_and_episode_ends():
    from services.learner.dqn.windows import feed_rectangle
    from services.learner.rectangle import Rectangle
    from shared.messages import GROUP_LEARNER

    def rect_of(T, rewards, terminated, truncated, first):
        rect = Rectangle(T, 2, 3, 2)
        rect.group[:] = GROUP_LEARNER
        rect.obs_valid[:] = True
        for t in range(T + 1):
            for r in range(2):
                rect.rows[t, r] = [first + t, r, 1]
        rect.actions[:] = np.arange(T)[:, None] + first
        rect.reward[:] = rewards
        rect.terminated[:] = terminated
        rect.truncated[:] = truncated
        rect.step_valid[:] = True
        rect.acted[:] = True
        return rect

    b = WindowBuilder(2, 0.5, 3)
    # slot 0 terminates at cycle 1; slot 1 runs on into the next iteration, truncated at its cycle 0.
    r1 = rect_of(3, np.array([[1.0, 10.0], [2.0, 20.0], [4.0, 40.0]]), np.array([[0, 0], [1, 0], [0, 0]], bool),
                 np.zeros((3, 2), bool), first=0)
    feed_rectangle(b, r1)
    w = b.drain()
    got = sorted(zip(w.players.tolist(), w.actions.tolist(), w.rewards.tolist(), w.discounts.tolist(),
                     w.can_bootstrap.tolist(), w.next_obs[:, 0].tolist()))
    # slot 0: decisions 0,1 then terminal: windows (0: 1 + .5*2, no bootstrap), (1: 2, no bootstrap)
    # slot 1: window 0 closes at decision 2 (next obs is cycle 2's row): 10 + .5*20, gamma^2
    assert got == [(0, 0, 2.0, 0.0, False, 0), (0, 1, 2.0, 0.0, False, 0), (1, 0, 20.0, 0.25, True, 2)]
    state = b.state_dict()
    assert {s: [d[1] for d in q] for s, q in state.items()} == {0: [2], 1: [1, 2]}
    resumed = WindowBuilder(2, 0.5, 3)
    resumed.load_state_dict(state)
    r2 = rect_of(1, np.array([[8.0, 80.0]]), np.zeros((1, 2), bool), np.array([[False, True]]), first=3)
    r2.final_rows[(0, 1)] = np.array([99, 1, 1], np.uint8)
    for builder in (b, resumed):
        feed_rectangle(builder, r2)
    w, v = b.drain(), resumed.drain()
    for f in w.__dataclass_fields__:
        assert np.array_equal(getattr(w, f), getattr(v, f)), f
    got = sorted(zip(w.players.tolist(), w.actions.tolist(), w.rewards.tolist(), w.discounts.tolist(), w.next_obs[:, 0].tolist()))
    # slot 0: decisions 2, 3 stay open (window 2 needs decision 4's observation)
    # slot 1: window 1 closes at decision 3 (20 + .5*40, next = its row 3); truncated after decision 3:
    # windows 2 (40 + .5*80, gamma^2) and 3 (80, gamma^1) bootstrap from the final row 99
    assert got == [(1, 1, 40.0, 0.25, 3), (1, 2, 80.0, 0.25, 99), (1, 3, 80.0, 0.5, 99)]
    assert [d[1] for d in b.state_dict()[0]] == [2, 3] and 1 not in b.state_dict()


def test_replay_and_open_windows_survive_the_checkpoint_files_exactly():
    from services.learner.dqn.state_files import (replay_from_files, replay_to_files, windows_from_files,
                                                  windows_to_files)

    buf = PrioritizedReplay(6, 4, 2, alpha=0.6, beta=0.4)
    buf.add(_windows(9), bootstrap_masks(np.random.default_rng(1), 9, 2, 0.5))
    buf.update_priorities(np.array([1, 4]), np.array([2.5, 0.01]))
    files = replay_to_files(buf)
    twin = PrioritizedReplay(6, 4, 2, alpha=0.6, beta=0.4)
    replay_from_files(twin, files)
    assert replay_to_files(twin) == files
    a, b = buf.sample(40, np.random.default_rng(3)), twin.sample(40, np.random.default_rng(3))
    for f in a.__dataclass_fields__:
        assert np.array_equal(getattr(a, f), getattr(b, f)), f

    builder = WindowBuilder(3, 0.9, 4)
    for t in range(2):
        builder.push(5, Decision(np.full(4, t, np.uint8), t, 0.5 * t, 5, head=t, epsilon=0.25))
    builder.push(2, Decision(np.full(4, 7, np.uint8), 7, -1.0, 2))
    other = WindowBuilder(3, 0.9, 4)
    windows_from_files(other, windows_to_files(builder))
    assert windows_to_files(other) == windows_to_files(builder)
    for bl in (builder, other):
        bl.end(5, "truncated", np.full(4, 9, np.uint8))
        bl.end(2, "terminated", None)
    w, v = builder.drain(), other.drain()
    assert len(w) == 3 and all(np.array_equal(getattr(w, f), getattr(v, f)) for f in w.__dataclass_fields__)
    assert sorted(zip(w.actions.tolist(), w.heads.tolist(), w.epsilons.tolist())) == [(0, 0, 0.25), (1, 1, 0.25), (7, 0, 0.0)]
    with pytest.raises(ValueError, match="written with n_step 3, this run has 2: resume with the same dqn.n_step"):
        windows_from_files(WindowBuilder(2, 0.9, 4), windows_to_files(builder))
