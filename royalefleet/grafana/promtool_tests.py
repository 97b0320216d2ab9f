"""promtool unit tests of the Prometheus rules (``prometheus/tests/alarms_test.yml``): for every
alarm the learner's gauges as its evaluator counts a series that fires after its patience, one
that stays quiet, one that resets, and one under a run's own patience and severity; for every
service alert one that fires when its ``for`` has passed and one that never does.
``tests/royalefleet/test_grafana.py`` checks the scenarios fire in the Python evaluator where
the tests expect."""

from __future__ import annotations

from royalefleet.grafana.alert_text import (CONSECUTIVE, EXTENSION_ALERT, PATIENCE, alarm_description, alarm_labels,
                                            alarm_summary, extension_annotations, service_description,
                                            service_labels)
from royalefleet.grafana.common import SEVERITY, num
from shared.alarms import ALARMS, RATIO_ATOL, Alarm, AlarmState, effective, evaluate, thresholds
from shared.config import AlarmConfig
from shared.service_alerts import EXPECTED_ROLLOUTS_METRIC, PROGRESS_METRIC, SERVICE_ALERTS, STALL_SECONDS, ServiceAlert


HEALTHY: dict[str, float] = {
    "health/illegal_action_rate": 0.0,
    "ppo/ratio_max_abs_dev": 1e-6,
    "ppo/ratio_atol": RATIO_ATOL["fp32"],
    "health/nan_guard_trips": 0.0,
    "health/buffer_fill_frac": 1.0,
    "health/obs_codec_rounded": 0.0,
    "health/rollouts_lost": 0.0,
    "ppo/clip_fraction": 0.12,
    "ppo/kl": 0.01,
    "ppo/explained_variance": 0.6,
    "policy/cards_per_match": 21.0,
    "ppo/noop_entropy": 0.1,
    "policy/tile_top1_share": 0.08,
    "policy/card_tile_top10_share": 0.3,
    "env/draw_rate": 0.2,
    "env/episode_steps_at_cap_frac": 0.1,
    "env/win_rate_by_seat_ci95_lo": 0.44,
    "env/win_rate_by_seat_ci95_hi": 0.56,
    "env/elixir_count_exact_frac": 1.0,
    "ppo/reward_clip_frac": 0.0,
    "env/reward_shaping_abs": 0.4,
    "env/reward_terminal_abs": 1.0,
    "time/update": 10.0,
    "health/vram_driver_free_mb": 4000.0,
    "ladder/transitivity_residual": 0.03,
    "ladder/consecutive_gate_failures": 1.0,
    "throughput/rollout_capacity_ratio": 2.5,
    "dqn/q_abs_max": 3.0,
    "dqn/greedy_noop_frac": 0.9,
    "imitation/beta_at_floor": 0.0,
    "imitation/kl_budget_ratio": 1.0,
}
"""A value in each alarm key's healthy band (the reference schema's), for the quiet series."""

TOLERANT: dict[str, dict[str, float]] = {
    "ratio_invariant": {"ppo/ratio_max_abs_dev": 1e-2, "ppo/ratio_atol": RATIO_ATOL["bf16"]},
}
"""Per ``gt_times`` alarm, a row that would fire at HEALTHY's tolerance and must not at its own:
the ~1e-2 the reference measured between bf16 rollout and update forwards on CUDA, under the
bf16 tolerance. Its series (``tolerant``) shows the rule follows the precision the row names."""


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def firing_values(alarm: Alarm, cfg: AlarmConfig | None = None) -> dict[str, float]:
    """Values of the alarm's keys that make its condition hold (vram_spilling: once its best is
    set by a healthy row)."""
    t = thresholds(alarm, cfg)
    k = alarm.keys
    match alarm.condition:
        case "gt":
            return {k[0]: _round(t[0] * 1.5) if t[0] > 0 else 1.0}
        case "lt":
            return {k[0]: _round(t[0] / 2) if t[0] > 0 else t[0] - 0.5}
        case "ge":
            return {k[0]: t[0]}
        case "gt_times":
            return {k[0]: _round(t[0] * HEALTHY[k[1]] * 1.5), k[1]: HEALTHY[k[1]]}
        case "rose":
            return {k[0]: 1.0}
        case "all_gt":
            return {key: _round(v + (1 - v) / 2) for key, v in zip(k, t)}
        case "ci_outside":
            return {k[0]: _round(t[0] - 0.1), k[1]: _round(t[0] - 0.05)}
        case "first_gt_second":
            return {k[0]: 3.0, k[1]: 1.0}
        case "vram_spill":
            return {k[0]: _round(HEALTHY[k[0]] * t[0] * 1.25), k[1]: _round(t[1] / 2)}
    raise AssertionError(alarm.condition)


