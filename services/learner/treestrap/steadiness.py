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

import argparse
import json
import sys
from pathlib import Path

KEYS = ("treestrap/head_disagreement", "treestrap/target_stability", "treestrap/search_agreement")


def figures(rows: list[dict]) -> list[tuple[int, float, float, float]]:
    """(iteration, single, ensemble, search) of each row holding the three keys."""
    return [(int(r["run/iteration"]), 1.0 - r[KEYS[0]], r[KEYS[1]], r[KEYS[2]]) for r in rows if all(k in r for k in KEYS)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m services.learner.treestrap.steadiness", description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path, help="the run's folder (its metrics.jsonl)")
    ap.add_argument("--last", type=int, default=6, help="iterations the means are over (default 6)")
    args = ap.parse_args(argv)
    path = args.run_dir / "metrics.jsonl"
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
    tail = got[-args.last:]
    mean = [sum(x[i] for x in tail) / len(tail) for i in (1, 2, 3)]
    print(f"last {len(tail)}: single {mean[0]:.3f}, ensemble {mean[1]:.3f}, search {mean[2]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
