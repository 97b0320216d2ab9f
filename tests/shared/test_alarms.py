"""The alarm table (shared/alarms.py) is the reference's, every alarm can fire and stays quiet on a
healthy row, patience counts consecutive iterations, overrides work and unknown names are refused;
the learner's monitor (services/learner/alarms.py) exports, logs and bundles what fired."""

import json
import math

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from services.learner.alarms import RECENT_ROWS, REPEAT_EVERY, AlarmMonitor, write_bundle
from shared.alarms import ALARM_NAMES, ALARMS, BY_NAME, AlarmState, evaluate, promql, thresholds
from shared.config import AlarmConfig, dump_config, RunConfig
from shared.metric_schema import SCHEMA, prometheus_name

# The reference's table (royalelearn 0.5.20, facts §9.2): name -> (severity, patience, default thresholds).
REFERENCE = {
    "illegal_actions": ("halt", 1, (0.0,)),
    # the multiple of ppo/ratio_atol, the row's tolerance for its precision (fp32: 5 x 1e-4)
    "ratio_invariant": ("halt", 1, (5.0,)),
    "nonfinite": ("halt", 1, (0.0,)),
    "buffer_overflow": ("halt", 1, (1.0,)),
    "obs_codec_rounded": ("warn", 1, (0.0,)),
    "worker_failures": ("warn", 1, ()),
    "worker_failures_persistent": ("halt", 3, ()),
    "clip_pinned": ("halt", 3, (0.5,)),
    "kl_high": ("warn", 3, (0.05,)),
    "kl_dead": ("warn", 10, (1e-5,)),
    "ev_negative": ("warn", 50, (0.0,)),
    "noop_collapse": ("warn", 5, (8.0,)),
    "noop_collapse_severe": ("halt", 5, (3.0,)),
    "noop_entropy_floor": ("warn", 5, (0.02,)),
    "tile_spam": ("warn", 5, (0.25,)),
    "artefact_exploit": ("warn", 5, (0.5,)),
    "draw_equilibrium": ("warn", 5, (0.5, 0.8)),
    "seat_bias": ("warn", 3, (0.45, 0.55)),
    "elixir_count_inexact": ("warn", 3, (0.99,)),
    "reward_clipped": ("warn", 1, (0.0,)),
    "shaping_dominates": ("warn", 5, ()),
    "vram_spilling": ("warn", 3, (2.0, 128.0)),
    "transitivity": ("warn", 3, (0.1,)),
    "gate_starved": ("warn", 1, (5.0,)),
    "capacity_ratio": ("warn", 3, (1.5,)),
}
DEPARTURES = {  # default thresholds that are not the reference's, each measured (docs/design.md)
    "elixir_count_inexact": (0.5,),
}

OURS = {  # after the reference's, in table order: the DQN learner's
    "q_diverging": ("halt", 3, (100.0,)),
    "behaviour_dead": ("warn", 5, (0.999,)),
    # the KL anchor's (services/learner/extensions/imitation.py)
    "anchor_not_binding": ("warn", 10, (0.0,)),
    "anchor_budget_left": ("warn", 5, (3.0,)),
}

# Keys alarms read that the learner's row does not carry yet (the schema gets them with the
# features that measure them). The table may only shrink this set, never read a new unknown key.
PENDING_ROW_KEYS = {
    # In the schema, but only a CUDA learner exports it: absent from a CPU row by design.
    "health/vram_driver_free_mb",
}

# ----------------------------------------------------------------------------- a healthy, real-looking row

