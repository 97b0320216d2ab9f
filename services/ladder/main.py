"""``python -m services.ladder`` (``__main__.py`` calls ``main``): run the ladder
(services/ladder/service.py) until SIGTERM or SIGINT, by the service skeleton
(``shared.service_main``: its settings, signals and exit codes).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.ladder.pool import PoolCorrupt
from services.ladder.service import LadderService, Metrics
from shared.config import load_service_config
from shared.service_main import Running, Say, StartRefused, run_service, serve_metrics
from shared.service_settings import metrics_host_option, metrics_port_option, option, settings_parser


@dataclass(frozen=True)
class Settings:
    """The ladder's settings (``shared.service_settings``: flag, else variable, else default)."""

    bind: str = option("tcp://127.0.0.1:5556", env="ROYALEFLEET_LADDER_BIND",
                       help="ZeroMQ address the ROUTER binds, e.g. tcp://0.0.0.0:5556")
    runs_dir: str = option("runs", env="ROYALEFLEET_RUNS_DIR", help="folder holding one sub-folder per run")
    config: str | None = option(None, env="ROYALEFLEET_CONFIG",
                                help="run config JSON (master_seed, run_name and the ladder section); "
                                "without one the cpu profile's defaults are used")
    metrics_port: int = metrics_port_option(9101)
    metrics_host: str = metrics_host_option()


parse_settings = settings_parser(
    Settings, prog="python -m services.ladder",
    description="The royalefleet ladder: tells the learner who plays whom (mirror / pool / scripted "
    "mixture, per-episode opponents and seats) and keeps each run's durable result log "
    "<runs-dir>/<run_name>/ladder/results.jsonl. Stops cleanly on SIGTERM or Ctrl-C.")


def start(settings: Settings, say: Say) -> Running:
    """The ladder bound at ``settings.bind`` with its /metrics server, its start line said.
    Raises ``ConfigError`` for a refused config, ``StartRefused`` for a corrupt pool (2) or an
    address or port it cannot take (1)."""
    config = load_service_config(settings.config)
    metrics = Metrics()
    try:
        service = LadderService(config, bind=settings.bind, runs_dir=settings.runs_dir, metrics=metrics, say=say)
    except PoolCorrupt as exc:
        raise StartRefused(f"refusing to start: {exc}") from None
    except OSError as exc:
        raise StartRefused(str(exc), code=1) from None
    server, url = serve_metrics(service, settings.metrics_port, settings.metrics_host, metrics.registry)
    open_roles = sorted(role for role, token in service.tokens.items() if not token)
    say(f"ladder: serving {service.address} (run {config.run_name!r}, master seed {config.master_seed}, "
        f"mix {tuple(config.ladder.mix)}), metrics {url}, writes "
        + (f"NOT authenticated for {', '.join(open_roles)} (no role token and CURVE off)" if open_roles
           else "need their role's token"))
    return Running(service, metrics_server=server, stopped="ladder: stopped")


def main(argv: list[str] | None = None) -> int:
    """Run the ladder until SIGTERM or SIGINT (``shared.service_main``): 0 stopped, 2 refused,
    1 an address or port taken."""
    return run_service("ladder", parse_settings(argv), start)
