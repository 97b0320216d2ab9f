"""Does the ensemble make TreeStrap's targets steadier? The figure from a run's metric rows.

    python -m services.learner.treestrap.steadiness RUN_DIR [--last N]

Per iteration: ``single`` = 1 - ``treestrap/head_disagreement`` (two single heads, each on its own
bootstrap resample, agree on the top-1 among the searched candidates), ``ensemble`` =
``treestrap/target_stability`` (two half-ensembles on disjoint heads agree), ``search`` =
``treestrap/search_agreement`` (the whole ensemble's top-1 is the search target's), and the means
over the last N iterations (default 6). The ensemble steadies the target when ``ensemble`` stands
above ``single``; the target is worth steadying only where ``search`` stands above chance (1 / the
candidates). A figure, not a test; docs/design.md, "TreeStrap", records one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KEYS = ("treestrap/head_disagreement", "treestrap/target_stability", "treestrap/search_agreement")


def figures(rows: list[dict]) -> list[tuple[int, float, float, float]]:
    """(iteration, single, ensemble, search) of each row holding the three keys."""
    return [(int(r["run/iteration"]), 1.0 - r[KEYS[0]], r[KEYS[1]], r[KEYS[2]]) for r in rows if all(k in r for k in KEYS)]


USAGE = "usage: python -m services.learner.treestrap.steadiness RUN_DIR [--last N]"


def parse(argv: list[str]) -> tuple[Path, int] | None:
    """(the run's folder, N) of ``RUN_DIR [--last N]``; None when the words are not that (a figure
    tool's two arguments: no service settings, so no parser of its own beyond this)."""
    last = 6
    if len(argv) == 3 and argv[1] == "--last" and argv[2].isdigit() and int(argv[2]) > 0:
        last = int(argv[2])
    elif len(argv) != 1 or argv[0].startswith("-"):
        return None
    return Path(argv[0]), last


def main(argv: list[str] | None = None) -> int:
    got_args = parse(sys.argv[1:] if argv is None else argv)
    if got_args is None:
        print(USAGE + " (N >= 1, default 6)", file=sys.stderr)
        return 2
    run_dir, last = got_args
    from shared.run_dir import RunDir

    path = RunDir(run_dir).metrics
    if not path.is_file():
        print(f"steadiness: {path} does not exist: give a run's folder", file=sys.stderr)
        return 2
    got = figures([json.loads(line) for line in path.read_text().splitlines() if line.strip()])
    if not got:
        print(f"steadiness: no row of {path} holds {', '.join(KEYS)}: is it a treestrap run?", file=sys.stderr)
        return 2
    print("iteration  single  ensemble  search")
    for it, single, ens, search in got:
        print(f"{it:9d}  {single:6.3f}  {ens:8.3f}  {search:6.3f}")
    tail = got[-last:]
    mean = [sum(x[i] for x in tail) / len(tail) for i in (1, 2, 3)]
    print(f"last {len(tail)}: single {mean[0]:.3f}, ensemble {mean[1]:.3f}, search {mean[2]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