def scenarios(alarm: Alarm, cfg: AlarmConfig | None = None) -> tuple[dict[str, list[dict[str, float]]], int]:
    """Row sequences of equal length, one row an iteration, and the index of the row the alarm
    must first fire on: ``fire`` holds from row ``warmup`` on (vram_spilling needs healthy rows
    first, to set its best) and fires on its patience-th holding row; ``quiet`` is healthy
    throughout; ``reset`` holds ``patience - 1`` rows, breaks once, holds ``patience - 1`` rows
    again and is healthy after: it never fires; ``tolerant`` (alarms in ``TOLERANT``) holds a
    deviation that fires at the fp32 tolerance, under the coarser tolerance its row names: it
    never fires."""
    healthy = {k: HEALTHY[k] for k in alarm.keys}
    bad = firing_values(alarm, cfg)
    warmup = 2 if alarm.condition == "vram_spill" else 0
    p = alarm.patience
    n = warmup + 2 * p + 1
    fire = [healthy] * warmup + [bad] * (n - warmup)
    reset = [healthy] * warmup + [bad] * (p - 1) + [healthy] + [bad] * (p - 1)
    reset += [healthy] * (n - len(reset))
    runs = {"fire": fire, "quiet": [healthy] * n, "reset": reset}
    if alarm.name in TOLERANT:
        runs["tolerant"] = [TOLERANT[alarm.name]] * n
    return runs, warmup + p - 1


def counts(alarm: Alarm, rows: list[dict[str, float]], cfg: AlarmConfig | None = None) -> list[int]:
    """The learner's count of ``alarm`` after each row (``shared.alarms.evaluate``, the evaluator
    the learner runs): what it exports as ``royalefleet_learner_alarm_consecutive``."""
    state, out = AlarmState(), []
    for row in rows:
        out.append(next(r.consecutive for r in evaluate(row, cfg or AlarmConfig(), state) if r.name == alarm.name))
    return out


def overridden(alarm: Alarm) -> AlarmConfig:
    """A run's own config for ``alarm``: one more iteration of patience, the other severity."""
    return AlarmConfig(patience_overrides={alarm.name: alarm.patience + 1},
                       severity_overrides={alarm.name: "warn" if alarm.severity == "halt" else "halt"})


def _minutes(i: int) -> str:
    return f"{i}m"


def alarm_test(alarm: Alarm) -> dict:
    """The learner's gauges for the scenarios (``scenarios``), one instance each, and ``config``:
    the ``fire`` rows under a run's own patience and severity (``overridden``). Just before the
    patience is spent nothing fires; at it only ``fire`` does, valued its count; one iteration
    later ``config`` too, with its own severity; at the end still those two (``reset`` broke its
    run, ``quiet`` never held)."""
    runs, fire_at = scenarios(alarm)
    instances = {name: (counts(alarm, rows), AlarmConfig()) for name, rows in runs.items()}
    instances["config"] = (counts(alarm, runs["fire"], overridden(alarm)), overridden(alarm))
    series = []
    for name, (n_held, cfg) in instances.items():
        severity, patience = effective(alarm, cfg)
        labels = f'{{job="learner",instance="{name}",alarm="{alarm.name}",severity="{severity}"}}'
        series.append({"series": CONSECUTIVE + labels, "values": " ".join(str(c) for c in n_held)})
        series.append({"series": PATIENCE + labels, "values": f"{patience}x{len(n_held) - 1}"})

    def fired(name: str, at: int) -> dict:
        severity, _ = effective(alarm, instances[name][1])
        return {"exp_labels": {**alarm_labels(alarm), "alarm": alarm.name, "severity": SEVERITY[severity],
                               "job": "learner", "instance": name},
                "exp_annotations": {
                    "summary": alarm_summary(alarm, num(instances[name][0][at])).replace("{{ $labels.instance }}", name)
                    .replace("{{ $labels.severity }}", SEVERITY[severity]),
                    "description": alarm_description(alarm)}}

    last = len(runs["fire"]) - 1
    checks = []
    if fire_at > 0:
        checks.append({"eval_time": _minutes(fire_at - 1), "alertname": alarm.name, "exp_alerts": []})
    checks.append({"eval_time": _minutes(fire_at), "alertname": alarm.name, "exp_alerts": [fired("fire", fire_at)]})
    checks.append({"eval_time": _minutes(fire_at + 1), "alertname": alarm.name,
                   "exp_alerts": [fired("fire", fire_at + 1), fired("config", fire_at + 1)]})
    checks.append({"eval_time": _minutes(last), "alertname": alarm.name,
                   "exp_alerts": [fired("fire", last), fired("config", last)]})
    return {"name": alarm.name, "interval": "1m", "input_series": series, "alert_rule_test": checks}


