"""Running the real local stack (``royalefleet up``) from tests, on free loopback ports."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import msgspec

from royalefleet.procfs import children_of

REPO = Path(__file__).resolve().parents[1]


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def tiny_config(runs_dir: Path, **overrides) -> Path:
    """A tiny-profile config on free ports, written under ``runs_dir``; returns its path."""
    p = free_ports(9)
    doc = {
        "profile": "tiny",
        "runs_dir": str(runs_dir),
        "services": {"learner_port": p[0], "ladder_port": p[1], "checkpoint_port": p[2],
                     "learner_metrics_port": p[3], "ladder_metrics_port": p[4],
                     "checkpoint_metrics_port": p[5], "rollout_metrics_port": p[6], "learner_halt_port": p[7],
                     "evaluator_metrics_port": p[8]},
    }
    for key, value in overrides.items():
        if isinstance(value, dict):
            doc.setdefault(key, {}).update(value)
        else:
            doc[key] = value
    runs_dir.mkdir(parents=True, exist_ok=True)
    path = runs_dir / f"config-{p[0]}.json"
    path.write_text(json.dumps(doc))
    return path


class Up:
    """``python -m royalefleet up`` as a subprocess, its output collected line by line.

    ``--no-doctor`` unless ``doctor=True``: the machine checks ``up`` runs first (``royalefleet
    doctor --fast``, about 10 s of one core: torch imported, 200 decisions of real battles) check
    the machine, not the stack under test, and would run before every start of every stack test
    (about 30 starts in the suite). That ``up`` runs them and refuses on a failure is
    tests/royalefleet/test_doctor.py's ``test_up_runs_the_fast_checks_first_and_refuses_on_a_failure``."""

    def __init__(self, config: Path, *args: str, env: dict | None = None, doctor: bool = False):
        self.lines: list[str] = []
        self.log = open(config.with_suffix(".out"), "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "royalefleet", "up", "--config", str(config), *(() if doctor else ("--no-doctor",)),
             *args],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=os.environ | (env or {}), bufsize=1,
        )
        os.set_blocking(self.proc.stdout.fileno(), False)

    def _read(self) -> None:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                return
            self.lines.append(line.rstrip("\n"))
            self.log.write(line)
            self.log.flush()

    def wait_for(self, predicate, timeout: float, what: str) -> str:
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            self._read()
            for line in self.lines[seen:]:
                if predicate(line):
                    return line
            seen = len(self.lines)
            if self.proc.poll() is not None:
                self._read()
                for line in self.lines[seen:]:
                    if predicate(line):
                        return line
                raise AssertionError(f"stack exited ({self.proc.returncode}) before {what}:\n" + "\n".join(self.lines[-40:]))
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}:\n" + "\n".join(self.lines[-40:]))

    def wait_exit(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._read()
            if self.proc.poll() is not None:
                self._read()
                return self.proc.returncode
            time.sleep(0.05)
        self.kill()
        raise AssertionError(f"stack did not exit within {timeout} s:\n" + "\n".join(self.lines[-40:]))

    def tail(self, n: int = 40) -> str:
        """The last ``n`` lines of output, for assertion messages."""
        return "\n".join(self.lines[-n:])

    def children(self) -> dict[int, str]:
        """pid -> command line of the launcher's direct children."""
        return {pid: b" ".join(argv).decode() for pid, (_, argv) in children_of(self.proc.pid).items()}

    def interrupt(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    def kill(self) -> None:
        for pid in self.children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.kill()
        self.proc.wait()


def run_to_exit(config: Path, *args: str, timeout: float, env: dict | None = None,
                doctor: bool = False) -> tuple[Up, int]:
    """Run ``royalefleet up`` to its end: (the Up, its exit code). A stack still running after
    ``timeout`` seconds is killed (``Up.wait_exit``), and so is one whose wait is interrupted.
    ``doctor``: as ``Up``'s."""
    up = Up(config, *args, env=env, doctor=doctor)
    try:
        return up, up.wait_exit(timeout)
    finally:
        if up.proc.poll() is None:
            up.kill()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def read_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def rectangle_slack(prev: dict, row: dict) -> int:
    """How far ``row``'s learner cells (trained plus counted lost) may lie from its cycles x
    learner rows a cycle, ``prev`` being the row before it: 0 when both iterations planned as many
    battles (every battle keeps its role). When the count changed (a killed rollout still planned
    beside its restarted self: 12 battles after 8), the roles are laid anew over the new count
    (``shared.matchmaking.battle_roles``), while a battle that carried over finishes its episode in
    flight under the role it began with (``shared.assignments.AssignmentTable.take``), and a lost
    one is counted by its last known seats for every cycle it did not play
    (``services.learner.measures.lost_cells``): at most one learner seat more or fewer than
    planned, a cycle, for each battle that carried over."""
    if prev["run/battles"] == row["run/battles"]:
        return 0
    return row["run/cycles"] * min(prev["run/battles"], row["run/battles"])


def decode(path: Path):
    return msgspec.json.decode(path.read_bytes())


def learner_results(run: Path, opponent: str) -> tuple[Counter, Counter]:
    """(wins, games) by iteration of the learner's episodes in ``run``'s ladder result log;
    every one must have been against ``opponent`` (the learning tests' single opponent)."""
    wins, games = Counter(), Counter()
    for line in (run / "ladder" / "results.jsonl").read_text().splitlines():
        record = json.loads(line)["record"]
        if record["player"] != "learner":
            continue
        assert record["opponent"] == opponent
        games[record["iteration"]] += 1
        wins[record["iteration"]] += record["outcome"] == 1
    return wins, games


def win_rate(wins: Counter, games: Counter, iterations: range) -> tuple[float, int]:
    """Wins over games pooled across ``iterations``, and the games (nan with none)."""
    n = sum(games[i] for i in iterations)
    return (sum(wins[i] for i in iterations) / n if n else float("nan")), n


def exact_rows(cfg, tmp_path: Path) -> list[dict]:
    """``verify_resume`` of ``cfg`` (2 iterations, split after 1, one rollout) asserted exact;
    returns the straight run's metric rows. The searched learners' stack tests share it."""
    from royalefleet.verify_resume import verify_resume

    lines: list[str] = []
    problems = verify_resume(cfg, iterations=2, split=1, rollouts=1, keep_dir=str(tmp_path / "v"), say=lines.append)
    assert problems == [], "\n".join(lines)
    assert lines[-1].startswith("verify-resume: exact")
    return [json.loads(s) for s in (tmp_path / "v" / "straight" / "metrics.jsonl").read_text().splitlines()]
