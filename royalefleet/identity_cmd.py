"""The identity a config gives on this machine, computed exactly as the learner computes it."""

from __future__ import annotations

from shared.config import RunConfig


def identity_for(cfg: RunConfig):
    """(RunIdentity, run_id) for ``cfg`` against a freshly built environment and this device."""
    import torch

    from shared.preflight import run_preflight
    from shared.codec import table_digest
    from shared.identity import action_digest_of, compute_identity, describe_device, run_id

    pf = run_preflight(cfg.env, cfg.master_seed, frame_stack=cfg.obs.frame_stack)
    device = cfg.net.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    ident = compute_identity(cfg, engine=pf.engine, obs_digest=pf.spec.digest(),
                             action_digest=action_digest_of(pf.spec),
                             codec_table_digest=table_digest(pf.table), device_kind=describe_device(device),
                             torch_version=str(torch.__version__))
    return ident, run_id(ident)
