"""``royalefleet demos record`` leaves no worker behind: SIGTERM stops it as Ctrl-C does (the
workers stopped, the finished shards kept as the set of their battles and nothing half-written,
exit 143), and a SIGKILLed command's workers get SIGTERM from the kernel
(``shared.parent_death``) instead of recording on as orphans."""

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


def test_sigterm_stops_the_workers_keeps_the_finished_shards_and_sigkill_leaves_no_orphan(tmp_path):
    from shared.demos import MANIFEST, load_set, read_manifest

    proc, workers, lines, reader = _start(tmp_path, "termed")
    time.sleep(3.0)  # a few more one-battle shards down
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 143
    reader.join(10)  # the pipe closes with the process: every last line read
    text = "".join(lines)
    assert "royalefleet demos record: stopped (SIGTERM) after" in text, text[-1500:]
    demos = tmp_path / "runs" / "stop" / "demos"
    assert not (demos / "termed.partial").exists()
    m = read_manifest(demos / "termed")
    assert f"kept the {len(m.shards)} finished shard(s) of 5000 as " in text, text[-1500:]
    # the set is exactly its finished shards: one battle each, the manifest's battles theirs, every
    # shard verifying against its sha256, no other file
    assert len(m.shards) >= 1 and all(len(s.battles) == 1 for s in m.shards)
    assert sorted(b.battle for b in m.battles) == sorted(s.battles[0] for s in m.shards)
    assert {p.name for p in (demos / "termed").iterdir()} == {s.file for s in m.shards} | {MANIFEST}
    _, rows = load_set(demos / "termed", m.digests)
    assert len(rows["actions"]) == m.rows == sum(s.rows for s in m.shards)
    assert _wait_gone(workers, 15) == []

    proc, workers, _, _ = _start(tmp_path, "killed")
    proc.kill()
    proc.wait(30)
    assert _wait_gone(workers, 15) == [], "workers outlived a SIGKILLed demos record"


def test_a_stopped_recording_keeps_only_its_finished_shards_battles_and_files(tmp_path):
    import io

    from royalefleet.cmd_demos import DemoCollector
    from shared.demos import BattleEntry, ShardEntry

    staging = tmp_path / "set.partial"
    staging.mkdir()
    for name in ("shard-00000.npz", "shard-00002.npz", "shard-00001.npz.tmp"):
        (staging / name).write_bytes(b"x")
    (staging / "stray").mkdir()
    c = DemoCollector(6, 3, io.StringIO())
    c.entries = [BattleEntry(battle=b, env_seed=b, teacher="t", opponent="o", recorded_seats=[0], outcome=[1],
                             decisions=5) for b in (0, 1, 2, 3, 4)]
    # shard 0 (battles 0-1) and shard 2 (battles 4-5, only 4 reported) finished; shard 1 was being written
    c.shard_entries = {0: ShardEntry("shard-00000.npz", "a" * 64, 10, 2, [0, 1]),
                       2: ShardEntry("shard-00002.npz", "b" * 64, 9, 1, [4, 5])}
    c.keep_finished(staging)
    assert [e.battle for e in c.entries] == [0, 1, 4]
    assert sorted(p.name for p in staging.iterdir()) == ["shard-00000.npz", "shard-00002.npz"]
