"""``royalefleet bench --overlap`` and ``royalefleet bench --fleet-sizes 1,2,...``: what overlapped
collection and more rollouts buy on this machine, measured side by side in one run.

* ``--overlap``: the same config (the ``throughput`` tier for both, so only the overlap
  differs) run twice on the same battles and seed, sync then overlapped, each for
  ``--iterations``; per mode the whole-run learner rows/s (trainable rows / wall seconds over
  the rows after the first), the fleet's rollout idle fraction
  (``throughput/rollout_idle_frac``), update seconds, the policy lag and the mean inference
  batch, with the load average before and after.
* ``--fleet-sizes 1,2,...``: one stack per fleet size (``local.rollouts``), the collection's learner
  rows/s and the scaling efficiency: rows/s per rollout relative to one rollout's.

Figures, not tests: nothing here passes or fails (docs/throughput.md records them).
"""

from __future__ import annotations

import os

import msgspec

from shared.config import RunConfig


def _load() -> str:
    try:
        return "load %.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        return "load -"


def _mean(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if key in r]
    return sum(vals) / len(vals) if vals else float("nan")


def whole_run_rows_per_second(rows: list[dict]) -> float:
    """Trainable rows over wall seconds across the rows after the first (start-up dropped):
    the wall clock between the first and the last row, so overlapped time counts once."""
    steady = rows[1:]
    if len(steady) < 1 or len(rows) < 2:
        return float("nan")
    wall = rows[-1]["run/wall_seconds"] - rows[0]["run/wall_seconds"]
    return sum(r["health/trainable_rows"] for r in steady) / wall if wall > 0 else float("nan")


def summarise(rows: list[dict]) -> dict:
    steady = rows[1:] or rows
    return {
        "rows_per_s": whole_run_rows_per_second(rows),
        "collect_rows_per_s": _mean(steady, "throughput/collected_steps_per_second"),
        "idle_frac": _mean(steady, "throughput/rollout_idle_frac"),
        "update_s": _mean(steady, "time/update"),
        "iteration_s": _mean(steady, "time/iteration"),
        "lag": _mean(steady, "ppo/policy_lag_mean"),
        "batch_rows": _mean(steady, "throughput/inference_batch_rows_mean"),
        "batch_rows_p90": _mean(steady, "throughput/inference_batch_rows_p90"),
        "inference_ms": _mean(steady, "throughput/inference_ms_per_round"),
    }


def run_overlap_bench(cfg: RunConfig, *, iterations: int, say=print) -> int:
    from royalefleet.bench import stack_speed

    base = msgspec.structs.replace(cfg, determinism=msgspec.structs.replace(cfg.determinism, tier="throughput"))
    say(f"bench --overlap: profile {cfg.profile}, {cfg.local.rollouts} rollout(s) x {cfg.rollout.battles} battles, "
        f"{iterations} iterations a mode, tier throughput, {os.cpu_count()} CPUs")
    results = {}
    for name, overlap in (("sync", False), ("overlap", True)):
        run = msgspec.structs.replace(base, rollout=msgspec.structs.replace(base.rollout, overlap=overlap))
        before = _load()
        say(f"{name}: {before} ...")
        results[name] = summarise(stack_speed(run, max(3, iterations), say)) | {"load": f"{before} -> {_load()}"}
    say("")
    say(f"{'':<44}{'sync':>12}{'overlap':>12}")
    for key, label, fmt in (("rows_per_s", "learner rows/s, whole run", ",.0f"),
                            ("collect_rows_per_s", "learner rows/s, collection", ",.0f"),
                            ("idle_frac", "rollout idle fraction (fleet mean)", ".2f"),
                            ("update_s", "update seconds", ".1f"),
                            ("iteration_s", "iteration seconds", ".1f"),
                            ("lag", "policy lag, mean", ".2f"),
                            ("batch_rows", "inference batch rows, mean", ".1f"),
                            ("batch_rows_p90", "inference batch rows, p90", ".1f")):
        say(f"{label:<44}{format(results['sync'][key], fmt):>12}{format(results['overlap'][key], fmt):>12}")
    say(f"{'overlap / sync, whole-run rows/s':<44}{results['overlap']['rows_per_s'] / results['sync']['rows_per_s']:>24.2f}")
    for name in ("sync", "overlap"):
        say(f"{name}: {results[name]['load']}")
    return 0


