"""``royalefleet k8s [--check]``: the command line of the Kubernetes generator (royalefleet/k8s/).

Only the parser lives here: the generator needs PyYAML, a development dependency that no image
installs, so it is imported when the command runs, never when the CLI is built (every command in
an image builds the same parser)."""

from __future__ import annotations

import argparse
import pathlib

DESCRIPTION = ("Generate the Kubernetes manifests (deploy/k8s/: a kustomize base, one overlay per machine class, "
               "the Prometheus Operator's and Grafana's objects) from the config files, the ports, the alarm "
               "table and the dashboards.")
ROOT = pathlib.Path(__file__).resolve().parents[1]


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 naming every file under deploy/k8s/ that is not what the generator makes")
    p.add_argument("--root", type=pathlib.Path, default=ROOT, help="repository root (default: this checkout)")
    p.set_defaults(func=run)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``k8s`` on the ``royalefleet`` command line."""
    p = subparsers.add_parser("k8s", help="write (or --check) the Kubernetes manifests in deploy/k8s/",
                              description=DESCRIPTION + " See docs/kubernetes.md.")
    configure(p)
    return p


def run(args) -> int:
    try:
        from royalefleet.k8s import files
    except ModuleNotFoundError as exc:
        print(f"royalefleet k8s: needs {exc.name!r}, a development dependency: pip install -e '.[dev]' "
              "(or `make test-fast` once, which builds .venv with it)")
        return 2
    return files.run(args)
