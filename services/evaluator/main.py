"""``python -m services.evaluator`` (``__main__.py`` calls ``main``): play the ladder's evaluation
jobs (services/evaluator/service.py) until SIGTERM or SIGINT, by the service skeleton
(``shared.service_main``: its settings, signals and exit codes).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from shared.config import load_service_config
from shared.cpu_priority import autogroup_nice, lower_cpu_priority, nice_value
from shared.service_main import StartRefused, Running, Say, run_service, serve_metrics
from shared.service_settings import metrics_host_option, metrics_port_option, option, settings_parser
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
    metrics_port: int = metrics_port_option(9200)
    metrics_host: str = metrics_host_option()
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


parse_settings = settings_parser(
    Settings, prog="python -m services.evaluator",
    description="A royalefleet evaluator: asks the ladder for evaluation jobs (the promotion gate's games "
    "between frozen snapshots and scripted anchors), plays them as full matches on the fixed evaluation "
    "seeds, and reports the records to the ladder's result log. Stops cleanly on SIGTERM or Ctrl-C.")


def start(settings: Settings, say: Say) -> Running:
    """An evaluator asking ``settings.ladder`` for jobs, at its CPU priority, with its /metrics
    server, its start line said. Raises ``ConfigError`` for a refused config, ``StartRefused``
    (1) for a metrics port it cannot take, (2) for a key or role token it cannot read."""
    config = load_service_config(settings.config)
    for problem in lower_cpu_priority(settings.nice):  # before any thread: threads inherit the nice value
        print(f"evaluator: {problem}; its games may take CPU from training on this machine", file=sys.stderr)
    from services.evaluator.service import Evaluator, EvaluatorMetrics

    metrics = EvaluatorMetrics()
    try:
        evaluator = Evaluator(config, ladder=settings.ladder, checkpoint=settings.checkpoint, metrics=metrics,
                              say=say, viser=settings.viser)
    except OSError as exc:  # a key or role token file it cannot read (shared/writer_token.py)
        raise StartRefused(str(exc)) from None
    server, url = serve_metrics(evaluator, settings.metrics_port, settings.metrics_host, metrics.registry)
    say(f"evaluator: run {config.run_name!r}, ladder {settings.ladder}, checkpoint {settings.checkpoint}, metrics "
        f"{url}, nice {os.nice(0)}" + (f" (autogroup {group})" if (group := autogroup_nice()) is not None else ""))
    return Running(evaluator, metrics_server=server)


def main(argv: list[str] | None = None) -> int:
    """Play evaluation jobs until SIGTERM or SIGINT (``shared.service_main``): 0 stopped, 2 a
    refused config, 1 a metrics port taken."""
    return run_service("evaluator", parse_settings(argv), start)
