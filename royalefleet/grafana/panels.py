"""The pieces every dashboard is built of: ``ts`` (a panel of queries), ``alert_list`` (the
alerts that fire) and ``dashboard`` (rows of panels laid out on Grafana's 24-column grid, ids given
in order of appearance)."""

from __future__ import annotations

from royalefleet.grafana.common import DATASOURCE

Row = tuple[str, list[dict]]
"""A dashboard row: its title and its panels (each from ``ts``), in order."""


def ts(title: str, targets: list[tuple[str, str]], unit: str = "short", description: str = "",
       kind: str = "timeseries", width: int = 12) -> dict:
    """A panel: ``targets`` are (PromQL, legend) pairs, every one on the fixed datasource uid."""
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": ({"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                     "tooltip": {"mode": "multi", "sort": "none"}} if kind == "timeseries"
                    else {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                          "colorMode": "value", "graphMode": "area", "textMode": "auto"}),
        "targets": [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend,
                     "range": True, "instant": False}
                    for i, (expr, legend) in enumerate(targets)],
        "_width": width,
    }


FIRING_QUERY = 'ALERTS{alertstate=~"firing|pending"}'
"""Prometheus's own series of every alert that fires or waits out its ``for``, with its labels."""


def alert_list(title: str, description: str = "", width: int = 24) -> dict:
    """A table of the alerts Prometheus's rules hold now (``FIRING_QUERY``, instant), one line an
    alert: its name, state, severity, alarm, instance. Prometheus evaluates every generated rule;
    Grafana evaluates none, so this reads Prometheus's ``ALERTS`` series, not Grafana's list."""
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"showHeader": True, "sortBy": [{"displayName": "severity", "desc": False}]},
        "targets": [{"refId": "A", "datasource": DATASOURCE, "expr": FIRING_QUERY, "format": "table",
                     "instant": True, "range": False}],
        "transformations": [{"id": "organize", "options": {
            "excludeByName": {"Time": True, "Value": True, "__name__": True},
            "indexByName": {"alertname": 0, "alertstate": 1, "severity": 2, "alarm": 3, "instance": 4}}}],
        "_width": width,
    }


def dashboard(uid: str, title: str, description: str, sections: list[Row]) -> dict:
    """Rows of panels, laid out two to a line; panel ids in order of appearance."""
    panels, y, pid = [], 0, 1
    for row_title, row_panels in sections:
        panels.append({"type": "row", "title": row_title, "id": pid, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        pid, y, x = pid + 1, y + 1, 0
        for p in row_panels:
            w = p.pop("_width")
            if x + w > 24:
                x, y = 0, y + 8
            p["id"] = pid
            p["gridPos"] = {"h": 8, "w": w, "x": x, "y": y}
            panels.append(p)
            pid, x = pid + 1, x + w
        y += 8
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["royalefleet"],
        "timezone": "browser",
        "editable": False,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": []},
        "annotations": {"list": []},
        "links": [],
        "panels": panels,
    }


def dashboard_exprs(dash: dict) -> list[str]:
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]

