"""``royalefleet up``: the whole stack as local processes on loopback.

Each service runs as ``python -m services.<name>`` configured ONLY through ``ROYALEFLEET_*``
environment variables (``service_environments``), exactly as Compose runs them: one code
path. Children get their own session (a terminal's Ctrl-C reaches only this launcher, which
then stops them in order) and die with the launcher if it is killed (PR_SET_PDEATHSIG).

Stop order matters: the learner first (it writes its checkpoint through the checkpoint
service), then the rollouts, the ladder and the checkpoint service. A second Ctrl-C kills
everything at once.

Every service is supervised as Compose supervises its containers (``Stack._supervise``): one
that exits is started again after a back-off, and the learner started again resumes from its
newest checkpoint. The stack gives up, stops everything and exits non-zero when a core service
(learner, ladder, checkpoint) crash-loops ``GIVE_UP_QUICK_EXITS`` times in a row or refuses its
config (exit 2); the learner's own ends (0 done, 3 halted) end the stack with that code.

A child's output goes to ``runs/<run>/logs/<name>.log`` through a pump thread that never dies
of a log it cannot write (a full disk): while the file refuses bytes the child's lines go to
this terminal instead (``Child._pump``), so the learner's last words are never lost.
"""

from __future__ import annotations

import errno
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from shared.components import ALLOW_ENV, USER_PACKAGES_ENV, explicit_modules, trusting, user_packages
from shared.config import RunConfig, config_differences, dump_config
from shared.parent_death import die_with_parent
from shared.transport import CURVE_DIR_ENV, tcp
from royalefleet import key_roles
from shared.writer_token import LADDER_TOKEN_ENVS, TOKEN_ENV
from shared.run_dir import RunDir

SERVICE_ORDER = ("checkpoint", "ladder", "learner")
LEARNER_STOP_GRACE_S = 180.0
OTHERS_STOP_GRACE_S = 10.0
# Restart backoff for rollouts and evaluators, after Kubernetes' CrashLoopBackOff: a child that
# exits within QUICK_EXIT_S of its start is crash-looping (a bad host, a missing file), and each
# such exit in a row doubles the wait before the next start, from BACKOFF_FIRST_S up to
# BACKOFF_MAX_S. One that ran longer (a kill, a crash mid-run) restarts at once, and the count
# starts again: a lost rollout rejoins at the next iteration.
QUICK_EXIT_S = 60.0
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0
GIVE_UP_QUICK_EXITS = 5
"""A core service (learner, ladder, checkpoint) that exits this many times in a row within
``QUICK_EXIT_S`` of its start is crash-looping on something a restart cannot fix: the stack
gives up, stops every service and exits ``EXIT_GAVE_UP`` (the waits before were 1+2+4+8 s)."""
EXIT_GAVE_UP = 1
CORE_SERVICES = ("checkpoint", "ladder", "learner")
LEARNER_FINAL_EXITS = {0: "finished", 2: "refused its config or its checkpoint", 3: "halted"}
"""Learner exit codes that end the stack with that code (services/learner/lifecycle.py): any
other exit (a crash, a kill, 4: a service it needed at start did not answer,
services/learner/main.py ``EXIT_UNREACHABLE``) is restarted and resumes from the newest
checkpoint."""
LOG_RETRY_S = 10.0
"""How often a pump tries a log file again after a write failed (ENOSPC, EIO)."""
TAIL_LINES = 12
WATCH_INTERVAL_S = 0.3


def restart_delay(quick_exits: int) -> float:
    """Seconds to wait before restarting a child after ``quick_exits`` quick exits in a row
    (0: it ran at least ``QUICK_EXIT_S``): 0, 1, 2, 4, ... capped at ``BACKOFF_MAX_S``."""
    if quick_exits <= 0:
        return 0.0
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2.0 ** (quick_exits - 1))



def allowed_env(cfg) -> dict[str, str]:
    """``{ALLOW_ENV: ...}`` for the services this launcher starts: the modules this process was
    told to allow (``ALLOW_ENV``, ``--allow-module``; shared/components.py ``explicit_modules``)
    and, under --trust-code, the config's ``env.extra_component_modules``. Installed extensions
    each service finds itself."""
    names = sorted(set(explicit_modules()) | (set(cfg.env.extra_component_modules) if trusting() else set()))
    return {ALLOW_ENV: ",".join(names)}


