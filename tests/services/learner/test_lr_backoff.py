"""services/learner/lr_backoff.py: a backoff after exactly ``patience`` consecutive breaches and
not before, a non-breach restarts the count, the floor holds, and the state round-trips."""

import json

import pytest
import torch

from services.learner.lr_backoff import LrBackoff
from shared.config import LrBackoffConfig

CFG = LrBackoffConfig(kl_threshold=0.02, patience=3, factor=0.5, lr_min=2e-5)
HIGH, LOW = 0.05, 0.01


def optimizers(lr_actor=2e-4, lr_critic=1e-4):
    a, c = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    return torch.optim.Adam([a], lr=lr_actor, eps=1e-5), torch.optim.Adam([c], lr=lr_critic, eps=1e-5)


def lrs(opt_a, opt_c):
    return opt_a.param_groups[0]["lr"], opt_c.param_groups[0]["lr"]


def test_backoff_after_exactly_patience_breaches_and_not_before():
    backoff, (opt_a, opt_c) = LrBackoff(CFG), optimizers()
    assert backoff.observe(HIGH, opt_a, opt_c) is False
    assert backoff.observe(HIGH, opt_a, opt_c) is False
    assert lrs(opt_a, opt_c) == (2e-4, 1e-4)
    assert backoff.observe(HIGH, opt_a, opt_c) is True  # the third consecutive breach
    assert lrs(opt_a, opt_c) == (1e-4, 5e-5)  # both optimizers, by factor
    assert backoff.events == 1 and backoff.streak == 0  # counter reset after a backoff
    # the next backoff needs a full patience again
    assert [backoff.observe(HIGH, opt_a, opt_c) for _ in range(3)] == [False, False, True]
    assert lrs(opt_a, opt_c) == (5e-5, 2.5e-5)
    m = backoff.metrics(opt_a, opt_c)
    assert m == {"ppo/lr_actor": 5e-5, "ppo/lr_critic": 2.5e-5, "ppo/lr_backoff_events": 2.0,
                 "ppo/lr_backoff_streak": 0.0}


def test_kl_at_the_threshold_is_not_a_breach():
    backoff, (opt_a, opt_c) = LrBackoff(CFG), optimizers()
    assert not any(backoff.observe(0.02, opt_a, opt_c) for _ in range(5))
    assert backoff.events == 0


def test_a_non_breach_resets_the_counter():
    backoff, (opt_a, opt_c) = LrBackoff(CFG), optimizers()
    results = [backoff.observe(kl, opt_a, opt_c) for kl in (HIGH, HIGH, LOW, HIGH, HIGH)]
    assert results == [False] * 5 and backoff.streak == 2 and lrs(opt_a, opt_c) == (2e-4, 1e-4)
    assert backoff.observe(HIGH, opt_a, opt_c) is True


def test_an_iteration_without_a_kl_leaves_the_streak_alone():
    # no choice row -> no ppo/kl: the actor did not move; neither a breach nor a reset
    backoff, (opt_a, opt_c) = LrBackoff(CFG), optimizers()
    assert [backoff.observe(kl, opt_a, opt_c) for kl in (HIGH, None, HIGH, float("nan"), HIGH)] == [
        False, False, False, False, True]


def test_the_floor_holds_and_a_backoff_at_the_floor_is_not_an_event():
    backoff, (opt_a, opt_c) = LrBackoff(LrBackoffConfig(kl_threshold=0.02, patience=1, factor=0.5, lr_min=2e-5)), optimizers(
        lr_actor=6e-5, lr_critic=2e-5)
    assert backoff.observe(HIGH, opt_a, opt_c) is True  # actor 6e-5 -> 3e-5; critic already at the floor
    assert lrs(opt_a, opt_c) == (3e-5, 2e-5)
    assert backoff.observe(HIGH, opt_a, opt_c) is True  # 1.5e-5 floored at 2e-5
    assert lrs(opt_a, opt_c) == (2e-5, 2e-5)
    for _ in range(5):
        assert backoff.observe(HIGH, opt_a, opt_c) is False  # nothing left to lower
    assert lrs(opt_a, opt_c) == (2e-5, 2e-5) and backoff.events == 2


def test_state_round_trip():
    backoff, (opt_a, opt_c) = LrBackoff(CFG), optimizers()
    for kl in (HIGH, HIGH, HIGH, HIGH, HIGH):  # one backoff, then a streak of 2 in progress
        backoff.observe(kl, opt_a, opt_c)
    restored = LrBackoff(CFG)
    restored.load_state(json.loads(json.dumps(backoff.state())))
    assert restored.state() == backoff.state() == {"streak": 2, "events": 1, "lr_actor": 1e-4, "lr_critic": 5e-5}
    # a resume builds fresh optimizers at the config's rates; apply() puts the backed-off ones back
    new_a, new_c = optimizers()
    restored.apply(new_a, new_c)
    assert lrs(new_a, new_c) == lrs(opt_a, opt_c)
    # and the two continue identically: the restored streak needs one more breach
    assert restored.observe(HIGH, new_a, new_c) is True and backoff.observe(HIGH, opt_a, opt_c) is True
    assert lrs(new_a, new_c) == lrs(opt_a, opt_c) and restored.state() == backoff.state()


def test_a_run_that_never_backed_off_keeps_the_config_rates_on_resume():
    restored = LrBackoff(CFG)
    restored.load_state(LrBackoff(CFG).state())
    opt_a, opt_c = optimizers(lr_actor=3e-4)
    restored.apply(opt_a, opt_c)
    assert lrs(opt_a, opt_c) == (3e-4, 1e-4)
