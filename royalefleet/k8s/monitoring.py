"""The Prometheus Operator's objects and Grafana's (``deploy/k8s/monitoring``): a ServiceMonitor
for every royalefleet Service, a PrometheusRule with the same groups as prometheus/rules/alarms.yml
(``royalefleet.grafana.prometheus.prometheus_rules``: the alarm table and the service alerts),
the dashboards as ConfigMaps labelled for Grafana's dashboard sidecar, and the datasource the
dashboards name by uid, labelled for the datasource sidecar."""

from __future__ import annotations

from royalefleet.grafana.common import DATASOURCE_UID
from royalefleet.grafana.dashboards import dashboards
from royalefleet.grafana.emit import to_json, to_yaml
from royalefleet.grafana.prometheus import prometheus_config, prometheus_rules
from royalefleet.grafana.provisioning import datasource
from royalefleet.k8s.common import PART_OF

PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
"""The Prometheus the datasource points at: the Service the Prometheus Operator makes for a
Prometheus in namespace ``monitoring`` (kube-prometheus-stack's default). Another one: patch the
``royalefleet-grafana-datasource`` ConfigMap (docs/kubernetes.md)."""

DASHBOARD_LABEL = {"grafana_dashboard": "1"}
DATASOURCE_LABEL = {"grafana_datasource": "1"}


def scrape_interval() -> str:
    """The interval Compose's Prometheus scrapes at (prometheus/prometheus.yml's global)."""
    return prometheus_config()["global"]["scrape_interval"]


def service_monitor() -> dict:
    """Every royalefleet Service's ``metrics`` port; the job label is the Service's name, the
    job names of prometheus/prometheus.yml (learner, ladder, checkpoint, rollout, evaluator), so
    the rules' ``up{job=...}`` read the same here."""
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": "royalefleet", "labels": dict(PART_OF)},
        "spec": {"selector": {"matchLabels": dict(PART_OF)},
                 "endpoints": [{"port": "metrics", "path": "/metrics", "interval": scrape_interval()}]},
    }


def prometheus_rule() -> dict:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "royalefleet", "labels": dict(PART_OF)},
            "spec": prometheus_rules()}


def dashboard_maps() -> list[dict]:
    return [{"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": f"royalefleet-dashboard-{name}", "labels": {**PART_OF, **DASHBOARD_LABEL}},
             "data": {f"royalefleet-{name}.json": to_json(dash)}}
            for name, dash in dashboards().items()]


def datasource_map() -> dict:
    doc = datasource()
    doc["datasources"][0]["url"] = PROMETHEUS_URL
    doc["datasources"][0]["isDefault"] = False
    assert doc["datasources"][0]["uid"] == DATASOURCE_UID
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "royalefleet-grafana-datasource", "labels": {**PART_OF, **DATASOURCE_LABEL}},
            "data": {"royalefleet-datasource.yaml": to_yaml(doc, header="")}}
