"""``royalefleet up``'s watch over its rollouts and evaluators (royalefleet/launcher.py
``Stack._restart_policy``): restarted under ``local.restart_*`` unless the exit code says the
config was refused, with a doubling wait while one crash-loops, and a line printed either way,
once per exit. Fake children and a fake clock: no process is started."""

from __future__ import annotations

import pytest

from royalefleet.launcher import BACKOFF_MAX_S, QUICK_EXIT_S, Stack, ports_in_use, restart_delay
from shared.config import load_config


class FakeProc:
    def __init__(self, returncode):
        self.returncode = returncode


class FakeChild:
    """What ``_restart_policy`` uses of ``launcher.Child``; ``clock[0]`` is the fake time."""

    def __init__(self, name: str, code: int | None, clock: list[float] | None = None):
        self.name, self.log_path, self.restarts, self.given_up = name, f"/logs/{name}.log", 0, False
        self.proc = FakeProc(code)
        self.starts = 0
        self.clock = clock or [-1e9]  # no clock: started long ago
        self.started_at, self.quick_exits, self.restart_at = self.clock[0], 0, None

    def alive(self) -> bool:
        return self.proc.returncode is None

    def start(self, say) -> None:
        self.starts += 1
        self.started_at, self.restart_at = self.clock[0], None
        self.proc = FakeProc(None)

    def tail(self, n: int = 12) -> str:
        return "Traceback: boom"


def stack(tmp_path, restart: bool, codes: dict[str, int | None]):
    cfg = load_config({"profile": "tiny", "run_name": "t", "runs_dir": str(tmp_path),
                       "local": {"evaluators": len(codes), "restart_evaluators": restart,
                                 "restart_rollouts": restart}})
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


def test_restart_delay_doubles_from_one_second_to_the_cap():
    assert [restart_delay(n) for n in range(9)] == [0, 1, 2, 4, 8, 16, 32, 60, 60]
    assert BACKOFF_MAX_S == 60 and QUICK_EXIT_S == 60


def test_a_crash_looping_evaluator_waits_longer_each_time_and_is_said_once_per_exit(tmp_path):
    s, lines = stack(tmp_path, True, {"evaluator-0": None})
    clock = [1000.0]
    c = FakeChild("evaluator-0", 1, clock)  # exits 5 s after each start
    c.started_at = clock[0] - 5.0
    s.children["evaluator-0"] = c
    step = lambda: s._restart_policy(c, True, "local.restart_evaluators", on_restart="R", on_left_down="D",  # noqa: E731
                                     on_refused="X", now=clock[0])
    waits = []
    for expected_wait in (1, 2, 4, 8, 16, 32, 60, 60):
        exit_at = clock[0]
        assert step() == "waiting"
        assert step() == "waiting"  # polled again: nothing new is said
        clock[0] = exit_at + expected_wait - 0.01
        assert step() == "waiting"
        clock[0] = exit_at + expected_wait
        assert step() == "restarted"
        waits.append(clock[0] - exit_at)
        assert step() == "alive"
        clock[0] += 5.0  # it crashes again 5 s later
        c.proc = FakeProc(1)
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60] and c.restarts == 8
    assert len(lines) == 8
    assert lines[0] == ("evaluator-0 exited (code 1) 5 s after starting, 1 quick exit(s) in a row; restarting it "
                        "in 1 s (restart 1); R; last lines of /logs/evaluator-0.log:\nTraceback: boom")
    assert "8 quick exit(s) in a row; restarting it in 60 s (restart 8)" in lines[7]
    # It then runs a full minute before it is killed: restarted at once, the count starts again.
    clock[0] += QUICK_EXIT_S
    assert step() == "restarted" and c.quick_exits == 0
    assert lines[-1] == "evaluator-0 exited (code 1); restarting it (restart 9); R"
    clock[0] += 5.0
    c.proc = FakeProc(1)
    assert step() == "waiting" and "restarting it in 1 s" in lines[-1]


def test_a_refused_rollout_stops_the_stack_and_one_left_down_does_not(tmp_path):
    s, lines = stack(tmp_path, True, {})
    c = FakeChild("rollout-0", 2)
    kw = dict(on_restart="R", on_left_down="the run goes on", on_refused="stopping the stack")
    assert s._restart_policy(c, True, "local.restart_rollouts", **kw) == "refused"
    assert lines == ["rollout-0 exited (code 2) and is not restarted (its config was refused); stopping the stack; "
                     "last lines of /logs/rollout-0.log:\nTraceback: boom"]
    assert s._restart_policy(c, True, "local.restart_rollouts", **kw) == "down" and len(lines) == 1
    c = FakeChild("rollout-1", -9)
    assert s._restart_policy(c, False, "local.restart_rollouts", **kw) == "down"
    assert lines[-1].startswith("rollout-1 exited (code -9) and is not restarted (local.restart_rollouts is off); "
                                "the run goes on;")
    assert c.starts == 0


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
