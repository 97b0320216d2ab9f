"""``royalefleet bench``'s update figure: PPO update rows/s on this machine, ours beside the
reference's on the same batch.

Our side (``update_speed``): a synthetic iteration built from REAL observations. RoyaleGym
battles of the run's env config (``shared.envs.build_env``; one at a time, reset when finished)
are played by both seats with ``RandomLegalOpponent(PLAY_NOOP_PROB)`` and every seat-observation
is packed with the codec the learner's preflight decides
(``shared.preflight.run_preflight``); ``n_legal`` comes from the learner's own
``Codec.legal_counts``, actions and log-probs from ``Policy.act`` (choice rows sampled,
forced rows the no-op at log-prob 0, as in collection), old values from ``Policy.values``;
advantages are seeded normal noise and returns ``values + advantages``. The profile's
``ActorCritic`` and ``make_optimizers`` are built as the learner builds them, the schedules
evaluated by the learner's ``evaluate_schedules``, the epoch permutations drawn from its stream,
and ``ppo_update`` is timed on ``ppo.batch_size x batches`` rows after a warm-up update (one
epoch over the first minibatch's rows: the timed update's shapes).

The reference's side (``reference_speed``) runs ``python -m royalefleet.bench.reference`` in a
process of its own, only when ``importlib.util.find_spec("royalelearn")`` finds the package;
that module's docstring says exactly what it times.

Both sides run in a fresh process with ``OMP/OPENBLAS/MKL_NUM_THREADS`` and torch's thread
count at ``determinism.torch_threads``, as the launcher starts the learner.

rows/s is the iteration's rows over the update's seconds (all epochs), the unit of the metric
row's ``health/trainable_rows / time/update`` and of the reference's
``update_timesteps_per_second``; choice rows/s counts only rows with more than one legal action.

A figure, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import numpy as np

from shared.config import RunConfig

PLAY_NOOP_PROB = 0.0
"""No-op probability of the random-legal play that makes the synthetic iteration's
observations: 0 plays a uniformly random legal card whenever one is legal, spending elixir the
moment it arrives as a trained policy does, which leaves ~90 % of rows forced (0.935 measured
over one battle; the stack's learner rows: ~93 %, docs/throughput.md). At 0.9 (the scripted
anchor's) elixir piles up and only ~40 % are forced: no realistic update."""

BENCH_SEED = 20260921
"""Seed of the synthetic iteration's battles, uniforms and advantages (a benchmark, not a run:
its draws need no named stream)."""

SIDE_TIMEOUT_S = 900.0
"""The longest either side's process may take before the bench gives up on it."""

PARAMS_TOLERANCE = 0.02
"""At the same channels and blocks, parameter totals within this share of ours count as the same
network (the two implementations differ by ~200 parameters in their heads at the cpu profile's sizes)."""

FORCED_FRAC_TOLERANCE = 0.03
"""Forced fractions further apart than this make the two sides' choice rows unlike (printed)."""


# ----------------------------------------------------------------------------- the batch


def real_rows(env_cfg, codec, n_rows: int, seed: int = BENCH_SEED, noop_prob: float = PLAY_NOOP_PROB) -> np.ndarray:
    """(n_rows, codec.row_bytes) uint8: packed seat-observations of real RoyaleGym battles, in
    play order, blue's then red's at every decision, a finished battle reset with a fresh seed.

    Raises ValueError for n_rows < 1."""
    from royalegym import RandomLegalOpponent

    from shared.envs import build_env

    if n_rows < 1:
        raise ValueError(f"real_rows: n_rows must be at least 1, got {n_rows}")
    rng = np.random.default_rng(seed)
    env = build_env(env_cfg)
    player = RandomLegalOpponent(noop_prob)
    obs, _ = env.reset(seed=int(rng.integers(2**62)))
    rows = np.empty((n_rows, codec.row_bytes), dtype=np.uint8)
    done = 0
    while done < n_rows:
        for seat in ("blue", "red")[: n_rows - done]:  # packed at once: the env may reuse its arrays
            codec.pack(obs[seat], rows[done])
            done += 1
        actions = {s: player.act(obs[s], obs[s]["action_mask"], rng) for s in ("blue", "red")}
        obs, _, term, trunc, _ = env.step(actions)
        if term["blue"] or trunc["blue"]:
            obs, _ = env.reset(seed=int(rng.integers(2**62)))
    return rows


def legal_counts(rows: np.ndarray, codec) -> np.ndarray:
    """(N,) int32 legal actions of packed rows, the no-op included: the learner's own count
    (``Codec.legal_counts``), so a row is forced here exactly when the update calls it so."""
    return codec.legal_counts(rows).astype(np.int32)


def synthetic_update_data(policy, rows: np.ndarray, n_legal: np.ndarray, seed: int = BENCH_SEED):
    """``UpdateData`` over packed ``rows`` ((N, row_bytes) uint8) with ``n_legal`` ((N,) int32).

    Actions and log-probs from ``policy.act`` on seeded uniforms (forced rows: action 0, log-prob
    exactly 0.0), old values from ``policy.values``, advantages N(0, 1) float32, returns
    ``old_values + advantages``; ``fetch`` is the learner's own (``policy.fetcher``: numpy per
    minibatch on the CPU, the rows on the device once on CUDA). Raises ValueError when the
    lengths differ."""
    from services.learner.ppo import UpdateData

    if len(rows) != len(n_legal):
        raise ValueError(f"synthetic_update_data: {len(rows)} rows but {len(n_legal)} legal counts")
    rng = np.random.default_rng([seed, 1])
    actions, log_probs = policy.act(rows, n_legal, rng.random(len(rows), dtype=np.float32))
    values = policy.values(rows)
    advantages = rng.standard_normal(len(rows)).astype(np.float32)
    return UpdateData(actions=actions, old_log_probs=log_probs, advantages=advantages,
                      returns=(values + advantages).astype(np.float32), old_values=values,
                      n_legal=n_legal.astype(np.int32), fetch=policy.fetcher(rows, np.arange(len(rows))),
                      old_log_prob_precision=getattr(policy.model, "last_precision", {}).get("actor"))


def head(data, n: int):
    """The first ``n`` rows of an ``UpdateData`` (the same ``fetch``: its indices are unchanged)."""
    import dataclasses

    return dataclasses.replace(data, **{k: getattr(data, k)[:n] for k in
                                        ("actions", "old_log_probs", "advantages", "returns", "old_values", "n_legal")})


# ----------------------------------------------------------------------------- our update


def update_speed(cfg: RunConfig, batches: int = 1) -> dict:
    """Time ``ppo_update`` on ``cfg.ppo.batch_size * batches`` real-observation rows with the
    profile's network, after a warm-up update (one epoch over the first minibatch's rows).

    On the profile's device (``net.device``; ``auto`` is CUDA when torch sees one), in the
    precision the learner would use there (bf16 autocast on CUDA by default), with the update's
    rows held on the device as the learner holds them. Puts this process in the run's
    determinism tier first (``apply_determinism``; under run_exact it raises DeterminismError
    unless the BLAS thread variables, and on CUDA ``CUBLAS_WORKSPACE_CONFIG``, were set before
    numpy loaded, as ``update_side``'s process has them). Raises ValueError for ``batches`` < 1.
    Returns the figures as a flat dict: ``rows_per_s`` (rows / s), ``choice_rows_per_s``,
    ``seconds`` and ``warmup_seconds`` (s), ``forced_frac``, the batch shape, network size,
    device and precision (``dtype``)."""
    import torch
    import torch.utils.deterministic

    from services.learner.ppo import make_optimizers, ppo_update
    from shared.preflight import run_preflight
    from services.learner.service import apply_determinism, evaluate_schedules
    from shared.nn.model import ActorCritic
    from shared.nn.policy import Policy
    from shared.seeding import stream

    if batches < 1:
        raise ValueError(f"update_speed: batches must be at least 1, got {batches}")
    device_name = cfg.net.device if cfg.net.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    apply_determinism(cfg, device_name)
    device = torch.device(device_name)
    t0 = time.perf_counter()
    pf = run_preflight(cfg.env, cfg.master_seed, frame_stack=cfg.obs.frame_stack)
    model = ActorCritic(pf.spec, cfg.net, seed=int(stream(cfg.master_seed, "torch/init").integers(2**62))).to(device)
    opt_actor, opt_critic = make_optimizers(model, cfg.ppo)
    policy = Policy(model, pf.codec, device)
    n = cfg.ppo.batch_size * batches
    rows = real_rows(cfg.env, pf.codec, n)
    n_legal = legal_counts(rows, pf.codec)
    data = synthetic_update_data(policy, rows, n_legal)
    sched = evaluate_schedules(cfg, 0)
    setup_s = time.perf_counter() - t0

    def epochs_of(iteration):
        return lambda e: stream(cfg.master_seed, "ppo/minibatch/iteration/{iteration}/epoch/{epoch}",
                                iteration=iteration, epoch=e)

    seconds = []
    # Warm-up: one epoch over the first minibatch's rows (the timed update's shapes), then the update.
    warm = min(cfg.ppo.minibatch_size, n)
    for iteration, rows_of, ppo in ((1, warm, msgspec.structs.replace(cfg.ppo, n_epochs=1)), (2, n, cfg.ppo)):
        t0 = time.perf_counter()
        stats = ppo_update(model, opt_actor, opt_critic, head(data, rows_of), ppo, epochs_of(iteration), device,
                           ent_coef=sched["ent_coef"], ent_coef_noop=sched["ent_coef_noop"])
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - t0)
    choice = int((n_legal > 1).sum())
    counts = model.parameter_count()
    return {
        "rows": n, "choice_rows": choice, "forced_frac": 1.0 - choice / n, "batch_size": cfg.ppo.batch_size,
        "minibatch_size": cfg.ppo.minibatch_size, "epochs": cfg.ppo.n_epochs,
        "optimizer_steps": int(stats["ppo/optimizer_steps"]), "channels": cfg.net.channels,
        "blocks": cfg.net.blocks, "actor_params": counts["actor"], "critic_params": counts["critic"],
        "forced_rows": "critic_only", "dtype": DTYPE_NAMES[model.last_precision.get("critic", "fp32")],
        "device": device_name, "threads": cfg.determinism.torch_threads,
        "timed_epochs": cfg.ppo.n_epochs, "fill": bool(torch.are_deterministic_algorithms_enabled()
                                                       and torch.utils.deterministic.fill_uninitialized_memory),
        "tier": cfg.determinism.tier, "seconds": seconds[1], "warmup_seconds": seconds[0],
        "rows_per_s": n / seconds[1], "choice_rows_per_s": choice / seconds[1], "setup_seconds": setup_s,
    }


