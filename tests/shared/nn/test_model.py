"""The actor-critic: shapes and dtypes, parameter counts, layout lookups by name, the mask
planes, seeded initialisation, and that actor and critic share nothing."""

import math

import msgspec
import numpy as np
import pytest
import torch

from shared.config import EnvConfig, NetConfig
from shared.envs import ObsSpec
from shared.nn.model import ActorCritic, autocast_enabled, board_input_channels, legal_fraction, mask_planes

H, W, P = 32, 18, 4
TILES = H * W  # 576

# RoyaleGym 0.1.25's SpatialObsBuilder layout, copied from shared.envs.obs_spec(build_env(...))
# (test_hand_built_layout_is_the_real_one keeps the copy honest).
PLANES = (
    "own_ground_troops", "own_air_troops", "own_buildings", "own_towers", "own_hp",
    "enemy_ground_troops", "enemy_air_troops", "enemy_buildings", "enemy_towers", "enemy_hp",
    "own_deploying", "enemy_deploying", "water", "no_deploy", "enemy_troop_zone",
    "own_spells", "enemy_spells", "own_spell_aim", "own_stunned", "enemy_stunned",
)
VECTOR_FIELDS = {
    "own_elixir": (0, 1), "enemy_elixir": (1, 2), "own_hand_cards": (2, 586),
    "own_hand_cost": (586, 590), "own_hand_affordable": (590, 594), "own_hand_pending": (594, 598),
    "own_pending_cost": (598, 599), "own_next_card": (599, 745), "own_cycle_6_8": (745, 1183),
    "own_deck": (1183, 1328), "own_last_card": (1328, 1474), "own_ticks_since_play": (1474, 1475),
    "own_elixir_leaked": (1475, 1476), "enemy_cards_seen": (1476, 1621),
    "enemy_possible_hand": (1621, 1766), "enemy_plays": (1766, 1767), "own_tower_hp": (1767, 1770),
    "enemy_tower_hp": (1770, 1773), "crowns": (1773, 1775), "king_active": (1775, 1777),
    "clock": (1777, 1780), "elixir_rate": (1780, 1783),
}
SPEC = ObsSpec(
    plane_names=PLANES, static_planes=("water", "no_deploy"), height=H, width=W, vector_size=1783,
    vector_fields=VECTOR_FIELDS, n_actions=1 + P * TILES, hand_slots=P, decision_ms=500,
)
TINY = NetConfig(channels=8, blocks=1, norm_groups=4, vector_embed=8, value_hidden=32)


def random_obs(b, seed=0, legal_p=0.2):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(b, SPEC.n_actions, generator=g) < legal_p
    mask[:, 0] = True
    return {
        "spatial": torch.rand(b, len(PLANES), H, W, generator=g),
        "vector": torch.rand(b, SPEC.vector_size, generator=g),
        "mask": mask,
    }


@pytest.fixture(scope="module")
def model():
    return ActorCritic(SPEC, TINY, seed=7)


def test_logits_are_b_by_2305_float32_and_values_b_float32(model):
    obs = random_obs(3)
    logits, values = model.actor_logits(obs), model.value(obs)
    assert logits.shape == (3, 2305) and logits.dtype == torch.float32
    assert values.shape == (3,) and values.dtype == torch.float32
    assert torch.isfinite(logits).all() and torch.isfinite(values).all()


def test_stem_input_is_planes_plus_mask_planes_plus_coordinates_plus_vector_embedding():
    # 20 planes + 4 mask planes + 2 coordinates + 32 embedding = 58 (the reference's stem width).
    assert board_input_channels(SPEC, NetConfig()) == 58


