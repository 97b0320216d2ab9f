"""Prometheus: its configuration (``prometheus/prometheus.yml``: the scrape jobs, the rules and
the Alertmanager it sends firing alerts to) and its alerting rules (``prometheus/rules/alarms.yml``:
the table's alarms and the service alerts)."""

from __future__ import annotations

from royalefleet.grafana.alert_text import (EXTENSION_ALERT, alarm_description, alarm_expr, alarm_labels,
                                            alarm_summary, extension_annotations, extension_expr,
                                            service_description, service_labels)
from royalefleet.grafana.common import duration
from shared.alarms import ALARMS, Alarm
from shared.service_alerts import ROLLOUT_HOSTS_JOB, SERVICE_ALERTS, ServiceAlert

SCRAPE_TARGETS = {"learner": "learner:9100", "ladder": "ladder:9101", "checkpoint": "checkpoint:9102"}
ROLLOUT_DNS_NAME, ROLLOUT_PORT = "rollout", 9110
EVALUATOR_DNS_NAME, EVALUATOR_PORT = "evaluator", 9200
SCALED_TARGETS = {"rollout": (ROLLOUT_DNS_NAME, ROLLOUT_PORT), "evaluator": (EVALUATOR_DNS_NAME, EVALUATOR_PORT)}
"""Scrape job -> (Compose service name, metrics port) for the scaled services (``deploy.replicas``)."""

ALERTMANAGER_TARGET = "alertmanager:9093"
"""compose.yaml's ``alertmanager`` service, where Prometheus sends its firing alerts."""

ROLLOUT_HOSTS_FILES = "targets/*.json"
"""Rollouts on other hosts (compose.rollout.yaml), by file-based service discovery: one JSON file
a host in ``prometheus/targets/`` (relative to prometheus.yml), written by ``royalefleet keys
--metrics NAME=ADDRESS:PORTS``; Prometheus reads a new or edited file within a minute, with no
restart. Each target carries the label ``host`` (the host's name in the keys folder)."""


def prometheus_config() -> dict:
    jobs = [{"job_name": job, "static_configs": [{"targets": [target]}]} for job, target in SCRAPE_TARGETS.items()]
    for job, (name, port) in SCALED_TARGETS.items():
        # One A record per replica of the scaled compose service: every replica is its own
        # target (a static 'rollout:9110' would hit a different replica on each scrape).
        jobs.append({"job_name": job,
                     "dns_sd_configs": [{"names": [name], "type": "A", "port": port, "refresh_interval": "15s"}]})
    jobs.append({"job_name": ROLLOUT_HOSTS_JOB,
                 "file_sd_configs": [{"files": [ROLLOUT_HOSTS_FILES], "refresh_interval": "1m"}]})
    return {
        "global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [ALERTMANAGER_TARGET]}]}]},
        "rule_files": ["rules/alarms.yml"],
        "scrape_configs": jobs,
    }


def prometheus_rule(alarm: Alarm) -> dict:
    """The alarm's rule: the learner's own verdict (``alert_text.alarm_expr``), so no ``for``:
    the learner has already counted the iterations."""
    return {"alert": alarm.name, "expr": alarm_expr(alarm), "labels": alarm_labels(alarm),
            "annotations": {"summary": alarm_summary(alarm, "{{ $value }}"), "description": alarm_description(alarm)}}


def prometheus_service_rule(alert: ServiceAlert) -> dict:
    return {"alert": alert.name, "expr": alert.expr, "for": duration(alert.for_seconds),
            "labels": service_labels(alert),
            "annotations": {"summary": alert.summary, "description": service_description(alert)}}


def prometheus_rules() -> dict:
    extension = {"alert": EXTENSION_ALERT, "expr": extension_expr(ALARMS), "labels": {"service": "learner"},
                 "annotations": extension_annotations()}
    return {"groups": [{"name": "royalefleet-alarms", "rules": [prometheus_rule(a) for a in ALARMS] + [extension]},
                       {"name": "royalefleet-services", "rules": [prometheus_service_rule(a) for a in SERVICE_ALERTS]}]}
