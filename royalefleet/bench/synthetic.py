"""``royalefleet bench --synthetic 1,2,4,8``: the learner's serving capacity alone, with
synthetic rollouts that replay recorded real rounds over the real protocol
(``royalefleet/synthetic.py``).

One run, side by side: first a real stack with one real rollout (``RecordingRollout``) for
``--iterations``, which records every round it sends and gives the reference figure, one real
rollout's collection rate; then, per fleet size k, a stack of the real learner, ladder and
checkpoint service with k synthetic rollouts replaying that recording for the same number of
iterations. Per column: the collection's learner rows/s (``throughput/collected_steps_per_second``:
rows the learner received, filed, inferred and answered per second of collection), the mean and
p90 inference batch (``throughput/inference_batch_rows_mean``/``_p90``) against a round's learner
rows, inference ms a round, and the load average before and after. The first row of each stack
is left out (start-up).

Both record and replay run with ``ladder.mix = (1, 0, 0)`` (every battle a mirror: any battle id's
plan has the seats the recording had), the ``throughput`` tier (batched inference) and no overlap
(the recording is one round per Step, in order). Figures, not tests (docs/throughput.md).
"""

from __future__ import annotations

import glob
import os
import tempfile

import msgspec

from royalefleet.bench.scale import _load, summarise
from royalefleet.synthetic import RECORD_ENV, REPLAY_ENV, Recording
from shared.config import RunConfig

MODULE = "royalefleet.synthetic"


def bench_config(cfg: RunConfig) -> RunConfig:
    """``cfg`` as the synthetic bench records and replays it: every battle a mirror, throughput
    tier, no overlap (module docstring)."""
    return msgspec.structs.replace(
        cfg, ladder=msgspec.structs.replace(cfg.ladder, mix=(1.0, 0.0, 0.0)),
        determinism=msgspec.structs.replace(cfg.determinism, tier="throughput"),
        rollout=msgspec.structs.replace(cfg.rollout, overlap=False))


def record(cfg: RunConfig, folder: str, *, iterations: int, say=print) -> tuple[str, list[dict]]:
    """Run a real stack with one recording rollout; (the recording's path, the stack's metric rows).
    Raises SystemExit when the stack fails or nothing was recorded."""
    from royalefleet.bench import stack_speed

    one = msgspec.structs.replace(cfg, local=msgspec.structs.replace(cfg.local, rollouts=1))
    rows = stack_speed(one, iterations, say, rollouts=1, rollout_env={RECORD_ENV: folder}, rollout_module=MODULE)
    found = sorted(glob.glob(os.path.join(folder, "*.rounds")), key=os.path.getmtime)
    if not found:
        raise SystemExit(f"bench --synthetic: the recording rollout wrote no recording in {folder}")
    return found[-1], rows


def replay_config(cfg: RunConfig, rollouts: int) -> RunConfig:
    """``cfg`` for ``rollouts`` synthetic rollouts: ``ppo.timesteps_per_iteration`` times
    ``rollouts``, so every rollout's shards go through the recording's T cycles an iteration
    and replay the very rounds the real rollout sent in that iteration (with a fixed iteration a
    larger fleet would replay only each episode's opening, where every row is forced and no
    forward runs), and one PPO epoch (the update is not what is measured; it shortens the run)."""
    ppo = msgspec.structs.replace(cfg.ppo, timesteps_per_iteration=cfg.ppo.timesteps_per_iteration * rollouts,
                                  n_epochs=1)
    return msgspec.structs.replace(cfg, ppo=ppo, local=msgspec.structs.replace(cfg.local, rollouts=rollouts))


def replay(cfg: RunConfig, path: str, rollouts: int, *, iterations: int, say=print) -> list[dict]:
    """The metric rows of a stack whose ``rollouts`` rollouts replay ``path`` (``replay_config``)."""
    from royalefleet.bench import stack_speed

    k = replay_config(cfg, rollouts)
    return stack_speed(k, iterations, say, rollouts=rollouts, rollout_env={REPLAY_ENV: path}, rollout_module=MODULE)