def test_parameter_count_by_hand(model):
    # C = 8, E = 8, V = 1783, 146 card ids (145 cards + empty), value_hidden 32, GroupNorm affine 2C.
    vector_embed = 1783 * 8 + 8  # 14,272
    stem = 34 * 8 * 9 + 2 * 8  # conv (20+4+2+8 -> 8, no bias) + GN = 2,464
    block = 2 * (8 * 8 * 9) + 2 * (2 * 8)  # 1,184
    trunk = vector_embed + stem + block  # 17,920
    tile_features = 8 * 8 * 9 + 2 * 8  # 592
    card_table = 146 * 8  # 1,168
    query, query_bias, noop = 10 * 8 + 8, 10 + 1, 16 + 1  # 88, 11, 17
    actor = trunk + tile_features + card_table + query + query_bias + noop  # 19,796
    critic = trunk + vector_embed + (16 + 8 + 4) * 32 + 32 + 32 + 1  # 17,920 + 14,272 + 928 + 33 = 33,153
    assert model.parameter_count() == {"actor": actor, "critic": critic} == {"actor": 19_796, "critic": 33_153}


def test_actor_and_critic_share_no_parameter_and_no_gradient(model):
    actor_ids = {id(p) for p in model.actor.parameters()}
    critic_ids = {id(p) for p in model.critic.parameters()}
    assert not actor_ids & critic_ids
    assert actor_ids | critic_ids == {id(p) for p in model.parameters()}
    model.zero_grad(set_to_none=True)
    model.actor_logits(random_obs(2)).sum().backward()
    assert all(p.grad is None for p in model.critic.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.actor.parameters())
    model.zero_grad(set_to_none=True)
    model.value(random_obs(2)).sum().backward()
    assert all(p.grad is None for p in model.actor.parameters())
    model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("missing", ["own_hand_cards", "own_hand_cost", "own_hand_affordable"])
def test_a_missing_hand_field_is_refused_with_the_declared_fields_listed(missing):
    fields = {k: v for k, v in VECTOR_FIELDS.items() if k != missing}
    spec = msgspec.structs.replace(SPEC, vector_fields=fields)
    with pytest.raises((KeyError, ValueError)) as err:
        ActorCritic(spec, TINY)
    message = str(err.value)
    assert missing in message and "own_elixir" in message and "elixir_rate" in message


def test_a_hand_cost_field_of_the_wrong_width_is_refused():
    fields = dict(VECTOR_FIELDS, own_hand_cost=(586, 589))
    with pytest.raises(ValueError, match="own_hand_cost"):
        ActorCritic(msgspec.structs.replace(SPEC, vector_fields=fields), TINY)


def test_mask_planes_follow_the_action_encoding():
    # action = 1 + slot * 576 + y * 18 + x: slot 1, y 5, x 7 -> 1 + 576 + 90 + 7 = 674;
    # slot 3, y 31, x 17 -> 1 + 1728 + 558 + 17 = 2304 (the last action).
    mask = torch.zeros(2, SPEC.n_actions, dtype=torch.bool)
    mask[:, 0] = True
    mask[0, 674] = True
    mask[1, 2304] = True
    planes = mask_planes(mask, SPEC)
    assert planes.shape == (2, P, H, W)
    assert planes[0, 1, 5, 7] and planes[0].sum() == 1
    assert planes[1, 3, 31, 17] and planes[1].sum() == 1
    # legal_frac: one legal tile of 576 in one slot.
    np.testing.assert_allclose(legal_fraction(mask, SPEC)[0].numpy(), [0, 1 / 576, 0, 0])


def test_tile_logits_are_laid_out_slot_major_in_action_order():
    # Zero the pointer query and let the per-slot bias read only the slot's cost: every tile of
    # slot s then has logit cost_s, so the flattened logits are 576 copies of each cost in slot order.
    m = ActorCritic(SPEC, TINY, seed=1)
    with torch.no_grad():
        m.actor.query.weight.zero_()
        m.actor.query.bias.zero_()
        m.actor.query_bias.weight.zero_()
        m.actor.query_bias.weight[0, TINY.channels] = 1.0  # input order: [embedding (C), cost, affordable]
    obs = random_obs(1)
    costs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    obs["vector"][0, 586:590] = costs
    tiles = m.actor_logits(obs)[0, 1:].reshape(P, TILES)
    torch.testing.assert_close(tiles, costs[:, None].expand(P, TILES))