BY_UNIT = {
    "count": 4, "timesteps": 4096, "decisions": 120.0, "episodes": 24, "s": 2.5, "ratio": 0.997,
    "timesteps/s": 850.0, "decisions/s": 900.0, "ms": 3.2, "bytes": 1480.0, "fraction": 0.1, "reward": 0.2,
    "cards": 21.0, "nats": 0.6, "reward^2": 0.3, "norm": 0.3, "MB": 2000.0,
}
HEALTHY = {
    # schema keys an alarm reads, or whose unit default would be implausible
    "ppo/actor_frozen": 0.0, "imitation/beta_at_floor": 0.0, "imitation/kl_budget_ratio": 1.0,
    "run/iteration": 120, "run/gamma": 0.997, "run/credit_horizon_seconds": 39.0,
    "health/illegal_action_rate": 0.0, "health/rollouts_lost": 0, "health/rows_invalid": 0,
    "health/rows_invalid_frac": 0.0, "health/messages_refused": 0,
    "ppo/kl": 0.008, "ppo/clip_fraction": 0.11, "ppo/explained_variance": 0.62,
    "ppo/explained_variance_choice": 0.55, "ppo/noop_entropy": 0.09, "ppo/ratio_max_abs_dev": 2.4e-7,
    "ppo/ratio_atol": 1e-4,
    "ppo/forced_frac": 0.93, "policy/cards_per_match": 21.5, "env/draw_rate": 0.18,
    "env/episode_steps_at_cap_frac": 0.12, "time/update": 11.0, "env/win_rate_scripted": 0.71,
    # pending keys, at values inside the reference's healthy bands
    "policy/tile_top1_share": 0.07, "policy/card_tile_top10_share": 0.31,
    "env/win_rate_by_seat_ci95_lo": 0.43, "env/win_rate_by_seat_ci95_hi": 0.57,
    "env/elixir_count_exact_frac": 1.0, "ppo/reward_clip_frac": 0.0, "env/reward_shaping_abs": 0.35,
    "env/reward_terminal_abs": 1.0, "health/buffer_fill_frac": 1.0, "health/nan_guard_trips": 0,
    "health/obs_codec_rounded": 0, "ladder/transitivity_residual": 0.04, "ladder/consecutive_gate_failures": 1,
    "throughput/rollout_capacity_ratio": 2.6, "health/vram_driver_free_mb": 3900.0,
}


def healthy_row() -> dict:
    """Every schema key (families with one member) at a plausible value, plus the pending keys."""
    row = {}
    for key, (unit, _) in SCHEMA.items():
        if "{" in key:
            prefix, label = key.split("{", 1)
            key = prefix + ("scripted:noop" if label.startswith("opponent") else "0")
        row[key] = BY_UNIT.get(unit, 1.0)
    row.update(HEALTHY)
    return row


# What each alarm's condition looks like, planted on its declared keys (written out here, not
# derived from the table, so a wrong comparison in the table shows).
PLANTS = {
    "illegal_actions": {"health/illegal_action_rate": 0.002},
    "ratio_invariant": {"ppo/ratio_max_abs_dev": 1e-3, "ppo/ratio_atol": 1e-4},
    "nonfinite": {"health/nan_guard_trips": 1},
    "buffer_overflow": {"health/buffer_fill_frac": 1.02},
    "obs_codec_rounded": {"health/obs_codec_rounded": 3},
    "worker_failures": {"health/rollouts_lost": 1},
    "worker_failures_persistent": {"health/rollouts_lost": 2},
    "clip_pinned": {"ppo/clip_fraction": 0.97},
    "kl_high": {"ppo/kl": 0.08},
    "kl_dead": {"ppo/kl": 1e-7},
    "ev_negative": {"ppo/explained_variance": -0.2},
    "noop_collapse": {"policy/cards_per_match": 6.0},
    "noop_collapse_severe": {"policy/cards_per_match": 0.5},
    "noop_entropy_floor": {"ppo/noop_entropy": 0.005},
    "tile_spam": {"policy/tile_top1_share": 0.4},
    "artefact_exploit": {"policy/card_tile_top10_share": 0.8},
    "draw_equilibrium": {"env/draw_rate": 0.7, "env/episode_steps_at_cap_frac": 0.9},
    "seat_bias": {"env/win_rate_by_seat_ci95_lo": 0.58, "env/win_rate_by_seat_ci95_hi": 0.66},
    "elixir_count_inexact": {"env/elixir_count_exact_frac": 0.4},
    "reward_clipped": {"ppo/reward_clip_frac": 0.001},
    "shaping_dominates": {"env/reward_shaping_abs": 1.4, "env/reward_terminal_abs": 1.0},
    "vram_spilling": {"time/update": 30.0, "health/vram_driver_free_mb": 60.0},
    "transitivity": {"ladder/transitivity_residual": 0.2},
    "gate_starved": {"ladder/consecutive_gate_failures": 5},
    "capacity_ratio": {"throughput/rollout_capacity_ratio": 1.1},
    "q_diverging": {"dqn/q_abs_max": 250.0},
    "behaviour_dead": {"dqn/greedy_noop_frac": 1.0},
    "anchor_not_binding": {"imitation/beta_at_floor": 1.0},
    "anchor_budget_left": {"imitation/kl_budget_ratio": 3.5},
}

