"""Grafana-managed alert rules (``grafana/provisioning/alerting/alarms.yaml``): one rule per
alarm of the table, linked to the training dashboard's alarm panel, and one per service alert."""

from __future__ import annotations

from royalefleet.grafana.alert_text import (alarm_description, alarm_labels, alarm_summary, rule_uid,
                                            service_description, service_labels)
from royalefleet.grafana.common import DATASOURCE, DATASOURCE_UID, FOLDER, duration, pending_seconds
from royalefleet.grafana.dashboards import training
from shared.alarms import ALARMS, Alarm, promql
from shared.service_alerts import SERVICE_ALERTS, ServiceAlert


def _rule_data(expr: str) -> list[dict]:
    """A: ``expr`` (instant; a series only while it holds); B: its value, for the summary; C: 1
    for every series A returned, the condition. No data means not holding (OK)."""
    return [
        {"refId": "A", "queryType": "", "relativeTimeRange": {"from": 600, "to": 0},
         "datasourceUid": DATASOURCE_UID,
         "model": {"refId": "A", "datasource": DATASOURCE, "expr": expr, "instant": True, "range": False,
                   "intervalMs": 15000, "maxDataPoints": 43200}},
        {"refId": "B", "queryType": "", "relativeTimeRange": {"from": 0, "to": 0}, "datasourceUid": "__expr__",
         "model": {"refId": "B", "datasource": {"type": "__expr__", "uid": "__expr__"}, "type": "reduce",
                   "expression": "A", "reducer": "last"}},
        {"refId": "C", "queryType": "", "relativeTimeRange": {"from": 0, "to": 0}, "datasourceUid": "__expr__",
         "model": {"refId": "C", "datasource": {"type": "__expr__", "uid": "__expr__"}, "type": "math",
                   "expression": "is_number($B)"}},
    ]


def _grafana_alert(uid: str, title: str, expr: str, for_: str, labels: dict, annotations: dict,
                   link: dict | None = None) -> dict:
    """One Grafana-managed rule on ``expr`` (``_rule_data``); ``link``: the dashboard panel it
    belongs to, if any. No data means not holding (OK)."""
    return ({"uid": uid, "title": title, "condition": "C", "data": _rule_data(expr)} | (link or {})
            | {"noDataState": "OK", "execErrState": "Error", "for": for_, "labels": labels,
               "annotations": annotations, "isPaused": False})


def grafana_rule(alarm: Alarm, panel_id: int) -> dict:
    """An alarm of the table, linked to the training dashboard's alarm panel."""
    return _grafana_alert(
        rule_uid(alarm), alarm.name, promql(alarm),
        duration(pending_seconds(alarm.patience)) if alarm.patience > 1 else "0s", alarm_labels(alarm),
        {"summary": alarm_summary(alarm, "{{ $values.B.Value }}"), "description": alarm_description(alarm)},
        link={"dashboardUid": training.UID, "panelId": panel_id})



def grafana_service_rule(alert: ServiceAlert) -> dict:
    return _grafana_alert(f"royalefleet-{alert.name}", alert.name, alert.expr, duration(alert.for_seconds),
                          service_labels(alert),
                          {"summary": alert.summary, "description": service_description(alert)})


def grafana_alert_rules() -> dict:
    panel_id = next(p["id"] for p in training.build()["panels"] if p["title"] == training.ALARM_PANEL)
    return {
        "apiVersion": 1,
        "groups": [{
            "orgId": 1,
            "name": "royalefleet-alarms",
            "folder": FOLDER,
            "interval": "1m",
            "rules": [grafana_rule(a, panel_id) for a in ALARMS],
        }, {
            "orgId": 1,
            "name": "royalefleet-services",
            "folder": FOLDER,
            "interval": "1m",
            "rules": [grafana_service_rule(a) for a in SERVICE_ALERTS],
        }],
    }
