"""TensorBoard event files beside ``metrics.jsonl``: the run's curves without Grafana.

Every finite number of every metric row becomes a scalar under its row key (``ppo/kl``,
``env/win_rate_vs/scripted:noop``, ``strength/rating``, ...) at step = ``run/iteration``, in
``runs/<run>/tensorboard/`` (``tensorboard --logdir runs`` shows every run). Strings (ids,
digests) are left out; so is a NaN or an infinity, which is no point on a curve.

The writer is ``tensorboardX.SummaryWriter``, opened at the first row this process writes with
``purge_step`` = that row's iteration: a resume from checkpoint N writes iteration N + 1 first,
and TensorBoard then drops every earlier event at a step >= N + 1, exactly the rows the resume
moved to ``metrics.purged.jsonl`` (services/learner/metric_log.py), so no step has two points.
Curves are a view, never the record: without tensorboardX installed, or on a disk that refuses,
the learner says so once and trains on.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared.run_dir import CURVES

CURVES_DIR = CURVES


def scalars(row: dict) -> dict[str, float]:
    """The row's keys that make a curve point: finite int or float values (bools excluded)."""
    return {k: float(v) for k, v in row.items()
            if type(v) in (int, float) and math.isfinite(v)}


class TensorBoardCurves:
    """Writes each metric row to ``<run_dir>/tensorboard`` (module docstring). ``say`` prints."""

    def __init__(self, run_dir: str | Path, say: Callable[[str], object]):
        self.dir = Path(run_dir) / CURVES_DIR
        self.say = say
        self.writer: Any = None  # a tensorboardX SummaryWriter once the first row arrives
        self.off = False

    def write(self, row: dict) -> None:
        """Add every scalar of ``row`` at step ``row["run/iteration"]`` and flush."""
        if self.off or "run/iteration" not in row:
            return
        step = int(row["run/iteration"])
        try:
            if self.writer is None:
                from tensorboardX import SummaryWriter

                # The file name holds whole seconds and the host only: two writers in one second
                # (a quick restart) would share it; the nanosecond suffix keeps them apart, in order.
                self.writer = SummaryWriter(logdir=str(self.dir), purge_step=step, flush_secs=3600,
                                            filename_suffix=f".{time.time_ns()}.{os.getpid()}")
                self.say(f"learner: TensorBoard curves in {self.dir} (see them with `tensorboard --logdir "
                         f"{self.dir.parent.parent}`); steps are iterations, from {step} in this process")
            wall = time.time()
            for key, value in scalars(row).items():
                self.writer.add_scalar(key, value, global_step=step, walltime=wall)
            self.writer.flush()
        except (ImportError, OSError) as exc:
            self.off = True
            self.say(f"learner: no TensorBoard curves from here on ({type(exc).__name__}: {exc}); metrics.jsonl and "
                     "`royalefleet report` have every number")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
