"""``python -m services.evaluator`` (``__main__.py`` calls ``main``): play the ladder's evaluation jobs until SIGTERM or SIGINT.

Every setting is a flag, an environment variable, or its default, in that order of precedence
(the flag wins), so ``royalefleet up`` on loopback and Compose share one code path.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass

from prometheus_client import start_http_server

from shared.config import ConfigError, load_service_config
from shared.cpu_priority import autogroup_nice, lower_cpu_priority, nice_value
from shared.service_settings import option, parse_settings, port
from shared.viser import address_option

@dataclass(frozen=True)
class Settings:
    """An evaluator's settings (``shared.service_settings``: flag, else variable, else default)."""

    ladder: str = option("tcp://127.0.0.1:5556", env="ROYALEFLEET_LADDER",
                         help="the ladder's address, e.g. tcp://ladder:5556")
    checkpoint: str = option("tcp://127.0.0.1:5557", env="ROYALEFLEET_CHECKPOINT",
                             help="the checkpoint service's address (snapshots), e.g. tcp://checkpoint:5557")
    config: str | None = option(None, env="ROYALEFLEET_CONFIG",
                                help="run config JSON (master seed, env, network, ladder and evaluation sections); "
                                "without one the cpu profile's defaults are used")
    metrics_port: int = option(9200, env="ROYALEFLEET_METRICS_PORT", parse=port,
                               help="Prometheus /metrics port; 0 turns it off")
    metrics_host: str = option("127.0.0.1", env="ROYALEFLEET_METRICS_HOST", help="address the /metrics server listens on")
    nice: int = option(19, env="ROYALEFLEET_NICE", parse=nice_value,
                       help="CPU priority, as a nice value 0..19: the games take only the cores the learner and "
                       "rollouts leave idle (19, the default; a busy evaluator at full priority made the cpu "
                       "profile's update 3.5x slower on 2 cores); 0 keeps the priority it was started with (an "
                       "evaluator on a machine of its own)")
    viser: str = option("", env="ROYALEFLEET_VISER", parse=address_option,
                        help="RoyaleViser's stream address HOST:PORT: stream the games played to a viewer "
                        "(python -m royaleviser --stream HOST:PORT), a frame per engine tick while one watches, "
                        "unpaced, the results unchanged; an address another evaluator holds is said and skipped "
                        "(default off)")


def parse_args(argv: list[str] | None = None, environ=None) -> Settings:
    return parse_settings(
        Settings, argv, environ, prog="python -m services.evaluator",
        description="A royalefleet evaluator: asks the ladder for evaluation jobs (the promotion gate's games "
        "between frozen snapshots and scripted anchors), plays them as full matches on the fixed evaluation "
        "seeds, and reports the records to the ladder's result log. Stops cleanly on SIGTERM or Ctrl-C.")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = load_service_config(args.config)
    except ConfigError as exc:
        print(f"evaluator: {exc}", file=sys.stderr)
        return 2
    for problem in lower_cpu_priority(args.nice):  # before any thread: threads inherit the nice value
        print(f"evaluator: {problem}; its games may take CPU from training on this machine", file=sys.stderr)
    from services.evaluator.service import Evaluator, EvaluatorMetrics

    metrics = EvaluatorMetrics()
    evaluator = Evaluator(config, ladder=args.ladder, checkpoint=args.checkpoint, metrics=metrics,
                          say=lambda text: print(text, flush=True), viser=args.viser)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: evaluator.stop.set())
    server = None
    if args.metrics_port:
        try:
            server, _ = start_http_server(args.metrics_port, addr=args.metrics_host, registry=metrics.registry)
        except OSError as exc:
            evaluator.close()
            print(f"evaluator: cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {exc}",
                  file=sys.stderr)
            return 1
    print(f"evaluator: run {config.run_name!r}, ladder {args.ladder}, checkpoint {args.checkpoint}, metrics "
          + (f"http://{args.metrics_host}:{args.metrics_port}/metrics" if server else "off")
          + f", nice {os.nice(0)}" + (f" (autogroup {group})" if (group := autogroup_nice()) is not None else ""),
          flush=True)
    try:
        return evaluator.run()
    finally:
        evaluator.close()
        if server is not None:
            server.shutdown()

