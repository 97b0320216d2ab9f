"""What an alert says: the expression of a table alarm's rule (the learner's own verdict), its
labels, summary and description, and those of a service alert (``shared/service_alerts.py``)."""

from __future__ import annotations

from royalefleet.grafana.common import SEVERITY
from shared.alarms import Alarm, describe
from shared.service_alerts import ServiceAlert

CONSECUTIVE = "royalefleet_learner_alarm_consecutive"
"""Iterations in a row the alarm's condition has held, as the learner counts them
(``services/learner/alarms.py AlarmMonitor``), labelled ``alarm`` and ``severity`` (the
learner's ``warn``/``halt`` after the run's ``severity_overrides``)."""

PATIENCE = "royalefleet_learner_alarm_patience"
"""The count it fires at under the run's config (``patience_overrides`` included); same labels."""


def rule_uid(alarm: Alarm) -> str:
    return f"royalefleet-{alarm.name}"


def alarm_expr(alarm: Alarm) -> str:
    """The learner's verdict, not a second evaluation: a series exactly while the learner counts
    at least the patience it fires at (its own thresholds, overrides and iteration length; an
    alarm the run disables exports nothing), valued the count, its ``severity`` label renamed
    ``critical``/``warning`` (``SEVERITY``)."""
    sel = f'{{alarm="{alarm.name}"}}'
    return _renamed(f"{CONSECUTIVE}{sel} >= {PATIENCE}{sel}")


EXTENSION_ALERT = "learner_extension_alarm"
"""The one rule for the alarms of learner extensions (shared/learner_extension.py), which the
table does not list: the same verdict for every alarm name the table does not hold."""


def _renamed(expr: str) -> str:
    for learner_severity, label in SEVERITY.items():
        expr = f'label_replace({expr}, "severity", "{label}", "severity", "{learner_severity}")'
    return expr


def extension_expr(table: tuple[Alarm, ...]) -> str:
    """``alarm_expr`` for every alarm name not in ``table``."""
    sel = '{alarm!~"' + "|".join(a.name for a in table) + '"}'
    return _renamed(f"{CONSECUTIVE}{sel} >= {PATIENCE}{sel}")


def extension_annotations() -> dict:
    return {"summary": "{{ $labels.alarm }} [{{ $labels.severity }}] (a learner extension's alarm) has held "
                       "{{ $value }} iteration(s) in a row on {{ $labels.instance }}",
            "description": f"An alarm a learner extension adds (docs/extending.md) fired in the learner: "
                           f"{CONSECUTIVE} >= {PATIENCE}. Its meaning and what to do are in the learner's log "
                           f"line `alarm [...] <name>: ...` and in runs/<run>/alarms.jsonl."}


def alarm_summary(alarm: Alarm, value: str) -> str:
    return (f"{alarm.name} [{{{{ $labels.severity }}}}]: {describe(alarm)} (default thresholds) has held "
            f"{value} iteration(s) in a row on {{{{ $labels.instance }}}}")


def alarm_description(alarm: Alarm) -> str:
    return (f"{alarm.meaning[0].upper()}{alarm.meaning[1:]}. Next: {alarm.what_to_do}. "
            f"The learner evaluates this alarm on each metric row with the run's thresholds and fires it at its "
            f"patience ({alarm.patience} by default); this alert is that verdict ({CONSECUTIVE} >= {PATIENCE}). "
            f"critical: the learner has halted (checkpoint, bundle, exit 3); warning: it logs and goes on.")


def alarm_labels(alarm: Alarm) -> dict:
    """The rule's own labels; ``alarm`` and ``severity`` come with the learner's series."""
    return {"service": "learner"}


def service_labels(alert: ServiceAlert) -> dict:
    return {"severity": alert.severity, "alarm": alert.name}


def service_description(alert: ServiceAlert) -> str:
    return f"{alert.meaning[0].upper()}{alert.meaning[1:]}. Next: {alert.what_to_do}."
