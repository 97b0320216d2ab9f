"""``royalefleet up``'s watch over its evaluators (royalefleet/launcher.py ``Stack._watch_evaluators``):
restarted under ``local.restart_evaluators`` unless the exit code says its config was refused,
and a line printed either way, once per exit. Fake children: no process is started."""

from __future__ import annotations

import pytest

from royalefleet.launcher import Stack, ports_in_use
from shared.config import load_config


class FakeProc:
    def __init__(self, returncode):
        self.returncode = returncode


class FakeChild:
    """What ``_watch_evaluators`` uses of ``launcher.Child``."""

    def __init__(self, name: str, code: int | None):
        self.name, self.log_path, self.restarts, self.given_up = name, f"/logs/{name}.log", 0, False
        self.proc = FakeProc(code)
        self.starts = 0

    def alive(self) -> bool:
        return self.proc.returncode is None

    def start(self, say) -> None:
        self.starts += 1
        self.proc = FakeProc(None)

    def tail(self, n: int = 12) -> str:
        return "Traceback: boom"


def stack(tmp_path, restart: bool, codes: dict[str, int | None]):
    cfg = load_config({"profile": "tiny", "run_name": "t", "runs_dir": str(tmp_path),
                       "local": {"evaluators": len(codes), "restart_evaluators": restart}})
    lines: list[str] = []
    s = Stack(cfg, say=lines.append)
    assert sorted(n for n in s.children if n.startswith("evaluator-")) == sorted(codes)
    for name, code in codes.items():
        s.children[name] = FakeChild(name, code)
    return s, lines


def test_a_dead_evaluator_is_restarted_and_said_and_a_live_one_left_alone(tmp_path):
    s, lines = stack(tmp_path, True, {"evaluator-0": 1, "evaluator-1": None})
    s._watch_evaluators()
    dead, live = s.children["evaluator-0"], s.children["evaluator-1"]
    assert (dead.starts, dead.restarts, live.starts) == (1, 1, 0)
    assert lines == ["evaluator-0 exited (code 1); restarting it (restart 1); a job it held is handed out "
                     "again after evaluation.job_deadline_s"]
    s._watch_evaluators()  # now alive again: nothing more
    assert dead.starts == 1 and len(lines) == 1
    dead.proc = FakeProc(-9)  # killed again: restarted again, counted
    s._watch_evaluators()
    assert dead.restarts == 2 and lines[-1].startswith("evaluator-0 exited (code -9); restarting it (restart 2)")


@pytest.mark.parametrize("restart, code, why", [
    (True, 2, "its config was refused"),
    (False, 1, "local.restart_evaluators is off"),
    (False, 0, "local.restart_evaluators is off"),
])
def test_an_evaluator_left_down_is_said_once_with_why_and_its_log(tmp_path, restart, code, why):
    s, lines = stack(tmp_path, restart, {"evaluator-0": code})
    for _ in range(3):
        s._watch_evaluators()
    child = s.children["evaluator-0"]
    assert child.starts == 0 and child.given_up
    assert lines == [f"evaluator-0 exited (code {code}) and is not restarted ({why}); gates wait for the other "
                     "evaluators; last lines of /logs/evaluator-0.log:\nTraceback: boom"]


def test_the_evaluators_metrics_ports_are_checked_before_starting(tmp_path):
    import socket

    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        sk.listen()
        port = sk.getsockname()[1]
        cfg = load_config({"profile": "tiny", "runs_dir": str(tmp_path), "local": {"evaluators": 1},
                           "services": {"evaluator_metrics_port": port}})
        busy = [b for b in ports_in_use(cfg, 0) if b.startswith("evaluator")]  # other stacks may hold the rest
    assert busy == [f"evaluator-0 metrics port {port} on 127.0.0.1"]