def run_synthetic_bench(cfg: RunConfig, fleet_sizes: list[int], *, iterations: int, say=print) -> int:
    cfg = bench_config(cfg)
    iterations = max(2, iterations)
    say(f"bench --synthetic {','.join(map(str, fleet_sizes))}: profile {cfg.profile}, {cfg.rollout.battles} battles "
        f"in {cfg.rollout.shards} shards a rollout, {iterations} iterations a stack, tier throughput, every battle a "
        f"mirror, inference_max_batch_rows {cfg.rollout.inference_max_batch_rows}, inference_max_wait_ms "
        f"{cfg.rollout.inference_max_wait_ms}, {cfg.determinism.torch_threads} torch threads, {os.cpu_count()} CPUs")
    columns = []
    with tempfile.TemporaryDirectory(prefix="royalefleet-synthetic-") as folder:
        before = _load()
        say(f"recording: 1 real rollout, {before} ...")
        path, rows = record(cfg, folder, iterations=iterations, say=say)
        rec = Recording.load(path)
        round_rows = [_held_slots(m) for s in rec.shards for m in s]
        per_round = sum(round_rows) / len(round_rows)
        say(f"  recorded {rec.rounds()} rounds ({os.path.getsize(path) / 2**10:,.0f} KiB), {per_round:.1f} rows "
            f"a round")
        columns.append(("real x1", summarise(rows), f"{before} -> {_load()}"))
        _said(columns[-1], say)
        for k in fleet_sizes:
            before = _load()
            say(f"{k} synthetic rollout(s): {before} ...")
            rows = replay(cfg, path, k, iterations=iterations, say=say)  # SystemExit: no column (stack_speed)
            columns.append((f"synth x{k}", summarise(rows), f"{before} -> {_load()}"))
            _said(columns[-1], say)
    real = columns[0][1]["collect_rows_per_s"]
    say("")
    say(f"{'':<40}" + "".join(f"{name:>12}" for name, _, _ in columns))
    for key, label, fmt in (("collect_rows_per_s", "learner rows/s served (collection)", ",.0f"),
                            ("batch_rows", "inference batch rows, mean", ".1f"),
                            ("batch_rows_p90", "inference batch rows, p90", ".1f"),
                            ("inference_ms", "inference ms a round", ".2f"),
                            ("idle_frac", "rollout idle fraction", ".2f"),
                            ("iteration_s", "iteration seconds", ".1f")):
        say(f"{label:<40}" + "".join(f"{format(c[1].get(key, float('nan')), fmt):>12}" for c in columns))
    say(f"{'rows/s / one real rollout':<40}" + "".join(f"{c[1]['collect_rows_per_s'] / real:>12.2f}" for c in columns))
    say(f"{'mean batch / a round':<40}" + "".join(f"{c[1]['batch_rows'] / per_round:>12.2f}" for c in columns))
    say(f"(a round: {per_round:.1f} learner rows)")
    for name, _, load in columns:
        say(f"{name}: {load}")
    return 0


def _said(column, say) -> None:
    name, s, load = column
    say(f"  {name}: {s['collect_rows_per_s']:,.0f} learner rows/s served, inference batch {s['batch_rows']:.1f} rows "
        f"(p90 {s['batch_rows_p90']:.1f}); {load}")


def _held_slots(frames: list[bytes]) -> int:
    """Rows a recorded Round carries (its slots with group >= 0), whatever its wire codec."""
    from shared.messages import Decoder, ToLearner

    return int((Decoder(ToLearner).decode(frames)[1]["group"] >= 0).sum())


def sweep_config(cfg: RunConfig, max_wait_ms: float, max_batch_rows: int) -> RunConfig:
    """``cfg`` with ``rollout.inference_max_wait_ms`` and ``inference_max_batch_rows`` set."""
    return msgspec.structs.replace(cfg, rollout=msgspec.structs.replace(
        cfg.rollout, inference_max_wait_ms=float(max_wait_ms), inference_max_batch_rows=int(max_batch_rows)))


