"""The learner on a CUDA device: what a CPU cannot show. Marked ``gpu``; every test skips
without CUDA, so the suite stays green on CPU machines. ``deploy/gpu-check.sh`` runs these on
the accelerator machine (its own python3 and torch), then the laptop bench.

* the device expansion of packed rows equals the codec's numpy unpack bit for bit;
* CUDA forward and backward against the CPU's, within the precision's tolerance (fp32 with TF32
  off; bf16 autocast);
* the ratio check under bf16 as the learner runs it: rollout-shaped forwards (a few rows) then
  update-shaped ones (minibatches), five iterations without a false halt, and the measured
  deviation printed (the reference's ~1e-2 on its GPU); stale weights still fire;
* a checkpoint written from CUDA loads on the CPU and back with identical state digests, and the
  restored optimizer state sits on the parameters' device;
* the start-up memory check passes the laptop profile and refuses an impossible one by its numbers;
* ``verify-resume --profile tiny`` on CUDA under run_exact (CUBLAS_WORKSPACE_CONFIG as the
  launcher sets it): exact, and its rows say bf16 and carry the VRAM keys.
"""

import hashlib
import json
import os

# cuBLAS reads it once, when CUDA initialises: before the first CUDA call of this process.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import msgspec  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the gpu tests run on a GPU machine "
                       "(deploy/gpu-check.sh)"),
]

N_ROWS = 1200


def say(text):
    print(f"[gpu] {text}", flush=True)


@pytest.fixture(scope="module")
def pf():
    from shared.config import EnvConfig
    from shared.preflight import run_preflight

    return run_preflight(EnvConfig(), 17)


@pytest.fixture(scope="module")
def rows(pf):
    from royalefleet.bench.update import real_rows
    from shared.config import EnvConfig

    return real_rows(EnvConfig(), pf.codec, N_ROWS, seed=29)


