"""shared/schedules.py: every kind hits its endpoints at the stated env step and holds after;
geometric moves 1 - value geometrically; piecewise holds its first value before the first point;
schedule_problems names the bad spec."""

import math

import msgspec
import pytest

from shared.config import AdvantageConfig, PPOConfig
from shared.schedules import (
    ConstantSpec, GeometricSpec, LinearSpec, PiecewiseConstantSpec, Schedule, schedule_problems, value_at,
)


def test_a_plain_number_and_a_constant_spec_never_move():
    for step in (0, 1, 10**9):
        assert value_at(0.25, step) == 0.25
        assert value_at(3, step) == 3.0 and isinstance(value_at(3, step), float)
        assert value_at(ConstantSpec(value=0.5), step) == 0.5


@pytest.mark.parametrize("start, end, over", [(0.01, 0.003, 30_000_000), (0.02, 0.0, 10_000_000), (0.0, 1.0, 7)])
def test_linear_hits_its_endpoints_and_holds(start, end, over):
    spec = LinearSpec(start=start, end=end, over_env_steps=over)
    assert value_at(spec, 0) == start
    assert value_at(spec, over) == end
    assert value_at(spec, over + 1) == end and value_at(spec, 10 * over) == end
    assert value_at(spec, over // 2) == pytest.approx(start + (end - start) * (over // 2) / over, rel=1e-12)
    # monotone between the endpoints
    values = [value_at(spec, over * k // 10) for k in range(11)]
    assert values == sorted(values, reverse=start > end)


def test_linear_defaults_at_the_stated_env_steps():
    ppo = PPOConfig()
    assert value_at(ppo.ent_coef, 0) == 0.01 and value_at(ppo.ent_coef, 30_000_000) == 0.003
    assert value_at(ppo.ent_coef, 15_000_000) == pytest.approx(0.0065, rel=1e-12)
    assert value_at(ppo.ent_coef_noop, 0) == 0.02 and value_at(ppo.ent_coef_noop, 10_000_000) == 0.0
    assert value_at(ppo.ent_coef_noop, 10_000_001) == 0.0  # holds after (never negative)


@pytest.mark.parametrize("start, end, over", [(0.997, 0.999, 20_000_000), (0.99, 0.9999, 1000), (0.999, 0.99, 10)])
def test_geometric_hits_its_endpoints_and_holds(start, end, over):
    spec = GeometricSpec(start=start, end=end, over_env_steps=over)
    assert value_at(spec, 0) == start
    assert value_at(spec, over) == end
    assert value_at(spec, over + 1) == end and value_at(spec, 100 * over) == end


@pytest.mark.parametrize("start, end", [(0.997, 0.999), (0.99, 0.9999), (0.9, 0.5)])
def test_geometric_moves_one_minus_value_geometrically(start, end):
    over = 20_000_000
    spec = GeometricSpec(start=start, end=end, over_env_steps=over)
    # half way: 1 - sqrt((1 - start)(1 - end)), the geometric mean of the two leaks
    assert value_at(spec, over // 2) == pytest.approx(1 - math.sqrt((1 - start) * (1 - end)), abs=1e-15)
    # equal steps multiply the leak by one constant ratio
    leaks = [1 - value_at(spec, over * k // 4) for k in range(5)]
    ratios = [b / a for a, b in zip(leaks, leaks[1:])]
    assert ratios == pytest.approx([((1 - end) / (1 - start)) ** 0.25] * 4, rel=1e-9)


def test_the_default_discount_schedule():
    gamma = AdvantageConfig().gamma
    assert value_at(gamma, 0) == 0.997 and value_at(gamma, 20_000_000) == 0.999
    assert value_at(gamma, 10_000_000) == pytest.approx(1 - math.sqrt(0.003 * 0.001), abs=1e-15)  # 0.998268
    assert value_at(gamma, 40_000_000) == 0.999


def test_piecewise_constant_before_at_between_and_after_its_points():
    spec = PiecewiseConstantSpec(points=[(100, 0.02), (500, 0.01), (900, 0.005)])
    assert value_at(spec, 0) == 0.02  # before the first point: the first value holds
    assert value_at(spec, 99) == 0.02
    assert value_at(spec, 100) == 0.02
    assert value_at(spec, 499) == 0.02
    assert value_at(spec, 500) == 0.01  # a point takes effect AT its env step
    assert value_at(spec, 899) == 0.01
    assert value_at(spec, 900) == 0.005 and value_at(spec, 10**12) == 0.005


def test_schedules_decode_from_config_json():
    # the documented JSON forms, through msgspec's tagged union
    cases = {
        '0.01': 0.01,
        '{"kind": "constant", "value": 0.01}': ConstantSpec(value=0.01),
        '{"kind": "linear", "start": 0.01, "end": 0.003, "over_env_steps": 30000000}':
            LinearSpec(start=0.01, end=0.003, over_env_steps=30_000_000),
        '{"kind": "piecewise_constant", "points": [[0, 0.02], [5000000, 0.01]]}':
            PiecewiseConstantSpec(points=[(0, 0.02), (5_000_000, 0.01)]),
    }
    for text, want in cases.items():
        assert msgspec.json.decode(text, type=Schedule) == want
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode('{"kind": "linear", "start": 0.01, "end": 0.003, "over_env_steps": 0}', type=Schedule)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode('{"kind": "linear", "start": 0.01, "end": 0.003, "over": 10}', type=Schedule)


def test_schedule_problems_accepts_good_specs():
    for spec in (0.01, ConstantSpec(value=0.0), LinearSpec(start=0.01, end=0.0, over_env_steps=10),
                 GeometricSpec(start=0.997, end=0.999, over_env_steps=10),
                 PiecewiseConstantSpec(points=[(0, 0.02), (10, 0.01)])):
        assert schedule_problems("ppo.ent_coef", spec, low=0.0, high=1.0) == []


@pytest.mark.parametrize("spec, fragment", [
    (-0.1, "below 0.0"),
    (ConstantSpec(value=float("nan")), "not a finite number"),
    (LinearSpec(start=0.01, end=-0.5, over_env_steps=10), "below 0.0"),
    (LinearSpec(start=2.0, end=0.5, over_env_steps=10), "above 1.0"),
    (GeometricSpec(start=0.997, end=1.0, over_env_steps=10), "geometric schedule needs start and end below 1"),
    (GeometricSpec(start=1.5, end=0.9, over_env_steps=10), "geometric schedule needs start and end below 1"),
    (PiecewiseConstantSpec(points=[]), "at least one point"),
    (PiecewiseConstantSpec(points=[(10, 0.1), (5, 0.2)]), "sorted"),
    (PiecewiseConstantSpec(points=[(0, 0.1), (5, float("inf"))]), "not a finite number"),
])
def test_schedule_problems_names_the_bad_spec(spec, fragment):
    problems = schedule_problems("advantage.gamma", spec, low=0.0, high=1.0)
    assert problems, spec
    assert all(p.startswith("advantage.gamma: ") for p in problems)
    assert any(fragment in p for p in problems), problems
