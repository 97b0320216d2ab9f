"""What an alert says, the same in both rule formats (Grafana's and Prometheus's): its uid,
labels, summary and description, for a table alarm (``shared/alarms.py``) and for a service
alert (``shared/service_alerts.py``)."""

from __future__ import annotations

from royalefleet.grafana.common import ITERATION_SECONDS, pending_seconds
from shared.alarms import Alarm, describe
from shared.service_alerts import ServiceAlert


def rule_uid(alarm: Alarm) -> str:
    return f"royalefleet-{alarm.name}"


def alarm_summary(alarm: Alarm, value: str) -> str:
    return f"{alarm.name} [{alarm.severity}]: {describe(alarm)} on {{{{ $labels.instance }}}} (value {value})"


def alarm_description(alarm: Alarm) -> str:
    return (f"{alarm.meaning[0].upper()}{alarm.meaning[1:]}. Next: {alarm.what_to_do}. "
            f"The learner counts iterations itself (royalefleet_learner_alarm_consecutive, alarm={alarm.name}) and "
            f"{'halts' if alarm.severity == 'halt' else 'warns'} at {alarm.patience}; this rule waits "
            f"{pending_seconds(alarm.patience)} s (patience x {ITERATION_SECONDS} s nominal iterations).")


def alarm_labels(alarm: Alarm) -> dict:
    return {"severity": alarm.severity, "alarm": alarm.name, "service": "learner"}



def service_labels(alert: ServiceAlert) -> dict:
    return {"severity": alert.severity, "alarm": alert.name}


def service_description(alert: ServiceAlert) -> str:
    return f"{alert.meaning[0].upper()}{alert.meaning[1:]}. Next: {alert.what_to_do}."