def run_rollouts_bench(cfg: RunConfig, fleet_sizes: list[int], *, iterations: int, say=print) -> int:
    from royalefleet.bench import stack_speed

    say(f"bench --fleet-sizes {','.join(map(str, fleet_sizes))}: profile {cfg.profile}, {cfg.rollout.battles} battles a "
        f"rollout, tier {cfg.determinism.tier}, overlap {cfg.rollout.overlap}, {os.cpu_count()} CPUs")
    out = []
    for n in fleet_sizes:
        run = msgspec.structs.replace(cfg, local=msgspec.structs.replace(cfg.local, rollouts=n))
        before = _load()
        say(f"{n} rollout(s): {before} ...")
        s = summarise(stack_speed(run, max(2, iterations), say))
        out.append((n, s, f"{before} -> {_load()}"))
    one = out[0][1]["collect_rows_per_s"] / out[0][0]
    say("")
    say(f"{'rollouts':>8}{'rows/s collect':>16}{'rows/s whole':>14}{'idle':>8}{'batch':>8}{'efficiency':>12}  load")
    for n, s, load in out:
        say(f"{n:>8}{s['collect_rows_per_s']:>16,.0f}{s['rows_per_s']:>14,.0f}{s['idle_frac']:>8.2f}"
            f"{s['batch_rows']:>8.1f}{s['collect_rows_per_s'] / n / one:>12.2f}  {load}")
    return 0


def parse_fleet_sizes(text: str, option: str = "--fleet-sizes") -> list[int]:
    """``"1,2,4"`` -> [1, 2, 4]. Raises ValueError naming the bad entry and ``option``."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise ValueError(f"{option}: {part!r} is not a positive whole number; give sizes like 1,2,4")
        sizes.append(int(part))
    return sizes


def inference_capacity(cfg: RunConfig, fleet_sizes=(1, 2, 4, 8), n_rounds: int = 60, say=print) -> list[dict]:
    """The learner's central inference alone, in process, on real rounds: one shard's real
    battles (``bench.wire.real_rounds``: real packed rows and masks, both seats random-legal at
    no-op probability 0.9), replayed as ``k`` rollouts x ``rollout.shards`` shards answering at
    once; per k, learner rows/s and the mean forward, per round (run_exact) and batched
    (throughput, ``rollout.inference_max_batch_rows``). The wire, filing and Steps are not in it:
    an upper bound of what the serving loop reaches."""
    import time

    import numpy as np
    import torch

    from royalefleet.bench.wire import real_rounds
    from services.learner.rounds import infer_rounds
    from services.learner.rectangle import POPCOUNT
    from shared.nn.model import ActorCritic
    from shared.nn.policy import Policy
    from shared.preflight import run_preflight

    torch.set_num_threads(cfg.determinism.torch_threads)
    pf = run_preflight(cfg.env, cfg.master_seed)
    policy = Policy(ActorCritic(pf.spec, cfg.net, seed=1), pf.codec, torch.device("cpu"))
    rounds = real_rounds(cfg, pf.codec, 0.9, n_rounds=n_rounds)
    rng = np.random.default_rng(0)
    reqs = []
    for r in rounds:
        rows = r["rows"]
        n_legal = POPCOUNT[rows[:, pf.codec.omask:]].sum(1).astype(np.int32)
        reqs.append((rows, n_legal, rng.random(len(rows)), None))  # no frame history
    out = []
    for k in fleet_sizes:
        width = k * cfg.rollout.shards  # rounds ready at once
        for mode, cap in (("per round", 0), ("batched", cfg.rollout.inference_max_batch_rows)):
            sizes: list = []
            t0 = time.perf_counter()
            n_rows = 0
            for start in range(0, len(reqs) - width + 1, width):
                wave = reqs[start:start + width] if width <= len(reqs) else reqs
                infer_rounds(policy, wave, cap, sizes)
                n_rows += sum(len(w[0]) for w in wave)
            dt = time.perf_counter() - t0
            out.append({"rollouts": k, "mode": mode, "rows_per_s": n_rows / dt, "batch_rows": float(np.mean(sizes)),
                        "choice_frac": float(np.mean(np.concatenate([w[1] for w in reqs]) > 1))})
    return out


def run_capacity_bench(cfg: RunConfig, say=print) -> int:
    say(f"bench --capacity: the learner's inference alone on real rounds, profile {cfg.profile}, "
        f"{cfg.rollout.battles // cfg.rollout.shards} battles a shard, {cfg.rollout.shards} shards a rollout, "
        f"{cfg.determinism.torch_threads} torch threads; {_load()}")
    res = inference_capacity(cfg, say=say)
    say(f"{'rollouts':>8}{'mode':>12}{'rows/s':>12}{'rows a forward':>16}")
    for r in res:
        say(f"{r['rollouts']:>8}{r['mode']:>12}{r['rows_per_s']:>12,.0f}{r['batch_rows']:>16.1f}")
    say(f"choice rows (more than the no-op legal): {res[0]['choice_frac']:.2f} of the rows; {_load()}")
    return 0
