"""``royalefleet up``'s watch over its rollouts and evaluators (royalefleet/launcher.py
``Stack._restart_policy``): restarted under ``local.restart_*`` unless the exit code says the
config was refused, with a doubling wait while one crash-loops, and a line printed either way,
once per exit. Fake children and a fake clock: no process is started."""

from __future__ import annotations

import errno
import io
import signal
import sys
import types

import pytest

from royalefleet import launcher
from royalefleet.launcher import (BACKOFF_MAX_S, EXIT_GAVE_UP, GIVE_UP_QUICK_EXITS, QUICK_EXIT_S, Child, Stack,
                                  ports_in_use, restart_delay)
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


# ------------------------------------------------------------------ every service supervised


class ScriptedChild(FakeChild):
    """A child whose exits follow a script: ``exits[k]`` is the code of its k-th run (None: it
    stays alive), after ``polls`` calls of ``alive``. ``threads`` and ``proc.wait`` as Child's."""

    def __init__(self, name: str, exits: list[int | None], polls: int = 2):
        super().__init__(name, None)
        self.exits, self.polls, self.threads, self.signals = list(exits), polls, [], []
        self._left = polls
        self.started_at = -1e9

    def alive(self) -> bool:
        if self.proc.returncode is None and self.exits and self.exits[0] is not None:
            self._left -= 1
            if self._left <= 0:
                self.proc = FakeProc(self.exits.pop(0))
        return self.proc.returncode is None

    def start(self, say) -> None:
        super().start(say)
        self._left = self.polls
        self.started_at = -1e9  # every run counts as a long one: restarted at once

    def signal(self, sig) -> None:
        self.signals.append(sig)
        self.proc = FakeProc(0)


FakeProc.wait = lambda self: self.returncode


@pytest.fixture(autouse=True)
def fast_watch(monkeypatch):
    monkeypatch.setattr(launcher, "WATCH_INTERVAL_S", 0.001)


def scripted_stack(tmp_path, scripts: dict[str, list[int | None]]):
    cfg = load_config({"profile": "tiny", "run_name": "t", "runs_dir": str(tmp_path),
                       "local": {"evaluators": 0, "rollouts": 1}})
    lines: list[str] = []
    s = Stack(cfg, say=lines.append)
    for name in s.children:
        s.children[name] = ScriptedChild(name, scripts.get(name, [None]))
    return s, lines


def test_a_dead_ladder_and_checkpoint_service_are_restarted_and_the_learner_ends_the_stack(tmp_path):
    # The ladder is killed twice, the checkpoint service once, then the learner finishes (0).
    s, lines = scripted_stack(tmp_path, {"ladder": [-9, -9, None], "checkpoint": [1, None]})
    s.children["learner"] = ScriptedChild("learner", [0], polls=12)
    assert s._watch() == 0
    assert (s.children["ladder"].restarts, s.children["checkpoint"].restarts, s.children["learner"].restarts) == (2, 1, 0)
    assert [x for x in lines if "restarting" in x] == [
        "checkpoint exited (code 1); restarting it (restart 1); the learner waits for it and retries",
        "ladder exited (code -9); restarting it (restart 1); the learner waits for it and retries",
        "ladder exited (code -9); restarting it (restart 2); the learner waits for it and retries"]


def test_a_crashed_learner_is_restarted_to_resume_and_a_halt_ends_the_stack_with_3(tmp_path):
    s, lines = scripted_stack(tmp_path, {"learner": [-9, 1, 3]})
    assert s._watch() == 3
    assert s.children["learner"].restarts == 2
    assert "learner exited (code -9); restarting it (restart 1); it resumes from the run's newest checkpoint" in lines
    assert "learner exited (code 1); restarting it (restart 2); it resumes from the run's newest checkpoint" in lines
    assert lines[-1] == ("the learner exited with code 3 (halted); last lines of "
                         f"{s.children['learner'].log_path}:\nTraceback: boom")


@pytest.mark.parametrize("code", [0, 2, 3])
def test_the_learners_final_codes_end_the_stack_with_that_code_and_no_restart(tmp_path, code):
    s, _ = scripted_stack(tmp_path, {"learner": [code]})
    assert s._watch() == code and s.children["learner"].restarts == 0


