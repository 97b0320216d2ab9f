"""README's "A bot that beats `defend`" block, run as written at tiny sizes, so it cannot rot: read
from README.md, its sizes swapped for tiny ones (each swap must find its text), run by bash in
an empty folder with ``royalefleet`` and ``python`` this interpreter. ``make install`` is checked
to build the venv alone (make -n) instead of run."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEADING = "## A bot that beats `defend`"
FIRST = "make install && . .venv/bin/activate"
TINY = {"--battles 600": "--battles 4", "defend-600": "defend-4", "--workers 2": "--workers 1",
        "--max-epochs 3": "--max-epochs 1", "+search:8": "+search:2:2", "--games 200": "--games 2",
        "games=20,": "games=2,", '"profile": "cpu"': '"profile": "tiny"'}
"""README's sizes and the tiny ones the test plays."""


def readme_block() -> str:
    """The first fenced block under HEADING in README.md."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index(HEADING):]
    m = re.search(r"^```\n(.*?)^```$", section, re.S | re.M)
    assert m, f"no fenced block under {HEADING!r} in README.md"
    return m.group(1)


def test_the_block_starts_from_make_install_which_builds_the_venv_alone():
    block = readme_block()
    assert block.startswith(FIRST)
    assert len(re.findall(r"^```", (ROOT / "README.md").read_text().split(HEADING)[1].split("\n## ")[0], re.M)) == 2
    dry = subprocess.run(["make", "-n", "-B", "install"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "pip install --quiet --require-hashes -r requirements.lock" in dry and "bin/royalefleet" not in dry  # installs; starts nothing
    run = subprocess.run(["make", "-n", "-B", "run"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert ".venv/bin/royalefleet up" in run  # while make run trains


@pytest.mark.slow
def test_the_readme_block_runs_as_written_at_tiny_sizes(tmp_path):
    block = readme_block()
    for big, tiny in TINY.items():
        assert big in block, f"README's block no longer says {big!r}: update TINY"
        block = block.replace(big, tiny)
    script = block.replace(FIRST, "set -euo pipefail", 1)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("royalefleet", f'exec {sys.executable} -m royalefleet "$@"'),
                       ("python", f'exec {sys.executable} "$@"')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(stat.S_IRWXU)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    sid = next(x for x in lines if x.startswith("royalefleet clone: wrote snap:")).split("snap:")[1].split(";")[0]
    assert any(x.startswith(f"snap:{sid}+search:2:2 vs scripted:defend: score ") for x in lines)  # eval's line
    assert any(x.startswith(f"exported snap:{sid}+search:2:2 (run 'imitate'") for x in lines)
    summary = lines[-1]
    assert re.match(rf"snap:{sid}\+search:2:2 vs defend: \d+-\d+-\d+.* over 2 games\.", summary), summary
    assert (work / "my-defender" / "bot.json").is_file()