# Other alarms the same plant makes hold (they read the same key).
ALSO_FIRES = {
    "worker_failures": {"worker_failures_persistent"},
    "worker_failures_persistent": {"worker_failures"},
    "noop_collapse_severe": {"noop_collapse"},
}


def run(rows, cfg=None, state=None):
    cfg, state = cfg or AlarmConfig(), state or AlarmState()
    return [{r.name: r for r in evaluate(row, cfg, state)} for row in rows]


# ----------------------------------------------------------------------------- the table


def test_table_is_the_reference_table():
    """25 alarms under the reference's names, 7 halting, then our own (OURS), with their severities, patiences and
    default thresholds."""
    assert ALARM_NAMES == tuple(REFERENCE) + tuple(OURS)
    assert sum(a.severity == "halt" for a in ALARMS if a.name in REFERENCE) == 7
    for a in ALARMS:
        severity, patience, defaults = {**REFERENCE, **OURS}[a.name]
        defaults = DEPARTURES.get(a.name, defaults)
        assert (a.severity, a.patience) == (severity, patience), a.name
        assert thresholds(a) == pytest.approx(defaults), a.name
        assert a.meaning and a.what_to_do


def test_thresholds_are_config_fields_and_every_field_is_used():
    used = {t for a in ALARMS for t in a.threshold if isinstance(t, str)}
    fields = set(AlarmConfig.__struct_fields__) - {"enabled", "disabled", "patience_overrides", "severity_overrides"}
    assert used == fields


def test_alarm_keys_are_schema_keys_or_known_pending():
    """An alarm reads a key of the row, or one of the listed keys the row will carry; a typo fails."""
    missing = {k for a in ALARMS for k in a.keys if k not in SCHEMA}
    assert missing <= PENDING_ROW_KEYS, sorted(missing - PENDING_ROW_KEYS)
    for key in PENDING_ROW_KEYS:
        assert key not in SCHEMA or key in {k for a in ALARMS for k in a.keys}


def test_thresholds_follow_the_config():
    cfg = AlarmConfig(kl_high=0.1, buffer_fill_frac=0.5, ratio_invariant_multiple=10.0)
    assert thresholds(BY_NAME["kl_high"], cfg) == (0.1,)
    assert thresholds(BY_NAME["buffer_overflow"], cfg) == (1.0,)  # max(1.0, cfg): a floor only
    assert thresholds(BY_NAME["ratio_invariant"], cfg) == (10.0,)
    assert promql(BY_NAME["kl_high"], cfg) == "royalefleet_learner_ppo_kl > 0.1"
    assert promql(BY_NAME["ratio_invariant"], cfg) == (
        "royalefleet_learner_ppo_ratio_max_abs_dev > 10 * royalefleet_learner_ppo_ratio_atol")