DTYPE_NAMES = {"fp32": "float32", "tf32": "tf32", "bf16": "bfloat16"}
"""The table's ``dtype`` for a precision name (``shared.nn.model.PRECISIONS``)."""

# ----------------------------------------------------------------------------- the two processes


def side_environment(cfg: RunConfig) -> dict[str, str]:
    """This process's environment with the BLAS thread variables at
    ``determinism.torch_threads`` and ``CUBLAS_WORKSPACE_CONFIG`` (what the launcher gives the
    learner) and this checkout on PYTHONPATH."""
    threads = str(cfg.determinism.torch_threads)
    root = str(Path(__file__).resolve().parents[2])  # the checkout: royalefleet/bench/update.py
    path = os.environ.get("PYTHONPATH", "")
    return os.environ | {"OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
                         "CUBLAS_WORKSPACE_CONFIG": ":4096:8", "PYTHONPATH": root + (os.pathsep + path if path else "")}


def _run_side(cfg: RunConfig, argv: list[str], what: str) -> dict:
    proc = subprocess.run([sys.executable, *argv], env=side_environment(cfg), capture_output=True, text=True,
                          timeout=SIDE_TIMEOUT_S)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise RuntimeError(f"{what} exited with code {proc.returncode} and no figures:\n{tail}")
    return json.loads(lines[-1])


