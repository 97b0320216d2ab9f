"""Rollout idle fraction: the learner's fleet mean (services/learner/fleet.py, ``IdleMeter``) and each
rollout's own windowed gauge (services/rollout/metrics.py), by hand."""

from __future__ import annotations

import pytest

from services.learner.fleet import IdleMeter
from services.rollout.metrics import IdleWindow, RolloutMetrics


def test_the_fleet_idle_fraction_is_the_mean_over_rollouts_present_at_both_rows():
    meter = IdleMeter()
    assert meter.row_keys({"a": 5.0}, ["a"], now=100.0) == {}  # the first row: no window yet
    # 10 s later: a stepped 2 s more (idle 0.8), b is new (not in the window), c never seen
    keys = meter.row_keys({"a": 7.0, "b": 1.0}, ["a", "b"], now=110.0)
    assert keys == {"throughput/rollout_idle_frac": pytest.approx(0.8)}
    # 20 s later: a stepped 19 s (idle 0.05), b stepped 5 s (idle 0.75): mean 0.4
    keys = meter.row_keys({"a": 26.0, "b": 6.0}, ["a", "b"], now=130.0)
    assert keys == {"throughput/rollout_idle_frac": pytest.approx(0.4)}
    # a lost rollout leaves the mean; busy time past the wall (clock skew) clips at 0 idle
    keys = meter.row_keys({"a": 26.0, "b": 20.0}, ["b"], now=140.0)
    assert keys == {"throughput/rollout_idle_frac": 0.0}


def test_a_rollout_reports_its_idle_share_per_window_and_counts_every_second():
    m = RolloutMetrics(None)
    w = IdleWindow(m, window_s=10.0)
    w.add(3.0, 4.0)
    w.add(1.0, 5.0)
    assert m.idle_frac._value.get() == 0.0  # 9 s held: the window is not full
    w.add(1.0, 1.0)  # 10 s held, 5 s idle
    assert m.idle_frac._value.get() == pytest.approx(0.5)
    w.add(0.5, 10.0)
    assert m.idle_frac._value.get() == pytest.approx(0.05)
    assert m.idle_seconds._value.get() == pytest.approx(5.5)
    assert m.held_seconds._value.get() == pytest.approx(20.0)
