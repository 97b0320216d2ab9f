"""The reference's PPO update (RoyaleLearn, PyPI ``royalelearn``), timed on a synthetic iteration.

Run ONLY as its own process, by ``royalefleet.bench.update.reference_speed``::

    python -m royalefleet.bench.reference --rows 1024 --batch-size 1024 --minibatch-size 256 \
        --epochs 3 [--timed-epochs 1] --threads 2 [--net reference|ours] [--forced-rows all|critic_only] \
        [--tier run_exact|throughput]

and only when ``importlib.util.find_spec("royalelearn")`` finds the package. Nothing in this
repository imports ``royalelearn`` in its own process and it is no dependency (pyproject.toml
does not name it): this module calls the installed package's public and test-support API
(``royalelearn.testing``, ``royalelearn.learn``), copies none of it, and prints one JSON line.

What it times, exactly: ``PPOUpdate.step`` (``royalelearn/learn/ppo.py``) on a ``RectBuffer`` of
R slots x T cycles, every slot a learner seat (a mirror plan), filled with real observations
from the reference's own RoyaleGym battle factory (``config.default_env_spec()``: RustEngine,
the same observation builder and action parser as ours), stepped by a policy that plays a
uniformly random legal card whenever one is legal (the same policy as our side). Actions and
log-probs come from its own ``BatchedInference`` against the stored masks, rewards are seeded
normal noise. ``step`` also runs the whole-rectangle critic pass and GAE, which our
``ppo_update`` does not (our learner runs them before it); both are reported apart, and
``seconds`` is ``step`` minus those two, the span comparable to ours. The schedule is a
steady-state iteration (``debug_assert_iterations`` past, not a ratio-check iteration; under
``--tier run_exact`` deterministic kernels with torch's fill of unwritten memory off, as its
coordinator runs such an iteration), the network float32 on the CPU (the reference's default is
bfloat16 autocast, aimed at a GPU). A warm-up ``step`` (one epoch over a minibatch's worth of
cells, same shapes) precedes the timed one. ``--timed-epochs`` below ``--epochs`` runs fewer
epochs and scales their seconds to the configured count (every epoch does the same work), for a
network too slow to run them all.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time

import numpy as np

SEED = 20260921
"""The reference's default master seed (its ``RunConfig.master_seed``); any fixed value does."""

SLOTS = 64
"""Learner seats of the timed rectangle (rows are rounded up to whole cycles of these)."""

STEADY_ITERATION = 11
"""An iteration past the reference's ``ppo.debug_assert_iterations`` (10) and not a multiple of
its ``check_ratio_invariant_every`` (50): the update a long run spends its time in."""


def _observations(factory, count: int, games: int, seed: int) -> list[dict]:
    """``count`` single-seat observations from real battles, in play order.

    Every seat plays a uniformly random legal card whenever one is legal, the no-op otherwise
    (royalefleet.bench.update.PLAY_NOOP_PROB 0): in a mask with only the no-op set the row is
    forced. The vec env resets a finished battle itself."""
    env = factory.build_vec(games)
    rng = np.random.default_rng(seed)
    out: list[dict] = []
    try:
        batch = env.reset(seed=seed)[0]
        while len(out) < count:
            masks = batch["action_mask"]
            actions = np.zeros(len(masks), dtype=np.int64)
            for i, mask in enumerate(masks):
                legal = np.flatnonzero(mask)[1:]  # the no-op is action 0
                if legal.size:
                    actions[i] = legal[rng.integers(legal.size)]
            out.extend({k: np.array(v[i]) for k, v in batch.items()} for i in range(len(masks)))
            batch = env.step(actions)[0]
    finally:
        env.close()
    return out[:count]


def _collected(spec, observations: list[dict], model, cycles: int, slots: int):
    """A ``RectFixture`` of ``cycles`` x ``slots`` learner cells holding ``observations`` (one per
    cell, bootstrap row included), played through the reference's own ``BatchedInference`` with
    seeded normal rewards, as its coordinator collects an iteration. The caller closes it."""
    from royalelearn.api.rollout import GROUP_LEARNER
    from royalelearn.learn.inference import BatchedInference
    from royalelearn.testing import RectFixture, plan_for, round_for

    fixture = RectFixture(spec, observations[: (cycles + 1) * slots], cycles=cycles, slots=slots)
    try:
        fixture.fill()
        buffer = fixture.buffer
        plan = plan_for(slots, iteration=STEADY_ITERATION)
        buffer.begin_iteration(plan, cycles)
        engine = BatchedInference(buffer, model, master_seed=SEED)
        engine.begin_iteration(plan)
        every = np.arange(slots, dtype=np.int64)
        rewards = np.random.default_rng(SEED).normal(size=(cycles + 1, slots)).astype(np.float32)
        for cycle in range(cycles + 1):  # the last round carries the bootstrap observation
            cells = np.array([buffer.layout.row_index(cycle, int(s)) for s in every])
            played = round_for(cycle, every, rows=cells, reward=rewards[cycle], group=GROUP_LEARNER)
            if cycle == cycles:
                buffer.record_round(played, None, None)
            else:
                answer = engine.act(played)
                buffer.record_round(played, answer.actions, answer.log_probs)
    except BaseException:
        fixture.close()
        raise
    return fixture


