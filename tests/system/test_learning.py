"""The learner learns: real RoyaleGym battles against ``scripted:random_legal``, a few minutes
on two CPU cores, and the win rate has to rise above a stated bar.

Set-up (measured in docs/learning.md, where the numbers below come from):

* the whole local stack (``royalefleet up``): one rollout of 16 battles, every battle against
  ``scripted:random_legal`` (no-op probability 0.9), master seed 20260921;
* a small network (16 channels, one block) started PASSIVE: ``net.noop_bias`` 10 puts
  p(no-op) at ~0.98 where a card could be played, so the untrained policy hardly plays and
  loses. What the learner must discover is that playing cards wins games -- a single number
  (the no-op logit) and the tile choices behind it, learnt from the reward alone;
* PPO at ``lr_actor`` 3e-3 and ``lr_critic`` 1e-3 (15x and 5x the defaults: the default 2e-4
  moves the actor by KL ~1e-5 an iteration, right for hours of training, invisible in
  minutes), Adam eps 1e-8 (the default), 2,048 timesteps an iteration;
* 14 iterations (28,672 timesteps): 5 min 9 s on this 2-core machine.

The bar: over the episodes that finished in iterations 9-14 the learner wins at least
``LATE_BAR`` of them, and at least ``RISE`` more than in iterations 1-2. Measured at this seed
(run-exact, so the same on every run on this machine class): 2 of 10 early, 26 of 43 late
(0.60); at master seed 7, 3 of 10 and 22 of 41 (0.54). The no-op rate and cards per match must
move the right way too: those are what the win rate is made of.
"""

from __future__ import annotations


import pytest

from tests.stack import learner_results, read_rows, run_to_exit, tiny_config, win_rate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

ITERATIONS = 14
EARLY = range(1, 3)
LATE = range(9, ITERATIONS + 1)
LATE_BAR = 0.40
RISE = 0.15

CONFIG = {
    "profile": "cpu",
    "master_seed": 20260921,
    "net": {"channels": 16, "blocks": 1, "norm_groups": 4, "vector_embed": 16, "value_hidden": 64,
            "noop_bias": 10.0},
    "ladder": {"mix": [0.0, 0.0, 1.0], "scripted_opponents": ["scripted:random_legal"]},
    "ppo": {"lr_actor": 0.003, "lr_critic": 0.001,
            "timesteps_per_iteration": 2048, "batch_size": 512, "minibatch_size": 256},
    "checkpoint": {"every_iterations": 100},
    "local": {"evaluators": 0},
}


def test_the_win_rate_against_random_legal_rises_above_the_bar(tmp_path):
    runs = tmp_path / "runs"
    up, code = run_to_exit(tiny_config(runs, **CONFIG), "--iterations", str(ITERATIONS), timeout=1700)
    assert code == 0, up.tail()
    run = runs / "default"

    wins, games = learner_results(run, "scripted:random_legal")
    early, n_early = win_rate(wins, games, EARLY)
    late, n_late = win_rate(wins, games, LATE)
    table = ", ".join(f"it{i} {wins[i]}/{games[i]}" for i in sorted(games))
    print(f"learning: early {early:.2f} (n={n_early}), late {late:.2f} (n={n_late}); {table}")
    assert n_early >= 5 and n_late >= 25, table
    assert late >= LATE_BAR, table
    assert late - early >= RISE, table

    rows = read_rows(run)
    assert [r["run/iteration"] for r in rows] == list(range(1, ITERATIONS + 1))
    first, last = rows[0], rows[-1]
    assert last["policy/noop_rate"] <= first["policy/noop_rate"] - 0.05, (first["policy/noop_rate"], last["policy/noop_rate"])
    assert last["policy/cards_per_match"] >= 2 * first["policy/cards_per_match"]
