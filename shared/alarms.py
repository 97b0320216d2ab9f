"""The alarm table: every alarm of the reference harness (RoyaleLearn 0.5.20, 25 alarms: 7 halt,
18 warn) under the reference's names, then our own (the DQN learner's ``q_diverging`` and
``behaviour_dead``), and the one evaluator the learner runs on each metric row.

Mechanics (the reference's, reproduced exactly):

- an alarm reads its declared row keys; a key that is missing, not a number (a string, a bool)
  means the alarm is *not evaluated* this iteration, which counts as not holding: a missing key
  is not a zero;
- it *fires* when its condition has held on ``patience`` consecutive iterations; the counter
  goes back to 0 on the first iteration it does not hold (and starts at 0 on resume);
- thresholds are ``AlarmConfig`` fields under the reference's names (never part of the run
  identity); ``disabled``, ``patience_overrides`` and ``severity_overrides`` adjust single alarms
  and refuse a name that is not in the table;
- an alarm with ``muted`` (``ANCHOR_HOLDS``) is not evaluated on a row in that state: the
  clone-shaped alarms while a warm start's KL anchor binds;
- ``warn`` is logged; ``halt`` makes the learner write a checkpoint and a diagnostic bundle and
  stop (services/learner/alarms.py). The learner does this on its own: nothing here depends on
  Prometheus or Grafana being up.

``promql(alarm)`` is the same condition over the learner's exported gauges
(``shared.metric_schema.prometheus_name``), for Prometheus and Grafana alert rules
(``python -m royalefleet.grafana`` generates both from this table). PromQL sees the row as
gauges sampled in time, not as iterations: the generated rules turn ``patience`` into a pending
period of ``patience - 1`` nominal iterations, while the learner counts real ones.
"""

from __future__ import annotations

import difflib
import math
from typing import Literal

import msgspec

from shared.config import AlarmConfig
from shared.metric_schema import prometheus_name

Severity = Literal["warn", "halt"]

Condition = Literal["gt", "lt", "ge", "gt_times", "rose", "all_gt", "ci_outside", "first_gt_second", "vram_spill"]
"""How an alarm reads its keys and thresholds (``k`` = keys, ``t`` = resolved thresholds):

- ``gt`` / ``lt`` / ``ge``: ``k[0] > t[0]`` / ``k[0] < t[0]`` / ``k[0] >= t[0]``;
- ``gt_times``: ``k[0] > t[0] * k[1]``: the tolerance is a multiple of a number the row itself
  carries (``ratio_invariant``: of ``ppo/ratio_atol``, the tolerance of the precision the
  forwards ran in);
- ``rose``: the failure count rose this iteration. Our key counts the iteration's losses (it is
  the per-iteration increase of the reference's cumulative counter), so this is ``k[0] > 0``;
- ``all_gt``: ``k[i] > t[i]`` for every key;
- ``ci_outside``: a 95 % interval (``k = (lo, hi)``) lies entirely outside the band
  ``[t[0], t[1]]``: ``hi < t[0] or lo > t[1]``;
- ``first_gt_second``: ``k[0] > k[1]`` (no threshold);
- ``vram_spill``: ``k[0]`` (update seconds) ``>= t[0] *`` the run's best (lowest) update time so
  far, kept apart for frozen-actor iterations (row key ``ppo/actor_frozen`` when present), and
  ``k[1]`` (driver-free MB) ``< t[1]``; a new best never fires.
"""

RATIO_ATOL: dict[str, float] = {"fp32": 1e-4, "tf32": 5e-3, "bf16": 2e-2}
"""The reference's ratio tolerance per precision (royalelearn-facts §9, "Ratio invariant"),
keyed by ``shared.nn.model.PRECISIONS``. The learner writes the entry of the precision its
forwards actually ran in to every row as ``ppo/ratio_atol`` (``services/learner/ppo.py``: the
coarser of the rollout-time and the update-time forward's), and ``ratio_invariant`` reads it
from there, so the learner's alarm and the generated Prometheus and Grafana rules follow the
precision alike: a CPU or run_exact CUDA float32 learner is held to 1e-4, a bf16-autocast
CUDA learner (the default there) to 2e-2, where the reference measured its rollout and update
forwards ~1e-2 apart because cuDNN picks kernels per shape."""

