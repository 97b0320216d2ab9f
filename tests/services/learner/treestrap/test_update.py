"""The heads over the actor's trunk and one TreeStrap update on the real (tiny) actor-critic: a head
outside every row's bootstrap sample is not moved, the included heads and the proposal move
toward their targets, and the shared trunk learns from both."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F

from services.learner.treestrap.batch import TreeStrapBatch
from services.learner.treestrap.heads import ScoreHeads, tile_features
from services.learner.treestrap.update import treestrap_update
from shared.batches import AlphaZeroBatch, PackedObs
from shared.nn.model import ActorCritic
from tests.shared.nn.test_model import SPEC, TINY, random_obs

K, N = 3, 4
PPO = SimpleNamespace(n_epochs=2, batch_size=2, minibatch_size=4, vf_coef=0.5, max_grad_norm=10.0)


def setup(masks: np.ndarray):
    torch.manual_seed(0)
    model = ActorCritic(SPEC, TINY, seed=3)
    heads = ScoreHeads(SPEC, TINY.channels, K, seed=5)
    obs = random_obs(N, seed=1, legal_p=0.01)
    legal = [np.flatnonzero(obs["mask"][i].numpy()) for i in range(N)]
    ids = np.concatenate(legal).astype(np.int16)
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in legal])]).astype(np.int64)
    search_t, prop_t = np.zeros(len(ids), np.float32), np.zeros(len(ids), np.float32)
    for i, x in enumerate(legal):  # search: mass on the row's second legal action; proposal: on its last
        search_t[offsets[i] + 1] = 1.0
        prop_t[offsets[i + 1] - 1] = 1.0

    def az(targets):
        return AlphaZeroBatch(obs=PackedObs(np.zeros((N, 1 + SPEC.n_actions // 8 + 1), np.uint8), np.arange(N), 1,
                                            SPEC.n_actions), players=np.zeros(N, np.int32), policy_targets=targets,
                              value_targets=np.linspace(-1, 1, N).astype(np.float32),
                              policy_weights=np.ones(N, np.float32), legal_ids=ids, legal_offsets=offsets,
                              n_actions=SPEC.n_actions)

    batch = TreeStrapBatch(az(search_t), az(prop_t), masks)
    opts = (torch.optim.Adam(model.actor.parameters(), lr=1e-2), torch.optim.Adam(model.critic.parameters(), lr=1e-2),
            torch.optim.Adam(heads.parameters(), lr=1e-2))
    fetch = lambda cells: {k: v[torch.as_tensor(cells)] for k, v in obs.items()}  # noqa: E731
    return model, heads, opts, batch, fetch


def update(model, heads, opts, batch, fetch, it=0):
    return treestrap_update(model, heads, opts, batch, fetch, PPO, 1.0, lambda e: np.random.default_rng((it, e)),
                            torch.device("cpu"))


def head_slices(heads: ScoreHeads, h: int) -> list[torch.Tensor]:
    p = SPEC.hand_slots
    return [heads.tile.weight[h * p:(h + 1) * p].detach().clone(), heads.tile.bias[h * p:(h + 1) * p].detach().clone(),
            heads.noop.weight[h].detach().clone(), heads.noop.bias[h].detach().clone()]


def test_the_heads_score_every_action_from_the_tiles_the_actors_forward_computed():
    model, heads, *_ = setup(np.ones((N, K)))
    obs = random_obs(2, seed=4)
    with tile_features(model.actor) as seen:
        logits = model.actor_logits(obs)
    a = model.actor
    expected = F.relu(a.tile_norm(a.tile_conv(a.trunk(obs))))
    assert len(seen) == 1 and torch.equal(seen[0], expected)
    scores = heads(seen[0], obs["mask"])
    assert scores.shape == (2, K, SPEC.n_actions) and scores.dtype == torch.float32 and logits.shape == (2, SPEC.n_actions)
    # head 1's score of action 1 + s*H*W + y*W + x is its 1x1 convolution of tile (y, x) for slot s
    s, y, x = 2, 5, 7
    w, b = heads.tile.weight[1 * SPEC.hand_slots + s, :, 0, 0], heads.tile.bias[1 * SPEC.hand_slots + s]
    want = (seen[0][0, :, y, x] * w).sum() + b
    torch.testing.assert_close(scores[0, 1, 1 + s * SPEC.height * SPEC.width + y * SPEC.width + x], want)


def test_a_head_outside_every_bootstrap_sample_is_not_moved_and_the_others_learn_their_target():
    masks = np.ones((N, K))
    masks[:, 2] = 0  # head 2 sees no row
    masks[0, 0] = 0
    model, heads, opts, batch, fetch = setup(masks)
    before = [head_slices(heads, h) for h in range(K)]
    trunk0 = model.actor.trunk.stem.weight.detach().clone()
    losses = [update(model, heads, opts, batch, fetch, it) for it in range(3)]
    after = [head_slices(heads, h) for h in range(K)]
    assert all(torch.equal(x, y) for x, y in zip(before[2], after[2]))
    assert all(not torch.equal(x, y) for x, y in zip(before[0][:1] + before[1][:1], after[0][:1] + after[1][:1]))
    assert not torch.equal(trunk0, model.actor.trunk.stem.weight)
    assert losses[-1]["treestrap/head_loss"] < losses[0]["treestrap/head_loss"]
    assert losses[-1]["treestrap/proposal_loss"] < losses[0]["treestrap/proposal_loss"]
    # included pairs: 4 rows x 3 heads - 4 (head 2) - 1 (row 0, head 0) = 7 of 12
    assert losses[0]["treestrap/included_frac"] == 7 / 12
    assert losses[0]["treestrap/optimizer_steps"] == 4  # 2 epochs x max(1, 4 // 2) batches
