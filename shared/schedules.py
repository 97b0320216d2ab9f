"""Scheduled scalars: a value as a function of env steps (battle decisions since the run began).

Schedules are evaluated ONCE at the top of an iteration (``evaluate_all``) and the numbers are
passed down, so the discount the reward used, the discount GAE used and the discount the metric
row reports are one number by construction (seed 004, ScheduleState).

In a config a schedule is either a plain number (constant) or one of::

    {"kind": "constant", "value": 0.01}
    {"kind": "linear", "start": 0.01, "end": 0.003, "over_env_steps": 30000000}
    {"kind": "geometric", "start": 0.997, "end": 0.999, "over_env_steps": 20000000}
    {"kind": "piecewise_constant", "points": [[0, 0.02], [5000000, 0.01]]}

``geometric`` moves ``1 - value`` by a constant factor per step, which is what a discount wants
(0.997 -> 0.999 shrinks the "leak" 1 - gamma from 0.003 to 0.001 geometrically).
"""

from __future__ import annotations

import math
from typing import Annotated, Union

from msgspec import Meta, Struct

EnvSteps = Annotated[int, Meta(ge=1)]


class _Spec(Struct, forbid_unknown_fields=True, tag_field="kind", frozen=True):
    pass


class ConstantSpec(_Spec, tag="constant"):
    value: float


class LinearSpec(_Spec, tag="linear"):
    """start to end linearly over ``over_env_steps``, then end forever."""

    start: float
    end: float
    over_env_steps: EnvSteps


class GeometricSpec(_Spec, tag="geometric"):
    """1 - value moves from 1 - start to 1 - end geometrically, then holds at end."""

    start: float
    end: float
    over_env_steps: EnvSteps


class PiecewiseConstantSpec(_Spec, tag="piecewise_constant"):
    """(env_steps, value) breakpoints, sorted; the value of the last breakpoint passed holds.
    Before the first breakpoint the first value holds."""

    points: list[tuple[Annotated[int, Meta(ge=0)], float]]


Schedule = Union[float, ConstantSpec, LinearSpec, GeometricSpec, PiecewiseConstantSpec]


def value_at(spec: Schedule, env_steps: int) -> float:
    """The schedule's value after ``env_steps`` battle decisions."""
    if isinstance(spec, (int, float)):
        return float(spec)
    if isinstance(spec, ConstantSpec):
        return float(spec.value)
    if isinstance(spec, LinearSpec):
        frac = min(1.0, max(0.0, env_steps / spec.over_env_steps))
        return spec.start + frac * (spec.end - spec.start)
    if isinstance(spec, GeometricSpec):
        frac = min(1.0, max(0.0, env_steps / spec.over_env_steps))
        if frac >= 1.0:
            return float(spec.end)  # exactly end, not end to within a rounding step
        a, b = 1.0 - spec.start, 1.0 - spec.end
        return 1.0 - a * (b / a) ** frac
    if isinstance(spec, PiecewiseConstantSpec):
        value = spec.points[0][1]
        for at, v in spec.points:
            if env_steps >= at:
                value = v
        return float(value)
    raise TypeError(f"not a schedule: {spec!r}")


def schedule_problems(name: str, spec: Schedule, *, low: float | None = None, high: float | None = None) -> list[str]:
    """Everything wrong with one schedule (bounds apply to every value it can take)."""
    problems = []
    if isinstance(spec, (int, float)):
        values = [float(spec)]
    elif isinstance(spec, ConstantSpec):
        values = [spec.value]
    elif isinstance(spec, (LinearSpec, GeometricSpec)):
        values = [spec.start, spec.end]
        if isinstance(spec, GeometricSpec) and (spec.start >= 1.0 or spec.end >= 1.0):
            problems.append(f"{name}: a geometric schedule needs start and end below 1 (it moves 1 - value)")
    else:
        values = [v for _, v in spec.points]
        if not spec.points:
            problems.append(f"{name}: a piecewise_constant schedule needs at least one point")
        if [p for p, _ in spec.points] != sorted(p for p, _ in spec.points):
            problems.append(f"{name}: piecewise_constant points must be sorted by env_steps")
    for v in values:
        if not math.isfinite(v):
            problems.append(f"{name}: {v!r} is not a finite number")
        elif low is not None and v < low:
            problems.append(f"{name}: {v!r} is below {low}")
        elif high is not None and v > high:
            problems.append(f"{name}: {v!r} is above {high}")
    return problems
