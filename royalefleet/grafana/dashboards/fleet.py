"""The fleet dashboard (`grafana/dashboards/fleet.json`): one function a row, each giving that
row's panels; ``ROWS`` puts them in order. A new row: a function here and its line in ``ROWS``;
a new panel: one more ``ts(...)`` in its row's list (``royalefleet.grafana.panels.ts``)."""

from __future__ import annotations

from royalefleet.grafana.common import learner as L
from royalefleet.grafana.panels import Row, alert_list, dashboard, ts
from shared.service_alerts import EXPECTED_ROLLOUTS_METRIC, PROGRESS_METRIC, STALL_SECONDS

UID = "royalefleet-fleet"
TITLE = "royalefleet: fleet"
DESCRIPTION = ("Firing alerts, rollouts registered, rows invalidated, restarts, round latency, wire bytes, "
               "checkpoints.")
FIRING_PANEL = "Firing and pending alerts"


def alerts() -> list[dict]:
    """Every alert of the generated rules (the alarm table and the service alerts) that fires or
    waits out its ``for``."""
    return [alert_list(FIRING_PANEL, description=(
        "The alarm table's and the service alerts' rules that fire now, or hold and wait out their 'for' "
        "(pending), as Prometheus evaluates them (its ALERTS series). Alertmanager posts each to ALERT_WEBHOOK_URL, "
        "once (docs/alarms.md, \"Where alerts show and how they reach you\"). The learner's own alarm counts are "
        "on the training dashboard."))]


def fleet() -> list[dict]:
    """Services up, rollouts registered and lost, rows invalidated, restarts."""
    return [
        ts("Core services up and the learner's progress", [
            ('up{job=~"learner|ladder|checkpoint"}', "{{job}} up (1) or down (0)"),
            (f"(time() - {PROGRESS_METRIC}) / 60", "minutes since the learner's last row"),
        ], description=f"The two service alerts read these (docs/alarms.md, \"Service alerts\"): a core service down "
                       f"2 minutes, or no row for {STALL_SECONDS // 60} minutes while the learner runs."),
        ts("Rollouts registered", [
            (L("health/rollouts"), "in the last iteration"),
            ('count(up{job="rollout"} == 1)', "scraped and up"),
            ('count(up{job="rollout"} == 0)', "scraped and down"),
            (EXPECTED_ROLLOUTS_METRIC, "expected by the learner"),
        ], description="The fleet_below_size alert fires when fewer rollouts answer scrapes than the learner "
                       "expects, for 5 minutes (docs/alarms.md, \"Service alerts\")."),
        ts("Rollouts lost and rows invalidated", [(L("health/rollouts_lost"), "rollouts lost"),
                                                  (L("health/rows_invalid"), "rows invalidated")]),
        ts("Share of the rectangle invalidated", [(L("health/rows_invalid_frac"), "invalid")], unit="percentunit"),
        ts("Restarts (counter resets in the last hour)", [
            ("sum(resets(royalefleet_rollout_rounds_total[1h]))", "rollouts"),
            ("resets(royalefleet_learner_iterations_total[1h])", "learner"),
            ("resets(royalefleet_ladder_plans_served_total[1h])", "ladder"),
        ], description="A restarted process starts its counters at 0; a rollout recreated on a new address "
                       "shows as a new target instead (see Rollouts registered)."),
    ]


