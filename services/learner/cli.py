"""``python -m services.learner``: the learner's command line. Every flag also reads an
environment variable (``--help`` names it), which is how the launcher and Compose configure it.

Exit codes: 0 finished or stopped, 2 a refused config, checkpoint, tier or device (said), 3
halted (``services/learner/lifecycle.py``).
"""

from __future__ import annotations

import os
import signal

from services.learner.determinism import DeterminismError
from services.learner.vram import DeviceMemoryError
from shared import transport
from shared.config import ConfigError, RunConfig, load_config


def main(argv=None) -> int:
    import argparse

    env = os.environ.get
    p = argparse.ArgumentParser(
        prog="python -m services.learner",
        description="The learner: central inference, GAE and PPO over rounds from the rollouts. "
        "Every flag also reads an environment variable (shown), which is how Compose configures it.",
    )
    p.add_argument("--config", default=env("ROYALEFLEET_CONFIG"),
                   help="config JSON (a profile plus overrides) [ROYALEFLEET_CONFIG]; default: the machine's profile")
    p.add_argument("--bind", default=env("ROYALEFLEET_LEARNER_BIND"),
                   help="address rollouts connect to [ROYALEFLEET_LEARNER_BIND] (default tcp://<services.host>:<learner_port>)")
    p.add_argument("--ladder", default=env("ROYALEFLEET_LADDER"), help="ladder address [ROYALEFLEET_LADDER]")
    p.add_argument("--checkpoint", default=env("ROYALEFLEET_CHECKPOINT"), help="checkpoint service address [ROYALEFLEET_CHECKPOINT]")
    p.add_argument("--runs-dir", default=env("ROYALEFLEET_RUNS_DIR"), help="runs folder [ROYALEFLEET_RUNS_DIR] (default: config runs_dir)")
    p.add_argument("--metrics-port", type=int, default=int(env("ROYALEFLEET_METRICS_PORT", "-1")),
                   help="port of /metrics, 0 = off [ROYALEFLEET_METRICS_PORT] (default: services.learner_metrics_port)")
    p.add_argument("--metrics-host", default=env("ROYALEFLEET_METRICS_HOST", "127.0.0.1"),
                   help="address /metrics listens on [ROYALEFLEET_METRICS_HOST] (default %(default)s)")
    p.add_argument("--iterations", type=int, default=int(env("ROYALEFLEET_ITERATIONS", "0")),
                   help="stop once the run has reached this iteration (a total over every resume and restart), "
                   "0 = run until stopped [ROYALEFLEET_ITERATIONS]")
    p.add_argument("--min-rollouts", type=int, default=int(env("ROYALEFLEET_MIN_ROLLOUTS", "1")),
                   help="rollouts the first iteration waits for (up to 120 s) [ROYALEFLEET_MIN_ROLLOUTS] (default %(default)s)")
    p.add_argument("--halt-port", type=int, default=int(env("ROYALEFLEET_HALT_PORT", "-1")),
                   help="port of the authenticated POST /halt endpoint (needs ROYALEFLEET_HALT_TOKEN; 0 = off) "
                   "[ROYALEFLEET_HALT_PORT] (default: services.learner_halt_port)")
    p.add_argument("--allow-identity-drift", action="store_true",
                   default=env("ROYALEFLEET_ALLOW_IDENTITY_DRIFT", "") not in ("", "0"),
                   help="resume a checkpoint whose run identity differs, recording the drift in drift.json "
                   "[ROYALEFLEET_ALLOW_IDENTITY_DRIFT=1]")
    p.add_argument("--clear-halt", action="store_true",
                   default=env("ROYALEFLEET_CLEAR_HALT", "") not in ("", "0"),
                   help="continue a run that was halted (an alarm or an operator wrote halted.json in its folder) "
                   "[ROYALEFLEET_CLEAR_HALT=1]")
    p.add_argument("--start-fresh", action="store_true",
                   default=env("ROYALEFLEET_START_FRESH", "") not in ("", "0"),
                   help="start the run over when it has checkpoints and none verifies (its metric rows are moved "
                   "to metrics.purged.jsonl); without it such a start is refused [ROYALEFLEET_START_FRESH=1]")
    a = p.parse_args(argv)
    # A test hook, not a user option: resume WITHOUT these components, to show that
    # verify-resume catches a resume that lost state (tests/test_verify_resume.py).
    perturb = tuple(x for x in env("ROYALEFLEET_PERTURB_RESUME", "").split(",") if x)

    def say(text):
        print(text, flush=True)

    try:
        cfg = load_config(a.config)
    except ConfigError as exc:
        say(str(exc))
        return 2
    try:
        learner = make_learner(cfg, a, perturb, say)
    except (DeterminismError, DeviceMemoryError) as exc:
        say(f"learner: {exc}")
        return 2
    signal.signal(signal.SIGTERM, learner.request_stop)
    signal.signal(signal.SIGINT, learner.request_stop)
    try:
        return learner.run()
    except SystemExit as exc:
        if isinstance(exc.code, str):
            say(exc.code)
            return 2
        raise


def make_learner(cfg: RunConfig, a, perturb, say):
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
        say=say,
    )
