"""The learner's determinism tier: put the process into it, or refuse a run that would silently
not be reproducible (docs/iteration.md, "Threads and tiers")."""

from __future__ import annotations

import os

from shared.config import RunConfig


class DeterminismError(RuntimeError):
    """The process cannot be put into the configured tier (the message names the setting)."""


def set_deterministic_algorithms(mode: bool) -> None:
    """``torch.use_deterministic_algorithms(mode)`` without its import of ``torch._inductor``.

    The public call also sets ``torch._inductor.config.deterministic``, and importing that config
    drags in dynamo, sympy and triton: measured 6-11 s of a learner's start on the 2-core machine
    under load (as long as ``import torch`` itself), for a compiler the learner never runs. So the
    flag goes straight to ATen, and the inductor's copy is set only where something has already
    imported it (then it costs nothing; an inductor imported later reads its own default, which
    matters only to a ``torch.compile`` the learner never calls). A torch without the private
    setter gets the public call."""
    import sys

    import torch

    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None:  # pragma: no cover - a torch that renamed it
        torch.use_deterministic_algorithms(mode, warn_only=False)
        return
    setter(mode, warn_only=False)
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None and hasattr(inductor, "deterministic"):
        setattr(inductor, "deterministic", mode)


def apply_determinism(cfg: RunConfig, device: str) -> dict:
    """Put this process into the configured tier, or refuse a run that would silently not be
    reproducible, naming the setting.

    run_exact: deterministic torch algorithms, a fixed thread count, and the BLAS thread counts
    pinned in the environment BEFORE numpy loaded (the launcher and Compose set them; they
    cannot be set from here, so they are checked), plus CUBLAS_WORKSPACE_CONFIG on CUDA; cuDNN
    deterministic, its benchmark off, TF32 off.
    throughput: torch may pick nondeterministic kernels, and cuDNN benchmarks them per shape
    (the fastest convolution for each minibatch shape); env-exactness still holds."""
    import torch

    tier, threads = cfg.determinism.tier, cfg.determinism.torch_threads
    torch.set_num_threads(threads)
    if tier == "run_exact":
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            if os.environ.get(var) != str(threads):
                raise DeterminismError(
                    f"determinism.tier run_exact needs {var}={threads} in the environment before the learner starts "
                    f"(found {os.environ.get(var)!r}); royalefleet up and compose.yaml set it. Set it, or choose "
                    f"determinism.tier \"throughput\"")
        if device.startswith("cuda") and os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in (":4096:8", ":16:8"):
            raise DeterminismError("determinism.tier run_exact on CUDA needs CUBLAS_WORKSPACE_CONFIG=:4096:8 set "
                                   "before the learner starts")
        set_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    else:
        set_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False
        torch.backends.cudnn.benchmark = device.startswith("cuda")
    return {"tier": tier, "torch_threads": threads}
