"""``royalefleet bench``'s scratch stacks (royalefleet/bench/__init__.py ``stack_speed``): a stack that a
signal stopped, or whose learner stopped before ``--iterations``, exits 0 like a finished one;
the bench must not read it as a measurement with no rows (the `--synthetic 8` cpu column that
printed nan and exited 0, docs/throughput.md). Fake children and fake stacks: no process starts."""

from __future__ import annotations

import json
import os
import signal

import pytest

from royalefleet import bench, launcher
from royalefleet.bench import EXIT_INTERRUPTED, incomplete_stack, stack_speed
from shared.config import load_config


class _Proc:
    def __init__(self, returncode):
        self.returncode = returncode

    def wait(self):
        return self.returncode


class _Child:
    """A live child that, like the real learner (``request_stop``), exits 0 on SIGTERM."""

    def __init__(self, name):
        self.name, self.log_path, self.proc, self.threads = name, f"/logs/{name}.log", _Proc(None), []
        self.restart_at, self.given_up, self.restarts, self.signals = None, False, 0, []

    def alive(self):
        return self.proc.returncode is None

    def signal(self, sig):
        self.signals.append(sig)
        self.proc = _Proc(0)

    def tail(self, n=12):
        return ""


def test_a_signal_to_the_launcher_stops_the_learner_cleanly_and_the_stack_exits_0(tmp_path, monkeypatch):
    """The cause: SIGTERM/SIGINT to the launcher (a `timeout` around the bench, a Ctrl-C) becomes
    a SIGTERM to the learner, which checkpoints and exits 0, and the stack's exit code is 0, the
    same as a finished run's; only ``Stack.interrupts`` tells them apart."""
    monkeypatch.setattr(launcher, "WATCH_INTERVAL_S", 0.001)
    cfg = load_config({"profile": "tiny", "run_name": "t", "runs_dir": str(tmp_path),
                       "local": {"evaluators": 0, "rollouts": 1}})
    s = launcher.Stack(cfg, say=lambda text: None)
    for name in s.children:
        s.children[name] = _Child(name)
    s._on_signal()
    assert s._watch() == 0
    assert s.children["learner"].signals == [signal.SIGTERM] and s.interrupts == 1 and s.gave_up is None


def _fake_stack(rows_written: list[int], interrupts: int):
    class FakeStack:
        """Writes a metric row per iteration in ``rows_written`` and exits 0, as the real stack
        does after ``interrupts`` signals."""

        def __init__(self, cfg, *, iterations, say, **options):
            self.cfg, self.interrupts, self.gave_up = cfg, interrupts, None
            self.children = {"learner": type("L", (), {"tail": lambda self: "learner: stop requested"})()}

        def run(self):
            folder = os.path.join(self.cfg.runs_dir, self.cfg.run_name)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "metrics.jsonl"), "w") as fh:
                for it in rows_written:
                    fh.write(json.dumps({"run/iteration": it}) + "\n")
            return 0

    return FakeStack


@pytest.mark.parametrize("rows_written, interrupts, code, says", [
    ([], 1, EXIT_INTERRUPTED, "interrupted (Ctrl-C or SIGTERM) with 0 of 2 iterations written"),
    ([1], 1, EXIT_INTERRUPTED, "interrupted (Ctrl-C or SIGTERM) with 1 of 2 iterations written"),
    ([], 0, 1, "the stack exited 0 with 0 of 2 iterations written: its learner stopped before --iterations 2"),
    ([1], 0, 1, "the stack exited 0 with 1 of 2 iterations written"),
])
def test_a_stack_that_exits_0_short_of_its_iterations_ends_the_bench_saying_why(monkeypatch, rows_written, interrupts,
                                                                                code, says):
    monkeypatch.setattr(launcher, "Stack", _fake_stack(rows_written, interrupts))
    said: list[str] = []
    with pytest.raises(SystemExit) as exc:
        stack_speed(load_config({"profile": "tiny"}), 2, said.append)
    assert exc.value.code == code
    assert len(said) == 1 and said[0].startswith(f"bench: {says}") and said[0].endswith("learner: stop requested")


def test_a_finished_stack_gives_its_rows(monkeypatch):
    monkeypatch.setattr(launcher, "Stack", _fake_stack([1, 2], 0))
    said: list[str] = []
    assert stack_speed(load_config({"profile": "tiny"}), 2, said.append) == [{"run/iteration": 1},
                                                                             {"run/iteration": 2}]
    assert said == []


def test_incomplete_stack_reads_the_last_iteration_not_the_row_count():
    # a learner restarted after a crash rewrites rows from its checkpoint: 3 rows, iteration 2 last
    assert incomplete_stack([{"run/iteration": i} for i in (1, 1, 2)], 2, False) is None
    assert incomplete_stack([{"run/iteration": i} for i in (1, 2)], 3, False).startswith("the stack exited 0 with 2 of 3")
    assert incomplete_stack([{"run/iteration": 2}], 2, True).startswith("interrupted (Ctrl-C or SIGTERM) with 2 of 2")
    assert bench.EXIT_INTERRUPTED == 130