@pytest.mark.parametrize("precision, deviation, fires", [
    # the reference's measured bf16 drift between rollout and update forwards on CUDA: ~1e-2
    ("bf16", 1e-2, False), ("tf32", 1e-2, False), ("fp32", 1e-2, True),
    # a planted mismatch (stale weights) is far above every precision's tolerance
    ("bf16", 0.3, True),
    # the edges: 5 x 2e-2 = 0.1 holds only above it; 5 x 1e-4 = 5e-4
    ("bf16", 0.1, False), ("bf16", 0.1001, True), ("fp32", 5e-4, False), ("fp32", 5.01e-4, True),
])
def test_the_ratio_tolerance_follows_the_precision_the_row_names(precision, deviation, fires):
    from shared.alarms import RATIO_ATOL

    row = {**healthy_row(), "ppo/ratio_max_abs_dev": deviation, "ppo/ratio_atol": RATIO_ATOL[precision]}
    result = run([row])[0]["ratio_invariant"]
    assert (result.evaluated, result.fired, result.severity) == (True, fires, "halt")


def test_a_row_without_its_ratio_tolerance_is_not_judged():
    """The tolerance is read from the row: without it the alarm is not evaluated (a missing
    key is not a zero), never judged against some other precision's number."""
    row = {**healthy_row(), "ppo/ratio_max_abs_dev": 0.3}
    del row["ppo/ratio_atol"]
    result = run([row])[0]["ratio_invariant"]
    assert (result.evaluated, result.holds) == (False, False)


# ----------------------------------------------------------------------------- firing and quiet


def test_healthy_row_is_quiet_and_every_alarm_is_evaluated():
    row = healthy_row()
    results = run([row] * 60)
    for results_i in results:
        assert not [n for n, r in results_i.items() if r.holds]
    # the healthy row carries a binding KL anchor (imitation/beta_at_floor 0): the clone-shaped
    # alarms are muted by it, every other one is evaluated
    assert {n for n, r in results[-1].items() if not r.evaluated} == {"tile_spam", "noop_entropy_floor"}
    assert all(results[-1][n].muted for n in ("tile_spam", "noop_entropy_floor"))
    assert set(results[-1]) == set(ALARM_NAMES)


@pytest.mark.parametrize("name", ALARM_NAMES)
def test_every_alarm_fires_on_its_plant_after_its_patience(name):
    alarm = BY_NAME[name]
    assert set(PLANTS[name]) == set(alarm.keys)
    healthy = healthy_row()
    if alarm.muted:  # a run without a binding anchor (test_the_clone_shaped_alarms_are_muted_...)
        del healthy[alarm.muted.key]
    planted = {**healthy, **PLANTS[name]}
    results = run([healthy] + [planted] * alarm.patience)  # the healthy row sets vram's best
    for i, res in enumerate(results[1:], start=1):
        r = res[name]
        assert r.evaluated and r.holds and r.consecutive == i
        assert r.fired == (i == alarm.patience), (name, i)
        others = {n for n, o in res.items() if o.holds} - {name}
        assert others <= ALSO_FIRES.get(name, set()), (name, others)
    assert results[-1][name].values == {k: float(v) for k, v in PLANTS[name].items()}


def test_patience_counts_consecutive_iterations_and_resets():
    ok, bad = healthy_row(), {**healthy_row(), "ppo/kl": 0.2}
    seq = [r["kl_high"] for r in run([bad, bad, ok, bad, bad, bad, bad, ok])]
    assert [r.consecutive for r in seq] == [1, 2, 0, 1, 2, 3, 4, 0]
    assert [r.fired for r in seq] == [False, False, False, False, False, True, True, False]


def test_missing_or_non_numeric_key_is_not_evaluated_and_breaks_the_run():
    bad = {**healthy_row(), "ppo/kl": 0.2}
    gone = {k: v for k, v in bad.items() if k != "ppo/kl"}
    for absent in (gone, {**bad, "ppo/kl": "nan"}, {**bad, "ppo/kl": True}, {**bad, "ppo/kl": None}):
        seq = [r["kl_high"] for r in run([bad, bad, absent, bad])]
        assert not seq[2].evaluated and not seq[2].holds and seq[2].consecutive == 0
        assert seq[3].consecutive == 1 and not any(r.fired for r in seq)
    # A row with no env/ keys at all (no episode finished) evaluates nothing that reads them.
    no_env = {k: v for k, v in healthy_row().items() if not k.startswith("env/")}
    res = run([no_env])[0]
    assert not res["draw_equilibrium"].evaluated and not res["seat_bias"].evaluated


