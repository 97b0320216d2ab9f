"""``python -m services.rollout`` (``__main__.py`` calls ``main``): run a rollout
(services/rollout/service.py) until SIGTERM or SIGINT, or until the learner closes it, by the
service skeleton (``shared.service_main``: its settings, signals and exit codes). Imports no
torch (the rollout image has none).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from services.rollout.metrics import RolloutMetrics
from services.rollout.service import RolloutService
from shared.service_main import Say, run_service
from shared.service_settings import metrics_host_option, metrics_port_option, option, positive, settings_parser


@dataclass(frozen=True)
class Settings:
    """A rollout's settings (``shared.service_settings``: flag, else variable, else default)."""

    learner: str = option("tcp://127.0.0.1:5555", env="ROYALEFLEET_LEARNER", help="learner address to connect to")
    battles: int = option(16, env="ROYALEFLEET_BATTLES", parse=positive, help="battles this rollout runs")
    shards: int = option(2, env="ROYALEFLEET_SHARDS", parse=positive, help="shards the battles are split into")
    metrics_port: int = metrics_port_option(9110)
    metrics_host: str = metrics_host_option()
    max_message_mb: int = option(64, env="ROYALEFLEET_MAX_MESSAGE_MB", parse=positive,
                                 help="largest message accepted, in MiB")


PROG = "python -m services.rollout"
_parse = settings_parser(
    Settings, prog=PROG,
    description="A rollout: runs RoyaleGym battles and steps them on the learner's command. "
    "Every flag also reads an environment variable (shown), which is how Compose configures it.")


def parse_settings(argv: list[str] | None = None, environ=None) -> Settings:
    """A rollout's settings from flags, else variables, else defaults; a bad value, or battles
    that are no multiple of shards, exits 2 naming it."""
    a = _parse(argv, environ)
    if a.battles % a.shards:
        print(f"{PROG}: error: --battles {a.battles} must be a positive multiple of --shards {a.shards}",
              file=sys.stderr)
        raise SystemExit(2)
    return a


def start(settings: Settings, say: Say) -> RolloutService:
    """A rollout connected to ``settings.learner`` (it says Hello when it runs), its /metrics
    server started by ``RolloutMetrics``."""
    metrics = RolloutMetrics(settings.metrics_port or None, settings.metrics_host)
    return RolloutService(settings.learner, settings.battles, settings.shards, metrics=metrics,
                          max_message_mb=settings.max_message_mb, say=say)


def main(argv: list[str] | None = None) -> int:
    """Run the rollout (``shared.service_main``): 0 stopped or closed by the learner, 2 refused
    (by its settings or by the learner), 1 a failure it reported to the learner."""
    return run_service("rollout", parse_settings(argv), start)
