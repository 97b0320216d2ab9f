"""``royalefleet bench``: how close the stack comes to the bare environment on this machine (the
bench package: this runner; ``scale``, ``synthetic``, ``update``, ``wire``, ``checkpoint`` and
``reference`` measure the rest).

Prints, in one run:

* bare RoyaleGym: the same battles (``local.rollouts`` processes x ``rollout.battles``), both
  seats played by ``RandomLegalOpponent(0.9)``, stepped in a plain loop: decisions/s and
  seat-rows/s (two seat observations per decision);
* the stack: ``royalefleet up`` for a few iterations on free loopback ports in a scratch
  folder: battle decisions/s and learner rows/s during collection (the first iteration, which
  includes start-up effects, is dropped), the update's rows/s;
* their ratio, and the wire bytes per observation row;
* the PPO update alone on a synthetic iteration of real observations, ours beside the
  reference's (RoyaleLearn, when it is installed) on the same batch (``royalefleet.bench.update``).
  ``--update-only`` prints this part alone.

A figure, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import tempfile
import time

import msgspec

from shared.config import RunConfig
from shared.run_dir import RunDir


def _bare_worker(env_cfg_json: bytes, battles: int, seconds: float, seed: int, out) -> None:
    import numpy as np
    from royalegym import RandomLegalOpponent

    from shared.config import EnvConfig
    from shared.envs import build_env

    cfg = msgspec.json.decode(env_cfg_json, type=EnvConfig)
    envs = [build_env(cfg) for _ in range(battles)]
    rng = np.random.default_rng(seed)
    player = RandomLegalOpponent(0.9)
    obs = [e.reset(seed=seed + i)[0] for i, e in enumerate(envs)]
    decisions = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for i, env in enumerate(envs):
            o = obs[i]
            acts = {s: player.act(o[s], o[s]["action_mask"], rng) for s in ("blue", "red")}
            o, _, term, trunc, _ = env.step(acts)
            decisions += 1
            if term["blue"] or trunc["blue"]:
                o, _ = env.reset(seed=int(rng.integers(2**62)))
            obs[i] = o
    out.put((decisions, time.perf_counter() - t0))


def bare_env_speed(cfg: RunConfig, seconds: float) -> tuple[float, int]:
    """(decisions/s summed over processes, processes)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    n = cfg.local.rollouts
    env_json = msgspec.json.encode(cfg.env)
    procs = [ctx.Process(target=_bare_worker, args=(env_json, cfg.rollout.battles, seconds, 1000 * k, q))
             for k in range(n)]
    for p in procs:
        p.start()
    results = [q.get(timeout=seconds + 300) for _ in procs]
    for p in procs:
        p.join()
    return sum(d / t for d, t in results), n


EXIT_INTERRUPTED = 130
"""``royalefleet bench``'s exit code when Ctrl-C or SIGTERM stopped one of its stacks."""


def stack_speed(cfg: RunConfig, iterations: int, say, **stack_options) -> list[dict]:
    """The metric rows of a stack run for ``iterations`` on free ports in a throwaway folder;
    ``stack_options`` go to ``Stack`` (the synthetic bench's ``rollout_env``/``rollout_module``).

    Raises SystemExit when the stack exits non-zero, when a signal stopped it
    (``EXIT_INTERRUPTED``: the bench ends there, never going on to its next stack), or when it
    ended without the row of iteration ``iterations`` (``incomplete_stack``): a stack whose
    learner was stopped early exits 0 like a finished one, and used to be read as a measurement
    with no rows."""
    from royalefleet.launcher import Stack, on_free_ports

    services = on_free_ports(cfg.services)
    with tempfile.TemporaryDirectory(prefix="royalefleet-bench-") as tmp:
        run_cfg = msgspec.structs.replace(cfg, runs_dir=tmp, run_name="bench", services=services)
        stack = Stack(run_cfg, iterations=iterations, say=lambda s: say("  " + s) if s.startswith("it ") else None,
                      **stack_options)
        code = stack.run()
        path = str(RunDir(os.path.join(tmp, "bench")).metrics)
        rows = [json.loads(x) for x in open(path)] if os.path.exists(path) else []
        learner_tail = stack.children["learner"].tail()  # the folder and its logs go with the block
    if code != 0:
        raise SystemExit(f"bench: the stack exited with code {code}")
    interrupted = bool(stack.interrupts) and not stack.gave_up
    problem = incomplete_stack(rows, iterations, interrupted)
    if problem:
        say(f"bench: {problem}; the learner's last lines:\n{learner_tail or '(none: it had printed nothing)'}")
        raise SystemExit(EXIT_INTERRUPTED if interrupted else 1)
    return rows


