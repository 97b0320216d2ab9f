"""Card identity end to end on REAL RoyaleGym observations: the spec reads RoyaleGym's
``card_ids`` key, the codec stores it as bytes after the uint8 planes (exact, the mask still
last), the torch expansion matches, and the network embeds it (an id changes the logits; with
``net.card_id_embed`` 0 it does not). Without card identity nothing moves: the spec's and the
table's encodings carry no new key."""

import msgspec
import numpy as np
import pytest
import torch

from shared.codec import CodecError, describe_table
from shared.config import ComponentSpec, EnvConfig, NetConfig
from shared.envs import CARD_IDS_KEY
from shared.nn.model import ActorCritic
from shared.nn.rows import DeviceRows
from shared.preflight import run_preflight
from tests.shared.selfplay import random_legal_observations

MASTER_SEED = 20261206
CARD_ENV = EnvConfig(obs_builder=ComponentSpec(cls="royalegym.SpatialObsBuilder", kwargs={"card_identity": True}))


@pytest.fixture(scope="module")
def preflight():
    return run_preflight(CARD_ENV, MASTER_SEED)


@pytest.fixture(scope="module")
def real_obs():
    """200 decisions of random-legal self-play (no-op probability 0.5), both seats, copied."""
    return random_legal_observations(CARD_ENV, 200, rng_seed=4, reset_seed=41, next_reset=500)


def test_the_spec_and_table_declare_the_id_planes(preflight):
    from royalegym import RustEngine

    spec, table = preflight.spec, preflight.table
    # own and enemy; 0 a free tile, 1 a tower, 2 + the catalogue position of a card
    assert (spec.id_planes, spec.id_vocab) == (2, len(RustEngine().cards()) + 2) == (2, 147)
    assert table.id_planes == 2
    assert "card ids uint8 x2" in describe_table(table)


def test_without_card_identity_the_encodings_have_no_new_key():
    plain = run_preflight(EnvConfig(), MASTER_SEED)
    assert (plain.spec.id_planes, plain.spec.id_vocab, plain.table.id_planes) == (0, 0, 0)
    assert b"id_planes" not in msgspec.json.encode(plain.spec)
    assert b"id_vocab" not in msgspec.json.encode(plain.spec)
    assert b"id_planes" not in msgspec.json.encode(plain.table)
    assert "card ids" not in describe_table(plain.table)


def test_row_layout_adds_the_id_bytes_before_the_rest(preflight):
    codec, t = preflight.codec, preflight.table
    hw = 32 * 18
    # 16 uint8 planes, then 2 id planes (18 x 576 bytes: even, no pad), 2 uint16 planes, the
    # vector of 1,929 (card identity adds enemy_last_card) and the 2,305 mask bits
    assert (codec.oid, codec.oid_end, codec.o16) == (16 * hw, 18 * hw, 18 * hw)
    assert t.vector_size == 1929
    assert codec.row_bytes == 18 * hw + 2 * 2 * hw + 2 * 1929 + 289 == 16819
    assert codec.omask == codec.row_bytes - 289


def test_real_card_ids_round_trip_exactly(preflight, real_obs):
    codec = preflight.codec
    rows, clipped, rounded = codec.pack_many(real_obs)
    assert (clipped, rounded) == (0, 0)
    u = codec.unpack(rows)
    ids = np.stack([o[CARD_IDS_KEY] for o in real_obs])
    assert u["card_ids"].dtype == np.uint8 and np.array_equal(u["card_ids"], ids)
    # the play saw cards on the board, not only towers: the test exercises real ids
    assert int((ids >= 2).sum()) > 100
    assert np.array_equal(u["spatial"], np.stack([o["spatial"] for o in real_obs]))
    assert np.array_equal(u["vector"], np.stack([o["vector"] for o in real_obs]).astype(np.float16).astype(np.float32))
    masks = np.stack([o["action_mask"] for o in real_obs]) != 0
    assert np.array_equal(u["mask"], masks)
    assert np.array_equal(codec.legal_counts(rows), masks.sum(axis=1))
    expanded = DeviceRows(codec, "cpu").expand(torch.as_tensor(rows))
    for key in ("card_ids", "spatial", "vector", "mask"):
        assert torch.equal(expanded[key], torch.as_tensor(u[key])), key


def test_packing_an_observation_without_card_ids_is_refused(preflight, real_obs):
    obs = {k: v for k, v in real_obs[0].items() if k != CARD_IDS_KEY}
    with pytest.raises(CodecError, match="stores 2 card-id planes; the observation's card_ids is None"):
        preflight.codec.pack(obs, np.empty(preflight.codec.row_bytes, dtype=np.uint8))


def obs_tensors(preflight, real_obs):
    rows, _, _ = preflight.codec.pack_many(real_obs)
    return {k: torch.as_tensor(v) for k, v in preflight.codec.unpack(rows).items()}


def test_the_network_reads_the_ids_and_can_be_told_not_to(preflight, real_obs):
    spec = preflight.spec
    with_ids = ActorCritic(spec, NetConfig(slot_index=True), seed=3)
    without = ActorCritic(spec, NetConfig(slot_index=True, card_id_embed=0), seed=3)
    # the stem's extra input: 2 planes x 8 features, times 32 channels x 3 x 3; and the table
    extra = 2 * 8 * 32 * 9 + 147 * 8
    for net in ("actor", "critic"):
        assert with_ids.parameter_count()[net] - without.parameter_count()[net] == extra == 5784
    embed = with_ids.actor.trunk.card_id_embed
    assert torch.equal(embed.weight[0], torch.zeros(8))  # an empty tile embeds to nothing
    assert 0.8 < float(embed.weight[1:].detach().std()) < 1.2  # N(0, 1): a card counts as much as a unit
    obs = obs_tensors(preflight, real_obs[:64])
    relabelled = dict(obs, card_ids=torch.where(obs["card_ids"] >= 2, 2 + (obs["card_ids"] - 2 + 40) % 145,
                                                 obs["card_ids"]))
    assert not torch.equal(relabelled["card_ids"], obs["card_ids"])
    with torch.no_grad():
        assert not torch.allclose(with_ids.actor_logits(obs), with_ids.actor_logits(relabelled))
        assert not torch.allclose(with_ids.value(obs), with_ids.value(relabelled))
        assert torch.equal(without.actor_logits(obs), without.actor_logits(relabelled))
        assert torch.equal(without.value(obs), without.value(relabelled))


def test_a_byte_past_the_vocabulary_reads_as_the_last_id(preflight, real_obs):
    net = ActorCritic(preflight.spec, NetConfig(), seed=0)
    obs = obs_tensors(preflight, real_obs[:4])
    corrupt = dict(obs, card_ids=obs["card_ids"].clone())
    last = dict(obs, card_ids=obs["card_ids"].clone())
    corrupt["card_ids"][:, 0, 5, 5] = 255
    last["card_ids"][:, 0, 5, 5] = 146
    with torch.no_grad():
        assert torch.equal(net.actor_logits(corrupt), net.actor_logits(last))


def test_card_id_embed_enters_the_arch_digest_only_when_not_its_default():
    from shared.config_load import load_config
    from shared.identity import config_digests

    base = config_digests(load_config({"profile": "cpu"}))["arch_digest"]  # the default, 8: left out
    assert config_digests(load_config({"profile": "cpu", "net": {"card_id_embed": 0}}))["arch_digest"] != base
    assert config_digests(load_config({"profile": "cpu", "net": {"card_id_embed": 16}}))["arch_digest"] != base
