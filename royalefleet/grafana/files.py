"""Every generated file, and the command that writes or checks them
(``python -m royalefleet.grafana [--check]``)."""

from __future__ import annotations

import argparse
import pathlib
import sys

from royalefleet.grafana.alarms_doc import alarms_doc
from royalefleet.grafana.alertmanager import alertmanager_config
from royalefleet.grafana.common import ROOT
from royalefleet.grafana.dashboards import dashboards
from royalefleet.grafana.emit import to_json, to_yaml
from royalefleet.grafana.prometheus import prometheus_config, prometheus_rules
from royalefleet.grafana.promtool_tests import prometheus_tests
from royalefleet.grafana.provisioning import contact_points, dashboard_provider, datasource

DESCRIPTION = "Generate the monitoring files from the alarm table (shared/alarms.py) and the metric schema."


def render() -> dict[str, str]:
    """Every generated file: path from the repository root -> content."""
    files = {
        "docs/alarms.md": alarms_doc(),
        "grafana/provisioning/datasources/prometheus.yaml": to_yaml(datasource()),
        "grafana/provisioning/dashboards/royalefleet.yaml": to_yaml(dashboard_provider()),
        "grafana/provisioning/alerting/contact-points.yaml": to_yaml(contact_points()),
        "prometheus/prometheus.yml": to_yaml(prometheus_config()),
        "prometheus/rules/alarms.yml": to_yaml(prometheus_rules()),
        "prometheus/tests/alarms_test.yml": to_yaml(prometheus_tests()),
        "alertmanager/alertmanager.yml": to_yaml(alertmanager_config()),
    }
    for name, dash in dashboards().items():
        files[f"grafana/dashboards/{name}.json"] = to_json(dash)
    return files


def stale(root: pathlib.Path = ROOT) -> list[str]:
    """Generated files that are missing or differ from what ``render()`` gives now."""
    out = []
    for rel, text in render().items():
        path = root / rel
        if not path.exists() or path.read_text() != text:
            out.append(rel)
    return out


def write(root: pathlib.Path = ROOT) -> list[str]:
    written = []
    for rel, text in render().items():
        path = root / rel
        if path.exists() and path.read_text() == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(rel)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m royalefleet.grafana", description=DESCRIPTION)
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file is not current")
    p.add_argument("--root", type=pathlib.Path, default=ROOT, help="repository root (default: this checkout)")
    a = p.parse_args(argv)
    if a.check:
        bad = stale(a.root)
        for rel in bad:
            print(f"not current: {rel}", file=sys.stderr)
        if bad:
            print("run `python -m royalefleet.grafana` and commit the result", file=sys.stderr)
            return 1
        print(f"all {len(render())} generated files are current")
        return 0
    for rel in write(a.root):
        print(f"wrote {rel}")
    return 0

