"""Device memory on a CUDA learner: the start-up check that the configured update fits the
card, and the VRAM keys of the metric row.

The check (royalelearn-facts §2, preflight step 12, in our terms): one real forward and backward
of both networks at ``ppo.minibatch_size`` rows, every row a choice row (the actor's worst case;
in training ~90 % of rows skip it), measures the update's peak; the iteration's packed rows are
held on the device during the update (``shared.nn.policy.Policy.fetcher``), ``row_bytes`` each
for at least ``ppo.timesteps_per_iteration`` rows. The learner refuses to start when

    peak of the trial + iteration rows + VRAM_HEADROOM_MB  >  driver-free memory before the trial
                                                             + what torch already held

naming each number and the largest power-of-two minibatch the measured peak, scaled linearly in
the rows, would fit (``fit_report``). A CPU learner has no device memory to check.
"""

from __future__ import annotations

from dataclasses import dataclass

MB = 2**20

VRAM_HEADROOM_MB = 256
"""Kept free beyond the measured need (the reference's ``vram_headroom_mb``): cuDNN workspaces
differ by shape, and the allocator fragments."""

ROWS_MARGIN = 1.25
"""The iteration's trainable rows over ``ppo.timesteps_per_iteration``: T is rounded up to
whole cycles (facts §2), so an iteration holds a little more; 1.25 covers the profiles' fleets."""


class DeviceMemoryError(RuntimeError):
    """The configured update does not fit the device's memory; the text has the numbers."""


@dataclass(frozen=True)
class FitReport:
    trial_peak_mb: float
    """Peak torch allocation of the forward+backward trial (weights and gradients included)."""
    rows_mb: float
    """The iteration's packed rows held on the device."""
    available_mb: float
    """Driver-free memory before the trial plus what torch already held."""
    minibatch_size: int
    suggested_minibatch: int | None
    """The largest power of two the peak, scaled linearly in rows, would fit; None when even
    one row would not."""

    @property
    def need_mb(self) -> float:
        return self.trial_peak_mb + self.rows_mb + VRAM_HEADROOM_MB

    @property
    def fits(self) -> bool:
        return self.need_mb <= self.available_mb

    def describe(self) -> str:
        return (f"the update needs {self.need_mb:,.0f} MiB (forward+backward of {self.minibatch_size} rows "
                f"{self.trial_peak_mb:,.0f} + the iteration's packed rows {self.rows_mb:,.0f} + headroom "
                f"{VRAM_HEADROOM_MB}) of {self.available_mb:,.0f} MiB available")


def fit_report(trial_peak_mb: float, weights_mb: float, rows_mb: float, available_mb: float,
               minibatch_size: int) -> FitReport:
    """Judge the trial's numbers. ``weights_mb`` is the part of the peak that does not grow with
    the rows (weights, gradients, optimizer state); the rest is scaled linearly for the suggestion."""
    per_row = max(trial_peak_mb - weights_mb, 0.0) / minibatch_size
    budget = available_mb - weights_mb - rows_mb - VRAM_HEADROOM_MB
    suggested = None
    if per_row > 0 and budget >= per_row:
        suggested = 1 << (int(budget / per_row).bit_length() - 1)
    return FitReport(trial_peak_mb, rows_mb, available_mb, minibatch_size, suggested)


def check_update_fits(model, opt_actor, opt_critic, spec, ppo, row_bytes: int, device, say=print) -> FitReport:
    """Run the trial on ``device`` (CUDA), print one line, and return the report; raise
    DeviceMemoryError naming the numbers (and a minibatch that would fit) when it does not fit,
    also when the trial itself runs out of memory. Gradients are cleared afterwards, and the
    optimizers are never stepped: the trial changes no weight and no optimizer state."""
    import torch

    from shared.nn.distribution import MaskedCategorical

    free, _ = torch.cuda.mem_get_info(device)
    available_mb = (free + torch.cuda.memory_reserved(device)) / MB
    weights_mb = torch.cuda.memory_allocated(device) / MB
    rows_mb = ppo.timesteps_per_iteration * ROWS_MARGIN * row_bytes / MB
    torch.cuda.reset_peak_memory_stats(device)
    b = ppo.minibatch_size
    obs = {
        "spatial": torch.zeros((b, len(spec.plane_names), spec.height, spec.width), device=device),
        "vector": torch.zeros((b, spec.vector_size), device=device),
        "mask": torch.ones((b, spec.n_actions), dtype=torch.bool, device=device),
    }
    if spec.id_planes:  # card identity: each tile's card id (shared/nn/model.py)
        obs["card_ids"] = torch.zeros((b, spec.id_planes, spec.height, spec.width), dtype=torch.uint8, device=device)
    if spec.frame_stack > 1:  # the previous decisions' planes (shared/nn/frame_stack.py)
        from shared.nn.frame_stack import history_channels

        obs["history"] = torch.zeros((b, history_channels(spec), spec.height, spec.width), device=device)
    try:
        dist = MaskedCategorical(model.actor_logits(obs), obs["mask"])
        loss = model.value(obs).sum() + dist.entropy().sum()
        loss.backward()
        torch.cuda.synchronize(device)
        trial_peak_mb = torch.cuda.max_memory_allocated(device) / MB
    except torch.cuda.OutOfMemoryError as exc:
        raise DeviceMemoryError(f"the update's forward+backward at ppo.minibatch_size {b} ran out of device memory "
                                f"({available_mb:,.0f} MiB available): lower ppo.minibatch_size ({exc})") from None
    finally:
        opt_actor.zero_grad(set_to_none=True)
        opt_critic.zero_grad(set_to_none=True)
        del obs
        torch.cuda.empty_cache()
    # Adam's two moments arrive with the first step: count them now, as part of the fixed cost.
    params_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / MB
    report = fit_report(trial_peak_mb + 2 * params_mb, weights_mb + 2 * params_mb, rows_mb, available_mb, b)
    if not report.fits:
        hint = (f"set ppo.minibatch_size to {report.suggested_minibatch} or lower (a memory knob only)"
                if report.suggested_minibatch else "use a smaller network or a card with more memory")
        raise DeviceMemoryError(f"{report.describe()}: {hint}, lower ppo.timesteps_per_iteration, or free the GPU")
    say(f"learner: device memory: {report.describe()}")
    return report


def reset_peak(device) -> None:
    """Start the iteration's peak (``health/vram_peak_allocated_mb``) afresh; CUDA only."""
    import torch

    torch.cuda.reset_peak_memory_stats(device)


def vram_row(device) -> dict[str, float]:
    """The row's VRAM keys, in MiB: driver-free, torch's peak allocation since ``reset_peak``,
    and what its caching allocator holds."""
    import torch

    return {
        "health/vram_driver_free_mb": torch.cuda.mem_get_info(device)[0] / MB,
        "health/vram_peak_allocated_mb": torch.cuda.max_memory_allocated(device) / MB,
        "health/vram_reserved_mb": torch.cuda.memory_reserved(device) / MB,
    }