def test_worker_failures_fire_on_every_loss_and_persist_after_three():
    rows = [{**healthy_row(), "health/rollouts_lost": n} for n in (1, 0, 1, 1, 1, 0)]
    res = run(rows)
    assert [r["worker_failures"].fired for r in res] == [True, False, True, True, True, False]
    assert [r["worker_failures_persistent"].fired for r in res] == [False, False, False, False, True, False]


def test_vram_spilling_compares_with_the_run_best_and_a_new_best_never_fires():
    def row(update, free=60.0, frozen=None):
        r = {**healthy_row(), "time/update": update, "health/vram_driver_free_mb": free}
        if frozen is not None:
            r["ppo/actor_frozen"] = frozen
        return r

    seq = [r["vram_spilling"] for r in run([row(30.0), row(12.0), row(25.0), row(23.0, free=500.0), row(5.0)])]
    assert [r.holds for r in seq] == [False, False, True, False, False]
    # Frozen-actor iterations keep their own best: a fast frozen update does not make the
    # normal ones look slow.
    seq = [r["vram_spilling"] for r in run([row(10.0), row(2.0, frozen=1), row(12.0), row(4.5, frozen=1)])]
    assert [r.holds for r in seq] == [False, False, False, True]


def test_cpu_row_without_vram_keys_never_evaluates_vram_spilling():
    row = {k: v for k, v in healthy_row().items() if k != "health/vram_driver_free_mb"}
    assert not run([row])[0]["vram_spilling"].evaluated


# ----------------------------------------------------------------------------- overrides


def test_overrides_disable_and_change_patience_and_severity():
    cfg = AlarmConfig(disabled=["kl_dead"], patience_overrides={"kl_high": 1},
                      severity_overrides={"kl_high": "halt", "clip_pinned": "warn"})
    bad = {**healthy_row(), "ppo/kl": 0.2, "ppo/clip_fraction": 0.9}
    res = run([bad] * 3, cfg)
    assert "kl_dead" not in res[0]
    assert res[0]["kl_high"].fired and res[0]["kl_high"].severity == "halt" and res[0]["kl_high"].patience == 1
    assert res[2]["clip_pinned"].fired and res[2]["clip_pinned"].severity == "warn"
    assert run([bad], AlarmConfig(enabled=False)) == [{}]


@pytest.mark.parametrize("field,value", [
    ("disabled", ["kl_hgih"]),
    ("patience_overrides", {"imitation_handoff": 2}),
    ("severity_overrides", {"nope": "warn"}),
])
def test_unknown_alarm_names_are_refused_with_the_known_names(field, value):
    cfg = AlarmConfig(**{field: value})
    with pytest.raises(ValueError) as err:
        evaluate(healthy_row(), cfg, AlarmState())
    msg = str(err.value)
    assert field in msg and all(n in msg for n in ALARM_NAMES)
    with pytest.raises(ValueError):
        AlarmMonitor(cfg, CollectorRegistry())
    if field == "disabled":
        assert "did you mean 'kl_high'" in msg


# ----------------------------------------------------------------------------- PromQL


def test_promql_reads_the_exported_gauges_of_the_declared_keys():
    names = set()
    for a in ALARMS:
        expr = promql(a)
        gauges = {prometheus_name(k)[0] for k in a.keys}
        assert gauges <= set(expr.replace("(", " ").replace(")", " ").replace("[", " ").split()), a.name
        names |= gauges
    assert all(n.startswith("royalefleet_learner_") for n in names)


# ----------------------------------------------------------------------------- the learner's monitor


def sample(registry, name, alarm):
    return next(s.value for m in registry.collect() for s in m.samples
                if s.name == name and s.labels["alarm"] == alarm)