@pytest.fixture
def exact_cuda():
    """float32 without TF32 for the duration of a test (torch's default lets cuDNN use TF32)."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def net(name="laptop", **changes):
    from shared.config import profile

    return msgspec.structs.replace(profile(name).net, **changes)


# ----------------------------------------------------------------------------- rows on the device


def test_device_expansion_equals_numpy_unpack_on_cuda(pf, rows):
    from shared.nn.rows import DeviceRows

    device_rows = DeviceRows(pf.codec, "cuda")
    for lo in range(0, N_ROWS, 256):
        part = rows[lo : lo + 256]
        got = device_rows.expand(device_rows.upload(part))
        ref = pf.codec.unpack(part)
        for key, value in ref.items():
            g = got[key].cpu().numpy()
            if value.dtype == np.float32:
                np.testing.assert_array_equal(g.view(np.int32), value.view(np.int32), err_msg=key)
            else:
                np.testing.assert_array_equal(g, value, err_msg=key)
    index = np.random.default_rng(0).permutation(N_ROWS)
    assert torch.equal(device_rows.gather(rows, index).cpu(), torch.from_numpy(rows[index]))


# ----------------------------------------------------------------------------- CUDA against the CPU


def _forward_backward(model, obs):
    from shared.nn.distribution import MaskedCategorical

    model.zero_grad(set_to_none=True)
    dist = MaskedCategorical(model.actor_logits(obs), obs["mask"])
    values = model.value(obs)
    (values.pow(2).mean() - dist.entropy().mean()).backward()
    grads = torch.cat([p.grad.flatten().double().cpu() for p in model.parameters() if p.grad is not None])
    return dist.log_probs.detach().cpu(), values.detach().cpu(), grads


@pytest.mark.parametrize("autocast, precision", [("off", "fp32"), ("bfloat16", "bf16")])
def test_cuda_forward_and_backward_match_the_cpu_within_the_precision(pf, rows, exact_cuda, autocast, precision):
    from shared.alarms import RATIO_ATOL
    from shared.nn.model import ActorCritic
    from shared.nn.policy import Policy

    cpu = ActorCritic(pf.spec, net(autocast=autocast), seed=5)
    gpu = ActorCritic(pf.spec, net(autocast=autocast), seed=5).cuda()
    choice = rows[np.flatnonzero(pf.codec.unpack(rows)["mask"].sum(1) > 1)[:64]]
    lp_cpu, v_cpu, g_cpu = _forward_backward(cpu, Policy(cpu, pf.codec, torch.device("cpu")).obs_batch(choice))
    lp_gpu, v_gpu, g_gpu = _forward_backward(gpu, Policy(gpu, pf.codec, torch.device("cuda")).obs_batch(choice))
    assert gpu.last_precision == {"actor": precision, "critic": precision}
    legal = lp_cpu > torch.finfo(torch.float32).min / 2
    ratio_dev = float((lp_gpu[legal] - lp_cpu[legal]).exp().sub(1).abs().max())
    value_dev = float((v_gpu - v_cpu).abs().max())
    cosine = float(torch.nn.functional.cosine_similarity(g_cpu, g_gpu, dim=0))
    say(f"{precision}: CUDA vs CPU max |ratio - 1| {ratio_dev:.3g}, max |dV| {value_dev:.3g}, gradient cosine {cosine:.6f}")
    assert ratio_dev <= 5 * RATIO_ATOL[precision]
    assert cosine >= (0.9999 if precision == "fp32" else 0.99)


# ----------------------------------------------------------------------------- the ratio check under bf16


def test_bf16_ratio_check_has_no_false_halt_in_five_iterations_and_still_fires(pf, rows):
    from royalefleet.bench.update import legal_counts, synthetic_update_data
    from services.learner.alarms import AlarmMonitor
    from services.learner.ppo import UpdateData, make_optimizers, ppo_update
    from shared.config import AlarmConfig, profile
    from shared.nn.model import ActorCritic
    from shared.nn.policy import Policy
    from shared.seeding import stream

    cfg = profile("laptop")
    ppo = msgspec.structs.replace(cfg.ppo, batch_size=512, minibatch_size=256)
    model = ActorCritic(pf.spec, cfg.net, seed=8).cuda()
    opt_actor, opt_critic = make_optimizers(model, ppo)
    policy = Policy(model, pf.codec, torch.device("cuda"))
    n_legal = legal_counts(rows, pf.codec)
    monitor = AlarmMonitor(AlarmConfig(), run_dir=None, say=lambda s: None)
    devs = []
    for it in range(1, 6):
        # rollout-shaped forwards: a round's few rows at a time, as collection infers them
        u = np.random.default_rng(it).random(N_ROWS, dtype=np.float32)
        actions, log_probs = np.zeros(N_ROWS, np.int64), np.zeros(N_ROWS, np.float32)
        for lo in range(0, N_ROWS, 24):
            sl = slice(lo, lo + 24)
            actions[sl], log_probs[sl] = policy.act(rows[sl], n_legal[sl], u[sl])
        inferred_in = model.last_precision["actor"]
        values = policy.values(rows)
        adv = np.random.default_rng(100 + it).standard_normal(N_ROWS).astype(np.float32)
        data = UpdateData(actions=actions, old_log_probs=log_probs, advantages=adv, returns=values + adv,
                          old_values=values, n_legal=n_legal, fetch=policy.fetcher(rows, np.arange(N_ROWS)),
                          old_log_prob_precision=inferred_in)
        stats = ppo_update(model, opt_actor, opt_critic, data, ppo,
                           lambda e: stream(1, "ppo/minibatch/iteration/{iteration}/epoch/{epoch}", iteration=it, epoch=e),
                           torch.device("cuda"), ent_coef=0.01, ent_coef_noop=0.0)
        verdict = monitor.observe({"run/iteration": it, **stats})
        devs.append(stats["ppo/ratio_max_abs_dev"])
        assert (inferred_in, stats["ppo/ratio_atol"]) == ("bf16", 2e-2)
        assert not verdict.halt_due, [r.name for r in verdict.fired]
    say(f"bf16 on CUDA, rollout batches of 24 vs update minibatches of 256: ppo/ratio_max_abs_dev per iteration "
        f"{', '.join(f'{d:.3g}' for d in devs)} (tolerance 5 x 2e-2)")
    # stale weights: the rows acted by another network fire the halt
    other = ActorCritic(pf.spec, cfg.net, seed=9).cuda()
    with torch.no_grad():
        for m in (model, other):
            for head in (m.actor.query, m.actor.query_bias, m.actor.noop):
                head.weight.mul_(100.0)
    data = synthetic_update_data(policy, rows, n_legal)
    oa, oc = make_optimizers(other, ppo)
    stale = ppo_update(other, oa, oc, data, ppo,
                       lambda e: stream(1, "ppo/minibatch/iteration/{iteration}/epoch/{epoch}", iteration=9, epoch=e),
                       torch.device("cuda"), ent_coef=0.01, ent_coef_noop=0.0)
    assert monitor.observe({"run/iteration": 6, **stale}).halt_due


# ----------------------------------------------------------------------------- checkpoints across devices


def _state_files(model, opt_actor, opt_critic) -> dict[str, bytes]:
    from shared.nn.statefiles import module_to_bytes, optimizer_to_bytes

    files = {"actor/model.safetensors": module_to_bytes(model.actor),
             "critic/model.safetensors": module_to_bytes(model.critic)}
    for name, opt in (("actor", opt_actor), ("critic", opt_critic)):
        files[f"optimizers/{name}.safetensors"], files[f"optimizers/{name}.json"] = optimizer_to_bytes(opt)
    return files


def _load(files, model, opt_actor, opt_critic) -> None:
    from shared.nn.statefiles import bytes_to_module, bytes_to_optimizer

    bytes_to_module(model.actor, files["actor/model.safetensors"])
    bytes_to_module(model.critic, files["critic/model.safetensors"])
    bytes_to_optimizer(opt_actor, files["optimizers/actor.safetensors"], files["optimizers/actor.json"])
    bytes_to_optimizer(opt_critic, files["optimizers/critic.safetensors"], files["optimizers/critic.json"])


def test_a_checkpoint_written_on_cuda_loads_on_the_cpu_and_back_with_identical_digests(pf, rows):
    from royalefleet.bench.update import legal_counts, synthetic_update_data
    from services.learner.checkpointing import state_digest
    from services.learner.ppo import make_optimizers, ppo_update
    from shared.config import profile
    from shared.nn.model import ActorCritic
    from shared.nn.policy import Policy
    from shared.seeding import stream

    cfg = profile("tiny")
    gpu = ActorCritic(pf.spec, cfg.net, seed=4).cuda()
    ga, gc = make_optimizers(gpu, cfg.ppo)
    data = synthetic_update_data(Policy(gpu, pf.codec, torch.device("cuda")), rows[:256], legal_counts(rows[:256], pf.codec))
    ppo_update(gpu, ga, gc, data, cfg.ppo, lambda e: stream(1, "ppo/minibatch/iteration/{iteration}/epoch/{epoch}",
                                                             iteration=1, epoch=e),
               torch.device("cuda"), ent_coef=0.01, ent_coef_noop=0.0)  # Adam state exists now
    written = _state_files(gpu, ga, gc)
    cpu = ActorCritic(pf.spec, cfg.net, seed=99)
    ca, cc = make_optimizers(cpu, cfg.ppo)
    _load(written, cpu, ca, cc)
    on_cpu = _state_files(cpu, ca, cc)
    back = ActorCritic(pf.spec, cfg.net, seed=98).cuda()
    ba, bc = make_optimizers(back, cfg.ppo)
    _load(on_cpu, back, ba, bc)
    again = _state_files(back, ba, bc)
    digests = [state_digest(f) for f in (written, on_cpu, again)]
    say(f"state digest written on CUDA / loaded on CPU / back on CUDA: {' / '.join(digests)}")
    assert digests[0] == digests[1] == digests[2]
    assert {k: hashlib.sha256(v).hexdigest() for k, v in written.items()} == {
        k: hashlib.sha256(v).hexdigest() for k, v in again.items()}
    for opt in (ba, bc):  # realigned on the device: every moment beside its parameter
        for p, state in opt.state.items():
            assert state["exp_avg"].device == p.device == state["exp_avg_sq"].device
            assert p.device.type == "cuda"


# ----------------------------------------------------------------------------- memory at start-up


def test_the_start_up_memory_check_passes_laptop_and_refuses_the_impossible(pf):
    from services.learner.ppo import make_optimizers
    from services.learner.vram import DeviceMemoryError, check_update_fits
    from shared.config import profile
    from shared.nn.model import ActorCritic

    cfg = profile("laptop")
    model = ActorCritic(pf.spec, cfg.net, seed=1).cuda()
    oa, oc = make_optimizers(model, cfg.ppo)
    report = check_update_fits(model, oa, oc, pf.spec, cfg.ppo, pf.codec.row_bytes, torch.device("cuda"), say)
    assert report.fits and report.trial_peak_mb > 0
    assert all(p.grad is None for p in model.parameters()) and not oa.state  # the trial changed nothing
    huge = msgspec.structs.replace(cfg.ppo, timesteps_per_iteration=50_000_000)  # ~900 GB of packed rows
    with pytest.raises(DeviceMemoryError, match=r"the update needs [\d,]+ MiB .* of [\d,]+ MiB available"):
        check_update_fits(model, oa, oc, pf.spec, huge, pf.codec.row_bytes, torch.device("cuda"), say)


# ----------------------------------------------------------------------------- the learner end to end


@pytest.mark.slow
def test_verify_resume_tiny_on_cuda_under_run_exact(tmp_path):
    from royalefleet.verify_resume import verify_resume
    from shared.config import profile

    cfg = msgspec.structs.replace(profile("tiny"), net=msgspec.structs.replace(profile("tiny").net, device="cuda"))
    assert cfg.determinism.tier == "run_exact"
    problems = verify_resume(cfg, iterations=3, split=1, say=say, keep_dir=str(tmp_path))
    assert problems == []
    rows = [json.loads(x) for x in open(tmp_path / "straight" / "metrics.jsonl")]
    assert {r.get("run/train_precision") for r in rows if "ppo/kl" in r} == {"bf16"}
    assert all("health/vram_peak_allocated_mb" in r and "ppo/ratio_atol" in r for r in rows if "ppo/kl" in r)
    say(f"verify-resume tiny on CUDA: exact; update {rows[-1]['time/update']:.2f} s, "
        f"VRAM peak {rows[-1]['health/vram_peak_allocated_mb']:.0f} MiB")
