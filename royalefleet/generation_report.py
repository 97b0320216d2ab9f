"""Each promoted generation's strength as text, HTML and a plot, for ``royalefleet strength``,
``status`` and ``report`` (the numbers: ``services.ladder.generation_strength.measure`` over
``<run>/ladder/generation_strength.json`` and the result log, exactly as the ladder measures).

A condition is ``<kind>/<opponent>``: ``unsearched/<anchor>``, ``searched/<anchor>`` (the search
simulates that anchor exactly), ``searched_sim_<bot>/<anchor>`` and
``searched_sim_<bot>/previous`` (the search simulates the other seat as ``<bot>``; ``previous`` is
the previous generation's champion). Each cell is the score (a draw counts half), its Wilson
95 % interval and the games behind it; a condition not yet wholly played is ``-``.
"""

from __future__ import annotations

import html

STATUS_GENERATIONS = 3
"""Generations ``royalefleet status`` shows, newest last."""


def conditions_of(measured) -> list[str]:
    """Every condition of ``measured`` (``GenerationStrength`` list), in first-seen order."""
    seen: dict[str, None] = {}
    for g in measured:
        seen.update(dict.fromkeys(g.score))
    return list(seen)


def cell(g, cond: str) -> str:
    """``0.75 [0.30, 0.95] n=4``, or ``-`` when ``cond`` is not measured for ``g``."""
    if cond not in g.score:
        return "-"
    return f"{g.score[cond]:.2f} [{g.score_lo[cond]:.2f}, {g.score_hi[cond]:.2f}] n={g.games[cond]}"


def _short(cond: str) -> str:
    return cond.replace("scripted:", "")


def table_lines(measured, pending: int) -> list[str]:
    """The per-generation table of ``royalefleet strength``: one line per generation and
    condition (generation, champion, env steps, condition, score [Wilson 95 %] n=games)."""
    if not measured:
        return [f"no generation measured yet ({pending} pending)"]
    lines = [f"{'generation':>10}  {'champion':<21} {'env_steps':>11}  {'condition':<34} score [Wilson 95 %] games"]
    for g in measured:
        steps = "-" if g.env_steps is None else f"{g.env_steps:,}"
        for i, cond in enumerate(conditions_of([g])):
            head = f"{g.generation:>10}  {g.champion:<21} {steps:>11}" if i == 0 else " " * 45
            lines.append(f"{head}  {_short(cond):<34} {cell(g, cond)}")
    lines.append(f"{len(measured)} generation(s) measured, {pending} pending; searched_sim_<bot>: the search "
                 "simulates the opponent as <bot> (no opponent model); previous: the previous generation's champion")
    return lines


def status_lines(measured, pending: int, active: bool) -> list[str]:
    """``royalefleet status`` lines: the newest ``STATUS_GENERATIONS`` generations, one line each;
    nothing when the measurement is off and nothing was planned."""
    if not measured:
        if not active and not pending:
            return []
        return [f"generation none measured yet ({pending} pending; evaluation.strength.generations)"]
    lines = []
    for g in measured[-STATUS_GENERATIONS:]:
        cells = "; ".join(f"{_short(c)} {g.score[c]:.2f} [{g.score_lo[c]:.2f}, {g.score_hi[c]:.2f}] ({g.games[c]})"
                          for c in g.score)
        lines.append(f"generation {g.generation} ({g.champion}): {cells}")
    lines.append(f"           {len(measured)} generation(s) measured, {pending} pending; `royalefleet strength` "
                 "for the table")
    return lines


def table_html(measured) -> str:
    """The report's per-generation table: a row per generation, a column per condition."""
    if not measured:
        return "<p>No generation measured yet.</p>"
    conds = conditions_of(measured)
    head = "".join(f"<th>{html.escape(_short(c))}</th>" for c in conds)
    body = "".join(f"<tr><td>{g.generation}</td><td>{html.escape(g.champion)}</td>"
                   + "".join(f"<td>{html.escape(cell(g, c))}</td>" for c in conds) + "</tr>" for g in measured)
    return f'<table id="generations"><tr><th>generation</th><th>champion</th>{head}</tr>{body}</table>'


def figure(measured):
    """Score against generation, one series per condition (unsearched solid, searched dashed),
    Wilson 95 % error bars. Returns the matplotlib Figure."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.2), layout="constrained")
    ax = fig.subplots()
    if not measured:
        ax.text(0.5, 0.5, "no generation measured yet\n(evaluation.strength.generations)", ha="center",
                va="center", transform=ax.transAxes, color="0.4")
        return fig
    for cond in conditions_of(measured):
        gens = [g for g in measured if cond in g.score]
        ax.errorbar([g.generation for g in gens], [g.score[cond] for g in gens],
                    yerr=[[max(0.0, g.score[cond] - g.score_lo[cond]) for g in gens],
                          [max(0.0, g.score_hi[cond] - g.score[cond]) for g in gens]],
                    marker="o", ms=3, capsize=2, ls="-" if cond.startswith("unsearched/") else "--",
                    label=_short(cond))
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("generation (0: the run's first snapshot)")
    ax.set_ylabel("score (draw = 1/2), Wilson 95 %")
    ax.set_title("strength by generation, unsearched and searched")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return fig
