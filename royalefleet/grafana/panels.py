"""The pieces every dashboard is built of: ``ts`` (a panel of queries), ``alert_list`` (Grafana's
list of alerts) and ``dashboard`` (rows of panels laid out on Grafana's 24-column grid, ids given
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


def alert_list(title: str, description: str = "", width: int = 24) -> dict:
    """Grafana's alert list panel (``alertlist``): the alert instances of this Grafana's rules
    that fire, are pending or failed to evaluate, newest state first, one line each."""
    return {
        "type": "alertlist",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "options": {
            "viewMode": "list",
            "groupMode": "default",
            "groupBy": [],
            "maxItems": 50,
            "sortOrder": 1,
            "dashboardAlerts": False,
            "alertName": "",
            "alertInstanceLabelFilter": "",
            "showInstances": True,
            "stateFilter": {"firing": True, "pending": True, "error": True, "noData": False, "normal": False},
        },
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