def service_environments(cfg: RunConfig, config_path: str, runs_dir: str, iterations: int = 0,
                         rollouts: int | None = None) -> dict[str, dict[str, str]]:
    """The environment variables of every local service: name -> {var: value}.

    Rollout k is named ``rollout-k``, evaluator k ``evaluator-k`` (``local.evaluators``; one that
    dies is restarted under ``local.restart_evaluators``, see ``Stack._watch_evaluators``). Thread
    counts are pinned before numpy or torch load (a fixed count is part of run-exactness; a
    rollout needs one thread).
    """
    s = cfg.services
    host = s.host
    common = {"ROYALEFLEET_METRICS_HOST": host, "ROYALEFLEET_MAX_MESSAGE_MB": str(s.max_message_mb),
              "PYTHONUNBUFFERED": "1", **allowed_env(cfg)}
    one = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    threads = str(cfg.determinism.torch_threads)
    envs = {
        "checkpoint": common | one | {
            "ROYALEFLEET_CHECKPOINT_BIND": tcp(host, s.checkpoint_port),
            "ROYALEFLEET_RUNS_DIR": runs_dir,
            "ROYALEFLEET_CHECKPOINT_KEEP": str(cfg.checkpoint.keep),
            "ROYALEFLEET_METRICS_PORT": str(s.checkpoint_metrics_port),
        },
        "ladder": common | one | {
            "ROYALEFLEET_LADDER_BIND": tcp(host, s.ladder_port),
            "ROYALEFLEET_RUNS_DIR": runs_dir,
            "ROYALEFLEET_CONFIG": config_path,
            "ROYALEFLEET_METRICS_PORT": str(s.ladder_metrics_port),
        },
        "learner": common | {
            "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
            # cuBLAS's deterministic workspace (run_exact on CUDA refuses without it; inert on a CPU).
            "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
            "ROYALEFLEET_CONFIG": config_path,
            "ROYALEFLEET_LEARNER_BIND": tcp(host, s.learner_port),
            "ROYALEFLEET_LADDER": tcp(host, s.ladder_port),
            "ROYALEFLEET_CHECKPOINT": tcp(host, s.checkpoint_port),
            "ROYALEFLEET_RUNS_DIR": runs_dir,
            "ROYALEFLEET_METRICS_PORT": str(s.learner_metrics_port),
            "ROYALEFLEET_HALT_PORT": str(s.learner_halt_port),
            "ROYALEFLEET_ITERATIONS": str(iterations),
            "ROYALEFLEET_MIN_ROLLOUTS": str(cfg.local.rollouts if rollouts is None else rollouts),
        },
    }
    for k in range(cfg.local.rollouts if rollouts is None else rollouts):
        envs[f"rollout-{k}"] = common | one | {
            "ROYALEFLEET_LEARNER": tcp(host, s.learner_port),
            "ROYALEFLEET_BATTLES": str(cfg.rollout.battles),
            "ROYALEFLEET_SHARDS": str(cfg.rollout.shards),
            "ROYALEFLEET_METRICS_PORT": str(s.rollout_metrics_port + k if s.rollout_metrics_port else 0),
            # which user packages the rollout digests for its Hello (shared/components.py)
            USER_PACKAGES_ENV: ",".join(user_packages(cfg.env)),
        }
    for k in range(cfg.local.evaluators):
        envs[f"evaluator-{k}"] = common | one | {
            "ROYALEFLEET_CONFIG": config_path,
            "ROYALEFLEET_LADDER": tcp(host, s.ladder_port),
            "ROYALEFLEET_CHECKPOINT": tcp(host, s.checkpoint_port),
            "ROYALEFLEET_METRICS_PORT": str(s.evaluator_metrics_port + k if s.evaluator_metrics_port else 0),
        }
    return envs


