"""``python -m services.ladder`` (``__main__.py`` calls ``main``): run the ladder service until
SIGTERM or SIGINT.

Every setting is a flag, an environment variable, or its default, in that order of precedence
(the flag wins), so ``make run`` on loopback and Compose share one code path.
"""

from __future__ import annotations

import signal
import sys
import threading
from dataclasses import dataclass

from prometheus_client import start_http_server

from shared.config import ConfigError, load_service_config
from shared.service_settings import option, parse_settings, port
from services.ladder.pool import PoolCorrupt
from services.ladder.service import LadderService, Metrics

@dataclass(frozen=True)
class Settings:
    """The ladder's settings (``shared.service_settings``: flag, else variable, else default)."""

    bind: str = option("tcp://127.0.0.1:5556", env="ROYALEFLEET_LADDER_BIND",
                       help="ZeroMQ address the ROUTER binds, e.g. tcp://0.0.0.0:5556")
    runs_dir: str = option("runs", env="ROYALEFLEET_RUNS_DIR", help="folder holding one sub-folder per run")
    config: str | None = option(None, env="ROYALEFLEET_CONFIG",
                                help="run config JSON (master_seed, run_name and the ladder section); "
                                "without one the cpu profile's defaults are used")
    metrics_port: int = option(9101, env="ROYALEFLEET_METRICS_PORT", parse=port,
                               help="Prometheus /metrics port; 0 turns it off")
    metrics_host: str = option("127.0.0.1", env="ROYALEFLEET_METRICS_HOST", help="address the /metrics server listens on")


def parse_args(argv: list[str] | None = None, environ=None) -> Settings:
    return parse_settings(
        Settings, argv, environ, prog="python -m services.ladder",
        description="The royalefleet ladder: tells the learner who plays whom (mirror / pool / scripted "
        "mixture, per-episode opponents and seats) and keeps each run's durable result log "
        "<runs-dir>/<run_name>/ladder/results.jsonl. Stops cleanly on SIGTERM or Ctrl-C.")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = load_service_config(args.config)
    except ConfigError as exc:
        print(f"ladder: {exc}", file=sys.stderr)
        return 2

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    metrics = Metrics()
    try:
        service = LadderService(config, bind=args.bind, runs_dir=args.runs_dir, metrics=metrics,
                                say=lambda text: print(text, flush=True))
    except PoolCorrupt as exc:
        print(f"ladder: refusing to start: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"ladder: {exc}", file=sys.stderr)
        return 1
    server = None
    if args.metrics_port:
        try:
            server, _ = start_http_server(args.metrics_port, addr=args.metrics_host, registry=metrics.registry)
        except OSError as exc:
            service.close()
            print(f"ladder: cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {exc}", file=sys.stderr)
            return 1
    print(
        f"ladder: serving {service.address} (run {config.run_name!r}, master seed {config.master_seed}, "
        f"mix {tuple(config.ladder.mix)}), metrics "
        + (f"http://{args.metrics_host}:{args.metrics_port}/metrics" if server else "off"),
        flush=True,
    )
    try:
        service.serve(stop)
    finally:
        service.close()
        if server is not None:
            server.shutdown()
    print("ladder: stopped", flush=True)
    return 0

