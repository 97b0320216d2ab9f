"""Precision-aware ratio checks: each forward records the precision it actually ran in, the
update reports the ratio tolerance of that precision (``ppo/ratio_atol``), and
``ratio_invariant`` judges ``ppo/ratio_max_abs_dev`` against it.

The bf16 path is exercised on the CPU under torch's CPU autocast (bfloat16), the dtype rules
CUDA runs by default: an honest iteration (the rollout-time forwards and the update's under the
same weights and the same decode) keeps the alarm quiet; a planted mismatch (stale weights, or a
different decode of the stored rows) fires it. The CPU cannot show the bf16 DRIFT itself (the
same rows in batches of 4 and of 49 give identical log-probs here; the reference measured ~1e-2
on CUDA, where cuDNN picks kernels per shape): tests/services/learner/test_gpu.py measures that on a GPU."""

import contextlib

import msgspec
import numpy as np
import pytest
import torch

from royalefleet.bench.update import legal_counts, real_rows, synthetic_update_data
from services.learner.alarms import AlarmMonitor
from services.learner.ppo import make_optimizers, ppo_update
from shared.alarms import RATIO_ATOL
from shared.codec import Codec
from shared.config import AlarmConfig, EnvConfig, profile
from shared.nn.model import ActorCritic, coarser, forward_precision
from shared.nn.policy import Policy
from shared.preflight import run_preflight
from shared.seeding import stream

N_ROWS = 200  # 16 choice rows
CFG = profile("tiny")
PPO = msgspec.structs.replace(CFG.ppo, n_epochs=1)  # CPU bf16 convolutions are slow: one epoch suffices


@pytest.fixture(scope="module")
def pf():
    return run_preflight(EnvConfig(), 13)


@pytest.fixture(scope="module")
def rows(pf):
    return real_rows(EnvConfig(), pf.codec, N_ROWS, seed=21)


def bf16():
    return torch.autocast(device_type="cpu", dtype=torch.bfloat16)


def one_update(model, data, iteration=1):
    opt_actor, opt_critic = make_optimizers(model, PPO)
    return ppo_update(model, opt_actor, opt_critic, data, PPO,
                      lambda e: stream(7, "ppo/minibatch/iteration/{iteration}/epoch/{epoch}", iteration=iteration, epoch=e),
                      torch.device("cpu"), ent_coef=0.01, ent_coef_noop=0.0)


def opinionated(pf, seed=2):
    """A model whose pointer and no-op heads have gain 1 instead of the initial 0.01: a trained
    policy is far from uniform, and only then do other weights or another decode move its
    log-probs (a fresh policy gives nearly 1/n_legal to every action whatever it is fed)."""
    model = ActorCritic(pf.spec, CFG.net, seed=seed)
    with torch.no_grad():
        for head in (model.actor.query, model.actor.query_bias, model.actor.noop):
            head.weight.mul_(100.0)
    return model


def acted(pf, rows, model, context):
    """UpdateData as collection leaves it: actions and log-probs of ``model``'s rollout-time
    forwards under ``context``, which record their precision."""
    policy = Policy(model, pf.codec, torch.device("cpu"))
    with context():
        data = synthetic_update_data(policy, rows, legal_counts(rows, pf.codec))
    return data, model.last_precision.get("actor")


def alarm_fires(stats) -> bool:
    monitor = AlarmMonitor(AlarmConfig(), run_dir=None, say=lambda s: None)
    verdict = monitor.observe({"run/iteration": 1, **stats})
    return any(r.name == "ratio_invariant" for r in verdict.fired) and verdict.halt_due


# ----------------------------------------------------------------------------- what a forward ran in


def test_a_forward_records_the_precision_it_ran_in(pf, rows):
    model = ActorCritic(pf.spec, CFG.net, seed=1)
    obs = Policy(model, pf.codec, torch.device("cpu")).obs_batch(rows[:3])
    with torch.no_grad():
        model.actor_logits(obs)
        assert model.last_precision == {"actor": "fp32"}  # the CPU computes in float32 by default
        with bf16():
            model.value(obs)
    assert model.last_precision == {"actor": "fp32", "critic": "bf16"}


