"""``--allow-module`` and ``--trust-code``: the command line's say in what a config may import.

Every command takes both (added to each subcommand's parser once the parser is built, so a
command's own module need not know). ``--allow-module mybot`` (repeatable, or comma-separated)
allows the user's installed package ``mybot`` in this process and in the services it starts,
as ``ROYALEFLEET_ALLOW_MODULES=mybot`` does; ``--trust-code`` lets the config the command reads
(a run folder's config.json under eval, play, resume, demos, clone, export, ...) allow the
modules it lists itself: only for a folder whose author you trust. Neither can come from a
config, a folder or a message (shared/components.py, docs/reliability.md).
"""

from __future__ import annotations

import argparse

ALLOW_HELP = ("allow the installed package or module MOD (repeatable, or comma-separated) as a home of env "
              "components in this command and the services it starts (as ROYALEFLEET_ALLOW_MODULES=MOD does); "
              "a config's env.extra_component_modules only names what it needs")
TRUST_HELP = ("trust the code the config this command reads names (its env.extra_component_modules): without "
              "it a run folder naming a module this machine does not allow is refused before anything is "
              "imported; only for a folder whose author you trust")


def add_trust_options(sub: argparse._SubParsersAction) -> None:
    """``--allow-module`` and ``--trust-code`` on every parser ``sub`` holds (once each)."""
    for parser in set(sub.choices.values()):
        parser.add_argument("--allow-module", action="append", default=[], metavar="MOD", help=ALLOW_HELP)
        parser.add_argument("--trust-code", action="store_true", help=TRUST_HELP)


def apply_trust_options(args: argparse.Namespace) -> None:
    """Make ``args``' ``--allow-module`` and ``--trust-code`` this process's local settings
    (shared.components.allow_locally, trust_declared). Exits (SystemExit, the message naming
    the value) for a name that is not a module name."""
    from shared import components

    names = [m.strip() for arg in getattr(args, "allow_module", None) or [] for m in arg.split(",") if m.strip()]
    if names:
        try:
            components.allow_locally(names)
        except components.ComponentError as exc:
            raise SystemExit(f"royalefleet: --allow-module: {exc}") from None
    if getattr(args, "trust_code", False):
        components.trust_declared(True)
