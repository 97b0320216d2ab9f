"""One PPO update: every loss term and diagnostic on a hand-built batch, the dual clip (c from
the config), both entropy terms with their own coefficients, optional value clipping, the
forced-row shortcut, gradient accumulation and batching."""

import math

import msgspec
import numpy as np
import pytest
import torch
from torch import nn

from shared.config import NetConfig, PPOConfig
from shared.envs import ObsSpec
from shared.nn.distribution import MaskedCategorical
from shared.nn.model import ActorCritic
from services.learner.ppo import (
    UpdateData, adam_eps_floor_frac, clipped_objective, make_optimizers, ppo_update, standardize_advantages,
)

LN2 = math.log(2.0)
LN3 = math.log(3.0)


def epochs(seed=0):
    return lambda epoch: np.random.default_rng([seed, epoch])


# ----------------------------------------------------------------------------- a table stub


class TableModel(nn.Module):
    """Logits and values are free parameters, one row per cell: gradients are hand-computable.
    obs = {"row": (B,) int64, "mask": (B, A) bool}. Records which rows the actor was asked for."""

    def __init__(self, logits, values):
        super().__init__()
        self.actor, self.critic = nn.Module(), nn.Module()
        self.actor.table = nn.Parameter(torch.tensor(logits, dtype=torch.float32))  # (N, A)
        self.critic.table = nn.Parameter(torch.tensor(values, dtype=torch.float32))  # (N,)
        self.actor_rows = []

    def actor_logits(self, obs):
        self.actor_rows += obs["row"].tolist()
        return self.actor.table[obs["row"]]

    def value(self, obs):
        return self.critic.table[obs["row"]]


def table_data(masks, actions, old_log_probs, advantages, returns, old_values):
    masks = torch.tensor(masks)
    return UpdateData(
        actions=np.array(actions, dtype=np.int64),
        old_log_probs=np.array(old_log_probs, dtype=np.float32),
        advantages=np.array(advantages, dtype=np.float32),
        returns=np.array(returns, dtype=np.float32),
        old_values=np.array(old_values, dtype=np.float32),
        n_legal=masks.sum(-1).numpy().astype(np.int32),
        fetch=lambda cells: {"row": torch.as_tensor(cells), "mask": masks[torch.as_tensor(cells)]},
    )


def sgd_step(model, data, ppo, ent_coef=0.5, ent_coef_noop=0.0):
    """Run the update with plain SGD at lr 1: each parameter moves by exactly -gradient."""
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt_a = torch.optim.SGD(model.actor.parameters(), lr=1.0)
    opt_c = torch.optim.SGD(model.critic.parameters(), lr=1.0)
    metrics = ppo_update(model, opt_a, opt_c, data, ppo, epochs(), "cpu", ent_coef=ent_coef, ent_coef_noop=ent_coef_noop)
    grads = {n: before[n] - p.detach() for n, p in model.named_parameters()}
    return metrics, grads


