"""``royalefleet k8s [--check]``: the command line of the Kubernetes generator (royalefleet/k8s/).

The generator needs PyYAML, a development dependency that no image installs, so it is imported
when the command runs, never when the CLI is built (every command in an image builds the same
parser)."""

from __future__ import annotations

import argparse

from royalefleet.k8s.arguments import DESCRIPTION, configure


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``k8s`` on the ``royalefleet`` command line."""
    p = subparsers.add_parser("k8s", help="write (or --check) the Kubernetes manifests in deploy/k8s/",
                              description=DESCRIPTION + " See docs/kubernetes.md.")
    configure(p, run)
    return p


def run(args) -> int:
    try:
        from royalefleet.k8s import files
    except ModuleNotFoundError as exc:
        print(f"royalefleet k8s: needs {exc.name!r}, a development dependency: pip install -e '.[dev]' "
              "(or `make test-fast` once, which builds .venv with it)")
        return 2
    return files.run(args)
