"""The dashboards, one module each (``training``, ``ladder``, ``fleet``), each a list of rows
(``ROWS``) of panels. A new dashboard: a module with ``build()`` and its line in ``DASHBOARDS``
(it is written to ``grafana/dashboards/<name>.json``)."""

from __future__ import annotations

from royalefleet.grafana.dashboards import fleet, ladder, training

DASHBOARDS = {"training": training, "ladder": ladder, "fleet": fleet}
"""File name (``grafana/dashboards/<name>.json``) -> the module that builds it."""


def dashboards() -> dict[str, dict]:
    """Every dashboard's JSON model, by file name."""
    return {name: module.build() for name, module in DASHBOARDS.items()}