# Four cells, three actions. Rows 0, 1 are choice rows; rows 2, 3 forced (only the no-op legal).
#  row 0: mask [T, T, F], logits 0 -> p = [1/2, 1/2, 0]; action 1; old p = 0.4 -> r = 0.5/0.4 = 1.25
#  row 1: mask all, logits [0, 0, ln 2] -> p = [1/4, 1/4, 1/2]; action 2; old p = 5/9 -> r = 0.9
# Raw advantages [3, 1 | 5, -5]: choice mean 2, std 1 -> standardised [1, -1] (forced rows unused).
HAND = dict(
    masks=[[True, True, False], [True, True, True], [True, False, False], [True, False, False]],
    actions=[1, 2, 0, 0],
    old_log_probs=[math.log(0.4), math.log(5 / 9), 0.0, 0.0],
    advantages=[3.0, 1.0, 5.0, -5.0],
    returns=[2.0, 2.0, 1.0, 1.0],
    old_values=[1.0, 2.0, 0.0, -1.0],
)
HAND_LOGITS = [[0.0, 0.0, 0.0], [0.0, 0.0, LN2], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
HAND_VALUES = [1.0, 2.0, 0.0, -1.0]
# ppo.ent_coef / ent_coef_noop (schedules) are deliberately NOT the numbers the tests pass:
# ppo_update must use its keyword arguments and never read a schedule.
HAND_PPO = PPOConfig(n_epochs=1, batch_size=4, minibatch_size=4, clip_range=0.2, vf_coef=0.5,
                     ent_coef=7.0, ent_coef_noop=7.0, max_grad_norm=100.0)
# The hand-built tests' dH/dz and dH2/dz of row 1 (p = [1/4, 1/4, 1/2]):
#   dH/dz_j  = -p_j (ln p_j + H), H = 1.5 ln 2          -> [ln2/8, ln2/8, -ln2/4]
#   dH2/dz   = ln((1 - p0)/p0) p0 (onehot(0) - p)        -> ln 3 [3/16, -1/16, -1/8]
ROW1_POLICY_GRAD = np.array([-0.05625, -0.05625, 0.1125])
ROW1_DH = np.array([LN2 / 8, LN2 / 8, -LN2 / 4])
ROW1_DH2 = LN3 * np.array([3 / 16, -1 / 16, -1 / 8])


@pytest.fixture(scope="module", params=[4, 1], ids=["minibatch4", "minibatch1"])
def hand_update(request):
    model = TableModel(HAND_LOGITS, HAND_VALUES)
    ppo = msgspec.structs.replace(HAND_PPO, minibatch_size=request.param)
    metrics, grads = sgd_step(model, table_data(**HAND), ppo, ent_coef=0.5, ent_coef_noop=0.0)
    return model, metrics, grads


def test_policy_loss_by_hand(hand_update):
    # row 0: r = 1.25, A = 1: min(1.25, clip 1.2) = 1.2      (clipped)
    # row 1: r = 0.9,  A = -1: min(-0.9, -0.9) = -0.9; dual max(-0.9, -3) = -0.9
    # policy = -(1/n) sum_choice = -(1.2 - 0.9) / 4 = -0.075   (n = 4: forced rows count in n)
    assert hand_update[1]["ppo/policy_loss"] == pytest.approx(-0.075, abs=1e-6)


def test_value_loss_and_its_gradient_by_hand(hand_update):
    _, metrics, grads = hand_update
    # V - G = [1-2, 2-2, 0-1, -1-1] = [-1, 0, -1, -2]; MSE = (1 + 0 + 1 + 4) / 4 = 1.5
    assert metrics["ppo/value_loss"] == pytest.approx(1.5, abs=1e-6)
    # d/dV vf_coef (1/n) sum (V-G)^2 = 0.5 * 2/4 * (V-G) = [-0.25, 0, -0.25, -0.5]; forced rows train too.
    np.testing.assert_allclose(grads["critic.table"].numpy(), [-0.25, 0.0, -0.25, -0.5], atol=1e-6)


def test_actor_gradient_by_hand(hand_update):
    _, _, grads = hand_update
    g = grads["actor.table"].numpy()
    # row 0 is clipped (r = 1.25 > 1.2 with A > 0): no policy gradient; its entropy gradient is 0
    # at a uniform legal distribution (dH/dz_j = -p_j (ln p_j + H) = -1/2 (-ln 2 + ln 2) = 0).
    np.testing.assert_allclose(g[0], [0.0, 0.0, 0.0], atol=1e-7)
    # row 1, unclipped: d(rA)/dz = A r (onehot(a) - p) = -0.9 ([0,0,1] - [1/4,1/4,1/2]) = [0.225, 0.225, -0.45]
    #   policy loss -(1/4)(rA):            [-0.05625, -0.05625, 0.1125]
    #   H = 1.5 ln 2; dH/dz = [ln2/8, ln2/8, -ln2/4]; entropy loss -0.5 (1/4) H: -0.125 dH/dz
    #                                      = [-0.0108304, -0.0108304, 0.0216608]
    expected = np.array([-0.05625, -0.05625, 0.1125]) - 0.125 * np.array([LN2 / 8, LN2 / 8, -LN2 / 4])
    np.testing.assert_allclose(g[1], expected, atol=1e-6)
    # forced rows: never forwarded through the actor, zero gradient
    np.testing.assert_array_equal(g[2:], 0.0)


def test_forced_rows_are_never_forwarded_through_the_actor(hand_update):
    model = hand_update[0]
    assert sorted(set(model.actor_rows)) == [0, 1]


def test_choice_row_diagnostics_by_hand(hand_update):
    m = hand_update[1]
    # H: row 0 ln 2, row 1 1.5 ln 2 -> mean 1.25 ln 2
    assert m["ppo/entropy"] == pytest.approx(1.25 * LN2, abs=1e-6)
    # noop entropy: row 0 p0 = 1/2 -> ln 2 = 0.6931472; row 1 p0 = 1/4 -> -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.5623351
    assert m["ppo/noop_entropy"] == pytest.approx((0.6931472 + 0.5623351) / 2, abs=1e-6)
    # k3 KL: (r - 1) - ln r: row 0 0.25 - 0.2231436 = 0.0268564; row 1 -0.1 + 0.1053605 = 0.0053605
    assert m["ppo/kl"] == m["ppo/kl_epoch0"] == pytest.approx((0.0268564 + 0.0053605) / 2, abs=1e-6)
    # |r - 1| > 0.2: row 0 yes (0.25), row 1 no (0.1) -> 1/2; not the 1/4 an all-row mean would say
    assert m["ppo/clip_fraction"] == m["ppo/clip_fraction_epoch0"] == 0.5
    assert m["ppo/dual_clip_fraction"] == 0.0
    assert m["ppo/ratio_max_abs_dev"] == pytest.approx(0.25, abs=1e-6)  # old probs made up by hand
    assert m["ppo/forced_frac"] == 0.5 and m["ppo/choice_rows"] == 2
    assert m["ppo/optimizer_steps"] == 1
    # normalised entropy H / ln max(n_legal, 2): row 0 ln2/ln2 = 1; row 1 1.5 ln2 / ln3
    assert m["ppo/entropy_normalised"] == pytest.approx((1.0 + 1.5 * LN2 / LN3) / 2, abs=1e-6)
    assert "ppo/value_clip_fraction" not in m  # value clipping off: absent, not 0


def test_explained_variance_and_grad_norms_by_hand(hand_update):
    m = hand_update[1]
    # G = [2, 2, 1, 1]: Var 0.25; G - V_old = [1, 0, 1, 2]: Var 0.5 -> EV = 1 - 0.5/0.25 = -1
    assert m["ppo/explained_variance"] == pytest.approx(-1.0, abs=1e-6)
    # choice rows: G = [2, 2], Var(G) = 0 -> undefined, so absent (not 0, not 1)
    assert "ppo/explained_variance_choice" not in m
    # critic: |[-0.25, 0, -0.25, -0.5]| = sqrt(0.375); actor: |row 1's gradient| above
    assert m["ppo/grad_norm_critic"] == pytest.approx(math.sqrt(0.375), abs=1e-6)
    row1 = np.array([-0.05625, -0.05625, 0.1125]) - 0.125 * np.array([LN2 / 8, LN2 / 8, -LN2 / 4])
    assert m["ppo/grad_norm_actor"] == pytest.approx(float(np.linalg.norm(row1)), abs=1e-6)


def test_update_magnitude_is_the_parameter_distance_moved(hand_update):
    # One SGD step at lr 1 without clipping: the distance moved is the gradient's norm.
    m = hand_update[1]
    assert m["ppo/update_magnitude_critic"] == pytest.approx(math.sqrt(0.375), abs=1e-6)
    row1 = ROW1_POLICY_GRAD - 0.125 * ROW1_DH
    assert m["ppo/update_magnitude_actor"] == pytest.approx(float(np.linalg.norm(row1)), abs=1e-6)
    # SGD keeps no second moment: the Adam eps-floor share is absent, not 0
    assert "ppo/adam_eps_floor_frac_actor" not in m and "ppo/adam_eps_floor_frac_critic" not in m


# ----------------------------------------------------------------------------- the entropy terms


@pytest.mark.parametrize("minibatch", [4, 1])
def test_noop_entropy_gradient_by_hand(minibatch):
    ppo = msgspec.structs.replace(HAND_PPO, minibatch_size=minibatch)
    metrics, grads = sgd_step(TableModel(HAND_LOGITS, HAND_VALUES), table_data(**HAND), ppo,
                              ent_coef=0.0, ent_coef_noop=0.5)
    g = grads["actor.table"].numpy()
    # row 0: clipped (no policy gradient) and p0 = 1/2, the maximum of H2: dH2/dz = ln(1) ... = 0
    np.testing.assert_allclose(g[0], 0.0, atol=1e-7)
    # row 1: policy gradient plus -ent_coef_noop (1/n) dH2/dz = -0.125 ln3 [3/16, -1/16, -1/8]
    np.testing.assert_allclose(g[1], ROW1_POLICY_GRAD - 0.125 * ROW1_DH2, atol=1e-6)
    np.testing.assert_array_equal(g[2:], 0.0)
    # the critic never sees either entropy term
    np.testing.assert_allclose(grads["critic.table"].numpy(), [-0.25, 0.0, -0.25, -0.5], atol=1e-6)


def test_the_two_entropy_coefficients_are_separate():
    _, grads = sgd_step(TableModel(HAND_LOGITS, HAND_VALUES), table_data(**HAND), HAND_PPO,
                        ent_coef=0.5, ent_coef_noop=0.25)
    # -(0.5 dH + 0.25 dH2) / 4 on row 1, on top of the policy gradient
    expected = ROW1_POLICY_GRAD - 0.125 * ROW1_DH - 0.0625 * ROW1_DH2
    np.testing.assert_allclose(grads["actor.table"].numpy()[1], expected, atol=1e-6)


def test_entropy_coefficients_are_required_keywords_and_checked():
    model, data = TableModel(HAND_LOGITS, HAND_VALUES), table_data(**HAND)
    opt_a = torch.optim.SGD(model.actor.parameters(), lr=1.0)
    opt_c = torch.optim.SGD(model.critic.parameters(), lr=1.0)
    with pytest.raises(TypeError):
        ppo_update(model, opt_a, opt_c, data, HAND_PPO, epochs(), "cpu", ent_coef=0.01)
    with pytest.raises(TypeError):
        ppo_update(model, opt_a, opt_c, data, HAND_PPO, epochs(), "cpu", ent_coef_noop=0.01)
    for bad in (-0.01, float("nan")):
        with pytest.raises(ValueError, match="ent_coef_noop"):
            ppo_update(model, opt_a, opt_c, data, HAND_PPO, epochs(), "cpu", ent_coef=0.01, ent_coef_noop=bad)


# ----------------------------------------------------------------------------- value clipping

# The critic has moved since GAE's pass: V = [1.5, 2, 0, -1] against V_old = [1, 2, 0.5, -1],
# G = [2, 2, 1, 1], clip 0.2, vf_coef 0.5, n = 4.
#  row 0: V - V_old = +0.5 -> V_c = 1.2; (V - G)^2 = 0.25, (V_c - G)^2 = 0.64 -> 0.64, clipped binds (no gradient)
#  row 1: unchanged, 0
#  row 2: V - V_old = -0.5 -> V_c = 0.3; (V - G)^2 = 1, (V_c - G)^2 = 0.49 -> 1, unclipped (gradient flows)
#  row 3: unchanged, (-2)^2 = 4
CLIP_VALUES = [1.5, 2.0, 0.0, -1.0]
CLIP_DATA = dict(HAND, old_values=[1.0, 2.0, 0.5, -1.0])


@pytest.mark.parametrize("clipping, loss, grad, fraction", [
    (True, (0.64 + 0.0 + 1.0 + 4.0) / 4, [0.0, 0.0, -0.25, -0.5], 0.25),
    (False, (0.25 + 0.0 + 1.0 + 4.0) / 4, [-0.125, 0.0, -0.25, -0.5], None),
])
def test_value_clipping_on_and_off_by_hand(clipping, loss, grad, fraction):
    ppo = msgspec.structs.replace(HAND_PPO, value_clipping=clipping)
    metrics, grads = sgd_step(TableModel(HAND_LOGITS, CLIP_VALUES), table_data(**CLIP_DATA), ppo)
    assert metrics["ppo/value_loss"] == pytest.approx(loss, abs=1e-6)
    # gradient: vf_coef * 2/n * (V - G) on the rows whose unclipped branch is the max
    np.testing.assert_allclose(grads["critic.table"].numpy(), grad, atol=1e-6)
    assert metrics.get("ppo/value_clip_fraction") == fraction


# ----------------------------------------------------------------------------- Adam's eps floor


def test_adam_eps_floor_fraction_by_hand():
    # After one Adam step v_hat = g^2, so sqrt(v_hat) < eps exactly where |g| < eps.
    model = TableModel(HAND_LOGITS, HAND_VALUES)
    opt_a = torch.optim.Adam(model.actor.parameters(), lr=1e-3, eps=1e-5)
    opt_c = torch.optim.Adam(model.critic.parameters(), lr=1e-3, eps=1e-5)
    assert adam_eps_floor_frac(opt_a) is None  # never stepped: no second moment to judge
    m = ppo_update(model, opt_a, opt_c, table_data(**HAND), HAND_PPO, epochs(), "cpu", ent_coef=0.5, ent_coef_noop=0.0)
    # actor: 12 elements, only row 1's 3 have a gradient (row 0 clipped at a uniform entropy
    # maximum; row 0's third action illegal; rows 2, 3 forced) -> 9/12 under eps
    assert m["ppo/adam_eps_floor_frac_actor"] == 0.75
    # critic: gradient [-0.25, 0, -0.25, -0.5] -> 1/4 under eps
    assert m["ppo/adam_eps_floor_frac_critic"] == 0.25
    # Adam's first step moves every element with a gradient by ~lr: 3 of them in each network
    assert m["ppo/update_magnitude_actor"] == pytest.approx(1e-3 * math.sqrt(3), rel=1e-3)
    assert m["ppo/update_magnitude_critic"] == pytest.approx(1e-3 * math.sqrt(3), rel=1e-3)


def test_grad_norm_is_clipped_per_network_and_reported_before_clipping():
    ppo = msgspec.structs.replace(HAND_PPO, max_grad_norm=0.1)
    metrics, grads = sgd_step(TableModel(HAND_LOGITS, HAND_VALUES), table_data(**HAND), ppo)
    assert metrics["ppo/grad_norm_critic"] == pytest.approx(math.sqrt(0.375), abs=1e-6)
    # each network's step is rescaled to norm 0.1 on its own
    assert grads["critic.table"].norm().item() == pytest.approx(0.1, rel=1e-4)
    assert grads["actor.table"].norm().item() == pytest.approx(0.1, rel=1e-4)


# ----------------------------------------------------------------------------- the dual clip


@pytest.mark.parametrize(
    "ratio, adv, expected",
    [
        (1.0, 2.0, 2.0),
        (1.5, 2.0, 2.4),  # min(3.0, 1.2 * 2)
        (0.5, 2.0, 1.0),  # min(1.0, 0.8 * 2)
        (5.0, 2.0, 2.4),  # A > 0: the dual clip never applies (3A = 6 is irrelevant)
        (1.1, -1.0, -1.1),  # inside the trust region
        (0.5, -1.0, -0.8),  # min(-0.5, 0.8 * -1)
        (2.0, -1.0, -2.0),  # min(-2, -1.2) = -2 > 3A = -3: dual clip not binding yet
        (5.0, -1.0, -3.0),  # min(-5, -1.2) = -5 < -3: dual clip binds at 3A
        (5.0, 0.0, 0.0),
    ],
)
def test_clipped_objective_table(ratio, adv, expected):
    got = clipped_objective(torch.tensor([ratio]), torch.tensor([adv]), clip=0.2, dual_clip=3.0)
    assert got.item() == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("c, expected", [(2.0, -2.0), (3.0, -3.0), (6.0, -5.0), (1.5, -1.5)])
def test_clipped_objective_uses_the_given_c(c, expected):
    # r = 5, A = -1: min(-5, -1.2) = -5, bounded below by c A; A = +1 is never touched by c.
    got = clipped_objective(torch.tensor([5.0, 5.0]), torch.tensor([-1.0, 1.0]), clip=0.2, dual_clip=c)
    assert got.tolist() == pytest.approx([expected, 1.2], abs=1e-6)


@pytest.mark.parametrize("c", [2.0, 6.0])
def test_dual_clip_binds_only_for_negative_advantages_with_c_from_the_config(c):
    # Two choice rows, both with r = 5 (p = 1/2 now, 1/10 at rollout); raw A [0, 2] -> [-1, +1].
    data = table_data(
        masks=[[True, True], [True, True]], actions=[1, 1], old_log_probs=[math.log(0.1)] * 2,
        advantages=[0.0, 2.0], returns=[0.0, 0.0], old_values=[0.0, 0.0],
    )
    metrics, grads = sgd_step(TableModel([[0.0, 0.0]] * 2, [0.0, 0.0]), data, msgspec.structs.replace(
        HAND_PPO, batch_size=2, minibatch_size=2, dual_clip_c=c), ent_coef=0.0)
    g = grads["actor.table"].numpy()
    # row 1 (A = +1): 1.2 A, the ordinary clip whatever c is; a constant, so no gradient.
    np.testing.assert_array_equal(g[1], 0.0)
    if c == 2.0:
        # row 0 (A = -1): min(-5, -1.2) = -5 < cA = -2, so the dual clip binds: objective -2, no gradient
        assert metrics["ppo/dual_clip_fraction"] == 0.5
        assert metrics["ppo/policy_loss"] == pytest.approx(-(-2.0 + 1.2) / 2, abs=1e-5)
        np.testing.assert_array_equal(g[0], 0.0)
    else:
        # cA = -6 < -5: not binding, objective r A = -5 with gradient
        # d(-rA/2)/dz = -(1/2) A r (onehot(1) - p) = 2.5 ([0, 1] - [1/2, 1/2]) = [-1.25, 1.25]
        assert metrics["ppo/dual_clip_fraction"] == 0.0
        assert metrics["ppo/policy_loss"] == pytest.approx(-(-5.0 + 1.2) / 2, abs=1e-5)
        np.testing.assert_allclose(g[0], [-1.25, 1.25], atol=1e-5)


# ----------------------------------------------------------------------------- standardisation


def test_advantages_are_standardised_over_choice_rows_only():
    adv = np.array([3.0, 1.0, 100.0], dtype=np.float32)
    out = standardize_advantages(adv, np.array([True, True, False]))
    np.testing.assert_allclose(out, [1.0, -1.0, 0.0], atol=1e-6)  # mean 2, std 1; forced -> 0


def test_a_single_choice_row_standardises_to_zero_not_nan():
    out = standardize_advantages(np.array([5.0, 7.0], np.float32), np.array([True, False]))
    assert out.tolist() == [0.0, 0.0]  # (5 - 5) / (0 + 1e-8)
    data = table_data(masks=[[True, True], [True, False]], actions=[1, 0], old_log_probs=[math.log(0.5), 0.0],
                      advantages=[5.0, 7.0], returns=[1.0, 0.0], old_values=[0.0, 0.0])
    metrics, grads = sgd_step(TableModel([[0.0, 0.0]] * 2, [0.0, 0.0]), data,
                              msgspec.structs.replace(HAND_PPO, batch_size=2, minibatch_size=2))
    assert all(math.isfinite(v) for v in metrics.values())
    assert all(torch.isfinite(g).all() for g in grads.values())


def test_zero_choice_rows_trains_the_critic_and_reports_no_actor_metrics():
    data = table_data(masks=[[True, False]] * 3, actions=[0] * 3, old_log_probs=[0.0] * 3,
                      advantages=[1.0, 2.0, 3.0], returns=[1.0, 2.0, 3.0], old_values=[0.0] * 3)
    model = TableModel([[0.0, 0.0]] * 3, [0.0] * 3)
    metrics, grads = sgd_step(model, data, msgspec.structs.replace(HAND_PPO, batch_size=3, minibatch_size=2))
    assert model.actor_rows == []
    assert grads["critic.table"].abs().sum() > 0 and grads["actor.table"].abs().sum() == 0
    for key in ("ppo/kl", "ppo/kl_epoch0", "ppo/clip_fraction", "ppo/entropy", "ppo/policy_loss",
                "ppo/grad_norm_actor", "ppo/ratio_max_abs_dev", "ppo/noop_entropy"):
        assert key not in metrics
    assert metrics["ppo/forced_frac"] == 1.0 and metrics["ppo/choice_rows"] == 0


def test_a_forced_row_with_a_non_noop_action_is_refused():
    data = table_data(masks=[[True, False]], actions=[1], old_log_probs=[0.0], advantages=[0.0],
                      returns=[0.0], old_values=[0.0])
    with pytest.raises(ValueError, match="forced rows"):
        sgd_step(TableModel([[0.0, 0.0]], [0.0]), data, msgspec.structs.replace(HAND_PPO, batch_size=1, minibatch_size=1))


# ----------------------------------------------------------------------------- batching


def test_epoch_is_cut_into_n_over_batch_size_batches_with_no_row_dropped():
    n = 25  # batch_size 10 -> 25 // 10 = 2 batches per epoch, of 13 and 12 rows (no short batch of 5)
    seen = []
    data = table_data(masks=[[True, False]] * n, actions=[0] * n, old_log_probs=[0.0] * n,
                      advantages=[0.0] * n, returns=list(range(n)), old_values=[0.0] * n)
    fetch = data.fetch
    data.fetch = lambda cells: (seen.append(cells.copy()), fetch(cells))[1]
    ppo = PPOConfig(n_epochs=3, batch_size=10, minibatch_size=13)
    metrics, _ = sgd_step(TableModel([[0.0, 0.0]] * n, [0.0] * n), data, ppo)
    assert metrics["ppo/optimizer_steps"] == 3 * 2
    assert [len(c) for c in seen] == [13, 12] * 3  # a 13-row batch is one 13-row minibatch
    for epoch in range(3):
        assert sorted(np.concatenate(seen[2 * epoch : 2 * epoch + 2]).tolist()) == list(range(n))
    assert all((np.diff(c) > 0).all() for c in seen)  # fetch gets sorted indices


# ----------------------------------------------------------------------------- the real network

SMALL_SPEC = ObsSpec(
    plane_names=("a", "b", "c"), static_planes=("c",), height=6, width=5, vector_size=30,
    vector_fields={"own_elixir": (0, 1), "own_hand_cards": (1, 21), "own_hand_cost": (21, 25),
                   "own_hand_affordable": (25, 29), "clock": (29, 30)},
    n_actions=1 + 4 * 30, hand_slots=4, decision_ms=500,
)
TINY_NET = NetConfig(channels=8, blocks=1, norm_groups=4, vector_embed=8, value_hidden=32)


def conv_batch(n=24, choice_every=3, seed=0):
    """n cells for the real (tiny) network on a 6x5 board; every third row is a choice row.
    Old log-probs come from the model itself, so the ratio starts at exactly 1."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(n, SMALL_SPEC.n_actions, generator=g) < 0.3
    forced = torch.arange(n) % choice_every != 0
    mask[forced] = False
    mask[:, 0] = True
    obs = {"spatial": torch.rand(n, 3, 6, 5, generator=g), "vector": torch.rand(n, 30, generator=g), "mask": mask}
    model = ActorCritic(SMALL_SPEC, TINY_NET, seed=seed)
    with torch.no_grad():
        dist = MaskedCategorical(model.actor_logits(obs), mask)
        actions = dist.sample(torch.rand(n, generator=g))
        old_log_probs = dist.log_prob(actions)
        old_values = model.value(obs)
    data = UpdateData(
        actions=actions.numpy(), old_log_probs=old_log_probs.numpy(),
        advantages=torch.randn(n, generator=g).numpy(), returns=torch.randn(n, generator=g).numpy(),
        old_values=old_values.numpy(), n_legal=mask.sum(-1).numpy().astype(np.int32),
        fetch=lambda cells: {k: v[torch.as_tensor(cells)] for k, v in obs.items()},
    )
    return model, data, obs


class GradRecorder(torch.optim.SGD):
    """lr 0: records each step's gradients and leaves the weights alone."""

    def __init__(self, params):
        super().__init__(params, lr=0.0)
        self.steps = []

    def step(self, closure=None):
        self.steps.append([p.grad.clone() if p.grad is not None else None for g in self.param_groups for p in g["params"]])


def recorded_grads(model, data, minibatch_size, batch_size=24):
    opt_a, opt_c = GradRecorder(model.actor.parameters()), GradRecorder(model.critic.parameters())
    ppo = PPOConfig(n_epochs=1, batch_size=batch_size, minibatch_size=minibatch_size, max_grad_norm=1e9)
    # the default schedules' values at env step 0
    metrics = ppo_update(model, opt_a, opt_c, data, ppo, epochs(), "cpu", ent_coef=0.01, ent_coef_noop=0.02)
    return opt_a.steps, opt_c.steps, metrics


def test_minibatch_size_does_not_change_the_accumulated_gradient():
    model, data, _ = conv_batch()
    reference_a, reference_c, _ = recorded_grads(model, data, minibatch_size=24)
    for minibatch in (5, 1):  # 5 leaves a short last minibatch of 4
        actor, critic, _ = recorded_grads(model, data, minibatch_size=minibatch)
        for got, want in zip(actor[0] + critic[0], reference_a[0] + reference_c[0]):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_skipping_forced_rows_gives_the_full_forward_gradient():
    # The reference forwards EVERY row through the actor (forced rows: ratio exp(0 - 0) = 1, a
    # constant log-prob) with the loss written out here; the update must match it while never
    # showing the actor a forced row.
    model, data, obs = conv_batch()
    calls = []
    actor_logits = model.actor_logits
    model.actor_logits = lambda o: (calls.append(o["mask"][:, 1:].any(-1)), actor_logits(o))[1]
    actor_steps, _, metrics = recorded_grads(model, data, minibatch_size=8)
    model.actor_logits = actor_logits
    assert all(has_play.all() for has_play in calls)  # only choice rows reached the actor

    ppo = PPOConfig()
    choice = torch.from_numpy(data.n_legal > 1)
    adv = torch.from_numpy(standardize_advantages(data.advantages, choice.numpy()))
    model.zero_grad(set_to_none=True)
    dist = MaskedCategorical(model.actor_logits(obs), obs["mask"])
    ratio = torch.exp(dist.log_prob(torch.from_numpy(data.actions)) - torch.from_numpy(data.old_log_probs))
    surrogate = torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
    objective = torch.where(adv < 0, torch.maximum(surrogate, 3 * adv), surrogate)
    # ent_coef / ent_coef_noop as passed; the forced rows' H and H2 are exactly 0 with zero gradient
    loss = -objective.sum() / 24 - (0.01 * dist.entropy().sum() + 0.02 * dist.noop_entropy().sum()) / 24
    loss.backward()
    for got, p in zip(actor_steps[0], model.actor.parameters()):
        torch.testing.assert_close(got, p.grad, atol=1e-6, rtol=1e-4)
    # The forward the update ran is the one the rollout ran: the ratio starts at 1.
    assert metrics["ppo/ratio_max_abs_dev"] < 1e-5


def test_all_forced_rows_leave_the_actor_unchanged_and_train_the_critic():
    model, data, _ = conv_batch(choice_every=10**6)  # row 0 would be choice: make every row forced
    data.n_legal[:] = 1
    data.actions[:] = 0
    data.old_log_probs[:] = 0.0
    actor_before = [p.detach().clone() for p in model.actor.parameters()]
    critic_before = [p.detach().clone() for p in model.critic.parameters()]
    opt_a, opt_c = make_optimizers(model, PPOConfig())
    metrics = ppo_update(model, opt_a, opt_c, data, PPOConfig(n_epochs=2, batch_size=12, minibatch_size=6),
                         epochs(), "cpu", ent_coef=0.01, ent_coef_noop=0.02)
    assert all(torch.equal(a, p) for a, p in zip(actor_before, model.actor.parameters()))
    assert any(not torch.equal(c, p) for c, p in zip(critic_before, model.critic.parameters()))
    assert metrics["ppo/optimizer_steps"] == 4 and metrics["ppo/actor_optimizer_steps"] == 0


def test_make_optimizers_uses_the_configured_rates_and_eps():
    model = ActorCritic(SMALL_SPEC, TINY_NET, seed=0)
    opt_a, opt_c = make_optimizers(model, PPOConfig(lr_actor=1e-3, lr_critic=3e-4, adam_eps=1e-5))
    assert opt_a.param_groups[0]["lr"] == 1e-3 and opt_c.param_groups[0]["lr"] == 3e-4
    assert opt_a.param_groups[0]["eps"] == 1e-5
    assert {id(p) for p in opt_a.param_groups[0]["params"]} == {id(p) for p in model.actor.parameters()}
