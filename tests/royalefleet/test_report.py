"""Curves without Grafana: the learner's TensorBoard event files (services/learner/curves.py)
read back by TensorBoard itself across a resume, and ``royalefleet report``'s plots and page,
opened in headless Chromium."""

from __future__ import annotations

import json
import re
import struct
import subprocess

import pytest

from services.learner.curves import TensorBoardCurves, scalars
from tests.services.ladder.test_strength import NOOP, RAND, FA, S1, S2, config, measure, play, service
from tests.royalefleet.test_watch import CHROMIUM, needs_chromium


def test_every_finite_number_of_the_row_is_a_curve_point():
    row = {"run/iteration": 3, "ppo/kl": 0.01, "run/run_id": "abc", "env/episodes": 4, "x": float("nan"),
           "flag": True, "strength/score/scripted:noop": 1.0}
    assert scalars(row) == {"run/iteration": 3.0, "ppo/kl": 0.01, "env/episodes": 4.0,
                            "strength/score/scripted:noop": 1.0}


def test_a_resume_leaves_one_point_per_iteration_in_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    said: list[str] = []
    first = TensorBoardCurves(tmp_path, said.append)
    for it in range(1, 6):  # iterations 1..5, then a crash; the checkpoint was at 2
        first.write({"run/iteration": it, "ppo/kl": 0.1 * it, "run/run_id": "r"})
    first.close()
    again = TensorBoardCurves(tmp_path, said.append)
    for it in range(3, 8):  # the resumed process writes 3.. again, with other numbers
        again.write({"run/iteration": it, "ppo/kl": 1.0 * it, "strength/rating": 10.0 * it})
    again.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    kl = [(e.step, round(e.value, 6)) for e in acc.Scalars("ppo/kl")]
    assert kl == [(1, 0.1), (2, 0.2), (3, 3.0), (4, 4.0), (5, 5.0), (6, 6.0), (7, 7.0)]
    assert [e.step for e in acc.Scalars("strength/rating")] == [3, 4, 5, 6, 7]
    assert "run/run_id" not in acc.Tags()["scalars"]
    assert any("tensorboard --logdir" in line and "from 3 in this process" in line for line in said)


def fake_run(tmp_path):
    """A run folder: 6 metric rows and two measured strength snapshots (synthetic games)."""
    said: list[str] = []
    svc = service(tmp_path, said)
    measure(svc, S1, 5)
    play(svc)
    measure(svc, S2, 10)
    play(svc)
    svc.close()
    run = tmp_path / "t"
    (run / "config.json").write_bytes(json.dumps({**json.loads(__import__("msgspec").json.encode(config())),
                                                  "runs_dir": str(tmp_path)}).encode())
    rows = [{"run/iteration": i, "run/timesteps": 192 * i, "ppo/kl": 0.01 / i, "ppo/entropy": 6.0 - 0.1 * i,
             "ppo/clip_fraction": 0.02, "ppo/value_loss": 1.0 / i, "ppo/explained_variance": 0.1 * i,
             "throughput/overall_steps_per_second": 100.0 + i, f"env/win_rate_vs/{NOOP}": 0.5 + 0.05 * i,
             f"env/win_rate_vs/{RAND}": 0.1 * i} for i in range(1, 7)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"run/itera')
    return run


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_royalefleet_report_writes_the_plots_and_a_self_contained_page(tmp_path, capsys):
    from royalefleet.cli import main

    run = fake_run(tmp_path)
    assert main(["report", "t", "--runs-dir", str(tmp_path)]) == 0
    out = run / "report"
    assert capsys.readouterr().out.startswith(f"wrote {out / 'index.html'} and ")
    page = (out / "index.html").read_text()
    for name in ("strength_timesteps", "strength_wall", "training"):
        data = (out / f"{name}.png").read_bytes()
        w, h = png_size(data)
        # figure inches x 80 dpi: training 14 x 6.5, strength 11 x 4.2
        assert (w, h) == ((1120, 520) if name == "training" else (880, 336))
        # embedded, not linked: the page is the one file to send
        assert f'id="{name}" alt="{name}.png" src="data:image/png;base64,' in page
    assert "src=\"strength" not in page and "<link" not in page
    # the strength table: both snapshots, the second's scores are the synthetic ones
    assert re.search(r"<tr><td>10</td><td>1,920</td><td>-?\d+ &plusmn; \d+</td><td>1.00 \[0.61, 1.00\]</td>"
                     r"<td>0.50 \[0.19, 0.81\]</td><td>0.50 \[0.19, 0.81\]</td></tr>", page)
    assert "6 metric rows, last iteration 6 at 1,152" in page
    assert f"{FA}</th>" in page


def test_report_of_a_run_without_rows_is_refused_naming_the_file(tmp_path, capsys):
    from royalefleet.cli import main

    (tmp_path / "nothing").mkdir()
    assert main(["report", "nothing", "--runs-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"royalefleet report: run 'nothing' has no metrics.jsonl yet "
                                       f"({tmp_path / 'nothing' / 'metrics.jsonl'}): its learner writes one "
                                       "metric row an iteration\n")


@needs_chromium
@pytest.mark.slow
def test_the_report_page_opens_in_headless_chromium_and_every_plot_renders(tmp_path):
    from royalefleet.cli import main

    run = fake_run(tmp_path)
    assert main(["report", "t", "--runs-dir", str(tmp_path)]) == 0
    page = run / "report" / "index.html"
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom",
                          page.as_uri()], check=True, capture_output=True, text=True, timeout=120).stdout
    rendered = re.search(r'data-rendered="([^"]*)"', dom)
    assert rendered, dom[:2000]
    sizes = dict(item.split(":") for item in rendered.group(1).split())
    for name in ("strength_timesteps", "strength_wall", "training"):
        w, h = png_size((run / "report" / f"{name}.png").read_bytes())
        assert sizes[name] == f"{w}x{h}"  # the browser decoded the embedded PNG at its own size