def prometheus_tests() -> dict:
    """One test group per alarm (``alarm_test``) and the service alerts' (``service_tests``)."""
    tests = [alarm_test(alarm) for alarm in ALARMS] + [extension_test()]
    return {"rule_files": ["../rules/alarms.yml"], "evaluation_interval": "1m", "tests": tests + service_tests()}


def extension_test() -> dict:
    """A learner extension's alarm (``my_extension_alarm``, patience 2, halt) fires the one
    extension rule at its patience, as ``critical``; a table alarm's series at its patience does
    not (its own rule does)."""
    ext = '{job="learner",instance="learner:9100",alarm="my_extension_alarm",severity="halt"}'
    table = f'{{job="learner",instance="learner:9100",alarm="{ALARMS[0].name}",severity="{ALARMS[0].severity}"}}'
    summary = (extension_annotations()["summary"].replace("{{ $labels.alarm }}", "my_extension_alarm")
               .replace("{{ $labels.severity }}", "critical").replace("{{ $value }}", "2")
               .replace("{{ $labels.instance }}", "learner:9100"))
    return {"name": EXTENSION_ALERT, "interval": "1m",
            "input_series": [{"series": CONSECUTIVE + ext, "values": "0 1 2 0"},
                             {"series": PATIENCE + ext, "values": "2x3"},
                             {"series": CONSECUTIVE + table, "values": "1 1 1 1"},
                             {"series": PATIENCE + table, "values": "1x3"}],
            "alert_rule_test": [
                {"eval_time": "1m", "alertname": EXTENSION_ALERT, "exp_alerts": []},
                {"eval_time": "2m", "alertname": EXTENSION_ALERT, "exp_alerts": [{
                    "exp_labels": {"service": "learner", "alarm": "my_extension_alarm", "severity": "critical",
                                   "job": "learner", "instance": "learner:9100"},
                    "exp_annotations": {"summary": summary,
                                        "description": extension_annotations()["description"]}}]},
                {"eval_time": "3m", "alertname": EXTENSION_ALERT, "exp_alerts": []}]}


def service_tests() -> list[dict]:
    """One promtool test per service alert, each with a series that must fire exactly when its
    ``for`` has passed and one that must never fire."""
    by_name = {a.name: a for a in SERVICE_ALERTS}
    down, stalled, fleet = by_name["service_down"], by_name["training_stalled"], by_name["fleet_below_size"]
    host_down = by_name["rollout_host_down"]

    def fired(alert: ServiceAlert, summary: str, **labels) -> dict:
        return {"exp_labels": {**service_labels(alert), **labels},
                "exp_annotations": {"summary": summary, "description": service_description(alert)}}

    n_down = down.for_seconds // 60
    down_alert = fired(down, down.summary.replace("{{ $labels.job }}", "ladder")
                       .replace("{{ $labels.instance }}", "ladder:9101"), job="ladder", instance="ladder:9101")
    # A learner that wrote its last row at time 0 (and one that writes a row every minute): the
    # condition holds from the first minute past STALL_SECONDS, the alert fires `for` later.
    holds_at = STALL_SECONDS // 60 + 1
    fires_at = holds_at + stalled.for_seconds // 60
    stalled_alert = fired(stalled, stalled.summary.replace("{{ $labels.instance }}", "stuck"),
                          job="learner", instance="stuck")
    return [
        {"name": "service_down", "interval": "1m",
         "input_series": [{"series": 'up{job="ladder",instance="ladder:9101"}', "values": f"0x{n_down + 2}"},
                          {"series": 'up{job="checkpoint",instance="checkpoint:9102"}', "values": f"1x{n_down + 2}"},
                          {"series": 'up{job="rollout",instance="10.0.0.7:9110"}', "values": f"0x{n_down + 2}"}],
         "alert_rule_test": [
             {"eval_time": _minutes(n_down - 1), "alertname": "service_down", "exp_alerts": []},
             {"eval_time": _minutes(n_down), "alertname": "service_down", "exp_alerts": [down_alert]}]},
        {"name": "training_stalled", "interval": "1m",
         "input_series": [{"series": f'{PROGRESS_METRIC}{{job="learner",instance="stuck"}}',
                           "values": f"0x{fires_at + 2}"},
                          {"series": f'{PROGRESS_METRIC}{{job="learner",instance="moving"}}',
                           "values": f"0+60x{fires_at + 2}"}],
         "alert_rule_test": [
             {"eval_time": _minutes(fires_at - 1), "alertname": "training_stalled", "exp_alerts": []},
             {"eval_time": _minutes(fires_at), "alertname": "training_stalled", "exp_alerts": [stalled_alert]}]},
        *fleet_tests(fleet, fired),
        host_down_test(host_down, fired),
    ]