def run(rows: int, batch_size: int, minibatch_size: int, epochs: int, timed_epochs: int, threads: int,
        net: str, forced_rows: str, our_net: dict | None, tier: str = "throughput") -> dict:
    """Warm up on one minibatch's worth of cells (one epoch), then time one ``step`` over
    ``rows`` cells (rounded up to whole cycles of ``SLOTS``) for ``timed_epochs`` epochs.
    ``seconds`` is the epochs' time scaled to ``epochs`` (every epoch does the same work: the
    same rows in the same number of batches), ``rows_per_s`` is ``rows / seconds``."""
    import torch
    import torch.utils.deterministic

    import royalelearn
    import royalelearn.config as rcfg
    from royalelearn.api.schedule import ScheduleState
    from royalelearn.learn.gae import GAE
    from royalelearn.learn.nets import DefaultNetworkFactory
    from royalelearn.learn.ppo import PPOUpdate
    from royalelearn.testing import read_env_spec

    torch.set_num_threads(threads)
    if tier == "run_exact":
        # Its run_exact as a long run spends it: deterministic kernels, and torch's fill of
        # unwritten memory off (its coordinator turns the fill on only for a process's first
        # iteration and the ratio-check ones).
        from royalelearn.determinism import set_fill_uninitialized

        torch.use_deterministic_algorithms(True)
        set_fill_uninitialized(False)
    else:
        torch.use_deterministic_algorithms(False)
    t_setup = time.perf_counter()
    factory = rcfg.default_env_spec()
    spec = read_env_spec(factory)
    slots = min(SLOTS, 2 * math.ceil(rows / 2))
    cycles = math.ceil(rows / slots)
    observations = _observations(factory, (cycles + 1) * slots, games=1, seed=SEED)

    if net == "reference":
        arch = rcfg.NetConfig(device="cpu", autocast_dtype="float32")
    else:  # the same trunk and head sizes as our profile's network
        arch = rcfg.NetConfig(device="cpu", autocast_dtype="float32", channels=our_net["channels"],
                              blocks=our_net["blocks"], norm_groups=our_net["norm_groups"],
                              vector_embed=our_net["vector_embed"], value_hidden=our_net["value_hidden"],
                              card_embed=our_net["channels"])
    model = DefaultNetworkFactory(SEED).build(spec, arch, "cpu")
    actor_params = sum(p.numel() for p in model.actor_parameters())
    critic_params = sum(p.numel() for p in model.critic_parameters())

    def update(cells: int, n_epochs: int):
        ppo = rcfg.PPOConfig(n_epochs=n_epochs, timesteps_per_iteration=cells, batch_size=batch_size,
                             minibatch_size=minibatch_size, forced_rows=forced_rows)
        sched = ScheduleState(iteration=STEADY_ITERATION, cumulative_env_steps=0, cumulative_timesteps=0,
                              gamma=0.997, gae_lambda=0.99, ent_coef=0.01, ent_coef_noop=0.02,
                              lr_actor=ppo.lr_actor, lr_critic=ppo.lr_critic)
        return PPOUpdate(model, GAE(standardize_rewards=False), ppo, master_seed=SEED), sched

    warm_cycles = max(1, math.ceil(min(minibatch_size, rows) / slots))
    with contextlib.ExitStack() as held:  # the rectangles' shared memory is released whatever happens
        warm = _collected(spec, observations, model, warm_cycles, slots)
        held.callback(warm.close)
        timed = _collected(spec, observations, model, cycles, slots)
        held.callback(timed.close)
        setup_s = time.perf_counter() - t_setup
        t_warm = time.perf_counter()
        step, sched = update(warm_cycles * slots, 1)
        step.step(warm.buffer, sched)
        warmup_s = time.perf_counter() - t_warm
        step, sched = update(cycles * slots, timed_epochs)
        result = step.step(timed.buffer, sched)
    epoch_s = (result.seconds - result.critic_pass_seconds - result.gae_seconds) * epochs / timed_epochs
    n = int(result.n_samples)
    choice = round(n * (1.0 - result.forced_frac))
    return {
        "version": royalelearn.__version__, "rows": n, "choice_rows": choice, "forced_frac": result.forced_frac,
        "batch_size": batch_size, "minibatch_size": minibatch_size, "epochs": epochs, "timed_epochs": timed_epochs,
        "optimizer_steps": int(result.n_optimizer_steps) * epochs // timed_epochs, "net": net,
        "channels": arch.channels, "blocks": arch.blocks, "actor_params": actor_params,
        "critic_params": critic_params, "forced_rows": forced_rows, "dtype": "float32", "threads": threads,
        "tier": tier, "fill": bool(torch.are_deterministic_algorithms_enabled()
                                   and torch.utils.deterministic.fill_uninitialized_memory),
        "step_seconds": result.seconds, "critic_pass_seconds": result.critic_pass_seconds,
        "gae_seconds": result.gae_seconds, "seconds": epoch_s, "rows_per_s": n / epoch_s,
        "choice_rows_per_s": choice / epoch_s, "setup_seconds": setup_s,
        "warmup_seconds": warmup_s, "actor_rows": int(result.actor_rows),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m royalefleet.bench.reference", description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--minibatch-size", type=int, required=True)
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--timed-epochs", type=int, help="epochs actually run (default --epochs); seconds are scaled")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--net", choices=("reference", "ours"), default="reference")
    p.add_argument("--our-net", default="{}", help="JSON of our NetConfig (with --net ours)")
    p.add_argument("--forced-rows", choices=("all", "critic_only"), default="all")
    p.add_argument("--tier", choices=("run_exact", "throughput"), default="throughput",
                   help="run_exact: deterministic kernels, no fill of unwritten memory (its steady state)")
    a = p.parse_args(argv)
    timed = a.timed_epochs or a.epochs
    if not 1 <= timed <= a.epochs:
        p.error(f"--timed-epochs {timed} must lie in [1, --epochs {a.epochs}]")
    out = run(a.rows, a.batch_size, a.minibatch_size, a.epochs, timed, a.threads, a.net, a.forced_rows,
              json.loads(a.our_net), a.tier)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