def run_inference_sweep(cfg: RunConfig, rollouts: int, waits_ms: list[float], max_rows: list[int], *,
                        iterations: int, say=print) -> int:
    """The batching knobs side by side in one run: one recording (as ``run_synthetic_bench``),
    then per (``inference_max_wait_ms``, ``inference_max_batch_rows``) a stack of ``rollouts``
    synthetic rollouts replaying it. Per column: learner rows/s served in the collection, the
    mean and p90 inference batch, inference ms a round, iteration seconds, the load before and
    after. A batch cap at or above ``rollouts`` x shards x a round's rows never binds (every
    ready round fits one forward): such columns differ by noise alone."""
    cfg = bench_config(cfg)
    iterations = max(2, iterations)
    shards = rollouts * cfg.rollout.shards
    say(f"inference sweep: profile {cfg.profile}, {rollouts} synthetic rollouts x {cfg.rollout.battles} battles in "
        f"{cfg.rollout.shards} shards ({shards} shards in all), {iterations} iterations a stack (the first left "
        f"out), tier throughput, {cfg.determinism.torch_threads} torch threads, {os.cpu_count()} CPUs")
    columns = []
    with tempfile.TemporaryDirectory(prefix="royalefleet-sweep-") as folder:
        say(f"recording: 1 real rollout, {_load()} ...")
        path, _ = record(cfg, folder, iterations=iterations, say=say)
        rec = Recording.load(path)
        round_rows = [_held_slots(m) for s in rec.shards for m in s]
        per_round = sum(round_rows) / len(round_rows)
        say(f"  {per_round:.1f} learner rows a round: every ready round fits a forward of "
            f"{shards * per_round:.0f} rows")
        for wait in waits_ms:
            for cap in max_rows:
                name = f"{wait:g}ms/{cap}"
                before = _load()
                rows = replay(sweep_config(cfg, wait, cap), path, rollouts, iterations=iterations, say=lambda s: None)
                columns.append((name, summarise(rows), f"{before} -> {_load()}"))
                s = columns[-1][1]
                say(f"  {name}: {s['collect_rows_per_s']:,.0f} learner rows/s, batch {s['batch_rows']:.1f} "
                    f"(p90 {s['batch_rows_p90']:.1f}); {columns[-1][2]}")
    say("")
    say(f"{'wait ms / max batch rows':<34}" + "".join(f"{name:>11}" for name, _, _ in columns))
    for key, label, fmt in (("collect_rows_per_s", "learner rows/s served (collection)", ",.0f"),
                            ("batch_rows", "inference batch rows, mean", ".1f"),
                            ("batch_rows_p90", "inference batch rows, p90", ".1f"),
                            ("inference_ms", "inference ms a round", ".2f"),
                            ("iteration_s", "iteration seconds", ".1f")):
        say(f"{label:<34}" + "".join(f"{format(c[1].get(key, float('nan')), fmt):>11}" for c in columns))
    for name, _, load in columns:
        say(f"{name}: {load}")
    return 0


def main(argv=None) -> int:
    """``python -m royalefleet.bench.synthetic --sweep``: ``run_inference_sweep`` (figures, not a test)."""
    import argparse

    from shared.config import load_config

    p = argparse.ArgumentParser(prog="python -m royalefleet.bench.synthetic",
                                description="Batched inference's two knobs side by side with synthetic rollouts "
                                "(docs/throughput.md, 'Batched inference: the defaults').")
    p.add_argument("--profile", default="tiny", help="config profile (default %(default)s)")
    p.add_argument("--rollouts", type=int, default=8, help="synthetic rollouts a stack (default %(default)s)")
    p.add_argument("--wait-ms", default="0,2,5", help="inference_max_wait_ms values (default %(default)s)")
    p.add_argument("--max-rows", default="16,256,1024", help="inference_max_batch_rows values (default %(default)s)")
    p.add_argument("--iterations", type=int, default=3, help="iterations a stack, the first left out (default 3)")
    a = p.parse_args(argv)
    try:
        waits = [float(x) for x in a.wait_ms.split(",")]
        caps = [int(x) for x in a.max_rows.split(",")]
    except ValueError as exc:
        p.error(f"--wait-ms and --max-rows take comma-separated numbers ({exc})")
    if a.rollouts < 1 or any(w < 0 for w in waits) or any(c < 1 for c in caps):
        p.error("--rollouts and --max-rows must be at least 1 and --wait-ms at least 0")
    return run_inference_sweep(load_config({"profile": a.profile}), a.rollouts, waits, caps,
                               iterations=a.iterations, say=lambda s: print(s, flush=True))


if __name__ == "__main__":
    import sys

    sys.exit(main())