def rounds() -> list[dict]:
    """Round latency, inference, rounds and rows sent, wire bytes, refusals, codec and mask."""
    return [
        ts("Round latency", [(f"{L('time/collection')} / {L('run/cycles')}", "seconds a cycle (mean)")], unit="s",
           description="Collection seconds over cycles: one round from every shard each cycle."),
        ts("Inference per round", [(L("throughput/inference_ms_per_round"), "ms")], unit="ms"),
        ts("Rounds and rows sent", [("sum(rate(royalefleet_rollout_rounds_total[5m]))", "rounds/s"),
                                    ("sum(rate(royalefleet_rollout_rows_total[5m]))", "rows/s")]),
        ts("Wire bytes", [("sum(rate(royalefleet_rollout_wire_bytes_total[5m]))", "all rollouts")], unit="Bps"),
        ts("Wire bytes per row", [(L("throughput/wire_bytes_per_row"), "bytes a row")], unit="bytes"),
        ts("Refused and unsent messages", [
            ("sum by (reason) (rate(royalefleet_learner_messages_refused_total[5m]))", "learner: {{reason}}"),
            ("sum by (reason) (rate(royalefleet_rollout_messages_refused_total[5m]))", "rollouts: {{reason}}"),
            ("sum(rate(royalefleet_rollout_send_failures_total[5m]))", "rollout sends failed"),
            ("rate(royalefleet_ladder_replies_unsent_total[5m])", "ladder replies unsent"),
        ]),
        ts("Codec and mask", [("sum(rate(royalefleet_rollout_obs_codec_clipped_total[5m]))", "values clipped/s"),
                              ("sum(rate(royalefleet_rollout_obs_codec_rounded_total[5m]))", "values rounded/s"),
                              ("sum(rate(royalefleet_rollout_illegal_actions_total[5m]))", "illegal actions/s")]),
    ]


def checkpoints() -> list[dict]:
    """Checkpoint write time and counts."""
    return [
        ts("Checkpoint write time", [
            ("histogram_quantile(0.5, sum by (le) (rate(royalefleet_checkpoint_write_seconds_bucket[30m])))", "p50"),
            ("histogram_quantile(0.95, sum by (le) (rate(royalefleet_checkpoint_write_seconds_bucket[30m])))", "p95"),
        ], unit="s", description="Buckets reach 60 s."),
        ts("Checkpoints", [("increase(royalefleet_checkpoint_writes_total[1h])", "written in the last hour"),
                           ("increase(royalefleet_checkpoint_verify_failures_total[1h])", "failed verification"),
                           ("increase(royalefleet_learner_checkpoint_failures_total[1h])", "learner gave up")]),
    ]


def scale() -> list[dict]:
    """Rollout idle fraction, the central inference's batch size, policy lag under overlap."""
    return [
        ts("Rollout idle fraction", [
            (L("throughput/rollout_idle_frac"), "fleet mean (the learner's view)"),
            ("royalefleet_rollout_idle_frac", "{{instance}} (its own view, last 10 s)"),
        ], unit="percentunit",
           description="Share of the wall time a rollout waits for the learner (inference, the update, the "
                       "boundary). Without rollout.overlap the update's pause dominates it (docs/iteration.md, "
                       "\"Overlap\")."),
        ts("Inference batch size", [(L("throughput/inference_batch_rows_mean"), "rows a forward (mean)"),
                                    (L("throughput/inference_batch_rows_p90"), "rows a forward (p90)")],
           description="Learner rows per central-inference actor forward: every ready round at once in the "
                       "throughput tier, one round under run_exact (docs/protocol.md, \"Batched inference\")."),
        ts("Policy lag and overlap", [(L("ppo/policy_lag_mean"), "policy lag (mean)"),
                                      (L("throughput/overlap_rows_frac"), "rows inferred during the update"),
                                      ("rate(royalefleet_learner_untrained_rows_total[1h])", "untrained rows/s")]),
    ]


ROWS = [("Alerts", alerts), ("Fleet", fleet), ("Rounds and wire", rounds), ("Checkpoints", checkpoints),
        ("Scale", scale)]
"""(row title, the function giving its panels), top to bottom. Panel ids follow this order; no
alert rule links to a panel of this dashboard (they link to the training dashboard's alarm
panel), so the alert list went first, where it is seen."""


def rows() -> list[Row]:
    return [(title, panels()) for title, panels in ROWS]


def build() -> dict:
    """The dashboard's JSON model."""
    return dashboard(UID, TITLE, DESCRIPTION, rows())