def test_a_crash_looping_ladder_makes_the_stack_give_up_and_exit_non_zero(tmp_path):
    s, lines = scripted_stack(tmp_path, {})
    clock = [1000.0]
    c = FakeChild("ladder", 1, clock)  # exits 1 s after each start
    c.started_at = clock[0] - 1.0
    step = lambda: s._restart_policy(c, True, "", on_restart="R", on_left_down="", on_refused="",  # noqa: E731
                                     give_up_after=GIVE_UP_QUICK_EXITS, now=clock[0])
    for k in range(1, GIVE_UP_QUICK_EXITS):
        assert step() == "waiting"
        clock[0] += restart_delay(k)
        assert step() == "restarted"
        clock[0] += 1.0
        c.proc = FakeProc(1)
    assert step() == "gave_up" and step() == "down"
    assert c.restarts == c.starts == GIVE_UP_QUICK_EXITS - 1
    assert lines[-1].startswith(f"ladder exited (code 1) 1 s after starting, its {GIVE_UP_QUICK_EXITS}th quick exit "
                                "in a row: it is not restarted again")
    # The whole stack: it gives up, stops the learner and exits EXIT_GAVE_UP.
    s, lines = scripted_stack(tmp_path, {"checkpoint": [2]})
    assert s._watch() == EXIT_GAVE_UP
    assert signal.SIGTERM in s.children["learner"].signals
    assert lines[-1] == f"the stack gives up: checkpoint refused its config; stopping every service (exit {EXIT_GAVE_UP})"


# ------------------------------------------------------------------ a log that cannot be written


class FlakyLog:
    """A log file that refuses its first ``refuse`` writes with ENOSPC, as a full disk does."""

    def __init__(self, refuse: int):
        self.refuse, self.data = refuse, b""

    def write(self, b: bytes) -> int:
        if self.refuse:
            self.refuse -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        self.data += b
        return len(b)

    def close(self) -> None:
        pass


def pump(child: Child, log, lines: list[bytes]) -> list[str]:
    said: list[str] = []
    proc = types.SimpleNamespace(stdout=io.BytesIO(b"".join(lines)))
    child._pump(proc, log, said.append)
    return said


def test_a_log_that_refuses_bytes_sends_the_lines_to_the_terminal_and_the_pump_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "LOG_RETRY_S", 0.0)  # try the file again at every line
    child = Child("ladder", {}, "/logs/ladder.log", echo=False)
    log = FlakyLog(refuse=3)
    said = pump(child, log, [b"one\n", b"two\n", b"three\n", b"four\n", b"five\n"])
    assert said == [
        "launcher: cannot write /logs/ladder.log (No space left on device); ladder's output goes to this terminal "
        "until the file takes bytes again",
        "[ladder] one", "[ladder] two", "[ladder] three",
        "launcher: /logs/ladder.log takes bytes again (3 line(s) of ladder went only to this terminal)"]
    assert log.data == (b"\n[launcher: 3 line(s) missing here: the file refused them (No space left on device); "
                        b"they went to the terminal]\nfour\nfive\n")
    assert child.tail() == "one\ntwo\nthree\nfour\nfive"


def test_the_learners_lines_reach_the_terminal_once_with_a_full_disk_and_a_failing_terminal(tmp_path):
    child = Child("learner", {}, "/logs/learner.log", echo=True)
    said = pump(child, FlakyLog(refuse=10**6), [f"it {k}\n".encode() for k in range(1, 6)])
    assert said[1:] == [f"it {k}" for k in range(1, 6)]  # echoed once each, no [learner] copy
    assert child.lines_not_logged == 5

    def broken(text):
        raise OSError(errno.ENOSPC, "No space left on device")

    proc = types.SimpleNamespace(stdout=io.BytesIO(b"a\nb\n"))
    child._pump(proc, FlakyLog(refuse=10**6), broken)  # a print that fails does not end the pump
    assert child.tail(2) == "a\nb"


def test_a_real_child_writing_to_dev_full_is_drained_to_its_end(tmp_path):
    """/dev/full refuses every write with ENOSPC: the child's 20,000 lines (far more than a
    pipe holds) are all read, so it is never blocked, and it exits 0."""
    child = Child("rollout-0", {}, "/dev/full", echo=False)
    child.command = lambda: [sys.executable, "-c", "for k in range(20000): print('line', k)"]
    said: list[str] = []
    child.start(said.append)
    assert child.proc.wait(timeout=60) == 0
    for t in child.threads:
        t.join(timeout=10)
    assert said[0].startswith("launcher: cannot write /dev/full (No space left on device)")
    assert said[1:] == [f"[rollout-0] line {k}" for k in range(20000)]


def test_a_learner_that_found_a_service_unreachable_at_start_is_restarted_not_given_up(tmp_path):
    # exit 4 (services/learner/main.py EXIT_UNREACHABLE): the checkpoint service died mid-request
    s, lines = scripted_stack(tmp_path, {"learner": [4, 0]})
    assert s._watch() == 0 and s.children["learner"].restarts == 1
    assert "learner exited (code 4); restarting it (restart 1); it resumes from the run's newest checkpoint" in lines
