"""The DQN parts on REAL RoyaleGym rows: the codec's packed rows of random-legal self-play give
CSR legality equal to the engine's own action masks (head frame), windows whose can_bootstrap
matches the next rows' legality, and one DQN update through the real actor network read as
Q rows (one head), its greedy actions legal."""

import numpy as np
import pytest
import torch

from services.learner.dqn.behaviour import DqnBehaviour, bootstrap_masks
from services.learner.dqn.network import make_target
from services.learner.dqn.replay import PrioritizedReplay
from services.learner.dqn.update import DqnUpdateSpec, dqn_batch, dqn_update
from services.learner.dqn.windows import Decision, WindowBuilder
from shared.batches import PackedObs
from shared.config import EnvConfig, NetConfig
from shared.envs import build_env
from shared.nn.model import ActorCritic
from shared.nn.policy import Policy
from shared.preflight import run_preflight

pytestmark = pytest.mark.slow

SEED = 20260921


def test_real_rows_csr_windows_and_one_update():
    from royalegym import RandomLegalOpponent

    pf = run_preflight(EnvConfig(), SEED)
    codec = pf.codec
    env = build_env(EnvConfig(max_steps=30))
    player = RandomLegalOpponent(0.5)
    rng = np.random.default_rng(3)
    obs, _ = env.reset(seed=11)
    builder = WindowBuilder(3, 0.99, codec.row_bytes, mask_offset=codec.omask)
    masks, rows = [], []
    ended = None
    for step in range(40):
        blue = obs["blue"]
        row, _, _ = codec.pack_many([blue])
        masks.append(np.asarray(blue["action_mask"]) != 0)
        rows.append(row[0])
        actions = {s: player.act(obs[s], obs[s]["action_mask"], rng) for s in ("blue", "red")}
        obs, reward, term, trunc, _ = env.step(actions)
        builder.push(0, Decision(row[0], int(actions["blue"]), float(reward["blue"]), 0))
        if term["blue"] or trunc["blue"]:
            ended = "terminated" if term["blue"] else "truncated"
            final, _, _ = codec.pack_many([obs["blue"]])
            builder.end(0, ended, final[0])
            break
    assert ended == "truncated"  # 30 decisions at max_steps 30: no battle ends that fast

    # CSR from the packed rows' mask bits equals the engine's masks, in the action ids it takes.
    packed = np.stack(rows)
    ids, offsets = PackedObs(packed, np.arange(len(packed)), codec.omask, pf.spec.n_actions).legal_csr()
    for i, m in enumerate(masks):
        assert ids[offsets[i]:offsets[i + 1]].tolist() == np.flatnonzero(m).tolist()
    assert all(m[0] for m in masks)  # the no-op is always legal: every next slice is non-empty

    windows = builder.drain()
    assert len(windows) == len(rows) and windows.can_bootstrap.all()
    assert windows.span.tolist()[-3:] == [3, 2, 1]
    np.testing.assert_allclose(windows.discounts[-3:], [0.99 ** 3, 0.99 ** 2, 0.99], rtol=1e-6)

    replay = PrioritizedReplay(64, codec.row_bytes, 1, alpha=0.6, beta=0.4, budget_mb=64)
    replay.add(windows, bootstrap_masks(np.random.default_rng(0), len(windows), 1, 1.0))
    batch = dqn_batch(replay.sample(16, np.random.default_rng(1)), codec.omask, pf.spec.n_actions)
    assert batch.can_bootstrap.all() and (np.diff(batch.next_legal_offsets) > 0).all()

    torch.manual_seed(0)
    model = ActorCritic(pf.spec, NetConfig(channels=8, blocks=1, norm_groups=4, vector_embed=8, value_hidden=32), seed=1)
    policy = Policy(model, codec, torch.device("cpu"))

    class QActor(torch.nn.Module):  # the actor's logits read as one head of Q rows
        def __init__(self, actor_critic):
            super().__init__()
            self.net = actor_critic

        def forward(self, obs):
            return self.net.actor_logits(obs)[:, None, :]

    online = QActor(model)
    target = make_target(online)
    opt = torch.optim.Adam(model.actor.parameters(), lr=1e-3)
    stats = dqn_update(online, target, opt, replay, DqnUpdateSpec(4, 16, 2, 10.0), np.random.default_rng(2),
                       policy.obs_batch, mask_offset=codec.omask, n_actions=pf.spec.n_actions, steps_before=0,
                       device="cpu")
    assert stats["dqn/target_syncs"] == 2.0 and np.isfinite(list(stats.values())).all()
    assert (replay.priority[: len(replay)] != 1.0).any()

    def q_rows(r):
        o = policy.obs_batch(r)
        return online(o), o["mask"]

    behaviour = DqnBehaviour(q_rows, eps=0.0)
    n_legal = np.array([m.sum() for m in masks])
    acts, _ = behaviour.act(packed, n_legal, np.full(len(packed), 0.5))
    assert all(masks[i][a] for i, a in enumerate(acts))