def update_side(cfg: RunConfig, batches: int) -> dict:
    """``update_speed`` in a fresh process (``python -m royalefleet.bench.update``)."""
    return _run_side(cfg, ["-m", "royalefleet.bench.update", "--config-json", msgspec.json.encode(cfg).decode(),
                           "--batches", str(batches)], "our update")


def reference_available() -> bool:
    """Whether the reference package is installed (found, never imported here)."""
    return importlib.util.find_spec("royalelearn") is not None


def reference_speed(cfg: RunConfig, rows: int, *, net: str, forced_rows: str, timed_epochs: int | None = None) -> dict:
    """The reference's update on ``rows`` rows at this profile's batch, minibatch and epochs
    (``royalefleet.bench.reference``). ``net``: "reference" (its default NetConfig) or "ours"
    (its network at our profile's sizes); ``timed_epochs`` (default all) runs fewer epochs and
    scales their time. Raises RuntimeError when that process fails."""
    timed = min(cfg.ppo.n_epochs, timed_epochs or cfg.ppo.n_epochs)
    our_net = {k: getattr(cfg.net, k) for k in ("channels", "blocks", "norm_groups", "vector_embed", "value_hidden")}
    argv = ["-m", "royalefleet.bench.reference", "--rows", str(rows), "--batch-size", str(cfg.ppo.batch_size),
            "--minibatch-size", str(cfg.ppo.minibatch_size), "--epochs", str(cfg.ppo.n_epochs),
            "--timed-epochs", str(timed), "--threads", str(cfg.determinism.torch_threads), "--net", net,
            "--forced-rows", forced_rows,
            "--our-net", json.dumps(our_net), "--tier", cfg.determinism.tier]
    return _run_side(cfg, argv, f"the reference's update ({net} network, forced_rows {forced_rows})")


