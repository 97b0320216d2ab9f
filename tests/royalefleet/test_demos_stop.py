"""``royalefleet demos record`` leaves no worker behind: SIGTERM stops it as Ctrl-C does (the
workers stopped, the partial set removed, exit 143), and a SIGKILLed command's workers get SIGTERM
from the kernel (``shared.parent_death``) instead of recording on as orphans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from royalefleet.procfs import children_of

ROOT = Path(__file__).resolve().parents[2]


def _start(tmp_path: Path, name: str):
    """The command recording far more battles than the test waits for, and once its first battle
    is done: (process, worker pids, the lines printed so far, the thread reading them)."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"profile": "tiny", "env": {"max_steps": 120}}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "royalefleet", "demos", "record", "stop", "--teacher", "scripted:defend",
         "--battles", "5000", "--workers", "2", "--shard-battles", "1", "--name", name,
         "--config", str(cfg), "--runs-dir", str(tmp_path / "runs")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: list[str] = []
    first = threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line)
            if "/5000 battles" in line:
                first.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert first.wait(120), "".join(lines)[-2000:]
    workers = [pid for pid, (_, argv) in children_of(proc.pid).items() if any(b"spawn_main" in a for a in argv)]
    assert len(workers) == 2, children_of(proc.pid)
    return proc, workers, lines, reader


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


def test_sigterm_stops_the_workers_and_removes_the_partial_set_and_sigkill_leaves_no_orphan(tmp_path):
    proc, workers, lines, reader = _start(tmp_path, "termed")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 143
    reader.join(10)  # the pipe closes with the process: every last line read
    text = "".join(lines)
    assert "royalefleet demos record: stopped (SIGTERM) after" in text and "nothing kept" in text, text[-1500:]
    demos = tmp_path / "runs" / "stop" / "demos"
    assert not (demos / "termed.partial").exists() and not (demos / "termed").exists()
    assert _wait_gone(workers, 15) == []

    proc, workers, _, _ = _start(tmp_path, "killed")
    proc.kill()
    proc.wait(30)
    assert _wait_gone(workers, 15) == [], "workers outlived a SIGKILLed demos record"