def host_down_test(alert: ServiceAlert, fired) -> dict:
    """rollout_host_down: one remote rollout answers no scrape from minute 0 and fires ``for``
    later; its neighbour on the same host, answering, never does."""
    n = alert.for_seconds // 60
    instance, host = "10.0.0.9:9111", "box2"
    summary = alert.summary.replace("{{ $labels.host }}", host).replace("{{ $labels.instance }}", instance)
    return {"name": alert.name, "interval": "1m",
            "input_series": [
                {"series": f'up{{job="rollout-hosts",host="{host}",instance="{instance}"}}', "values": f"0x{n + 2}"},
                {"series": f'up{{job="rollout-hosts",host="{host}",instance="10.0.0.9:9110"}}', "values": f"1x{n + 2}"}],
            "alert_rule_test": [
                {"eval_time": _minutes(n - 1), "alertname": alert.name, "exp_alerts": []},
                {"eval_time": _minutes(n), "alertname": alert.name,
                 "exp_alerts": [fired(alert, summary, job="rollout-hosts", host=host, instance=instance)]}]}


def fleet_tests(fleet: ServiceAlert, fired) -> list[dict]:
    """fleet_below_size: three rollouts expected; one's series ends at minute 3 (it left DNS:
    a stale marker, no ``up == 0``), so the rule holds from minute 3 and fires ``for`` later with
    the count left (2); a fleet whose every series ends fires with 0 (``or vector(0)``); a full
    fleet, or a learner that expects fewer than answer, never fires."""
    n = fleet.for_seconds // 60
    end = n + 6
    expected = f'{EXPECTED_ROLLOUTS_METRIC}{{job="learner",instance="learner:9100"}}'

    def rollout(k: int, values: str) -> dict:
        return {"series": f'up{{job="rollout",instance="10.0.0.{k}:9110"}}', "values": values}

    def alert(left: int) -> dict:
        return fired(fleet, fleet.summary.replace("{{ $value }}", str(left)))

    gone_at = 3
    one_gone = f"1x{gone_at - 1} stale"
    return [
        {"name": "fleet_below_size", "interval": "1m",
         "input_series": [{"series": expected, "values": f"3x{end}"}, rollout(1, f"1x{end}"), rollout(2, f"1x{end}"),
                          rollout(3, one_gone)],
         "alert_rule_test": [
             {"eval_time": _minutes(gone_at + n - 1), "alertname": fleet.name, "exp_alerts": []},
             {"eval_time": _minutes(gone_at + n), "alertname": fleet.name, "exp_alerts": [alert(2)]}]},
        {"name": "fleet_below_size: every rollout gone", "interval": "1m",
         "input_series": [{"series": expected, "values": f"2x{end}"}, rollout(1, one_gone), rollout(2, one_gone)],
         "alert_rule_test": [
             {"eval_time": _minutes(gone_at + n - 1), "alertname": fleet.name, "exp_alerts": []},
             {"eval_time": _minutes(gone_at + n), "alertname": fleet.name, "exp_alerts": [alert(0)]}]},
        {"name": "fleet_below_size: a full fleet and a larger one never fire", "interval": "1m",
         "input_series": [{"series": expected, "values": f"2x{end}"}, rollout(1, f"1x{end}"), rollout(2, f"1x{end}"),
                          rollout(3, one_gone)],
         "alert_rule_test": [{"eval_time": _minutes(end), "alertname": fleet.name, "exp_alerts": []}]},
    ]

