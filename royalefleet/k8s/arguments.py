"""The options of ``royalefleet k8s`` (also ``python -m royalefleet.k8s``), apart from the
generator: the command line is built in images that have no PyYAML, which the generator needs."""

from __future__ import annotations

import argparse
import pathlib

DESCRIPTION = ("Generate the Kubernetes manifests (deploy/k8s/: a kustomize base, one overlay per machine class, "
               "the Prometheus Operator's and Grafana's objects) from the config files, the ports, the alarm "
               "table and the dashboards.")
ROOT = pathlib.Path(__file__).resolve().parents[2]


def configure(p: argparse.ArgumentParser, func) -> None:
    """Add ``--check`` and ``--root`` to ``p``; ``func(args) -> int`` runs the command."""
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 naming every file under deploy/k8s/ that is not what the generator makes")
    p.add_argument("--root", type=pathlib.Path, default=ROOT, help="repository root (default: this checkout)")
    p.set_defaults(func=func)
