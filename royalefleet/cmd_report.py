"""``royalefleet report [RUN]``: the run's curves as PNG plots and one self-contained HTML page.

    royalefleet report myrun                  -> runs/myrun/report/index.html and *.png
    royalefleet report myrun --out /tmp/rep

Read-only on the run (no service needs to be up); it reads ``metrics.jsonl`` and the standing
strength measurement (``royalefleet strength``'s numbers: ``services.ladder.strength.measure``
over ``ladder/strength.json`` and the result log) and writes, with matplotlib (Agg backend):

* ``strength_timesteps.png``: score against each scripted anchor (Wilson 95 % interval as error
  bars) and the Bradley-Terry-Davidson rating (Elo, ``scripted:noop`` = 0, +- one standard
  error) of every measured strength snapshot, over the learner's timesteps;
* ``strength_wall.png``: the same over wall-clock time (UTC, when the learner took the snapshot);
* ``training.png``: win rate against each scripted opponent, KL, entropy, clip fraction, value
  loss, explained variance and throughput, one panel each, over timesteps.

With generations measured (``evaluation.strength.generations``), ``strength_generations.png``
(score against generation, unsearched and searched, Wilson 95 %) and a table per generation
(``royalefleet.generation_report``) follow the strength section.

``index.html`` embeds the plots (base64 ``data:`` URIs) and the strength table, so the one file
can be mailed or opened anywhere. A plot with nothing to draw yet (no strength snapshot
measured) says so on the plot instead of being left out.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from royalefleet.run_options import add_run_argument, add_run_options, run_config
from shared.run_dir import RunDir

TRAINING_PANELS = (
    ("win rate vs scripted", "env/win_rate_vs/", "fraction"),
    ("KL", "ppo/kl", "nats"),
    ("entropy", "ppo/entropy", "nats"),
    ("clip fraction", "ppo/clip_fraction", "fraction"),
    ("value loss", "ppo/value_loss", ""),
    ("explained variance", "ppo/explained_variance", ""),
    ("throughput", "throughput/overall_steps_per_second", "timesteps/s"),
)
"""(title, row key or key prefix ending in '/', unit) of each panel of training.png."""
PLOTS = ("strength_timesteps.png", "strength_wall.png", "training.png")
GENERATION_PLOT = "strength_generations.png"
"""Written beside PLOTS when the run measures its generations."""


def add_parser(subparsers) -> argparse.ArgumentParser:
    sp = subparsers.add_parser(
        "report", help="write the run's curves as PNG plots and a self-contained HTML page",
        description="Read metrics.jsonl and the strength measurement of a run and write strength per anchor and "
        "rating over timesteps and wall-clock, and win rate, KL, entropy, clip fraction, value loss, explained "
        "variance and throughput, as PNG plots and one HTML page that embeds them. Read-only on the run.")
    add_run_argument(sp)
    sp.add_argument("--out", type=Path, help="folder for index.html and the PNGs (default <run>/report)")
    add_run_options(sp)
    sp.set_defaults(func=cmd_report)
    return sp


def read_rows(path: Path) -> list[dict]:
    """The metric rows of ``path`` (a torn line is skipped; the last row of an iteration wins)."""
    by_it: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("run/iteration"), int):
            by_it[row["run/iteration"]] = row
    return [by_it[k] for k in sorted(by_it)]


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def strength_figure(measured, axis: str):
    """Two panels (score per anchor with Wilson bars; rating +- SE) over ``axis`` ("timesteps" or
    "wall"). Returns the matplotlib Figure."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    score_ax, rating_ax = fig.subplots(1, 2)
    if not measured:
        for ax in (score_ax, rating_ax):
            _empty(ax, "no strength snapshot measured yet\n(evaluation.strength.every_iterations)")
        return fig
    xs = ([m.timesteps for m in measured] if axis == "timesteps"
          else [datetime.fromtimestamp(m.requested_at, timezone.utc) for m in measured])
    for anchor in [a.anchor for a in measured[0].anchors]:
        points = [(x, a) for x, m in zip(xs, measured) for a in m.anchors if a.anchor == anchor]
        score_ax.errorbar([p[0] for p in points], [p[1].score for p in points],
                          yerr=[[max(0.0, p[1].score - p[1].lo) for p in points],  # rounding: never below 0
                                [max(0.0, p[1].hi - p[1].score) for p in points]],
                          marker="o", ms=3, capsize=2, label=anchor.removeprefix("scripted:"))
    score_ax.set_ylim(-0.02, 1.02)
    score_ax.set_ylabel("score (draw = 1/2), Wilson 95 %")
    score_ax.set_title("strength against each scripted anchor")
    score_ax.legend(fontsize=7, ncol=2)
    rating_ax.errorbar(xs, [m.rating for m in measured], yerr=[m.rating_se for m in measured], marker="o", ms=3,
                       capsize=2, color="black")
    rating_ax.axhline(0.0, color="0.6", lw=0.8)
    rating_ax.set_ylabel("Elo (scripted:noop = 0), +- 1 SE")
    rating_ax.set_title("Bradley-Terry-Davidson rating")
    for ax in (score_ax, rating_ax):
        ax.set_xlabel("learner timesteps" if axis == "timesteps" else "wall-clock (UTC)")
        ax.grid(alpha=0.3)
        if axis == "wall":
            ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    return fig