def test_hand_card_ids_are_the_argmax_of_each_slots_onehot():
    m = ActorCritic(SPEC, TINY, seed=1)
    vector = torch.zeros(1, SPEC.vector_size)
    for slot, card in enumerate([3, 145, 0, 77]):  # 145 = empty slot
        vector[0, 2 + slot * 146 + card] = 1.0
    assert m.actor.hand_card_ids(vector).tolist() == [[3, 145, 0, 77]]


def test_initial_weights_depend_only_on_the_seed_and_leave_the_global_rng_alone():
    state = torch.get_rng_state()
    a, b, c = ActorCritic(SPEC, TINY, seed=3), ActorCritic(SPEC, TINY, seed=3), ActorCritic(SPEC, TINY, seed=4)
    assert torch.equal(state, torch.get_rng_state())
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.actor.trunk.stem.weight, c.actor.trunk.stem.weight)


def test_init_gains_biases_and_embeddings():
    m = ActorCritic(SPEC, NetConfig(), seed=0)
    # A single-row orthogonal matrix is a unit vector, times the gain.
    assert m.actor.noop.weight.norm().item() == pytest.approx(0.01, rel=1e-5)
    assert m.actor.query_bias.weight.norm().item() == pytest.approx(0.01, rel=1e-5)
    assert m.critic.out.weight.norm().item() == pytest.approx(1.0, rel=1e-5)
    # query: 32 x 34 with orthonormal rows, times 0.01 -> Frobenius norm 0.01 * sqrt(32).
    assert m.actor.query.weight.norm().item() == pytest.approx(0.01 * math.sqrt(32), rel=1e-5)
    assert all(p.abs().sum() == 0 for n, p in m.named_parameters() if n.endswith(".bias") and "norm" not in n)
    assert m.actor.card_embed.weight.std().item() == pytest.approx(0.02, rel=0.1)
    # Near-zero head: the initial policy is near uniform over whatever is legal.
    assert m.actor_logits(random_obs(2)).abs().max().item() < 0.05


@pytest.mark.slow
def test_hand_built_layout_is_the_real_one_and_a_real_observation_runs():
    from shared.envs import build_env, obs_spec

    env = build_env(EnvConfig())
    assert obs_spec(env) == SPEC
    obs, _ = env.reset(seed=11)
    seat = obs["blue"]
    batch = {
        "spatial": torch.from_numpy(seat["spatial"])[None],
        "vector": torch.from_numpy(seat["vector"])[None],
        "mask": torch.from_numpy(seat["action_mask"]).bool()[None],
    }
    # Our mask planes are exactly the environment's own (slot, y, x) planes.
    assert torch.equal(mask_planes(batch["mask"], SPEC)[0], torch.from_numpy(seat["mask_planes"]).bool())
    logits = ActorCritic(SPEC, TINY, seed=0).actor_logits(batch)
    assert logits.shape == (1, 2305) and torch.isfinite(logits).all()


# ----------------------------------------------------------------------------- precision


@pytest.mark.parametrize("device_type,setting,expected", [
    ("cuda", "bfloat16", True), ("cuda", "off", False), ("cpu", "bfloat16", False), ("cpu", "off", False),
])
def test_bf16_autocast_only_on_cuda_when_asked(device_type, setting, expected):
    assert autocast_enabled(device_type, setting) is expected


def test_an_unknown_autocast_setting_is_refused_by_name():
    with pytest.raises(ValueError, match=r"net.autocast 'fp8': expected 'bfloat16' or 'off'"):
        autocast_enabled("cuda", "fp8")


