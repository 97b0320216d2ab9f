"""``python -m services.checkpoint`` (``__main__.py`` calls ``main``): run the checkpoint service
(services/checkpoint/service.py) until SIGTERM or SIGINT, by the service skeleton
(``shared.service_main``: its settings, signals and exit codes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import prometheus_client

from services.checkpoint.service import MIB, CheckpointService, Metrics
from shared.service_main import Running, Say, StartRefused, run_service, serve_metrics
from shared.service_settings import metrics_host_option, metrics_port_option, option, positive, settings_parser
from shared.transport import bind_router, curve_server_keys
from shared.writer_token import checkpoint_token


@dataclass(frozen=True)
class Settings:
    """The checkpoint service's settings (``shared.service_settings``: flag, else variable, else default)."""

    bind: str = option("tcp://127.0.0.1:5557", env="ROYALEFLEET_CHECKPOINT_BIND", help="ZeroMQ address the ROUTER binds")
    runs_dir: str = option("runs", env="ROYALEFLEET_RUNS_DIR",
                           help="folder of runs; checkpoints go to <runs-dir>/<run_name>/checkpoints")
    keep: int = option(10, env="ROYALEFLEET_CHECKPOINT_KEEP", parse=positive,
                       help="checkpoints kept per run; older ones are pruned")
    max_message_mb: int = option(64, env="ROYALEFLEET_MAX_MESSAGE_MB", parse=positive,
                                 help="largest request accepted, in MiB (bigger ones are dropped unanswered)")
    metrics_port: int = metrics_port_option(9102)
    metrics_host: str = metrics_host_option()


parse_settings = settings_parser(
    Settings, prog="python -m services.checkpoint",
    description="royalefleet checkpoint service: writes the learner's checkpoints atomically, "
    "verifies them on load, prunes old ones. Every setting is a flag or an environment "
    "variable; the flag wins.")


def start(settings: Settings, say: Say) -> Running:
    """The checkpoint service bound at ``settings.bind`` with its /metrics server, its start
    line said. Raises ``StartRefused``: 2 for an address it cannot bind or a writer token it
    cannot read, 1 for a metrics port it cannot take."""
    max_bytes = settings.max_message_mb * MIB
    try:
        token = checkpoint_token()
        sock = bind_router(settings.bind, max_bytes=max_bytes, curve=curve_server_keys())
    except OSError as exc:
        raise StartRefused(str(exc)) from None
    service = CheckpointService(
        sock, settings.runs_dir, keep=settings.keep, metrics=Metrics(prometheus_client.REGISTRY),
        max_message_bytes=max_bytes, token=token,
    )
    server, url = serve_metrics(service, settings.metrics_port, settings.metrics_host)
    say(f"checkpoint service on {settings.bind}, runs in {Path(settings.runs_dir).resolve()}, "
        f"keep {settings.keep}, max message {settings.max_message_mb} MiB, metrics {url}, saves "
        + "need the run's writer token")
    return Running(service, metrics_server=server, stopped="checkpoint service stopped")


def main(argv: list[str] | None = None) -> int:
    """Run the service until SIGTERM or SIGINT (``shared.service_main``): 0 on a clean stop, 2
    if it cannot start as configured, 1 if its metrics port is taken."""
    return run_service("checkpoint service", parse_settings(argv), start)
