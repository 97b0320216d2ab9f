"""Grafana provisioning: the Prometheus datasource, the dashboard file provider, and the
contact points with the notification policy. Grafana evaluates none of the generated rules
(Prometheus does, and Grafana lists them through the datasource); a rule an operator adds in
Grafana goes to Alertmanager (``$ALERTMANAGER_URL``), the one path to ``ALERT_WEBHOOK_URL``,
or, labelled ``action=halt``, to the learner-halt webhook."""

from __future__ import annotations

from royalefleet.grafana.common import (ALERTMANAGER_RECEIVER, ALERTMANAGER_VAR, DATASOURCE_UID, DEFAULT_RECEIVER,
                                        FOLDER, HALT_RECEIVER)


def datasource() -> dict:
    return {
        "apiVersion": 1,
        "datasources": [{
            "name": "Prometheus",
            "uid": DATASOURCE_UID,
            "type": "prometheus",
            "access": "proxy",
            "orgId": 1,
            "url": "$PROMETHEUS_URL",
            "isDefault": True,
            "editable": False,
            # manageAlerts: Grafana's Alerting pages list Prometheus's rules (read-only).
            "jsonData": {"timeInterval": "15s", "httpMethod": "POST", "manageAlerts": True},
        }],
    }


DASHBOARDS_PATH = "/var/lib/grafana/dashboards"


def dashboard_provider() -> dict:
    return {
        "apiVersion": 1,
        "providers": [{
            "name": "royalefleet",
            "orgId": 1,
            "folder": FOLDER,
            "folderUid": FOLDER,
            "type": "file",
            "disableDeletion": True,
            "allowUiUpdates": False,
            "updateIntervalSeconds": 30,
            "options": {"path": DASHBOARDS_PATH, "foldersFromFilesStructure": False},
        }],
    }


NOTIFY_TIMING = {"group_wait": "30s", "group_interval": "5m", "repeat_interval": "4h"}
"""How soon and how often a person hears of a firing alert (Alertmanager's route): 30 s to
gather an alert's companions, 5 minutes between updates of a group, a reminder every 4 hours
while it fires."""


def contact_points() -> dict:
    """Alertmanager (the policy's root: Grafana posts nothing to a person itself) and the
    learner's halt webhook (``action=halt``)."""
    return {
        "apiVersion": 1,
        "contactPoints": [{
            "orgId": 1,
            "name": ALERTMANAGER_RECEIVER,
            "receivers": [{
                "uid": ALERTMANAGER_RECEIVER,
                "type": "prometheus-alertmanager",
                "disableResolveMessage": False,
                "settings": {"url": f"${ALERTMANAGER_VAR}"},
            }],
        }, {
            "orgId": 1,
            "name": HALT_RECEIVER,
            "receivers": [{
                "uid": HALT_RECEIVER,
                "type": "webhook",
                "disableResolveMessage": True,
                "settings": {
                    "url": "$LEARNER_HALT_URL",
                    "httpMethod": "POST",
                    "authorization_scheme": "Bearer",
                    "authorization_credentials": "$LEARNER_HALT_TOKEN",
                    "maxAlerts": 1,
                },
            }],
        }],
        "policies": [{
            "orgId": 1,
            "receiver": DEFAULT_RECEIVER,
            "group_by": ["grafana_folder", "alertname"],
            **NOTIFY_TIMING,
            "routes": [{
                # Operator-defined halts: a Grafana rule labelled action=halt stops the learner
                # (checkpoint and bundle, as for a table alarm). The table's own halt alarms are
                # enforced by the learner and are not routed here, so a config that disables
                # one is not overruled by Grafana.
                "receiver": HALT_RECEIVER,
                "object_matchers": [["action", "=", "halt"]],
                "group_by": ["alertname"],
                "group_wait": "0s",
                "group_interval": "1m",
                "repeat_interval": "1h",
                "continue": False,
            }],
        }],
    }

