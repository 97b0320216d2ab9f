"""Where a searched teacher leaves its base's pick, and how its battles went.

    python -m royalefleet.bench.overrules RUN --demos plans-180

For a demonstration set whose teacher is a scripted rung searching (``scripted:<rung>+search:...``,
docs/search.md), each choice row's base pick is recomputed by the rung's own bot (RoyaleGym's,
``shared.envs.make_scripted``) from the row's legal set (the rungs read only the mask planes, so
this is exact) and compared with the recorded action: the share kept, and the overrules split into
the no-op, the same card on another tile, and another card. Then the teacher's own outcomes by
opponent from the manifest (a draw counts half; Wilson 95 %). A figure, not a test; docs/learning.md
("Distilling the search") reads it.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from royalefleet.run_options import add_run_argument, add_run_options, run_config


@dataclass
class Overrules:
    """Counts over a set's choice rows (each row once)."""

    rows: int = 0
    kept: int = 0
    noop: int = 0
    same_card: int = 0
    other_card: int = 0


def legal_planes(ids: np.ndarray, slots: int, height: int, width: int) -> np.ndarray:
    """(slots, height, width) int8 mask planes of one row's legal head-frame ids (the no-op and the
    buttons past the grid left out): what RoyaleGym's ``obs["mask_planes"]`` holds."""
    planes = np.zeros(slots * height * width, np.int8)
    grid = ids[(ids > 0) & (ids <= slots * height * width)] - 1
    planes[grid] = 1
    return planes.reshape(slots, height, width)


def count(manifest, shards, base, slots: int, height: int, width: int) -> Overrules:
    """``Overrules`` of ``shards`` (arrays as ``shared.demos.read_shard`` returns them) against the
    scripted ``base`` bot (``act(obs, mask, rng)``)."""
    out = Overrules()
    rng = np.random.default_rng(0)
    hw = height * width
    for a in shards:
        for i in np.flatnonzero(~a["forced"]):
            ids = a["legal_ids"][a["legal_offsets"][i]: a["legal_offsets"][i + 1]].astype(np.int64)
            planes = legal_planes(ids, slots, height, width)
            pick = int(base.act({"mask_planes": planes}, None, rng))
            act = int(a["actions"][i])
            out.rows += 1
            if act == pick:
                out.kept += 1
            elif act == 0:
                out.noop += 1
            elif pick > 0 and (act - 1) // hw == (pick - 1) // hw:
                out.same_card += 1
            else:
                out.other_card += 1
    return out


def outcomes(manifest) -> dict[str, list[float]]:
    """Per opponent, the teacher's scores (1 won, 1/2 draw or truncated, 0 lost) on its recorded seats."""
    by = defaultdict(list)
    for b in manifest.battles:
        for o in b.outcome:
            by[b.opponent].append((o + 1) / 2)
    return dict(by)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m royalefleet.bench.overrules", description=__doc__.split("\n\n")[0])
    add_run_argument(ap)
    ap.add_argument("--demos", required=True, help="the set: a name under the run's demos/ or a path")
    add_run_options(ap)
    args = ap.parse_args(argv)
    cfg = run_config(args)
    from royalefleet.clone_data import resolve_set
    from shared.demos import read_manifest, read_shard
    from shared.run_dir import RunDir
    from shared.envs import build_env, make_scripted, obs_spec
    from shared.search.spec import split_search
    from shared.stats import wilson_interval

    try:
        folder = resolve_set(args.demos, RunDir(Path(cfg.runs_dir) / cfg.run_name).demos)
    except FileNotFoundError as exc:  # a typo or a set still recording (<name>.partial): say so, no traceback
        print(f"python -m royalefleet.bench.overrules: {exc}", file=sys.stderr)
        return 2
    m = read_manifest(folder)
    spec = obs_spec(build_env(cfg.env))
    slots = spec.hand_slots
    print(f"{folder.name}: {len(m.battles)} battles, {m.choice_rows:,} choice rows; teacher(s) {', '.join(m.teachers)}")
    bases = {split_search(t)[0] for t in m.teachers}
    if len(bases) == 1 and next(iter(bases)).startswith("scripted:"):
        base_id = next(iter(bases))
        shards = [read_shard(folder / s.file, s.sha256, m.digests) for s in m.shards]
        c = count(m, shards, make_scripted(base_id, 0.9), slots, spec.height, spec.width)
        over = c.rows - c.kept
        print(f"  {base_id}'s own pick kept on {c.kept:,} of {c.rows:,} ({c.kept / max(c.rows, 1):.3f}); overruled "
              f"{over:,}: the no-op {c.noop:,}, the same card on another tile {c.same_card:,}, another card "
              f"{c.other_card:,}")
    else:
        print("  (overrules need one scripted base teacher: skipped)")
    by = outcomes(m)
    for opp in [o for o in m.opponents if o in by] + [o for o in by if o not in m.opponents]:
        scores = by[opp]
        lo, hi = wilson_interval(sum(scores), len(scores))
        print(f"  against {opp}: {np.mean(scores):.3f} [{lo:.3f}, {hi:.3f}] over {len(scores)} battles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
