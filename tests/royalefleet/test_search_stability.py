"""The search-stability bench: its interval, and on real battles (tiny profile) a search that can
never leave the player's own pick agrees with itself on every decision."""

from __future__ import annotations

import json
import math
import re

import pytest

from royalefleet.bench.search_stability import main, wilson


def test_wilson_is_the_score_interval():
    # 8 of 10 at z 1.96, worked by hand: centre (0.8 + 0.19208) / 1.38416, half-width
    # 1.96 sqrt(0.016 + 0.009604) / 1.38416
    lo, hi = wilson(8, 10)
    assert lo == pytest.approx((0.99208 - 1.96 * math.sqrt(0.025604)) / 1.38416, abs=1e-9)
    assert hi == pytest.approx((0.99208 + 1.96 * math.sqrt(0.025604)) / 1.38416, abs=1e-9)
    assert wilson(0, 0) == (0.0, 1.0)


def test_a_search_that_keeps_its_own_pick_always_agrees_with_itself(tmp_path, capsys):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"profile": "tiny", "env": {"max_steps": 120}}))
    common = ["bc", "--battles", "1", "--config", str(cfg), "--runs-dir", str(tmp_path / "runs")]
    assert main([*common, "--player", "scripted:defend+search:3:4,vs=2000,keep=2"]) == 0
    out = capsys.readouterr().out
    assert "top-1 agreement 1.000" in out and "left the player's own pick at 0.000" in out
    # keep 2 on tanh scores: every margin is above 0.4, and every decision agrees
    n = int(re.search(r"(\d+) searched decisions", out).group(1))
    assert f"    margin    > 0.40: {n} decisions, top-1 agreement 1.000 [" in out
    assert main([*common, "--player", "scripted:defend", "--opponent", "scripted:defend"]) == 2
    assert "must search" in capsys.readouterr().err