PORT_FIELDS = ("learner_port", "ladder_port", "checkpoint_port", "learner_metrics_port", "ladder_metrics_port",
               "checkpoint_metrics_port", "rollout_metrics_port", "learner_halt_port", "evaluator_metrics_port")


def on_free_ports(services):
    """``services`` with every port replaced by one free on loopback now: for the scratch stacks
    of bench and verify-resume, which must not collide with a user's running stack."""
    import msgspec

    socks = [socket.socket() for _ in PORT_FIELDS]
    try:
        for sk in socks:
            sk.bind(("127.0.0.1", 0))
        ports = [sk.getsockname()[1] for sk in socks]
    finally:
        for sk in socks:
            sk.close()
    fields = dict(zip(PORT_FIELDS, ports))
    # Rollout k and evaluator k serve on base + k: a free base says nothing of base + 1, which
    # may be another field's port (the stack then refuses to start). Scratch stacks read their
    # rows, not Prometheus, so those per-instance endpoints are simply off (0).
    fields.update(rollout_metrics_port=0, evaluator_metrics_port=0)
    return msgspec.structs.replace(services, **fields)


def module_of(name: str) -> str:
    return "services." + name.split("-")[0]


@dataclass
class Child:
    name: str
    env: dict
    log_path: str
    echo: bool
    proc: subprocess.Popen | None = None
    module: str | None = None
    """The ``python -m`` module it runs; None: ``module_of(name)`` (the bench's synthetic
    rollouts name ``royalefleet.synthetic``)."""
    restarts: int = 0
    given_up: bool = False  # exited and left down; said once
    threads: list = field(default_factory=list)
    started_at: float = 0.0  # time.monotonic() of the last start
    quick_exits: int = 0  # exits within QUICK_EXIT_S of their start, in a row
    restart_at: float | None = None  # a restart is due then (backoff); None: none planned
    recent: deque = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    """The last lines it printed, kept in memory: ``tail`` works when its log cannot be written."""
    log_error: str | None = None  # why the log refused the last write; None: it takes bytes
    log_retry_at: float = 0.0
    lines_not_logged: int = 0

    def start(self, say) -> None:
        self.started_at, self.restart_at = time.monotonic(), None
        self.threads = [t for t in self.threads if t.is_alive()]  # pumps of earlier runs end with them
        try:
            log = open(self.log_path, "ab", buffering=0)
        except OSError as exc:  # a full disk cannot create the file: the terminal gets the lines
            log = None
            self._log_failed(exc, say)
        try:
            self.proc = subprocess.Popen(
                self.command(),
                env=os.environ | self.env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=die_with_parent,
            )
        except BaseException:
            if log is not None:
                log.close()
            raise
        t = threading.Thread(target=self._pump, args=(self.proc, log, say), daemon=True, name=f"pump-{self.name}")
        t.start()
        self.threads.append(t)

    def command(self) -> list[str]:
        return [sys.executable, "-m", self.module or module_of(self.name)]

    def _log_failed(self, exc: OSError, say) -> None:
        if self.log_error is None:
            self.log_error = f"{exc.strerror or exc}"
            self.log_retry_at = time.monotonic() + LOG_RETRY_S
            _say_safely(say, f"launcher: cannot write {self.log_path} ({self.log_error}); {self.name}'s "
                             "output goes to this terminal until the file takes bytes again")

    def _pump(self, proc, log, say) -> None:
        """Copy the child's output to its log (and to the terminal when echoed) until it ends.
        Nothing here may end the thread early: a child whose pipe is not drained blocks on its
        next print. A log that refuses a write (ENOSPC, EIO) is tried again every
        ``LOG_RETRY_S``; meanwhile every line goes to the terminal (``[name]`` before those of
        a child that is not echoed) and to the memory tail, and the log gets a line that says
        how many it missed once it takes bytes again."""
        for line in iter(proc.stdout.readline, b""):
            text = line.decode(errors="replace").rstrip("\n")
            self.recent.append(text)
            logged = log is not None and self._write_log(log, line, say)
            if self.echo:
                _say_safely(say, text)
            elif not logged:
                _say_safely(say, f"[{self.name}] {text}")
        if log is not None:
            try:
                log.close()
            except OSError:
                pass

    def _write_log(self, log, line: bytes, say) -> bool:
        """Append ``line`` to the log; False (counted) when the file refused it or is resting."""
        if self.log_error is not None and time.monotonic() < self.log_retry_at:
            self.lines_not_logged += 1
            return False
        try:
            if self.log_error is not None:
                log.write(f"\n[launcher: {self.lines_not_logged} line(s) missing here: the file refused them "
                          f"({self.log_error}); they went to the terminal]\n".encode())
            log.write(line)
        except OSError as exc:
            self.lines_not_logged += 1
            if self.log_error is None:
                self._log_failed(exc, say)
            self.log_retry_at = time.monotonic() + LOG_RETRY_S
            return False
        if self.log_error is not None:
            _say_safely(say, f"launcher: {self.log_path} takes bytes again ({self.lines_not_logged} line(s) of "
                             f"{self.name} went only to this terminal)")
            self.log_error, self.lines_not_logged = None, 0
        return True

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig) -> None:
        if self.alive():
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def tail(self, n: int = TAIL_LINES) -> str:
        """Its last ``n`` lines of output (from memory: a log on a full disk may miss them)."""
        return "\n".join(list(self.recent)[-n:])


