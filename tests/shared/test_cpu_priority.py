"""The evaluator's lowered CPU priority (shared/cpu_priority.py): the nice value and the
autogroup's, each refusal a sentence, and the evaluator's --nice / ROYALEFLEET_NICE."""

import json
import os
import subprocess
import sys

import pytest

from services.evaluator.main import parse_settings
from shared.cpu_priority import autogroup_nice, lower_cpu_priority, nice_value

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _in_child(code: str) -> dict:
    """Run ``code`` in a fresh python (this test process keeps its priority); its last stdout
    line is JSON."""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env=os.environ | {"PYTHONPATH": REPO})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_nice_values_0_to_19_are_taken_and_others_refused_naming_the_value():
    assert [nice_value(str(n)) for n in (0, 1, 19)] == [0, 1, 19]
    with pytest.raises(ValueError, match=r"^20 is not a nice value 0..19 \(0 keeps the priority, 19 is the lowest\)$"):
        nice_value("20")
    with pytest.raises(ValueError, match=r"^-1 is not a nice value"):
        nice_value("-1")
    with pytest.raises(ValueError, match="^not a whole number$"):
        nice_value("low")
    with pytest.raises(ValueError, match="nice 25 is not 0..19"):
        lower_cpu_priority(25)


def test_the_process_and_its_autogroup_get_the_nice_value(tmp_path):
    fake = tmp_path / "autogroup"
    fake.write_text("/autogroup-41 nice 0\n")
    got = _in_child(
        "import json, os, pathlib\n"
        "from shared.cpu_priority import lower_cpu_priority\n"
        f"before = os.nice(0)\n"
        f"problems = lower_cpu_priority(7, autogroup=pathlib.Path({str(fake)!r}), session_leader=True)\n"
        "again = lower_cpu_priority(3, autogroup=pathlib.Path('/nonexistent'))\n"
        "print(json.dumps({'before': before, 'after': os.nice(0), 'problems': problems, 'again': os.nice(0)}))")
    assert got["before"] <= 7 and got["after"] == 7 and got["problems"] == []  # a value, not an increment
    assert got["again"] == 7  # a process already nicer than asked keeps its value
    assert fake.read_text() == "7\n"  # what the kernel's autogroup file takes: the group's nice value


def test_a_process_that_does_not_lead_its_session_leaves_the_shells_autogroup_alone(tmp_path):
    fake = tmp_path / "autogroup"
    fake.write_text("/autogroup-41 nice 0\n")
    got = _in_child(
        "import json, pathlib\n"
        "from shared.cpu_priority import lower_cpu_priority\n"
        f"print(json.dumps(lower_cpu_priority(4, autogroup=pathlib.Path({str(fake)!r}), session_leader=False)))")
    assert got == [] and fake.read_text() == "/autogroup-41 nice 0\n"


def test_a_busy_autogroup_write_is_retried(tmp_path, monkeypatch):
    import errno

    from shared import cpu_priority

    calls = []

    class Busy(type(tmp_path)):
        def exists(self):
            return True

        def write_text(self, text):
            calls.append(text)
            if len(calls) < 3:
                raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(cpu_priority.os, "setpriority", lambda *a: None)
    monkeypatch.setattr(cpu_priority.time, "sleep", lambda s: None)
    assert cpu_priority.lower_cpu_priority(19, autogroup=Busy(tmp_path / "ag"), session_leader=True) == []
    assert calls == ["19\n"] * 3
    calls.clear()

    class AlwaysBusy(Busy):
        def write_text(self, text):
            calls.append(text)
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    got = cpu_priority.lower_cpu_priority(19, autogroup=AlwaysBusy(tmp_path / "ag"), session_leader=True)
    assert len(calls) == cpu_priority.AUTOGROUP_TRIES and len(got) == 1 and "Resource temporarily unavailable" in got[0]


def test_zero_changes_nothing_and_a_refused_autogroup_is_a_sentence_not_an_exception(tmp_path):
    untouched = tmp_path / "autogroup"
    untouched.write_text("/autogroup-41 nice 0\n")
    assert lower_cpu_priority(0, autogroup=untouched) == []
    assert untouched.read_text() == "/autogroup-41 nice 0\n"
    blocked = tmp_path / "a-directory"
    blocked.mkdir()  # writing it fails like a read-only /proc in a container
    got = _in_child(
        "import json, pathlib\n"
        "from shared.cpu_priority import lower_cpu_priority\n"
        f"print(json.dumps(lower_cpu_priority(3, autogroup=pathlib.Path({str(blocked)!r}), session_leader=True)))")
    assert len(got) == 1 and got[0].startswith(f"could not set the autogroup's nice value ({blocked}) to 3: ")
    assert lower_cpu_priority(0, autogroup=tmp_path / "absent") == []  # no autogroups: nothing to say


def test_autogroup_nice_reads_the_kernel_line(tmp_path):
    f = tmp_path / "autogroup"
    f.write_text("/autogroup-7563 nice 19\n")
    assert autogroup_nice(f) == 19
    assert autogroup_nice(tmp_path / "absent") is None


def test_the_evaluator_runs_at_nice_19_unless_told(capsys):
    assert parse_settings([], environ={}).nice == 19
    assert parse_settings([], environ={"ROYALEFLEET_NICE": "0"}).nice == 0
    assert parse_settings(["--nice", "5"], environ={"ROYALEFLEET_NICE": "0"}).nice == 5
    with pytest.raises(SystemExit):
        parse_settings(["--nice", "25"], environ={})
    assert "argument --nice: '25': 25 is not a nice value 0..19" in capsys.readouterr().err
