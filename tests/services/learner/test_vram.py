"""The start-up device-memory judgement (services/learner/vram.py) on numbers worked out by
hand (the measuring trial itself needs CUDA: tests/services/learner/test_gpu.py), and cuDNN's settings per
determinism tier."""

from services.learner.vram import VRAM_HEADROOM_MB, fit_report


def test_an_update_that_fits():
    r = fit_report(trial_peak_mb=600.0, weights_mb=100.0, rows_mb=500.0, available_mb=4000.0, minibatch_size=256)
    assert r.need_mb == 600 + 500 + VRAM_HEADROOM_MB == 1356 and r.fits


def test_an_update_that_does_not_fit_names_a_minibatch_that_would():
    # per row (900 - 100) / 256 = 3.125 MiB; budget 1500 - 100 - 500 - 256 = 644 MiB -> 206 rows -> 128
    r = fit_report(trial_peak_mb=900.0, weights_mb=100.0, rows_mb=500.0, available_mb=1500.0, minibatch_size=256)
    assert (r.need_mb, r.fits, r.suggested_minibatch) == (1656.0, False, 128)
    assert r.describe() == ("the update needs 1,656 MiB (forward+backward of 256 rows 900 + the iteration's packed "
                            "rows 500 + headroom 256) of 1,500 MiB available")


def test_no_minibatch_is_suggested_when_not_one_row_fits():
    r = fit_report(trial_peak_mb=900.0, weights_mb=100.0, rows_mb=1500.0, available_mb=1500.0, minibatch_size=256)
    assert (r.fits, r.suggested_minibatch) == (False, None)



def test_cudnn_is_set_per_tier(monkeypatch):
    """run_exact: cuDNN deterministic, no benchmark, no TF32; throughput on CUDA: benchmark mode
    (cuDNN times its kernels per shape); throughput on the CPU leaves benchmark off. The flags
    are torch's process-wide settings, readable without a GPU; restored afterwards."""
    import torch

    from services.learner.service import apply_determinism
    from shared.config import load_config

    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    saved = (cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32,
             torch.are_deterministic_algorithms_enabled(), torch.get_num_threads())
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    try:
        apply_determinism(load_config({"profile": "tiny"}), "cuda")
        assert (cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32) == (True, False, False, False)
        throughput = load_config({"profile": "tiny", "determinism": {"tier": "throughput"}})
        apply_determinism(throughput, "cuda")
        assert (cudnn.deterministic, cudnn.benchmark) == (False, True)
        apply_determinism(throughput, "cpu")
        assert cudnn.benchmark is False
    finally:
        cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32 = saved[:4]
        torch.use_deterministic_algorithms(saved[4])
        torch.set_num_threads(saved[5])