def incomplete_stack(rows: list[dict], iterations: int, interrupted: bool) -> str | None:
    """Why a stack that exited 0 measured nothing usable, or None: ``interrupted`` (Ctrl-C or
    SIGTERM reached the bench: the launcher stops the learner cleanly and exits 0), or no row of
    iteration ``iterations`` (the learner stopped early on its own, e.g. a SIGTERM sent to it
    alone). ``rows`` are metric rows (``run/iteration``)."""
    last = max((int(r.get("run/iteration", 0)) for r in rows), default=0)
    if interrupted:
        return (f"interrupted (Ctrl-C or SIGTERM) with {last} of {iterations} iterations written; the figures of "
                "this stack and of every later one are not measured")
    if last < iterations:
        return (f"the stack exited 0 with {last} of {iterations} iterations written: its learner stopped before "
                f"--iterations {iterations} (a SIGTERM or SIGINT sent to it?)")
    return None


def run_bench(cfg: RunConfig, *, seconds: float, iterations: int, update_only: bool = False, update_batches: int = 1,
              reference: str = "our-size", say=print) -> int:
    from royalefleet.bench.update import run_update_bench

    if update_only:
        return run_update_bench(cfg, batches=update_batches, reference=reference, say=say)
    say(f"bench: profile {cfg.profile}, {cfg.local.rollouts} rollout process(es) x {cfg.rollout.battles} battles, "
        f"{os.cpu_count()} CPUs")
    say(f"bare RoyaleGym, random-legal play, {seconds:.0f} s ...")
    bare, n = bare_env_speed(cfg, seconds)
    say(f"  {bare:,.0f} decisions/s ({2 * bare:,.0f} seat-rows/s) over {n} process(es)")
    say(f"the stack, {iterations} iteration(s) ...")
    rows = stack_speed(cfg, max(2, iterations), say)
    steady = rows[1:] or rows

    def mean(key):
        vals = [r[key] for r in steady if key in r]
        return sum(vals) / len(vals) if vals else float("nan")

    decisions = mean("throughput/env_steps_per_second")
    collected = mean("throughput/collected_steps_per_second")
    learner_rows = mean("run/learner_rows_per_cycle") / max(1.0, mean("run/battles"))
    update_rows = mean("health/trainable_rows") / mean("time/update")
    say("")
    say(f"{'bare env decisions/s':<40}{bare:>12,.0f}")
    say(f"{'stack decisions/s (collection)':<40}{decisions:>12,.0f}")
    say(f"{'ratio stack / bare':<40}{decisions / bare:>12.2f}")
    say(f"{'stack learner rows/s (collection)':<40}{collected:>12,.0f}   ({learner_rows:.2f} learner rows a decision)")
    say(f"{'stack learner rows/s (whole iteration)':<40}{mean('throughput/overall_steps_per_second'):>12,.0f}")
    say(f"{'update rows/s':<40}{update_rows:>12,.0f}")
    say(f"{'wire bytes per observation row':<40}{mean('throughput/wire_bytes_per_row'):>12,.0f}")
    say(f"{'inference ms per round':<40}{mean('throughput/inference_ms_per_round'):>12.2f}")
    say(f"{'iteration seconds (update seconds)':<40}{mean('time/iteration'):>12.1f}   ({mean('time/update'):.1f})")
    precision = ", ".join(sorted({str(r[k]) for r in steady for k in ("run/inference_precision", "run/train_precision")
                                 if k in r})) or "-"
    say(f"{'learner precision (inference, update)':<40}{precision:>12}")
    if any("health/vram_peak_allocated_mb" in r for r in steady):
        say(f"{'VRAM peak allocated / reserved MiB':<40}{mean('health/vram_peak_allocated_mb'):>12,.0f}"
            f"   ({mean('health/vram_reserved_mb'):,.0f} reserved, {mean('health/vram_driver_free_mb'):,.0f} free)")
    say(f"{'learner wait share of collection':<40}{mean('throughput/parent_wait_frac'):>12.2f}")
    say("")
    return run_update_bench(cfg, batches=update_batches, reference=reference, say=say)