def test_monitor_exports_gauges_logs_fired_alarms_and_says_when_to_halt(tmp_path):
    reg, said = CollectorRegistry(), []
    mon = AlarmMonitor(AlarmConfig(), reg, run_dir=str(tmp_path), say=said.append)
    assert sample(reg, "royalefleet_learner_alarm_consecutive", "clip_pinned") == 0
    bad = {**healthy_row(), "ppo/clip_fraction": 0.9, "ppo/kl": 0.09}
    verdicts = [mon.observe({**bad, "run/iteration": i}) for i in (1, 2, 3)]
    assert [v.halt_due for v in verdicts] == [False, False, True]
    assert [r.name for r in verdicts[-1].fired] == ["clip_pinned", "kl_high"]
    assert sample(reg, "royalefleet_learner_alarm_holds", "clip_pinned") == 1
    assert sample(reg, "royalefleet_learner_alarm_consecutive", "kl_high") == 3
    assert sample(reg, "royalefleet_learner_alarm_holds", "kl_dead") == 0
    lines = [json.loads(x) for x in (tmp_path / "alarms.jsonl").read_text().splitlines()]
    assert [(x["iteration"], x["alarm"], x["severity"]) for x in lines] == [(3, "clip_pinned", "halt"), (3, "kl_high", "warn")]
    assert lines[0]["values"] == {"ppo/clip_fraction": 0.9} and lines[0]["thresholds"] == [0.5]
    assert any(s.startswith("alarm [halt] clip_pinned: ppo/clip_fraction=0.9") for s in said)
    mon.observe(healthy_row())
    assert sample(reg, "royalefleet_learner_alarm_consecutive", "clip_pinned") == 0


def test_a_warning_that_keeps_firing_is_printed_every_tenth_iteration_and_logged_every_one(tmp_path):
    said = []
    mon = AlarmMonitor(AlarmConfig(), CollectorRegistry(), run_dir=str(tmp_path), say=said.append)
    rounded = {**healthy_row(), "health/obs_codec_rounded": 3.0}  # warn, patience 1
    for i in range(1, 24):
        mon.observe({**rounded, "run/iteration": i})
    mon.observe({**healthy_row(), "run/iteration": 24})
    printed = [s for s in said if "obs_codec_rounded" in s]
    assert REPEAT_EVERY == 10 and len(printed) == 4
    assert printed[0].startswith("alarm [warn] obs_codec_rounded: health/obs_codec_rounded=3 (") and "in a row" not in printed[0]
    assert printed[1].endswith("[11 iterations in a row; printed every 10th, all in alarms.jsonl]")
    assert printed[2].endswith("[21 iterations in a row; printed every 10th, all in alarms.jsonl]")
    assert printed[3] == "alarm obs_codec_rounded cleared after 23 iteration(s) in a row"
    logged = [json.loads(x) for x in (tmp_path / "alarms.jsonl").read_text().splitlines()]
    assert [x["iteration"] for x in logged if x["alarm"] == "obs_codec_rounded"] == list(range(1, 24))


def test_a_bundle_alarm_asks_for_its_bundle_once_a_firing_streak_and_again_after_it_clears(tmp_path):
    """artefact_exploit (warn, patience 5, bundle): held on iterations 1-12, cleared on 13, held
    again on 14-20. A bundle is due on 5 (its first fired iteration) and 18 (the new streak's),
    nowhere else; a halt is due whenever one fires."""
    mon = AlarmMonitor(AlarmConfig(), CollectorRegistry(), run_dir=str(tmp_path), say=lambda s: None)
    exploit = {**healthy_row(), "policy/card_tile_top10_share": 0.8}
    due = [i for i in range(1, 21)
           if mon.observe({**(healthy_row() if i == 13 else exploit), "run/iteration": i}).bundle_due]
    assert due == [5, 18]
    halting = {**healthy_row(), "ppo/clip_fraction": 0.9}  # clip_pinned: halt, patience 3
    assert [mon.observe({**halting, "run/iteration": i}).bundle_due for i in (21, 22, 23, 24)] == \
        [False, False, True, True]