# ----------------------------------------------------------------------------- the table


def unlike(ours: dict, ref: dict) -> list[str]:
    """Where a reference column is not like for like with ours, one phrase each (empty when it
    is): batch shape, network size (channels and blocks, and parameters beyond
    ``PARAMS_TOLERANCE``), which rows the actor runs on, forced fraction (beyond
    ``FORCED_FRAC_TOLERANCE``), precision, threads, determinism tier and whether torch fills
    unwritten memory (``torch.utils.deterministic.fill_uninitialized_memory`` under deterministic
    kernels: ours always does under run_exact, the reference only on its checked iterations),
    epochs timed fewer than configured."""
    notes = []
    for key in ("rows", "batch_size", "minibatch_size", "epochs", "threads"):
        if ours[key] != ref[key]:
            notes.append(f"{key} {ref[key]} vs our {ours[key]}")
    ref_total, our_total = ref["actor_params"] + ref["critic_params"], ours["actor_params"] + ours["critic_params"]
    same_size = (ref["channels"], ref["blocks"]) == (ours["channels"], ours["blocks"])
    if not same_size or abs(ref_total - our_total) > PARAMS_TOLERANCE * our_total:
        notes.append(f"network {ref['channels']}ch x {ref['blocks']} blocks, "
                     f"{ref_total:,} parameters vs our {ours['channels']}ch x {ours['blocks']}, {our_total:,}")
    if ref["forced_rows"] != ours["forced_rows"]:
        notes.append(f"actor runs on {'every row' if ref['forced_rows'] == 'all' else ref['forced_rows']}, "
                     "ours on choice rows only")
    if abs(ref["forced_frac"] - ours["forced_frac"]) > FORCED_FRAC_TOLERANCE:
        notes.append(f"forced fraction {ref['forced_frac']:.3f} vs our {ours['forced_frac']:.3f}")
    if ref["dtype"] != ours["dtype"]:
        notes.append(f"{ref['dtype']} vs our {ours['dtype']}")
    if (ref["tier"], ref["fill"]) != (ours["tier"], ours["fill"]):
        notes.append(f"{_tier(ref)} vs our {_tier(ours)}")
    if ref["timed_epochs"] != ref["epochs"]:
        notes.append(f"timed over {ref['timed_epochs']} of its {ref['epochs']} epochs, "
                     f"seconds scaled to {ref['epochs']}")
    return notes


def _tier(r: dict) -> str:
    return r["tier"] + (", memory fill on" if r["fill"] else ", memory fill off" if r["tier"] == "run_exact" else "")


