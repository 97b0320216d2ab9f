"""``royalefleet bench --search``: the arithmetic of its figures, its timer, and its lines on a
real (tiny) run; not a speed."""

from __future__ import annotations

import json
import re

import pytest

from royalefleet.bench.search_speed import SearchSpeed, _Timed, report
from royalefleet.cli import main


def speed() -> SearchSpeed:
    return SearchSpeed(decisions=10, wall=5.0, cpu=4.0, sim_steps=2000,
                       engine={"step": 2.0, "load_state": 0.5, "state": 0.25, "action_mask": 0.25})


def test_the_figures_are_decisions_over_cpu_seconds_and_the_ratio_is_the_steps_share():
    s = speed()
    assert s.sim_per_core_second == 500.0  # 2000 simulated decisions in 4 CPU s of search
    assert s.engine_per_core_second == 1000.0  # the same 2000 in 2 CPU s of the engine's step
    assert s.ratio == 0.5
    assert s.shares() == {"step": 0.5, "load_state": 0.125, "state": 0.0625, "action_mask": 0.0625, "rest": 0.25}


def test_the_report_prints_each_figure_on_its_line():
    lines = report("scripted:defend+search:8", "scripted:defend", 2, speed())
    assert lines[0] == ("searched decisions: scripted:defend+search:8 against scripted:defend, 2 battle(s), "
                        "10 searched decisions, 2,000 simulated decisions")
    assert lines[1].split() == ["searched", "decisions/s", "2.00", "(2.50", "per", "core-second)"]
    assert lines[2].split()[:5] == ["simulated", "decisions", "per", "core-second", "500"]
    assert lines[3].split()[6] == "1,000"
    assert lines[4].split()[:5] == ["ratio", "search", "/", "engine", "alone"] and lines[4].split()[5] == "0.50"
    assert "engine step 50%, snapshot loads 12%, state decode 6%, masks 6%" in lines[5]
    assert lines[5].endswith("the rest (bots, the search's Python) 25%")


def test_a_timed_call_returns_its_value_and_adds_its_cpu_time_even_when_it_raises():
    into = {"f": 0.0}

    def busy(n):
        if n < 0:
            raise ValueError(n)
        return sum(i * i for i in range(n))

    timed = _Timed(busy, into, "f")
    assert timed(200_000) == sum(i * i for i in range(200_000))
    spent = into["f"]
    assert spent > 0.0
    with pytest.raises(ValueError):
        timed(-1)
    assert into["f"] >= spent


def test_bench_search_runs_a_tiny_search_and_refuses_a_player_that_does_not_search(tmp_path, capsys):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"profile": "tiny", "env": {"max_steps": 120}}))
    common = ["bench", "bs", "--config", str(cfg), "--runs-dir", str(tmp_path / "runs"), "--search-battles", "1"]
    assert main([*common, "--search", "scripted:defend+search:3:4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 6 and out[0].startswith("searched decisions: scripted:defend+search:3:4 against scripted:defend")
    decisions, steps = (int(x.replace(",", "")) for x in re.findall(r"([\d,]+) (?:searched|simulated) decisions", out[0]))
    assert decisions > 0 and 2 <= steps / decisions <= 3 * 5  # 2-3 candidates, 1 + up to 4 decisions each
    ratio = float(out[4].split()[5])
    assert 0.0 < ratio <= 1.0
    assert main([*common, "--search", "scripted:defend"]) == 2
    assert "must search" in capsys.readouterr().out
