"""``python -m royalefleet.bench.checkpoint CHECKPOINT_DIR``: what the battles' states add to a checkpoint.

Takes a checkpoint folder written by a run (``runs/<run>/checkpoints/<iteration>``) and times, on
this machine's disk, the learner's share of a checkpoint with and without the ``battle_states``
component, alternating the two so that disk and load noise fall on both alike:

* without: the checkpoint store's atomic write (every file fsynced, renamed, indexed) of the
  other components' files;
* with: building the component from the battles' states (``BattleStateBook.files``: sha256 per
  state, the index, the msgpack map) plus the write of every file.

The learner's own capture (weights and optimizers to bytes) and the transfer are left out of both,
which makes the ratio larger than the learner sees, never smaller. The rollouts' saving is not in
either: they save while the learner runs the update (``time/battle_states_save`` in the row) and
the learner only waits for what is late (``time/battle_states_wait``).

Prints the median wall time of each and the median ratio of back-to-back pairs (docs/throughput.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def measure(checkpoint: Path, repeats: int = 9, scratch: str | None = None) -> dict:
    import msgspec

    from services.checkpoint.store import MANIFEST, CheckpointStore
    from shared.run_dir import RunDir
    from services.learner.battle_states import INDEX_FILE, STATES_FILE, BattleStateBook, StateIndex

    manifest = json.loads((checkpoint / MANIFEST).read_text())
    files = {name: (checkpoint / name).read_bytes() for name in manifest["files"]}
    if STATES_FILE not in files:
        raise SystemExit(f"{checkpoint} has no {STATES_FILE}: take a checkpoint written with battle states")
    meta = json.dumps(manifest["meta"]).encode()
    base = {n: b for n, b in files.items() if not n.startswith("battle_states/")}
    index = msgspec.json.decode(files[INDEX_FILE], type=StateIndex)
    states = {int(k): v for k, v in msgspec.msgpack.decode(files[STATES_FILE], type=dict[str, bytes]).items()}
    times: dict[str, list[float]] = {"without": [], "with": []}
    with tempfile.TemporaryDirectory(prefix="royalefleet-bench-ckpt-", dir=scratch) as tmp:
        store = CheckpointStore(RunDir(tmp).checkpoints, say=lambda s: None)
        for i in range(repeats):
            t0 = time.perf_counter()
            store.write(2 * i, dict(base), meta)
            times["without"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            book = BattleStateBook(index.engine, say=lambda s: None)
            book.current, book.iteration = states, index.iteration
            store.write(2 * i + 1, base | book.files(), meta)
            times["with"].append(time.perf_counter() - t0)
    without, with_ = statistics.median(times["without"]), statistics.median(times["with"])
    # each pair ran back to back: the median of the pairs' ratios is the least disturbed by a
    # machine whose load drifts during the measurement
    paired = statistics.median(w / wo for w, wo in zip(times["with"], times["without"]))
    return {"battles": len(states), "states_bytes": sum(len(b) for b in states.values()),
            "other_bytes": sum(len(b) for b in base.values()), "without_s": without, "with_s": with_,
            "ratio": paired}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m royalefleet.bench.checkpoint", description=__doc__.splitlines()[0])
    p.add_argument("checkpoint", type=Path, help="a checkpoint folder (runs/<run>/checkpoints/<iteration>)")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--scratch", help="folder on the disk to time (default: the system's temporary folder)")
    a = p.parse_args(argv)
    r = measure(a.checkpoint, a.repeats, a.scratch)
    print(f"{r['battles']} battle states, {r['states_bytes']:,} B beside {r['other_bytes']:,} B of other files: "
          f"checkpoint {1000 * r['without_s']:.1f} ms without, {1000 * r['with_s']:.1f} ms with "
          f"(medians of {a.repeats}; median ratio of back-to-back pairs x{r['ratio']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
