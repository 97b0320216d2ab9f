"""K bootstrapped heads and dueling in the DQN learner (issue 17), against numbers worked by
hand: the Double DQN target per head at K = 2, the masked ensemble loss, the dueling
combination over the legal set (illegal entries at torch.finfo(dtype).min), bootstrap masks
from replay reaching the loss (a head outside a record's sample is not moved by it), the
K-head pointer network against the snapshot actor it writes (the same masked policy), and the
Thompson draw per (seat, episode) through central inference's episode keys."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
import torch

from services.learner.dqn.behaviour import EPISODE_KEYS, MEAN_HEAD, DqnBehaviour, thompson_head, thompson_heads
from services.learner.dqn.network import QEnsemble, dueling_combine, make_target
from services.learner.dqn.pointer_q import PointerQ, played_actor
from services.learner.dqn.replay import PrioritizedReplay
from services.learner.dqn.targets import double_dqn_target, ensemble_td_loss, masked_argmax
from services.learner.dqn.update import DqnUpdateSpec, dqn_update
from services.learner.dqn.windows import Windows
from shared.config import NetConfig
from shared.envs import ObsSpec
from shared.nn.distribution import MaskedCategorical
from shared.nn.model import ActorCritic

MIN32 = torch.finfo(torch.float32).min


# --- the target and the loss per head, K = 2 ---------------------------------------------------


def test_double_dqn_target_per_head_at_k2_by_hand():
    # record 0 bootstraps (discount 0.25), record 1 cannot (its next slice is empty).
    online = torch.tensor([[[1.0, 3.0, 2.0], [5.0, 0.0, 4.0]],
                           [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    target = torch.tensor([[[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]],
                           [[7.0, 7.0, 7.0], [7.0, 7.0, 7.0]]])
    next_legal = torch.tensor([[False, True, True], [False, False, False]])
    y = double_dqn_target(torch.tensor([1.0, -1.0]), torch.tensor([0.25, 0.0]), torch.tensor([True, False]),
                          online, target, next_legal)
    # head 0: online's legal argmax is id 1 (3 > 2) -> target 20 -> 1 + .25 * 20 = 6
    # head 1: id 0 (5.0) is illegal; online picks id 2 (4 > 0) -> target 60 -> 1 + .25 * 60 = 16
    assert y.tolist() == [[6.0, 16.0], [-1.0, -1.0]]


def test_masked_ensemble_loss_at_k2_by_hand():
    q = torch.tensor([[[0.0, 2.0], [1.0, 1.0]],
                      [[3.0, 0.0], [0.5, 4.0]]], requires_grad=True)  # (B=2, K=2, A=2)
    actions = torch.tensor([1, 0])
    y = torch.tensor([[2.5, 4.0], [3.0, -0.5]])
    masks = torch.tensor([[1.0, 0.0], [1.0, 1.0]])  # record 0 is outside head 1's sample
    weights = torch.tensor([1.0, 0.5])
    loss, td = ensemble_td_loss(q, actions, y, masks, weights)
    # Q(s,a): [[2, 1], [3, .5]]; td = y - Q = [[.5, 3], [0, -1]]
    assert td.tolist() == [[0.5, 3.0], [0.0, -1.0]]
    # huber: .125 (|.5|), excluded, 0, .5 (|1|: 0.5 * 1^2); weights 1, -, .5, .5; 3 included pairs
    assert loss.item() == pytest.approx((0.125 + 0.0 + 0.5 * 0.5) / 3)
    loss.backward()
    assert q.grad[0, 1].tolist() == [0.0, 0.0]  # the excluded pair: no gradient at all
    assert q.grad[0, 0].tolist() == [0.0, pytest.approx(-0.5 / 3)]  # d huber/dQ = -(td) = -.5, /3
    assert q.grad[1, 1].tolist() == [pytest.approx(0.5 * 1.0 / 3), 0.0]  # td -1 -> +1, weight .5


# --- dueling over the legal set -------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_dueling_combines_over_the_legal_set_with_the_dtype_minimum_for_illegal_entries(dtype):
    v = torch.tensor([[1.0, -2.0], [0.5, 0.0]], dtype=dtype)  # (B=2, K=2)
    a = torch.tensor([[[2.0, 100.0, 4.0, 0.0], [1.0, 1.0, -3.0, 9.0]],
                      [[6.0, 6.0, 6.0, 6.0], [1.0, 2.0, 3.0, 4.0]]], dtype=dtype)
    legal = torch.tensor([[True, False, True, False], [False, False, False, False]])
    q = dueling_combine(v, a, legal)
    low = torch.finfo(dtype).min
    # row 0, head 0: legal mean of A = (2 + 4) / 2 = 3 -> Q = 1 + A - 3 = [0, -, 2, -]
    # row 0, head 1: legal mean (1 - 3) / 2 = -1 -> Q = -2 + A + 1 = [0, -, -4, -]; the illegal 100 and 9 move nothing
    assert q[0].tolist() == [[0.0, low, 2.0, low], [0.0, low, -4.0, low]]
    assert q.dtype == dtype and (q[1] == low).all() and not torch.isnan(q).any()  # no legal action: no NaN
    assert masked_argmax(q[0], legal[0]).tolist() == [2, 0]


def test_qensemble_dueling_and_k_heads_shapes():
    torch.manual_seed(0)
    net = QEnsemble(torch.nn.Identity(), 3, 4, 2, dueling=True)
    x = torch.tensor([[1.0, 0.0, -1.0]])
    legal = torch.tensor([[True, True, False, True]])
    q = net(x, legal)
    assert q.shape == (1, 2, 4) and (q[0, :, 2] == MIN32).all()
    legal_q = q[0][:, legal[0]]
    v = net.value(x)[0]
    assert torch.allclose(legal_q.mean(dim=1), v, atol=1e-6)  # the legal advantages average to 0


# --- bootstrap masks from replay to the loss --------------------------------------------------


def _replay(W=48, F=4, A=5, heads=2, seed=0):
    rng = np.random.default_rng(seed)
    feats = rng.integers(0, 256, (W, F), dtype=np.uint8)
    legal = rng.random((W, A)) < 0.6
    legal[:, 0] = True
    obs = np.concatenate([feats, np.packbits(legal, axis=1, bitorder="little")], axis=1)
    actions = np.array([rng.choice(np.flatnonzero(m)) for m in legal], np.int64)
    z = np.zeros(W)
    windows = Windows(obs, np.zeros_like(obs), actions, rng.random(W).astype(np.float32), z.astype(np.float32),
                      z.astype(bool), np.ones(W, bool), z.astype(np.int32), np.ones(W, np.int64), z.astype(np.int8),
                      z.astype(np.float32))
    replay = PrioritizedReplay(64, F + 1, heads, alpha=0.6, beta=0.4)
    return replay, windows, F, A


@pytest.mark.parametrize("dueling", [False, True])
def test_a_head_no_stored_record_samples_is_not_moved_by_the_update(dueling):
    replay, windows, F, A = _replay()
    masks = np.zeros((len(windows), 2), np.uint8)
    masks[:, 0] = 1  # every record is in head 0's sample, none in head 1's
    masks[::7, 1] = 0
    replay.add(windows, masks)
    torch.manual_seed(1)
    online = QEnsemble(torch.nn.Linear(F, 8), 8, A, 2, dueling=dueling)
    target = make_target(online)
    opt = torch.optim.Adam(online.parameters(), lr=1e-2)
    before = {k: v.clone() for k, v in online.state_dict().items()}
    to_obs = lambda rows: torch.as_tensor(rows[:, :F], dtype=torch.float32) / 255.0  # noqa: E731
    stats = dqn_update(online, target, opt, replay, DqnUpdateSpec(5, 16, 100, 10.0), np.random.default_rng(2), to_obs,
                       mask_offset=F, n_actions=A, steps_before=0, device="cpu")
    after = online.state_dict()
    w0, w1 = after["advantage.weight"].view(2, A, 8), before["advantage.weight"].view(2, A, 8)
    assert torch.equal(w0[1], w1[1]) and not torch.equal(w0[0], w1[0])  # head 1: exactly unchanged (zero grad)
    b0, b1 = after["advantage.bias"].view(2, A), before["advantage.bias"].view(2, A)
    assert torch.equal(b0[1], b1[1]) and not torch.equal(b0[0], b1[0])
    if dueling:
        assert after["value.weight"][1].equal(before["value.weight"][1])
        assert not after["value.weight"][0].equal(before["value.weight"][0])
    assert stats["dqn/optimizer_steps"] == 5.0 and np.isfinite(list(stats.values())).all()


# --- the K-head pointer network and its snapshot actor ---------------------------------------

H, W, P = 4, 3, 2
SPEC = ObsSpec(plane_names=("a", "b", "c"), static_planes=("c",), height=H, width=W, vector_size=12,
               vector_fields={"own_hand_cards": (0, 6), "own_hand_cost": (6, 8), "own_hand_affordable": (8, 10),
                              "own_elixir": (10, 12)},
               n_actions=1 + P * H * W + 2, hand_slots=P, decision_ms=500, n_buttons=2)
NET = NetConfig(channels=8, blocks=1, norm_groups=4, vector_embed=4, value_hidden=8)


def _obs(b, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(b, SPEC.n_actions, generator=g) < 0.4
    mask[:, 0] = True
    return {"spatial": torch.rand(b, 3, H, W, generator=g), "vector": torch.rand(b, 12, generator=g), "mask": mask}


@pytest.mark.parametrize("slot_index", [False, True])
def test_one_head_without_dueling_is_the_actor_itself(slot_index):
    model = ActorCritic(SPEC, msgspec.structs.replace(NET, slot_index=slot_index), seed=3)
    q = PointerQ(model.actor, 1, dueling=False, seed=5)
    obs = _obs(6)
    assert torch.allclose(q(obs)[:, 0], model.actor(obs), atol=1e-6)


@pytest.mark.parametrize("dueling,slot_index", [(False, False), (True, False), (True, True)])
def test_the_snapshot_actor_plays_the_policy_of_the_heads_mean_q(dueling, slot_index):
    model = ActorCritic(SPEC, msgspec.structs.replace(NET, slot_index=slot_index), seed=3)
    qnet = PointerQ(model.actor, 3, dueling=dueling, seed=5)
    with torch.no_grad():  # heads far apart, as after training (the init is near zero)
        for p in (qnet.query.weight, qnet.noop.weight, qnet.button_head.weight, qnet.query_bias.weight):
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(9)))
        if dueling:
            qnet.value.weight.add_(5.0)
    played_actor(qnet, model.actor)
    obs = _obs(16, seed=1)
    with torch.no_grad():
        q = qnet(obs)  # (16, 3, A)
        legal = obs["mask"]
        mean_q = torch.where(legal, q.double().mean(dim=1), torch.finfo(torch.float64).min)
        logits = model.actor(obs)
    assert q.shape == (16, 3, SPEC.n_actions) and torch.isfinite(q[:, :, 0]).all()
    assert (q[:, 0] != q[:, 1]).any()  # the heads do differ
    if dueling:
        assert (q[~legal[:, None, :].expand_as(q)] == MIN32).all()
    # the same masked distribution and the same greedy action, row for row
    snap = torch.log_softmax(logits.masked_fill(~legal, MIN32), dim=-1)  # what MaskedCategorical samples from
    ref = torch.log_softmax(mean_q, dim=-1).float()
    assert torch.allclose(snap[legal], ref[legal], atol=1e-4)
    assert torch.equal(masked_argmax(logits, legal), masked_argmax(mean_q, legal))
    dist = MaskedCategorical(logits, legal)
    greedy = masked_argmax(logits, legal)
    assert torch.allclose(dist.log_prob(greedy), ref.gather(1, greedy[:, None]).squeeze(1), atol=1e-4)


def test_pointer_q_is_a_pure_function_of_the_seed_and_heads_differ_from_head_0():
    model = ActorCritic(SPEC, NET, seed=3)
    a, b = PointerQ(model.actor, 2, dueling=True, seed=5), PointerQ(model.actor, 2, dueling=True, seed=5)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    c = PointerQ(model.actor, 2, dueling=True, seed=6)
    assert not torch.equal(a.noop.weight, c.noop.weight)
    assert torch.equal(a.noop.weight[0], model.actor.noop.weight[0]) and not torch.equal(a.noop.weight[1], a.noop.weight[0])


# --- Thompson: one head per (seat, episode) -------------------------------------------------


def test_thompson_heads_change_only_at_an_episode_start():
    # one seat (battle 4, seat 1) over 40 cycles; its ordinal steps up at cycles 9, 17, 30
    ordinal = np.searchsorted([9, 17, 30], np.arange(40), side="right") + 7
    keys = np.stack([np.arange(40), np.full(40, 9), np.full(40, 4), np.full(40, 1), ordinal], axis=1)
    assert keys.shape[1] == len(EPISODE_KEYS)
    heads = thompson_heads(123, keys, 4)
    changes = np.flatnonzero(np.diff(heads)) + 1
    assert set(changes.tolist()) <= {9, 17, 30}  # never inside an episode
    for start, stop in ((0, 9), (9, 17), (17, 30), (30, 40)):
        assert len(set(heads[start:stop])) == 1
        assert heads[start] == thompson_head(123, 2 * 4 + 1, int(ordinal[start]), 4)
    # a resume is a fresh process: the same keys draw the same heads (no state involved)
    assert thompson_heads(123, keys, 4).tolist() == heads.tolist()
    many = thompson_heads(123, np.stack([np.zeros(400), np.zeros(400), np.arange(400), np.zeros(400),
                                         np.zeros(400)], 1).astype(np.int64), 4)
    assert set(many.tolist()) == {0, 1, 2, 3} and np.bincount(many).min() > 70  # 400 episodes over 4 heads


def test_the_thompson_behaviour_acts_by_each_rows_episode_head_and_records_it():
    from services.learner.dqn.learner import TallyBehaviour

    q = torch.tensor([[[0.0, 5.0, 1.0], [0.0, 1.0, 9.0]]]).repeat(4, 1, 1)  # head 0 -> id 1, head 1 -> id 2
    legal = torch.ones(4, 3, dtype=torch.bool)
    seed = 7
    keys = np.array([[3, s, 10 + s, s % 2, o] for s, o in enumerate([0, 1, 2, 3])], np.int64)
    want = thompson_heads(seed, keys, 2)
    assert set(want.tolist()) == {0, 1}, want  # this seed draws both heads over the four episodes
    pol = TallyBehaviour(lambda rows: (q[:len(rows)], legal[:len(rows)]), 0.0, None, thompson=(seed, 2))
    assert pol.acts_by_episode
    rows = np.zeros((4, 2), np.uint8)
    acts, _ = pol.act(rows, np.array([3, 3, 3, 3]), np.full(4, 0.5), episodes=keys)
    assert acts.tolist() == [1 if h == 0 else 2 for h in want]
    assert pol.heads_table(4, 4)[3].tolist() == want.tolist() and pol.row(0.05)["dqn/heads_used"] == 2.0
    with pytest.raises(ValueError, match="central inference must pass the rows' episodes"):
        pol.act(rows, np.array([3, 3, 3, 3]), np.full(4, 0.5))
    mean = DqnBehaviour(lambda rows: (q[:len(rows)], legal[:len(rows)]), 0.0, mean_head=MEAN_HEAD)
    acts, _ = mean.act(rows, np.array([3, 3, 3, 3]), np.full(4, 0.5))
    assert acts.tolist() == [2, 2, 2, 2] and mean.last["heads"].tolist() == [-1] * 4  # mean [0, 3, 5]
    assert not mean.acts_by_episode


def test_central_inference_hands_episode_keys_only_to_a_policy_that_acts_by_episode():
    from services.learner.rounds import episode_keys, infer_rounds
    from services.learner.fleet import SlotMap
    from shared.messages import GROUP_LEARNER

    slot_map = SlotMap(n_battles=3, battle_ids=np.array([40, 41, 42]), slots={})
    group = np.array([GROUP_LEARNER, 2, GROUP_LEARNER, GROUP_LEARNER], np.int8)  # the round's slots 2..5
    learner = np.array([2, 4, 5])
    keys = episode_keys(6, learner, group, np.array([11, 12, 13, 14]), slot_map)
    assert keys.tolist() == [[6, 2, 41, 0, 11], [6, 4, 42, 0, 13], [6, 5, 42, 1, 14]]

    class Recorder:
        def __init__(self, by_episode):
            self.acts_by_episode, self.calls = by_episode, []

        def act(self, rows, n_legal, uniforms, history=None, **kw):
            self.calls.append(kw.get("episodes"))
            return np.zeros(len(rows), np.int64), np.zeros(len(rows), np.float32)

    reqs = [(np.zeros((3, 2), np.uint8), np.ones(3), np.zeros(3), None, keys),
            (np.zeros((1, 2), np.uint8), np.ones(1), np.zeros(1), None, keys[:1])]
    pol = Recorder(True)
    infer_rounds(pol, reqs, 0)
    assert [c.tolist() for c in pol.calls] == [keys.tolist(), keys[:1].tolist()]
    pol = Recorder(True)
    infer_rounds(pol, reqs, 10)  # one batched forward: the keys concatenated like the rows
    assert [c.tolist() for c in pol.calls] == [keys.tolist() + keys[:1].tolist()]
    pol = Recorder(False)
    infer_rounds(pol, [r[:4] + (None,) for r in reqs], 10)
    assert pol.calls == [None]