def test_cpu_forward_runs_outside_autocast_even_when_bf16_is_configured(model):
    seen = {}
    handle = model.actor.register_forward_hook(lambda m, i, o: seen.setdefault("on", torch.is_autocast_enabled("cpu")))
    try:
        model.actor_logits(random_obs(2))
    finally:
        handle.remove()
    assert model.net_config.autocast == "bfloat16" and seen == {"on": False}


def test_logits_and_values_stay_float32_under_bf16_autocast(model):
    """What CUDA runs, exercised with CPU autocast (the same dtype rules): the heads' outputs
    are float32, and they agree with the float32 forward to bf16 precision."""
    obs = random_obs(4, seed=3)
    with torch.no_grad():
        ref_logits, ref_values = model.actor(obs), model.critic(obs)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            logits, values = model.actor(obs), model.critic(obs)
    assert logits.dtype == torch.float32 and values.dtype == torch.float32
    # bf16 keeps 8 significant bits: a relative error of a few 2**-8 through two conv layers.
    assert torch.allclose(logits, ref_logits, rtol=0.05, atol=0.02)
    assert torch.allclose(values, ref_values, rtol=0.05, atol=0.05)
    assert not torch.equal(logits, ref_logits)  # autocast really ran in bf16


def test_noop_bias_is_a_constant_on_the_noop_logit_only():
    obs = random_obs(3, seed=5)
    plain = ActorCritic(SPEC, TINY, seed=7)
    biased = ActorCritic(SPEC, msgspec.structs.replace(TINY, noop_bias=8.0), seed=7)
    with torch.no_grad():
        a, b = plain.actor_logits(obs), biased.actor_logits(obs)
    assert torch.equal(b[:, 1:], a[:, 1:])
    assert torch.allclose(b[:, 0] - a[:, 0], torch.full((3,), 8.0), atol=1e-6)
    # Not a parameter: the optimizer cannot see it, and the parameter count is unchanged.
    assert plain.parameter_count() == biased.parameter_count()


def _same_card_in_every_slot(obs):
    """Every hand slot holds card 3 at cost 0.3, affordable: the slots differ by index alone."""
    obs["vector"][:, 2:586] = 0.0
    for slot in range(P):
        obs["vector"][:, 2 + slot * 146 + 3] = 1.0
    obs["vector"][:, 586:590] = 0.3
    obs["vector"][:, 590:594] = 1.0
    return obs


def test_without_slot_index_two_slots_holding_the_same_card_score_every_tile_alike():
    # the defect net.slot_index mends: the pointer queries read card, cost and affordability
    # only, so a teacher that plays its FIRST playable slot cannot be copied
    m = ActorCritic(SPEC, TINY, seed=3)
    tiles = m.actor_logits(_same_card_in_every_slot(random_obs(2, seed=5)))[:, 1:].reshape(2, P, TILES)
    for slot in range(1, P):
        torch.testing.assert_close(tiles[:, slot], tiles[:, 0], rtol=0, atol=1e-6)  # the einsum rounds per slot


def test_with_slot_index_the_query_reads_the_slots_one_hot_index():
    net = msgspec.structs.replace(TINY, slot_index=True)
    m = ActorCritic(SPEC, net, seed=3)
    assert m.actor.query.in_features == TINY.channels + 2 + P  # 8 + 2 + 4
    # 4 more inputs to the query (8 outputs) and to its bias (1 output): 36 parameters
    assert m.parameter_count()["actor"] == 19_796 + 4 * 8 + 4
    # the query bias reads only the slot index, weight k on slot k: slot s's tiles all score s
    with torch.no_grad():
        m.actor.query.weight.zero_()
        m.actor.query.bias.zero_()
        m.actor.query_bias.weight.zero_()
        m.actor.query_bias.weight[0, TINY.channels + 2:] = torch.arange(P, dtype=torch.float32)
    tiles = m.actor_logits(_same_card_in_every_slot(random_obs(2, seed=5)))[:, 1:].reshape(2, P, TILES)
    torch.testing.assert_close(tiles, torch.arange(P, dtype=torch.float32)[None, :, None].expand(2, P, TILES))