def _say_safely(say, text: str) -> None:
    """``say`` that never raises: the launcher's terminal may be a file on the same full disk,
    and a pump or the watch loop must outlive a failed print."""
    try:
        say(text)
    except (OSError, ValueError):
        pass


def host_not_here(cfg: RunConfig) -> str | None:
    """Why this machine cannot bind ``services.host`` at all (an address it does not have, a
    name that does not resolve), or None. Checked before the ports, so that a mistyped address
    is not reported as ports in use."""
    host = cfg.services.host
    with socket.socket() as sk:
        try:
            sk.bind((host, 0))
        except socket.gaierror as exc:
            return f"services.host {host!r} does not resolve here ({exc.strerror})"
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                return (f"services.host {host} is not an address of this machine: the services bind it, so it "
                        f"must be one of this host's own addresses (`ip -brief address`), or 0.0.0.0")
    return None


def ports_in_use(cfg: RunConfig, rollouts: int) -> list[str]:
    s = cfg.services
    wanted = {"learner": s.learner_port, "ladder": s.ladder_port, "checkpoint": s.checkpoint_port,
              "learner metrics": s.learner_metrics_port, "ladder metrics": s.ladder_metrics_port,
              "checkpoint metrics": s.checkpoint_metrics_port}
    if s.rollout_metrics_port:
        wanted |= {f"rollout-{k} metrics": s.rollout_metrics_port + k for k in range(rollouts)}
    if s.evaluator_metrics_port:  # an evaluator that cannot bind exits 1, and would be restarted
        wanted |= {f"evaluator-{k} metrics": s.evaluator_metrics_port + k for k in range(cfg.local.evaluators)}
    busy = []
    for name, port in wanted.items():
        if not port:
            continue
        with socket.socket() as sk:
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sk.bind((s.host, port))
            except OSError:
                busy.append(f"{name} port {port} on {s.host}")
    return busy