def training_figure(rows: list[dict]):
    """One panel per TRAINING_PANELS entry over ``run/timesteps``. Returns the Figure."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(14, 6.5), layout="constrained")
    axes = fig.subplots(2, 4).ravel()
    for ax, (title, key, unit) in zip(axes, TRAINING_PANELS):
        keys = sorted({k for r in rows for k in r if k.startswith(key)}) if key.endswith("/") else [key]
        drawn = False
        for k in keys:
            pts = [(r["run/timesteps"], r[k]) for r in rows if isinstance(r.get(k), (int, float)) and "run/timesteps" in r]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1,
                        label=k[len(key):].removeprefix("scripted:") if key.endswith("/") else None)
                drawn = True
        if not drawn:
            _empty(ax, f"no {key}{'*' if key.endswith('/') else ''} in the rows yet")
        elif key.endswith("/"):
            ax.legend(fontsize=7)
        ax.set_title(title + (f" ({unit})" if unit else ""), fontsize=9)
        ax.set_xlabel("learner timesteps", fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1].set_visible(False)
    return fig


def strength_table_html(measured) -> str:
    if not measured:
        return "<p>No strength snapshot measured yet.</p>"
    anchors = [a.anchor for a in measured[0].anchors]
    head = "".join(f"<th>{html.escape(a)}</th>" for a in anchors)
    body = []
    for m in measured:
        by = {a.anchor: a for a in m.anchors}
        cells = "".join(f"<td>{by[a].score:.2f} [{by[a].lo:.2f}, {by[a].hi:.2f}]</td>" if a in by else "<td>-</td>"
                        for a in anchors)
        body.append(f"<tr><td>{m.iteration}</td><td>{m.timesteps:,}</td><td>{m.rating:.0f} &plusmn; "
                    f"{m.rating_se:.0f}</td>{cells}</tr>")
    return ("<table><tr><th>iteration</th><th>timesteps</th><th>rating (Elo)</th>" + head + "</tr>"
            + "".join(body) + "</table>")


def _generation_section(images: list[str], generations, pending: int) -> str:
    """The per-generation section (its plot is the fourth image), or "" when the run measures none."""
    from royalefleet import generation_report

    if len(images) < 4:
        return ""
    return (f"<h2>Strength of each generation</h2>\n<p>{len(generations)} generation(s) measured, {pending} "
            f"pending.</p>\n{images[3]}\n{generation_report.table_html(generations)}\n")


def write_report(cfg, out: Path) -> Path:
    """Write the PNGs and index.html of run ``cfg`` to ``out``; returns the page's path.
    Raises OSError for a missing metrics.jsonl or a folder that cannot be written, ValueError
    for a strength plan that does not decode."""
    import matplotlib

    matplotlib.use("Agg")
    from royalefleet.cmd_strength import strength_of_run

    from royalefleet import generation_report
    from services.ladder.generation_strength import generation_strength_of_run

    run = Path(cfg.runs_dir) / cfg.run_name
    rows = read_rows(RunDir(run).metrics)
    measured, pending = strength_of_run(cfg)
    generations, gen_pending = generation_strength_of_run(cfg)
    out.mkdir(parents=True, exist_ok=True)
    figures = {"strength_timesteps.png": strength_figure(measured, "timesteps"),
               "strength_wall.png": strength_figure(measured, "wall"), "training.png": training_figure(rows)}
    if generations or gen_pending:
        figures[GENERATION_PLOT] = generation_report.figure(generations)
    images = []
    for name, fig in figures.items():
        fig.savefig(out / name, dpi=80)
        data = base64.b64encode((out / name).read_bytes()).decode()
        images.append(f'<figure><img id="{name[:-4]}" alt="{name}" src="data:image/png;base64,{data}">'
                      f"<figcaption>{name}</figcaption></figure>")
    last = rows[-1] if rows else {}
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>royalefleet report: {html.escape(cfg.run_name)}</title>
<style>body{{font-family:sans-serif;margin:2em}}img{{max-width:100%}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:13px}}</style></head><body>
<h1>Run {html.escape(cfg.run_name)}</h1>
<p>{len(rows)} metric rows, last iteration {last.get('run/iteration', '-')} at {last.get('run/timesteps', 0):,}
timesteps; {len(measured)} strength snapshot(s) measured, {pending} pending. Written
{datetime.now(timezone.utc).isoformat(timespec='seconds')} by <code>royalefleet report</code>.</p>
<h2>Strength against the scripted anchors</h2>
{images[0]}{images[1]}
{strength_table_html(measured)}
{_generation_section(images, generations, gen_pending)}<h2>Training</h2>
{images[2]}
<script>
// Says on the page which plots the browser decoded (tests/royalefleet/test_report.py reads it back).
window.addEventListener("load", () => {{
  document.body.dataset.rendered = Array.from(document.images)
    .map(i => i.id + ":" + i.naturalWidth + "x" + i.naturalHeight).join(" ");
}});
</script>
</body></html>
"""
    (out / "index.html").write_text(page)
    return out / "index.html"


def cmd_report(args, out=None) -> int:
    out = out or sys.stdout
    cfg = run_config(args, must_exist=True)
    folder = args.out or Path(cfg.runs_dir) / cfg.run_name / "report"
    try:
        page = write_report(cfg, folder)
    except FileNotFoundError as exc:
        print(f"royalefleet report: run {cfg.run_name!r} has no {Path(exc.filename).name} yet ({exc.filename}): "
              "its learner writes one metric row an iteration", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"royalefleet report: {exc}", file=sys.stderr)
        return 2
    plots = PLOTS + ((GENERATION_PLOT,) if (folder / GENERATION_PLOT).exists() else ())
    out.write(f"wrote {page} and {', '.join(str(folder / p) for p in plots)}\n")
    return 0