def test_write_bundle_holds_rows_alarms_config_and_a_halt_record(tmp_path):
    run_dir = tmp_path / "runs" / "r1"
    mon = AlarmMonitor(AlarmConfig(), CollectorRegistry(), run_dir=str(run_dir), say=lambda s: None)
    run_dir.mkdir(parents=True)
    verdict = None
    for i in range(1, 61):
        row = {**healthy_row(), "run/iteration": i, "ppo/clip_fraction": 0.1 if i < 58 else 0.6 + i / 1000}
        verdict = mon.observe(row)
    assert verdict.halt_due
    cfg_json = dump_config(RunConfig())
    bundle = write_bundle(str(run_dir), 60, mon.recent_rows, verdict.fired, cfg_json, checkpoint_path="ck/60")
    files = {p.name for p in (run_dir / "bundles" / "60").iterdir()}
    assert files == {"metrics.jsonl", "alarms.jsonl", "config.json", "halt.json"}
    rows = [json.loads(x) for x in (run_dir / "bundles" / "60" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == RECENT_ROWS and rows[-1]["run/iteration"] == 60
    assert (run_dir / "bundles" / "60" / "config.json").read_bytes() == cfg_json
    halt = json.loads((run_dir / "bundles" / "60" / "halt.json").read_text())
    clip = next(a for a in halt["alarms"] if a["alarm"] == "clip_pinned")
    assert clip["severity"] == "halt" and clip["thresholds"] == [0.5]
    assert clip["last_values"]["ppo/clip_fraction"] == pytest.approx([0.1, 0.1, 0.658, 0.659, 0.66])
    assert halt["halted"] and halt["checkpoint"] == "ck/60"
    assert "royalefleet up --config" in halt["resume"] and "--run-name r1" in halt["resume"]
    assert bundle.endswith("60") and math.isfinite(halt["iteration"])


def _rectangle_with_lost_rollout():
    """A real rectangle of 4 cycles x 4 slots, every slot the learner's, where the rollout of
    slots 2-3 answered cycles 0-1 and was then lost: (4 - 1) + ... cells invalid."""
    from services.learner.rectangle import Rectangle

    T, R = 4, 4
    rect = Rectangle(T, R, row_bytes=8, mask_offset=7)
    group = np.zeros(R, np.int8)
    for t in range(T + 1):
        slots = np.arange(R) if t < 2 else np.arange(2)
        rect.store_obs(t, slots, group[slots], np.zeros(len(slots), np.int32), np.zeros((len(slots), 8), np.uint8))
        if t > 0:
            n = len(slots)
            rect.store_step(t - 1, slots, np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool),
                            np.zeros(n, np.int8), np.zeros(0, np.int64), np.zeros((0, 8), np.uint8))
    return rect, T


def test_a_bundle_from_a_row_with_lost_rollouts_holds_plain_numbers(tmp_path):
    """Issue 12 item 2: the invalid-rows count of a lost rollout came out of numpy and crashed
    the bundle's JSON encoding. A row built as the learner builds it, with a lost rollout and a
    halting alarm, goes into a bundle whose every number is a plain JSON number."""
    from services.learner.metric_log import plain_row
    from services.learner.measures import lost_cells as _lost_cells

    rect, T = _rectangle_with_lost_rollout()
    lost = _lost_cells(rect, T)
    # slots 2 and 3 received steps of cycle 0 only (the round of cycle 1 closed step 0): cycles 1..3 lost, each
    assert lost == 2 * (T - 1)
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    mon = AlarmMonitor(AlarmConfig(), CollectorRegistry(), run_dir=str(run_dir), say=lambda s: None)
    verdict = None
    for i in (1, 2, 3):
        row = {**healthy_row(), "run/iteration": i, "health/rollouts_lost": np.int64(i),
               "health/rows_invalid": np.int64(lost) if i == 3 else 0,
               "health/rows_invalid_frac": np.float64(lost) / np.int64(16), "ppo/kl": np.float32(0.25)}
        verdict = mon.observe(plain_row(row))
    assert verdict.halt_due and "worker_failures_persistent" in [r.name for r in verdict.fired]
    bundle = write_bundle(str(run_dir), 3, mon.recent_rows, verdict.fired, dump_config(RunConfig()))
    last = json.loads((run_dir / "bundles" / "3" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["health/rows_invalid"] == 6 and type(last["health/rows_invalid"]) is int
    assert last["health/rows_invalid_frac"] == 0.375
    halt = json.loads((run_dir / "bundles" / "3" / "halt.json").read_text())
    persistent = next(a for a in halt["alarms"] if a["alarm"] == "worker_failures_persistent")
    assert persistent["last_values"]["health/rollouts_lost"] == [1, 2, 3]
    assert bundle.endswith("3")


def test_write_bundle_takes_numpy_scalars_and_refuses_arrays(tmp_path):
    """write_bundle is the last thing a halt does: a numpy scalar in a row it is handed is
    written as the plain number it holds; an array is refused naming its key."""
    from services.learner.metric_log import plain_row

    rect, T = _rectangle_with_lost_rollout()
    # a numpy reduction, as the learner's row computes its counts: 2 slots x 4 steps + 2 slots x 1
    row = {"run/iteration": 1, "health/steps_valid": rect.step_valid.sum(), "health/ok": np.bool_(True),
           "ppo/kl": np.float32(0.5)}
    write_bundle(str(tmp_path), 1, [row], [], "{}")
    got = json.loads((tmp_path / "bundles" / "1" / "metrics.jsonl").read_text())
    assert got == {"run/iteration": 1, "health/steps_valid": 10, "health/ok": True, "ppo/kl": 0.5}
    with pytest.raises(TypeError, match="'run/slots'"):
        plain_row({"run/slots": np.zeros(3)})


def test_the_clone_shaped_alarms_are_muted_while_a_warm_starts_anchor_holds():
    """tile_spam and noop_entropy_floor on a clone's rows: muted (not evaluated, count 0, the
    reason given) while imitation/beta_at_floor is 0, counted from scratch once it is 1 (the
    anchor let go), and as before in a run without the anchor; the monitor says each change once."""
    from services.learner.alarms import AlarmMonitor
    from shared.alarms import ANCHOR_HOLDS

    clone = {"policy/tile_top1_share": 0.6, "ppo/noop_entropy": 0.001}
    said: list[str] = []
    monitor = AlarmMonitor(AlarmConfig(), say=said.append)
    names = ("tile_spam", "noop_entropy_floor")
    for _ in range(7):  # 7 > patience 5: unmuted, both would have fired
        results = {r.name: r for r in monitor.observe(clone | {"imitation/beta_at_floor": 0.0}).results}
        assert all(not results[n].evaluated and results[n].consecutive == 0 and not results[n].fired for n in names)
        assert all(results[n].muted == ANCHOR_HOLDS.reason for n in names)
    assert said == [f"alarm {n} muted: {ANCHOR_HOLDS.reason}" for n in sorted(names)]
    for k in range(1, 6):
        results = {r.name: r for r in monitor.observe(clone | {"imitation/beta_at_floor": 1.0}).results}
        assert [results[n].consecutive for n in names] == [k, k] and not results["tile_spam"].muted
    assert results["tile_spam"].fired and results["noop_entropy_floor"].fired  # at patience 5
    assert said[2:4] == [f"alarm {n} evaluated again: its mute no longer holds" for n in sorted(names)]
    # no anchor at all (a run without the imitation section): evaluated as ever
    state = AlarmState()
    for _ in range(5):
        results = {r.name: r for r in evaluate(clone, AlarmConfig(), state)}
    assert results["tile_spam"].fired and results["noop_entropy_floor"].fired
    assert [a.name for a in ALARMS if a.muted] == ["noop_entropy_floor", "tile_spam"]
