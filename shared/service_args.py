"""Command-line parsing shared by the services' ``__main__`` modules (ladder, evaluator): every
setting is a flag, an environment variable, or its default, in that order of precedence (the
flag wins), so ``royalefleet up`` on loopback and Compose share one code path."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence


def parse_service_args(argv: list[str] | None, *, prog: str, description: str,
                       defaults: Mapping[str, tuple[str, str | None]],
                       flags: Sequence[tuple[str, str, str] | tuple[str, str, str, type]]) -> argparse.Namespace:
    """Parse ``argv`` for a service.

    ``defaults`` maps each destination key to (environment variable, default string or None);
    ``flags`` lists (flag, key, help[, type]) in the order ``--help`` shows them. A key named
    ``metrics_port`` is read as an int in 0..65535. Exits through ``parser.error`` (status 2)
    naming the variable or flag when a value is unusable."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description,
        epilog="Each flag falls back to its environment variable, then to the default shown.",
    )
    for flag, key, help_, *type_ in flags:
        env, default = defaults[key]
        parser.add_argument(flag, dest=key, type=type_[0] if type_ else str, default=None,
                            help=f"{help_} [env {env}; default {default if default is not None else 'none'}]")
    args = parser.parse_args(argv)
    for key, (env, default) in defaults.items():
        if getattr(args, key) is None:
            value = os.environ.get(env, default)
            if key == "metrics_port" and value is not None:
                try:
                    value = int(value)
                except ValueError:
                    parser.error(f"{env}={value!r} is not a port number")
            setattr(args, key, value)
    if "metrics_port" in defaults and not 0 <= args.metrics_port <= 65535:
        parser.error(f"metrics port {args.metrics_port} is outside 0..65535")
    return args