def test_forward_precision_reads_torch_state():
    assert forward_precision("cpu") == "fp32"
    with bf16():
        assert forward_precision("cpu") == "bf16"
    with torch.autocast(device_type="cpu", dtype=torch.float16), pytest.raises(ValueError, match="only bfloat16"):
        forward_precision("cpu")
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        assert forward_precision("cuda") == "fp32"
        torch.backends.cudnn.allow_tf32 = True  # torch's default: cuDNN convolutions in TF32
        assert forward_precision("cuda") == "tf32"
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def test_coarser_orders_the_precisions():
    assert [coarser(a, b) for a, b in [("fp32", "bf16"), ("tf32", "fp32"), ("bf16", "tf32"), ("fp32", "fp32")]] == [
        "bf16", "tf32", "bf16", "fp32"]
    with pytest.raises(ValueError, match="precision 'fp8'"):
        coarser("fp8", "fp32")


# ----------------------------------------------------------------------------- the ratio check under bf16


@pytest.mark.slow
def test_under_bf16_an_honest_iteration_is_quiet_and_stale_weights_fire(pf, rows):
    """The rollout's rows trained on by the weights that acted (quiet), and by another
    checkpoint's weights, the same network from another seed (stale: fires)."""
    model = opinionated(pf, seed=2)
    data, inferred_in = acted(pf, rows, model, bf16)
    assert inferred_in == "bf16"
    data.old_log_prob_precision = inferred_in
    stale_model = opinionated(pf, seed=3)
    with bf16():
        honest = one_update(model, data)
        stale = one_update(stale_model, data)
    assert model.last_precision == {"actor": "bf16", "critic": "bf16"}
    assert honest["ppo/ratio_atol"] == stale["ppo/ratio_atol"] == RATIO_ATOL["bf16"] == 2e-2
    assert honest["ppo/ratio_max_abs_dev"] <= 5 * 2e-2 and not alarm_fires(honest)
    assert stale["ppo/ratio_max_abs_dev"] > 5 * 2e-2 and alarm_fires(stale)


def test_a_float32_iteration_is_held_to_the_float32_tolerance(pf, rows):
    model = ActorCritic(pf.spec, CFG.net, seed=2)
    data, inferred_in = acted(pf, rows, model, contextlib.nullcontext)
    data.old_log_prob_precision = inferred_in
    stats = one_update(model, data)
    assert (inferred_in, stats["ppo/ratio_atol"], stats["ppo/ratio_max_abs_dev"]) == ("fp32", 1e-4, 0.0)
    assert not alarm_fires(stats)


def test_the_coarser_of_rollout_and_update_precision_sets_the_tolerance(pf, rows):
    model = ActorCritic(pf.spec, CFG.net, seed=2)
    data, _ = acted(pf, rows, model, bf16)
    data.old_log_prob_precision = "bf16"
    assert one_update(model, data)["ppo/ratio_atol"] == RATIO_ATOL["bf16"]  # update in fp32, rollout in bf16


@pytest.mark.slow
def test_a_different_decode_fires_the_alarm_under_bf16(pf, rows):
    """The update reads the stored rows with another table than inference did: the hit-point
    planes' thousandths taken as whole units."""
    model = opinionated(pf)
    data, _ = acted(pf, rows, model, bf16)
    data.old_log_prob_precision = "bf16"
    planes = tuple(msgspec.structs.replace(p, scale=1.0) if p.storage == "uint16" else p for p in pf.table.planes)
    wrong = Codec(msgspec.structs.replace(pf.table, planes=planes), pf.codec.statics)
    wrong_policy = Policy(model, wrong, torch.device("cpu"))
    data.fetch = lambda cells: wrong_policy.obs_batch(rows[cells])
    with bf16():
        stats = one_update(model, data)
    assert stats["ppo/ratio_max_abs_dev"] > 5 * 2e-2
    assert alarm_fires(stats)