VRAM_FROZEN_KEY = "ppo/actor_frozen"
"""Read by ``vram_spilling`` when present (not a declared key): separate bests per value."""


class Mute(msgspec.Struct, frozen=True, kw_only=True):
    """A row state in which an alarm is not evaluated: ``row[key] == equals`` (the key present
    and a number), with the reason the learner logs when the mute starts and ends."""

    key: str
    equals: float
    reason: str


ANCHOR_HOLDS = Mute(
    key="imitation/beta_at_floor", equals=0.0,
    reason="the KL anchor of a warm start holds the policy near its clone (imitation/beta above imitation.beta_min), "
           "and a clone's plays are concentrated by construction (one tile, a near-deterministic play-or-wait "
           "choice); the alarm is evaluated again once the anchor stops binding (imitation/beta_at_floor = 1) or "
           "in a run without it")
"""While a warm start's KL anchor binds (``services/learner/extensions/imitation.py``), the
clone-shaped alarms (``tile_spam``, ``noop_entropy_floor``) would warn every iteration: they are
muted, with this reason logged, until the anchor lets go."""


class Alarm(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the table.

    ``threshold`` holds one entry per comparison: a string names an ``AlarmConfig`` field (the
    default threshold is that field's default), a number is a constant of the reference.
    ``floor`` bounds a resolved threshold from below (buffer_overflow's ``max(1.0, cfg)``)."""

    name: str
    keys: tuple[str, ...]
    condition: Condition
    threshold: tuple[str | float, ...]
    severity: Severity
    patience: int
    meaning: str
    what_to_do: str
    floor: float | None = None
    bundle: bool = False
    """Write a diagnostic bundle when it fires even at warn severity (artefact_exploit): on the
    first iteration of each firing streak, not on every iteration it keeps holding."""
    muted: Mute | None = None
    """A row state in which the alarm is not evaluated (``ANCHOR_HOLDS``)."""


ALARMS: tuple[Alarm, ...] = (
    # ------------------------------------------------------------ correctness assertions (patience 1)
    Alarm(
        name="illegal_actions", keys=("health/illegal_action_rate",), condition="gt", threshold=(0.0,),
        severity="halt", patience=1,
        meaning="the engine refused learner actions the mask allowed: the action mask and the engine disagree "
                "(the reference reads env/illegal_action_rate; our row carries the same measure as "
                "health/illegal_action_rate)",
        what_to_do="compare the codec's legal-action mask with the engine's deploy rules for the refused cards; "
                   "check the rollouts run the engine build the learner's preflight saw",
    ),
    Alarm(
        name="ratio_invariant", keys=("ppo/ratio_max_abs_dev", "ppo/ratio_atol"), condition="gt_times",
        threshold=("ratio_invariant_multiple",), severity="halt", patience=1,
        meaning="on the first minibatch the new/old probability ratio is not 1: the policy that trains is not "
                "the policy that acted (stale weights, a different observation decode, or a mask mismatch)",
        what_to_do="check the rollouts act with the weights of this iteration and the learner decodes the "
                   "stored rows exactly as inference did; look at ppo/ratio_max_abs_dev against the tolerance",
    ),
    Alarm(
        name="nonfinite", keys=("health/nan_guard_trips",), condition="gt", threshold=(0.0,),
        severity="halt", patience=1,
        meaning="a loss, gradient or logit was non-finite this iteration",
        what_to_do="look at the last rows' grad norms, value loss and advantages for a blow-up; lower the "
                   "learning rate or check reward standardisation before resuming",
    ),
    Alarm(
        name="buffer_overflow", keys=("health/buffer_fill_frac",), condition="gt",
        threshold=("buffer_fill_frac",), floor=1.0, severity="halt", patience=1,
        meaning="more rectangle cells written than exist (healthy is exactly 1.0): a cell was written twice "
                "(the config value only bounds from below: the bound is max(1.0, buffer_fill_frac))",
        what_to_do="look for a rollout whose round was accepted twice or a slot map that gives two battles "
                   "the same slot",
    ),
    Alarm(
        name="obs_codec_rounded", keys=("health/obs_codec_rounded",), condition="gt", threshold=(0.0,),
        severity="warn", patience=1,
        meaning="non-integer observation values were stored rounded in a uint8 plane",
        what_to_do="find the observation field the codec table declares as an integer plane and give it a "
                   "scale, or store it as a float",
    ),
    Alarm(
        name="worker_failures", keys=("health/rollouts_lost",), condition="rose", threshold=(),
        severity="warn", patience=1,
        meaning="a rollout was lost this iteration (deadline missed or failed). The reference reads the "
                "cumulative health/worker_restarts and fires when it rose; our row key health/rollouts_lost "
                "is already the iteration's increase, so 'rose' is 'greater than zero'",
        what_to_do="read the fleet dashboard (rollouts registered, rows invalidated, restarts) and the lost "
                   "rollout's log",
    ),
    Alarm(
        name="worker_failures_persistent", keys=("health/rollouts_lost",), condition="rose", threshold=(),
        severity="halt", patience=3,
        meaning="rollouts were lost on three consecutive iterations: the fleet is failing, not flaking "
                "(health/rollouts_lost stands for the reference's health/worker_restarts, see worker_failures)",
        what_to_do="look for a rollout crash loop, an out-of-memory kill, or a round deadline "
                   "(rollout.round_timeout_s) shorter than a round now takes",
    ),
    # ------------------------------------------------------------ learning health (patience > 1)
    Alarm(
        name="clip_pinned", keys=("ppo/clip_fraction",), condition="gt", threshold=("clip_fraction",),
        severity="halt", patience=3,
        meaning="most choice rows are clipped: a mask mismatch or a learning rate far too high",
        what_to_do="check ppo/kl and ppo/ratio_max_abs_dev; if the ratio invariant holds, lower the learning "
                   "rates before resuming",
    ),
    Alarm(
        name="kl_high", keys=("ppo/kl",), condition="gt", threshold=("kl_high",),
        severity="warn", patience=3,
        meaning="the policy moves too far per iteration (healthy KL 0.003-0.02)",
        what_to_do="watch ppo/clip_fraction; the lr backoff should engage; lower lr_actor if it persists",
    ),
    Alarm(
        name="kl_dead", keys=("ppo/kl",), condition="lt", threshold=("kl_dead",),
        severity="warn", patience=10,
        meaning="the policy has stopped moving",
        what_to_do="check the learning rate was not backed off to its floor, the entropy bonus, and that "
                   "ppo/choice_rows is not near zero",
    ),
    Alarm(
        name="ev_negative", keys=("ppo/explained_variance",), condition="lt", threshold=("explained_variance",),
        severity="warn", patience=50,
        meaning="the critic explains less return variance than a constant (likely plateau)",
        what_to_do="look at ppo/value_loss and the reward terms; a shaping weight that dominates or returns "
                   "that are mostly noise both show here",
    ),
    Alarm(
        name="noop_collapse", keys=("policy/cards_per_match",), condition="lt", threshold=("cards_per_match_warn",),
        severity="warn", patience=5,
        meaning="the learner plays few cards per match (about 22 expected from elixir arithmetic): the "
                "no-op collapse is starting",
        what_to_do="watch ppo/noop_entropy and the no-op entropy bonus schedule; compare the win rate "
                   "against scripted:noop",
    ),
    Alarm(
        name="noop_collapse_severe", keys=("policy/cards_per_match",), condition="lt",
        threshold=("cards_per_match_halt",), severity="halt", patience=5,
        meaning="the learner has all but stopped playing cards: the no-op collapse happened",
        what_to_do="resume from a checkpoint before the collapse with a stronger or longer no-op entropy "
                   "bonus (ppo.ent_coef_noop)",
    ),
    Alarm(
        name="noop_entropy_floor", keys=("ppo/noop_entropy",), condition="lt", threshold=("noop_entropy_floor",),
        severity="warn", patience=5, muted=ANCHOR_HOLDS,
        meaning="the play-vs-wait choice has become nearly deterministic",
        what_to_do="check policy/cards_per_match: near 22 it is a confident policy, falling it is a collapse",
    ),
    Alarm(
        name="tile_spam", keys=("policy/tile_top1_share",), condition="gt", threshold=("tile_top1_share",),
        severity="warn", patience=5, muted=ANCHOR_HOLDS,
        meaning="one tile takes more than a quarter of the learner's card plays",
        what_to_do="look at where the plays land; a single tile usually means a placement the engine rewards "
                   "by accident",
    ),
    Alarm(
        name="artefact_exploit", keys=("policy/card_tile_top10_share",), condition="gt",
        threshold=("card_tile_top10_share",), severity="warn", patience=5, bundle=True,
        meaning="ten (card, tile) pairs take most of the plays: the policy may exploit a simulator artefact "
                "(also writes a diagnostic bundle, once a firing streak)",
        what_to_do="open the bundle, replay an episode and watch those placements in the engine",
    ),
    Alarm(
        name="draw_equilibrium", keys=("env/draw_rate", "env/episode_steps_at_cap_frac"), condition="all_gt",
        threshold=("draw_rate", "episode_steps_at_cap_frac"), severity="warn", patience=5,
        meaning="most matches end in draws at the step limit: a turtle equilibrium",
        what_to_do="look at the reward terms (does shaping pay for waiting?) and the win rate against pool "
                   "opponents",
    ),
    Alarm(
        name="seat_bias", keys=("env/win_rate_by_seat_ci95_lo", "env/win_rate_by_seat_ci95_hi"),
        condition="ci_outside", threshold=(0.45, 0.55), severity="warn", patience=3,
        meaning="the 95 % interval of a seat's win rate lies entirely outside 0.45-0.55: seat asymmetry or a "
                "mirroring bug",
        what_to_do="check the observation mirroring for seat 1 and that both seats' rewards use the same sign "
                   "convention",
    ),
    Alarm(
        name="elixir_count_inexact", keys=("env/elixir_count_exact_frac",), condition="lt",
        threshold=("elixir_count_exact_frac",), severity="warn", patience=3,
        meaning="RoyaleGym's opponent-elixir count was inexact in most of the iteration's episodes, far below "
                "its baseline (about 1 episode in 5 drifts; the reference's 0.99 fired on half of every run's "
                "iterations)",
        what_to_do="compare the royalegym version the learner's start line names (logs/learner.log: 'learner: "
                   "engine ... (royalegym X)') with earlier runs'; a new engine build that broke the count shows "
                   "here: pin the previous royalegym in pyproject.toml",
    ),
    Alarm(
        name="reward_clipped", keys=("ppo/reward_clip_frac",), condition="gt", threshold=(0.0,),
        severity="warn", patience=1,
        meaning="rewards were clipped: any clipped reward breaks potential-based shaping",
        what_to_do="raise advantage.reward_clip or look at which reward term produced the outlier",
    ),
    Alarm(
        name="shaping_dominates", keys=("env/reward_shaping_abs", "env/reward_terminal_abs"),
        condition="first_gt_second", threshold=(), severity="warn", patience=5,
        meaning="per seat, the absolute shaping rewards add up to more than the terminal reward",
        what_to_do="lower the shaping weights (env reward weights); read env/reward_terms per term first",
    ),
    Alarm(
        name="vram_spilling", keys=("time/update", "health/vram_driver_free_mb"), condition="vram_spill",
        threshold=(2.0, 128.0), severity="warn", patience=3,
        meaning="the update takes at least twice the run's best while the driver has under 128 MB free: "
                "device memory is spilling (absent on CPU: the key is not in the row)",
        what_to_do="lower ppo.minibatch_size or stop other processes on the GPU",
    ),
    # ------------------------------------------------------------ ladder and capacity
    Alarm(
        name="transitivity", keys=("ladder/transitivity_residual",), condition="gt",
        threshold=("transitivity_residual",), severity="warn", patience=3,
        meaning="pairwise results disagree with a single rating: a scalar rating is not meaningful now (pairs "
                "with at least ladder.rater.min_pair_games games are tested, sweeps left out: the prior keeps a "
                "fitted gap finite, so a 200-0 record would always look off)",
        what_to_do="read the pairwise scores: `royalefleet rate --json` lists every pair's games and "
                   "observed score (`pairs`; `royalefleet rate` prints how many pairs are off the fit); a "
                   "rock-paper-scissors pool needs the per-opponent scores, not the ratings",
    ),
    Alarm(
        name="gate_starved", keys=("ladder/consecutive_gate_failures",), condition="ge",
        threshold=("gate_failures",), severity="warn", patience=1,
        meaning="candidates keep failing the gate: the learner is not beating its champion",
        what_to_do="read the gate records under runs/<run>/ladder/gates/ (each condition's numbers: the "
                   "lower bound against the champion, the anchor scores against the champion's record) and "
                   "the ratings from `royalefleet rate`",
    ),
    Alarm(
        name="capacity_ratio", keys=("throughput/rollout_capacity_ratio",), condition="lt",
        threshold=("capacity_ratio",), severity="warn", patience=3,
        meaning="rollout capacity is under 1.5 x what the update consumes: collection is the bottleneck",
        what_to_do="add rollouts or battles per rollout; check throughput/parent_wait_frac",
    ),
    # ------------------------------------------------------------ ours: the DQN learner (absent keys under PPO)
    Alarm(
        name="q_diverging", keys=("dqn/q_abs_max",), condition="gt", threshold=("dqn_q_abs_max",),
        severity="halt", patience=3,
        meaning="the Q values have left the range any return can reach: the bootstrapped targets feed on "
                "themselves (a target network copied too often, a learning rate too high, or a discount used twice)",
        what_to_do="lower dqn.lr, raise dqn.target_update_period, check dqn/td_bias and dqn/overestimation; "
                   "the update uses the batch's discounts, never gamma again",
    ),
    Alarm(
        name="behaviour_dead", keys=("dqn/greedy_noop_frac",), condition="ge", threshold=("dqn_greedy_noop_frac",),
        severity="warn", patience=5,
        meaning="the Q rows rank the no-op first on almost every choice row: only epsilon's uniform draws play "
                "cards, and as epsilon decays the behaviour policy stops playing",
        what_to_do="look at dqn/q_abs_mean and the reward terms; hold epsilon higher (dqn.epsilon_floor) or "
                   "lengthen dqn.epsilon_decay_iterations",
    ),
    # ------------------------------------------------------------ ours: the KL anchor (absent keys without imitation)
    Alarm(
        name="anchor_not_binding", keys=("imitation/beta_at_floor",), condition="gt", threshold=(0.0,),
        severity="warn", patience=10,
        meaning="the KL anchor's beta has sat at imitation.beta_min for 10 iterations: the policy stays inside the "
                "KL budget with the smallest pull, so the anchor no longer shapes the update",
        what_to_do="lower imitation.kl_budget (or imitation.beta_min) if the policy should stay nearer the clone; "
                   "otherwise the anchor can go (drop the imitation section in a new run)",
    ),
    Alarm(
        name="anchor_budget_left", keys=("imitation/kl_budget_ratio",), condition="gt", threshold=(3.0,),
        severity="warn", patience=5,
        meaning="KL(pi || pi_ref) has been above 3 x the budget for 5 iterations: the policy has left the clone "
                "faster than beta can pull it back (or beta is at imitation.beta_max)",
        what_to_do="look at imitation/beta against imitation.beta_max; raise beta_max or lower ppo.lr_actor; check "
                   "imitation.reference is the clone the run started from",
    ),
)

BY_NAME: dict[str, Alarm] = {a.name: a for a in ALARMS}
ALARM_NAMES: tuple[str, ...] = tuple(BY_NAME)


class AlarmResult(msgspec.Struct, frozen=True, kw_only=True):
    """One alarm's verdict on one row. ``values`` holds the declared keys' numbers when
    ``evaluated`` (all of them present and numeric)."""

    name: str
    holds: bool
    consecutive: int
    fired: bool
    severity: Severity
    patience: int
    evaluated: bool
    values: dict[str, float]
    thresholds: tuple[float, ...]
    bundle: bool = False
    muted: str = ""
    """The reason the alarm was not evaluated on this row (``Alarm.muted``), else empty."""


class AlarmState:
    """What evaluation remembers between rows: consecutive holds per alarm and, for
    ``vram_spilling``, the best update time per frozen flag. Starts empty on resume."""

    def __init__(self) -> None:
        self.consecutive: dict[str, int] = {}
        self.best_update_s: dict[float, float] = {}


# ----------------------------------------------------------------------------- thresholds


def check_overrides(cfg: AlarmConfig) -> None:
    """Raise ValueError naming every unknown alarm in ``disabled``, ``patience_overrides`` or
    ``severity_overrides``, with the known names."""
    problems = []
    for field in ("disabled", "patience_overrides", "severity_overrides"):
        for name in getattr(cfg, field):
            if name not in BY_NAME:
                close = difflib.get_close_matches(name, ALARM_NAMES, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                problems.append(f"alarms.{field}: unknown alarm {name!r}{hint}")
    if problems:
        raise ValueError("; ".join(problems) + ". Known alarms: " + ", ".join(ALARM_NAMES))


def thresholds(alarm: Alarm, cfg: AlarmConfig | None = None) -> tuple[float, ...]:
    """The alarm's thresholds under ``cfg`` (defaults when None), floored."""
    cfg = cfg or AlarmConfig()
    out = []
    for t in alarm.threshold:
        value = float(getattr(cfg, t)) if isinstance(t, str) else float(t)
        if alarm.floor is not None:
            value = max(alarm.floor, value)
        out.append(value)
    return tuple(out)


def effective(alarm: Alarm, cfg: AlarmConfig) -> tuple[Severity, int]:
    """(severity, patience) after the config's overrides."""
    return (cfg.severity_overrides.get(alarm.name, alarm.severity),
            int(cfg.patience_overrides.get(alarm.name, alarm.patience)))


def describe(alarm: Alarm, cfg: AlarmConfig | None = None, t: tuple[float, ...] | None = None) -> str:
    """The condition in words over the row keys, e.g. ``ppo/kl > 0.05`` (thresholds ``t`` when
    given, else ``cfg``'s)."""
    k, t = alarm.keys, (t if t is not None else thresholds(alarm, cfg))
    match alarm.condition:
        case "gt":
            return f"{k[0]} > {t[0]:g}"
        case "lt":
            return f"{k[0]} < {t[0]:g}"
        case "ge":
            return f"{k[0]} >= {t[0]:g}"
        case "gt_times":
            return f"{k[0]} > {t[0]:g} x {k[1]}"
        case "rose":
            return f"{k[0]} > 0 (rose this iteration)"
        case "all_gt":
            return " and ".join(f"{key} > {v:g}" for key, v in zip(k, t))
        case "ci_outside":
            return f"{k[1]} < {t[0]:g} or {k[0]} > {t[1]:g}"
        case "first_gt_second":
            return f"{k[0]} > {k[1]}"
        case "vram_spill":
            return f"{k[0]} >= {t[0]:g} x the run's best and {k[1]} < {t[1]:g}"
    raise AssertionError(alarm.condition)


# ----------------------------------------------------------------------------- evaluation


def _number(row: dict, key: str) -> float | None:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _holds(alarm: Alarm, v: tuple[float, ...], t: tuple[float, ...], row: dict, state: AlarmState) -> bool:
    match alarm.condition:
        case "gt":
            return v[0] > t[0]
        case "lt":
            return v[0] < t[0]
        case "ge":
            return v[0] >= t[0]
        case "gt_times":
            return v[0] > t[0] * v[1]
        case "rose":
            return v[0] > 0
        case "all_gt":
            return all(a > b for a, b in zip(v, t))
        case "ci_outside":
            lo, hi = v
            return hi < t[0] or lo > t[1]
        case "first_gt_second":
            return v[0] > v[1]
        case "vram_spill":
            update_s, free_mb = v
            flag = row.get(VRAM_FROZEN_KEY)
            frozen = 1.0 if isinstance(flag, (bool, int, float)) and flag else 0.0
            best = state.best_update_s.get(frozen)
            if best is None or update_s < best:
                state.best_update_s[frozen] = update_s
                return False  # a new best never fires
            return update_s >= t[0] * best and free_mb < t[1]
    raise AssertionError(alarm.condition)


def evaluate(row: dict, cfg: AlarmConfig, state: AlarmState, extra: tuple[Alarm, ...] = ()) -> list[AlarmResult]:
    """Evaluate every enabled alarm on one metric row, in table order, then ``extra`` (the
    learner extensions' alarms, shared/learner_extension.py), updating ``state``.
    Returns one result per enabled alarm (none when ``cfg.enabled`` is false); ``fired`` is
    true on every iteration the alarm has held for at least its patience."""
    check_overrides(cfg)
    if not cfg.enabled:
        return []
    disabled = set(cfg.disabled)
    results = []
    for alarm in ALARMS + tuple(extra):
        if alarm.name in disabled:
            state.consecutive.pop(alarm.name, None)
            continue
        severity, patience = effective(alarm, cfg)
        t = thresholds(alarm, cfg)
        values = [_number(row, k) for k in alarm.keys]
        muted = alarm.muted is not None and _number(row, alarm.muted.key) == alarm.muted.equals
        evaluated = not muted and all(v is not None for v in values)
        holds = evaluated and _holds(alarm, tuple(values), t, row, state)
        consecutive = state.consecutive.get(alarm.name, 0) + 1 if holds else 0
        state.consecutive[alarm.name] = consecutive
        results.append(AlarmResult(
            name=alarm.name, holds=holds, consecutive=consecutive, fired=holds and consecutive >= patience,
            severity=severity, patience=patience, evaluated=evaluated,
            values={k: v for k, v in zip(alarm.keys, values) if v is not None}, thresholds=t,
            bundle=alarm.bundle, muted=alarm.muted.reason if muted and alarm.muted else "",
        ))
    return results


# ----------------------------------------------------------------------------- PromQL


def _num(x: float) -> str:
    if math.isfinite(x) and x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return repr(float(x))


def _gauge(key: str) -> str:
    name, labels = prometheus_name(key)
    if labels:
        raise ValueError(f"alarm key {key!r} is a family key; alarms read scalar keys only")
    return name


VRAM_BEST_WINDOW = "6h"
"""PromQL has no run-long minimum: ``vram_spilling`` compares with the lowest update time of
this window (and does not split frozen-actor iterations)."""


def promql(alarm: Alarm, cfg: AlarmConfig | None = None) -> str:
    """The alarm's condition as a PromQL expression over the learner's gauges: it returns a
    series exactly while the condition holds on the last scraped row, none otherwise (a missing
    key gives no series: not evaluated). Thresholds are ``cfg``'s (the defaults when None)."""
    g = [_gauge(k) for k in alarm.keys]
    t = [_num(x) for x in thresholds(alarm, cfg)]
    match alarm.condition:
        case "gt":
            return f"{g[0]} > {t[0]}"
        case "lt":
            return f"{g[0]} < {t[0]}"
        case "ge":
            return f"{g[0]} >= {t[0]}"
        case "gt_times":
            return f"{g[0]} > {t[0]} * {g[1]}"
        case "rose":
            return f"{g[0]} > 0"
        case "all_gt":
            return " and ".join(f"({name} > {v})" for name, v in zip(g, t))
        case "ci_outside":
            lo, hi = g
            # Each side keeps only series whose other bound exists too (both keys are declared).
            return f"(({hi} < {t[0]}) and {lo}) or (({lo} > {t[1]}) and {hi})"
        case "first_gt_second":
            return f"{g[0]} > {g[1]}"
        case "vram_spill":
            upd, free = g
            return (f"({upd} >= {t[0]} * min_over_time({upd}[{VRAM_BEST_WINDOW}])) "
                    f"and ({free} < {t[1]})")
    raise AssertionError(alarm.condition)
