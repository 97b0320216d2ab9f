"""Overlapped collection (services/learner/overlap.py): the behaviour snapshot is a copy, the
ratio check reads the actor that inferred each row (and the alarm fires on a stale one), the
lag bookkeeping, the thread budget, and the refusal under run_exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from services.learner.measures import overlap_rows_frac, policy_lag_metrics
from services.learner.overlap import INLINE
from services.learner.overlap import (
    BehaviourPolicy, behaviour_ratio_dev, behaviour_snapshot, first_batch, overlap_threads,
)
from services.learner.rectangle import Rectangle
from shared.alarms import AlarmState, evaluate
from shared.config import AlarmConfig, ConfigError, load_config
from shared.nn.distribution import MaskedCategorical
from tests.services.learner.test_ppo import TableModel

N, A = 64, 5


def table(seed: int):
    rng = np.random.default_rng(seed)
    masks = rng.random((N, A)) < 0.7
    masks[:, 0] = True  # the no-op is always legal
    masks[:4, 1:] = False  # four forced rows (n_legal 1): never checked
    return TableModel(rng.normal(size=(N, A)), np.zeros(N)), torch.tensor(masks)


def sample(model, masks, rows: np.ndarray, seed: int):
    """Actions and their log-probs under ``model`` for ``rows``, by inverse CDF on uniforms."""
    with torch.no_grad():
        dist = MaskedCategorical(model.actor_logits({"row": torch.as_tensor(rows)}), masks[torch.as_tensor(rows)])
        a = dist.sample(torch.as_tensor(np.random.default_rng(seed).random(len(rows))))
        return a.numpy(), dist.log_prob(a).float().numpy()


def overlapped_rows(seed: int = 0):
    """Rows 0..N/2 inferred by the behaviour snapshot (lag 1) while the live model trains, the
    rest by the live model after its update (lag 0), as an overlapped collection does."""
    live, masks = table(seed)
    snap = behaviour_snapshot(live)
    with torch.no_grad():
        live.actor.table.add_(torch.as_tensor(np.random.default_rng(seed + 1).normal(0, 0.5, (N, A)), dtype=torch.float32))
    lags = np.r_[np.ones(N // 2, np.int8), np.zeros(N - N // 2, np.int8)]
    actions, logp = np.zeros(N, np.int64), np.zeros(N, np.float32)
    for lag, model in ((1, snap), (0, live)):
        rows = np.flatnonzero(lags == lag)
        actions[rows], logp[rows] = sample(model, masks, rows, seed + lag)
    fetch = lambda cells: {"row": torch.as_tensor(cells), "mask": masks[torch.as_tensor(cells)]}  # noqa: E731
    n_legal = masks.sum(-1).numpy()
    return live, snap, fetch, actions, logp, lags, n_legal


def test_the_behaviour_snapshot_is_a_copy_not_a_reference():
    live, _ = table(0)
    snap = behaviour_snapshot(live)
    before = snap.actor.table.detach().clone()
    with torch.no_grad():
        live.actor.table.mul_(2.0).add_(1.0)
    assert torch.equal(snap.actor.table, before)  # the update did not move it
    assert not torch.equal(live.actor.table, before)
    assert not snap.actor.table.requires_grad


def ratio_row(dev: float) -> dict:
    return {"ppo/ratio_max_abs_dev": dev, "ppo/ratio_atol": 1e-4}


def fired(row: dict) -> list[str]:
    return [r.name for r in evaluate(row, AlarmConfig(), AlarmState()) if r.name == "ratio_invariant" and r.fired]


def test_the_ratio_check_passes_against_the_behaviour_snapshot_and_a_stale_one_fires_the_alarm():
    live, snap, fetch, actions, logp, lags, n_legal = overlapped_rows()
    cells = np.arange(N)
    good = behaviour_ratio_dev({0: live, 1: snap}, fetch, cells, actions, logp, lags, n_legal)
    assert good < 1e-6  # each row against the actor that inferred it: the ratio is 1
    assert fired(ratio_row(good)) == []
    # the pitfall: a "snapshot" that is the live module (it moved with the update)
    stale = behaviour_ratio_dev({0: live, 1: live}, fetch, cells, actions, logp, lags, n_legal)
    assert stale > 0.05
    assert fired(ratio_row(stale)) == ["ratio_invariant"]
    # and the updated actor read as if it had inferred everything (the check before overlap)
    lag0_only = behaviour_ratio_dev({0: live}, fetch, cells, actions, logp, np.zeros(N, np.int8), n_legal)
    assert lag0_only > 0.05
    # forced rows are never checked: a nonsense log-prob there changes nothing
    logp_forced = logp.copy()
    logp_forced[:4] = 123.0
    assert behaviour_ratio_dev({0: live, 1: snap}, fetch, cells, actions, logp_forced, lags, n_legal) == good


def test_the_first_batch_is_the_one_ppo_update_steps_on_first():
    rng = lambda: np.random.default_rng(7)  # noqa: E731
    got = first_batch(100, 32, rng())
    assert np.array_equal(got, np.array_split(rng().permutation(100), 3)[0]) and len(got) == 34
    assert len(first_batch(10, 64, rng())) == 10  # fewer rows than a batch: one batch, all rows


def test_the_behaviour_policy_reports_the_lag_of_the_policy_that_answered():
    class P:
        def __init__(self, tag):
            self.model, self.tag = tag, tag

        def act(self, rows, n_legal, u, history=None):
            return self.tag, None

    hold = BehaviourPolicy(P("snapshot"), lag=1)
    assert hold.act(None, None, None)[0] == "snapshot" and hold.last_lag == 1 and hold.model == "snapshot"
    hold.switch(P("live"), 0)
    assert hold.act(None, None, None)[0] == "live" and hold.last_lag == 0 and hold.model == "live"
    assert hold.behaviour_model == "snapshot"  # kept for the ratio check


def test_lag_metrics_over_the_trainable_rows():
    rect = Rectangle(4, 3, 8, 0)
    rect.policy_lag[:2] = 1  # cycles 0-1 inferred during the update
    trainable = np.ones((4, 3), bool)
    trainable[3, 2] = False
    assert policy_lag_metrics(rect, trainable) == {"ppo/policy_lag_mean": 6 / 11, "ppo/policy_lag_max": 1}
    assert overlap_rows_frac(rect, trainable) == {"throughput/overlap_rows_frac": 6 / 11}
    assert policy_lag_metrics(rect, np.zeros((4, 3), bool)) == overlap_rows_frac(rect, np.zeros((4, 3), bool)) == {}


@pytest.mark.parametrize("threads,override,want", [(2, 0, 1), (1, 0, 1), (8, 0, 4), (8, 3, 3)])
def test_the_thread_budget_splits_the_cores(threads, override, want):
    cfg = load_config({"profile": "tiny", "determinism": {"tier": "throughput", "torch_threads": threads},
                       "rollout": {"overlap": True, "overlap_torch_threads": override}})
    assert overlap_threads(cfg) == want


def test_overlap_is_refused_under_run_exact_naming_the_tier():
    with pytest.raises(ConfigError) as exc:
        load_config({"profile": "tiny", "rollout": {"overlap": True}})
    assert 'rollout.overlap: overlapped collection is refused under determinism.tier "run_exact"' in str(exc.value)
    assert load_config({"profile": "tiny", "rollout": {"overlap": True},
                        "determinism": {"tier": "throughput"}}).rollout.overlap


def test_overlap_with_frame_stacking_is_refused_naming_both_fields():
    with pytest.raises(ConfigError) as exc:
        load_config({"profile": "tiny", "rollout": {"overlap": True}, "obs": {"frame_stack": 2},
                     "determinism": {"tier": "throughput"}})
    assert "rollout.overlap: overlapped collection does not support obs.frame_stack=2 yet" in str(exc.value)
    assert "set rollout.overlap false or obs.frame_stack 1" in str(exc.value)
    assert load_config({"profile": "tiny", "obs": {"frame_stack": 2},
                        "determinism": {"tier": "throughput"}}).obs.frame_stack == 2


def test_dqn_with_frame_stacking_is_refused_naming_the_field():
    with pytest.raises(ConfigError) as exc:
        load_config({"profile": "tiny", "learner": {"algorithm": "dqn"}, "obs": {"frame_stack": 2}})
    assert "obs.frame_stack: the DQN learner's Q rows read one frame; obs.frame_stack 2" in str(exc.value)


def test_a_stop_that_abandons_the_update_counts_its_rows_and_re_raises():
    """A stop during update k (ppo/learner.py raises StopRequested at the next minibatch): iteration
    k's inferred learner cells are counted untrained with the reason, the counters and the
    metric move by exactly that many, and the stop still ends the run."""
    from types import SimpleNamespace

    from services.learner.parts import IterationState, RunOptions
    from services.learner.service import Learner
    from services.learner.stops import StopRequested

    acted = np.zeros((6, 4), dtype=bool)
    acted[:5, :3] = True  # 15 inferred learner cells; the last cycle never answered
    c = SimpleNamespace(iteration=3, members=[SimpleNamespace(fresh=True)], rect=SimpleNamespace(acted=acted))
    said, inc = [], []

    def train(_c, _context):
        raise StopRequested

    # the parts train_and_report reaches before the update (a whole LearnerParts needs sockets)
    parts = SimpleNamespace(
        sock=None, say=said.append, battle_states=SimpleNamespace(request=lambda *a: None),
        fleet=SimpleNamespace(ordinal={}), metrics=SimpleNamespace(untrained_rows=SimpleNamespace(inc=inc.append)),
        cfg=load_config({"profile": "tiny"}), algorithm=SimpleNamespace(train=train))
    fake = SimpleNamespace(parts=parts, state=IterationState(iteration=2, untrained_rows=4), options=RunOptions(),
                           train_context=lambda: None)
    with pytest.raises(StopRequested):
        Learner.train_and_report(fake, c)
    assert fake.state.untrained_rows == 4 + 15 and inc == [15]
    assert said == ["learner: 15 rows of iteration 3 whose update the stop abandoned are not trained (the run stops "
                    "at iteration 2); counted in royalefleet_learner_untrained_rows_total"]
    assert fake.state.collection is INLINE  # overlap off: nothing else was started