class Stack:
    def __init__(self, cfg: RunConfig, *, iterations: int = 0, rollouts: int | None = None, say=print,
                 echo_all: bool = False, learner_env: dict | None = None, rollout_env: dict | None = None,
                 rollout_module: str | None = None, config_changes_said: bool = False):
        """``rollout_env`` is added to every rollout's environment and ``rollout_module``
        replaces ``services.rollout`` as what they run (``royalefleet bench --synthetic``).
        ``config_changes_said``: the caller said how ``cfg`` differs from the run's config.json
        (``royalefleet up``: royalefleet/start_config.py), so it is not said again here."""
        self.config_changes_said = config_changes_said
        self.cfg = cfg
        self.say = lambda text: _say_safely(say, text)
        self.run_dir = os.path.join(cfg.runs_dir, cfg.run_name)
        self.log_dir = str(RunDir(self.run_dir).logs)
        os.makedirs(self.log_dir, exist_ok=True)
        self.config_path = os.path.abspath(RunDir(self.run_dir).config)
        self.n_rollouts = cfg.local.rollouts if rollouts is None else rollouts
        self._write_config()
        envs = service_environments(cfg, self.config_path, os.path.abspath(cfg.runs_dir), iterations, self.n_rollouts)
        envs["learner"] |= learner_env or {}
        for name in envs:
            if name.startswith("rollout-"):
                envs[name] |= rollout_env or {}
        # Only this stack's learner may write the run's checkpoints (shared/writer_token.py): a
        # fresh token per start, given to the learner and the checkpoint service alone.
        token = os.environ.get(TOKEN_ENV) or secrets.token_hex(16)
        envs["learner"][TOKEN_ENV] = envs["checkpoint"][TOKEN_ENV] = token
        # The same for the ladder's writes: the learner's token to the learner, the evaluators'
        # to the evaluators, both to the ladder (a rollout gets neither).
        for role, var in LADDER_TOKEN_ENVS.items():
            role_token = os.environ.get(var) or secrets.token_hex(16)
            for name in envs:
                if name == "ladder" or name == role or name.startswith(f"{role}-"):
                    envs[name][var] = role_token
        # With CURVE on, each service reads its own role's keys (royalefleet/key_roles.py).
        curve_dir = os.environ.get(CURVE_DIR_ENV, "")
        if curve_dir:
            for name in envs:
                envs[name][CURVE_DIR_ENV] = key_roles.curve_dir_for(curve_dir, key_roles.role_of(name))
        self.children = {name: Child(name, env, os.path.join(self.log_dir, f"{name}.log"),
                                     echo=echo_all or name == "learner",
                                     module=rollout_module if name.startswith("rollout-") else None)
                         for name, env in envs.items()}
        self.interrupts = 0
        self.gave_up: str | None = None
        """Why the stack gave up (a core service crash-looped or was refused), or None."""

    def _write_config(self) -> None:
        new = dump_config(self.cfg)
        if os.path.exists(self.config_path) and not self.config_changes_said:
            import json

            with open(self.config_path, "rb") as fh:
                try:
                    old = json.loads(fh.read())
                except ValueError:
                    old = {}
            import msgspec

            for path, (a, b) in config_differences(old, msgspec.json.decode(new)).items():
                self.say(f"config changed since the last start: {path}: {a!r} -> {b!r}")
        tmp = self.config_path + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(new)
        os.replace(tmp, self.config_path)

    def _on_signal(self, *_):
        self.interrupts += 1
        if self.interrupts == 1:
            self.say("stopping: the learner writes a checkpoint first (Ctrl-C again to kill everything now)")
            self.children["learner"].signal(signal.SIGTERM)
        else:
            self.say("killing every service now")
            for c in self.children.values():
                c.signal(signal.SIGKILL)

    def run(self) -> int:
        not_here = host_not_here(self.cfg)
        if not_here:
            self.say(f"cannot start: {not_here}; fix it under \"services\" in the run's config.json")
            return 2
        busy = ports_in_use(self.cfg, self.n_rollouts)
        if busy:
            self.say("cannot start: " + "; ".join(busy) + " already in use (another `royalefleet up`?). "
                     "Stop it, or change the ports under \"services\" in the config.")
            return 2
        old_int = signal.signal(signal.SIGINT, self._on_signal)
        old_term = signal.signal(signal.SIGTERM, self._on_signal)
        self.say(f"run folder {self.run_dir}; service logs in {self.log_dir}")
        relay = None
        try:
            relay = self._start_alert_relay()  # from the end of alarms.jsonl before this start
            for name in SERVICE_ORDER:
                self.children[name].start(self.say)
            for name, c in self.children.items():
                if name.startswith(("rollout-", "evaluator-")):
                    c.start(self.say)
            n_eval = sum(n.startswith("evaluator-") for n in self.children)
            self.say(f"started checkpoint, ladder, learner, {self.n_rollouts} rollout(s) and {n_eval} evaluator(s); "
                     "Ctrl-C stops them cleanly")
            self.say(f"curves: tensorboard --logdir {self.cfg.runs_dir}   (event files in "
                     f"{self.cfg.runs_dir}/{self.cfg.run_name}/tensorboard; or `royalefleet report "
                     f"{self.cfg.run_name}` writes an HTML page with the plots)")
            return self._watch()
        finally:
            self._stop_all()
            if relay is not None:
                relay.stop()
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)

    def _start_alert_relay(self):
        """Fired alarms to ``ALERT_WEBHOOK_URL`` when it is set (royalefleet/alert_relay.py)."""
        from royalefleet.alert_relay import relay_for

        relay = relay_for(self.run_dir, str(RunDir(self.run_dir).alarms), say=self.say)
        if relay is not None:
            relay.start()
        return relay

    def _watch(self) -> int:
        """Supervise every child until the stack ends; returns the launcher's exit code."""
        learner = self.children["learner"]
        while True:
            time.sleep(WATCH_INTERVAL_S)
            if self.interrupts:  # stopping: the stack ends with the learner
                if not learner.alive():
                    return self._learner_stopped(learner)
                if not self.gave_up:  # the learner's last checkpoint goes through this service
                    self._restart_policy(self.children["checkpoint"], True, "", on_restart="the learner's last "
                                         "checkpoint goes through it", on_left_down="", on_refused="",
                                         give_up_after=GIVE_UP_QUICK_EXITS)
                continue
            for name in CORE_SERVICES:
                c = self.children[name]
                on_restart = ("it resumes from the run's newest checkpoint" if name == "learner"
                              else "the learner waits for it and retries")
                verdict = self._restart_policy(c, True, "", on_restart=on_restart, on_left_down="",
                                               on_refused="stopping the stack", give_up_after=GIVE_UP_QUICK_EXITS,
                                               final=LEARNER_FINAL_EXITS if name == "learner" else ())
                if verdict == "ended":
                    return self._learner_ended(c)
                if verdict in ("refused", "gave_up"):
                    self.gave_up = f"{name} {'refused its config' if verdict == 'refused' else 'crash-looped'}"
                    self.say(f"the stack gives up: {self.gave_up}; stopping every service (exit {EXIT_GAVE_UP})")
                    self.interrupts = 1
                    learner.signal(signal.SIGTERM)
                    break
            if self.interrupts:
                continue
            for name, c in self.children.items():
                if name.startswith("rollout-") and self._restart_policy(
                        c, self.cfg.local.restart_rollouts, "local.restart_rollouts",
                        on_restart="it rejoins at the next iteration",
                        on_left_down="the run goes on with the other rollouts",
                        on_refused="stopping the stack") == "refused":
                    self.gave_up = f"{name} refused its config"
                    self.interrupts = 1
                    learner.signal(signal.SIGTERM)
                    break
            if not self.interrupts:
                self._watch_evaluators()

    def _learner_ended(self, learner: Child) -> int:
        """The learner exited on its own with a final code (``LEARNER_FINAL_EXITS``)."""
        learner.proc.wait()
        for t in learner.threads:
            t.join(timeout=2)
        code = learner.proc.returncode
        if code != 0:
            self.say(f"the learner exited with code {code} ({LEARNER_FINAL_EXITS[code]}); {self._last_lines(learner)}")
        return code

    def _learner_stopped(self, learner: Child) -> int:
        """The exit code once the learner is down during a stop: 0 for a clean stop (or one that
        caught it between two starts), ``EXIT_GAVE_UP`` when the stack gave up."""
        if learner.proc is not None:
            learner.proc.wait()
        for t in learner.threads:
            t.join(timeout=2)
        if self.gave_up:
            return EXIT_GAVE_UP
        code = learner.proc.returncode if learner.proc is not None else 0
        if learner.restart_at is not None or code in (0, -signal.SIGTERM):
            return 0
        return code

    @staticmethod
    def _last_lines(c) -> str:
        """Where to read why ``c`` exited: its output above (an echoed child) or its last lines."""
        if getattr(c, "echo", False):
            return f"its output is above and in {c.log_path}"
        return f"last lines of {c.log_path}:\n{c.tail()}"

    def _watch_evaluators(self) -> None:
        """Restart an evaluator that exited (``local.restart_evaluators``), unless it exited 2 (its
        config was refused: a restart fails the same way). The run goes on without it either way:
        a job it held is handed out again after ``evaluation.job_deadline_s``, and gates wait for
        the evaluators left."""
        for c in [c for n, c in self.children.items() if n.startswith("evaluator-")]:
            self._restart_policy(c, self.cfg.local.restart_evaluators, "local.restart_evaluators",
                                 on_restart="a job it held is handed out again after evaluation.job_deadline_s",
                                 on_left_down="gates wait for the other evaluators",
                                 on_refused="gates wait for the other evaluators")

    def _restart_policy(self, c, enabled: bool, setting: str, *, on_restart: str, on_left_down: str,
                        on_refused: str, give_up_after: int | None = None, final=(), now: float | None = None) -> str:
        """One watch step over a child: ``"alive"``, ``"waiting"`` (a restart is due later:
        backoff), ``"restarted"``, ``"refused"`` (it exited 2, its config was refused: a restart
        fails the same way, so it is left down), ``"gave_up"`` (its ``give_up_after``-th quick
        exit in a row: crash-looping), ``"down"`` (left down: restarts off, or said before) or
        ``"ended"`` (it exited with one of the ``final`` codes, on its own: the caller decides).
        Each exit is said once, with why and when it restarts (``restart_delay``); ``c.restarts``
        counts the restarts.
        """
        if c.given_up:
            return "down"
        if c.alive():
            return "alive"
        now = time.monotonic() if now is None else now
        code = c.proc.returncode
        if c.restart_at is None:  # a new exit: decide once
            if code in final:
                return "ended"
            if code == 2 or not enabled:
                c.given_up = True
                why = "its config was refused" if code == 2 else f"{setting} is off"
                then = on_refused if code == 2 else on_left_down
                self.say(f"{c.name} exited (code {code}) and is not restarted ({why}); {then}; "
                         f"{self._last_lines(c)}")
                return "refused" if code == 2 else "down"
            ran = now - c.started_at
            c.quick_exits = c.quick_exits + 1 if ran < QUICK_EXIT_S else 0
            if give_up_after is not None and c.quick_exits >= give_up_after:
                c.given_up = True
                self.say(f"{c.name} exited (code {code}) {ran:.0f} s after starting, its {c.quick_exits}th quick exit "
                         f"in a row: it is not restarted again; {self._last_lines(c)}")
                return "gave_up"
            delay = restart_delay(c.quick_exits)
            c.restart_at = now + delay
            if delay:
                self.say(f"{c.name} exited (code {code}) {ran:.0f} s after starting, {c.quick_exits} quick exit(s) "
                         f"in a row; restarting it in {delay:.0f} s (restart {c.restarts + 1}); {on_restart}; "
                         f"{self._last_lines(c)}")
        if now < c.restart_at:
            return "waiting"
        c.restarts += 1
        if c.quick_exits == 0:
            self.say(f"{c.name} exited (code {code}); restarting it (restart {c.restarts}); {on_restart}")
        c.start(self.say)
        return "restarted"

    def _stop_all(self) -> None:
        learner = self.children["learner"]
        if learner.alive():
            learner.signal(signal.SIGTERM)
            deadline = time.monotonic() + LEARNER_STOP_GRACE_S
            while learner.alive() and time.monotonic() < deadline:
                time.sleep(0.1)
        others = [c for n, c in self.children.items() if n != "learner"]
        rollouts_first = sorted(others, key=lambda c: (not c.name.startswith("rollout"), c.name == "checkpoint"))
        for c in rollouts_first:
            c.signal(signal.SIGTERM)
        deadline = time.monotonic() + OTHERS_STOP_GRACE_S
        for c in rollouts_first + [learner]:
            while c.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if c.alive():
                self.say(f"{c.name} did not stop within {OTHERS_STOP_GRACE_S:.0f} s; killing it")
                c.signal(signal.SIGKILL)
            if c.proc is not None:
                c.proc.wait()
            for t in c.threads:
                t.join(timeout=2)