def update_table(ours: dict, refs: list[tuple[str, dict]]) -> list[str]:
    """The printed comparison: one column for ours, one per (title, reference figures), the
    notes saying where each reference column is not like for like."""
    cols = [("ours", ours)] + refs
    width = max(14, *(len(t) + 2 for t, _ in cols))
    fields = [
        ("update rows/s", lambda r: f"{r['rows_per_s']:,.1f}"),
        ("choice rows/s", lambda r: f"{r['choice_rows_per_s']:,.1f}"),
        ("update seconds", lambda r: f"{r['seconds']:.2f}"),
        ("rows (choice)", lambda r: f"{r['rows']:,} ({r['choice_rows']:,})"),
        ("forced fraction", lambda r: f"{r['forced_frac']:.3f}"),
        ("batch / minibatch", lambda r: f"{r['batch_size']:,} / {r['minibatch_size']:,}"),
        ("epochs (opt steps)", lambda r: f"{r['epochs']} ({r['optimizer_steps']})"),
        ("network", lambda r: f"{r['channels']}ch x {r['blocks']}"),
        ("actor params", lambda r: f"{r['actor_params']:,}"),
        ("critic params", lambda r: f"{r['critic_params']:,}"),
        ("actor rows", lambda r: "choice only" if r["forced_rows"] != "all" else "all"),
        ("dtype, threads, dev", lambda r: f"{r['dtype']}, {r['threads']}, {r.get('device', 'cpu')}"),
        ("tier", lambda r: r["tier"] + (" +fill" if r["fill"] else "")),
    ]
    lines = [f"{'':<20}" + "".join(f"{t:>{width}}" for t, _ in cols)]
    lines += [f"{name:<20}" + "".join(f"{fmt(r):>{width}}" for _, r in cols) for name, fmt in fields]
    for title, ref in refs:
        notes = unlike(ours, ref)
        lines.append(f"{title}: " + ("like for like" if not notes else "NOT like for like: " + "; ".join(notes)))
        if "step_seconds" in ref:
            lines.append(f"{' ' * (len(title) + 2)}its step also ran the critic pass over the rectangle "
                         f"({ref['critic_pass_seconds']:.2f} s) and GAE ({ref['gae_seconds']:.3f} s), left out "
                         "above as our learner runs them outside ppo_update")
    return lines


REFERENCE_RUNS = {
    "our-size": (("ref, our size", "ours", "critic_only", None),),
    "all": (("ref, our size", "ours", "critic_only", None), ("ref, its net", "reference", "all", 1)),
    "none": (),
}
"""``--reference`` -> the reference columns: (title, net, forced_rows, timed epochs or None for
all). "our-size" (the default): its network at our profile's sizes with the actor on choice
rows only (its ``critic_only``), the like-for-like column. "all" adds its default network and
update as shipped (``forced_rows`` "all", ~3x our parameters, the actor on every row): 8-21x our
update's time on this machine (docs/throughput.md), so one epoch is timed and scaled, and even
so it adds minutes."""


def run_update_bench(cfg: RunConfig, *, batches: int = 1, reference: str = "our-size", say=print) -> int:
    """Print the update comparison. ``reference`` picks the reference columns
    (``REFERENCE_RUNS``). Returns 0 (a figure, not a test); raises ValueError for an unknown
    ``reference``."""
    if reference not in REFERENCE_RUNS:
        raise ValueError(f"reference {reference!r}: choose one of {', '.join(REFERENCE_RUNS)}")
    n = cfg.ppo.batch_size * batches
    say(f"update: profile {cfg.profile}, {n:,} rows ({batches} x ppo.batch_size), {cfg.ppo.n_epochs} epochs, "
        f"{cfg.determinism.torch_threads} torch threads; one warm-up update each ...")
    ours = update_side(cfg, batches)
    say(f"  ours: {ours['rows_per_s']:,.1f} rows/s (setup {ours['setup_seconds']:.1f} s, "
        f"warm-up {ours['warmup_seconds']:.1f} s)")
    refs: list[tuple[str, dict]] = []
    if reference == "none":
        say("  the reference's update: skipped (--reference none)")
    elif not reference_available():
        say("  the reference's update: royalelearn is not installed here, so only ours is measured "
            "(pip install royalelearn in this environment to compare; it is never a dependency)")
    else:
        for title, net, forced_rows, timed in REFERENCE_RUNS[reference]:
            try:
                ref = reference_speed(cfg, n, net=net, forced_rows=forced_rows, timed_epochs=timed)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                say(f"  {title}: not measured: {exc}")
                continue
            say(f"  {title}: {ref['rows_per_s']:,.1f} rows/s (royalelearn {ref['version']}, "
                f"setup {ref['setup_seconds']:.1f} s, warm-up {ref['warmup_seconds']:.1f} s)")
            refs.append((title, ref))
        if reference == "our-size":
            say("  (--reference all adds the reference's default network: minutes more)")
    say("")
    for line in update_table(ours, refs):
        say(line)
    return 0


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m royalefleet.bench.update",
                                description="Time our PPO update once (after a warm-up); print the figures as JSON.")
    p.add_argument("--config-json", required=True, help="a complete RunConfig as JSON")
    p.add_argument("--batches", type=int, default=1, help="rows = ppo.batch_size x this (default 1)")
    a = p.parse_args(argv)
    cfg = msgspec.json.decode(a.config_json, type=RunConfig)
    print(json.dumps(update_speed(cfg, a.batches)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
