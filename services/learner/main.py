"""``python -m services.learner`` (``__main__.py`` calls ``main``): the learner's command line,
run by the service skeleton (``shared.service_main``). Every flag also reads an environment
variable (``--help`` names it), which is how the launcher and Compose configure it.

Exit codes: 0 finished or stopped, 2 a refused config, checkpoint, tier or device (said), 3
halted (``services/learner/lifecycle.py``), 4 (``EXIT_UNREACHABLE``) a service it needs at start
did not answer (the checkpoint service died mid-request, the ladder was down): a restart can
fix that, so the launcher and Compose retry it, where 2 is final.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from services.learner.determinism import DeterminismError
from services.learner.vram import DeviceMemoryError
from shared import transport
from shared.config import RunConfig, load_config
from shared.recorded_config import for_learner
from shared.service_main import Say, StartRefused, run_service, say
from shared.service_settings import metrics_host_option, metrics_port_option, option, port_or_config, settings_parser
from shared.viser import address_option

if TYPE_CHECKING:
    from services.learner.service import Learner

EXIT_UNREACHABLE = 4
"""The learner's exit code when a refusal came of a service that did not answer
(``transport.ServiceTimeout``), not of the config or the checkpoint: worth a restart."""


def _unreachable(exc: BaseException) -> bool:
    """True when ``exc`` was raised while handling a ``transport.ServiceTimeout`` (at any depth
    of its ``__context__`` chain, which ``raise ... from None`` keeps)."""
    seen = exc.__context__
    while seen is not None:
        if isinstance(seen, transport.ServiceTimeout):
            return True
        seen = seen.__context__
    return False


@dataclass(frozen=True)
class Settings:
    """The learner's settings (``shared.service_settings``: flag, else variable, else default;
    None and -1 mean "what the config says")."""

    config: str | None = option(None, env="ROYALEFLEET_CONFIG", default_text="the machine's profile",
                                help="config JSON (a profile plus overrides)")
    bind: str | None = option(None, env="ROYALEFLEET_LEARNER_BIND", default_text="tcp://<services.host>:<learner_port>",
                              help="address rollouts connect to")
    ladder: str | None = option(None, env="ROYALEFLEET_LADDER", default_text="tcp://<services.host>:<ladder_port>",
                                help="ladder address")
    checkpoint: str | None = option(None, env="ROYALEFLEET_CHECKPOINT",
                                    default_text="tcp://<services.host>:<checkpoint_port>",
                                    help="checkpoint service address")
    runs_dir: str | None = option(None, env="ROYALEFLEET_RUNS_DIR", default_text="config runs_dir", help="runs folder")
    metrics_port: int = metrics_port_option(-1, parse=port_or_config, default_text="services.learner_metrics_port")
    metrics_host: str = metrics_host_option()
    iterations: int = option(0, env="ROYALEFLEET_ITERATIONS",
                             help="stop once the run has reached this iteration (a total over every resume and "
                             "restart), 0 = run until stopped")
    min_rollouts: int = option(1, env="ROYALEFLEET_MIN_ROLLOUTS", help="rollouts the first iteration waits for (up to 120 s)")
    halt_port: int = option(-1, env="ROYALEFLEET_HALT_PORT", parse=port_or_config,
                            default_text="services.learner_halt_port",
                            help="port of the authenticated POST /halt endpoint (needs ROYALEFLEET_HALT_TOKEN; 0 = off)")
    allow_identity_drift: bool = option(False, env="ROYALEFLEET_ALLOW_IDENTITY_DRIFT",
                                        help="resume a checkpoint whose run identity differs, recording the drift "
                                        "in drift.json")
    clear_halt: bool = option(False, env="ROYALEFLEET_CLEAR_HALT",
                              help="continue a run that was halted (an alarm or an operator wrote halted.json in "
                              "its folder)")
    viser: str = option("", env="ROYALEFLEET_VISER", parse=address_option,
                        help="RoyaleViser's stream address HOST:PORT (python -m royaleviser --stream HOST:PORT): "
                        "the status line goes to its status channel on PORT+1 while a viewer watches (UDP, never "
                        "waits; default off)")
    start_fresh: bool = option(False, env="ROYALEFLEET_START_FRESH",
                               help="start the run over when it has checkpoints and none verifies (its metric rows "
                               "are moved to metrics.purged.jsonl); without it such a start is refused")


parse_settings = settings_parser(
    Settings, prog="python -m services.learner",
    description="The learner: central inference, GAE and PPO over rounds from the rollouts. "
    "Every flag also reads an environment variable (shown), which is how Compose configures it.")


def start(settings: Settings, say: Say) -> Learner:
    """The learner the settings ask for, on the config they name as the run's own config.json
    decides it (``shared.recorded_config.for_learner``). Raises ``ConfigError`` for a refused
    config, ``StartRefused`` for a determinism tier or a device this machine cannot give, an
    address it may not use without CURVE or a missing writer token."""
    # A test hook, not a user option: resume WITHOUT these components, to show that
    # verify-resume catches a resume that lost state (tests/royalefleet/test_verify_resume.py).
    perturb = tuple(x for x in os.environ.get("ROYALEFLEET_PERTURB_RESUME", "").split(",") if x)
    cfg = load_config(settings.config)
    # the run's own config.json decides its identity (Compose without its .env: docs/compose.md)
    cfg = for_learner(cfg, settings.runs_dir or cfg.runs_dir, allow_identity_drift=settings.allow_identity_drift,
                      say=say)
    try:
        return make_learner(cfg, settings, perturb, say)
    except (DeterminismError, DeviceMemoryError) as exc:
        raise StartRefused(str(exc)) from None
    except OSError as exc:  # an address it may not use in plaintext, no writer token (shared/transport.py, writer_token.py)
        raise StartRefused(str(exc)) from None


def refusal_code(exc: SystemExit) -> int:
    """The exit code of a run that ended in a refusal: ``EXIT_UNREACHABLE`` (said) when a
    service did not answer, else 2."""
    if _unreachable(exc):
        say(f"learner: exit {EXIT_UNREACHABLE}: a service did not answer; a restart retries")
        return EXIT_UNREACHABLE
    return 2


def main(argv: list[str] | None = None) -> int:
    """Train until the run's end, a stop (SIGTERM or SIGINT) or a halt (``shared.service_main``;
    the exit codes are the module docstring's)."""
    return run_service("learner", parse_settings(argv), start, refusal_code=refusal_code)


def make_learner(cfg: RunConfig, a: Settings, perturb: tuple[str, ...], say: Say) -> Learner:
    """The ``Learner`` the parsed flags ``a`` ask for (addresses and ports default to the config's)."""
    from services.learner.service import Learner

    s = cfg.services
    return Learner(
        cfg,
        bind=a.bind or transport.tcp(s.host, s.learner_port),
        ladder=a.ladder or transport.tcp(s.host, s.ladder_port),
        checkpoint=a.checkpoint or transport.tcp(s.host, s.checkpoint_port),
        runs_dir=a.runs_dir or cfg.runs_dir,
        metrics_port=(s.learner_metrics_port if a.metrics_port < 0 else a.metrics_port) or None,
        metrics_host=a.metrics_host,
        iterations=a.iterations,
        min_rollouts=a.min_rollouts,
        allow_identity_drift=a.allow_identity_drift,
        clear_halt=a.clear_halt,
        start_fresh=a.start_fresh,
        perturb_resume=perturb,
        halt_port=s.learner_halt_port if a.halt_port < 0 else a.halt_port,
        viser=a.viser,
        say=say,
    )
