"""The learner's side of ``shared.learner_extension``: the run's extension objects built from
its config, and the calls the update, the start and the checkpoint make into them.

With no extension section that defines ``learner_extension`` the tuple is empty and every
function here leaves the learner's numbers exactly as without it (no row key added)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import msgspec

from shared.learner_extension import ActorTerms, LearnerExtension

Extensions = tuple[LearnerExtension, ...]


def build_extensions(sections: dict[str, Any]) -> Extensions:
    """One object per section (``RunConfig.extensions``, sorted by key) whose schema class
    defines ``learner_extension()``. Raises TypeError naming the section when that method
    returns something other than a ``LearnerExtension``."""
    from shared.extensions import section_schema

    out = []
    for key in sorted(sections):
        schema = section_schema(key)
        section: Any = msgspec.convert(sections[key], schema)
        make = getattr(section, "learner_extension", None)
        if make is None:
            continue
        ext = make()
        if not isinstance(ext, LearnerExtension):
            raise TypeError(f"{key}: {schema.__name__}.learner_extension() returned a {type(ext).__name__}, "
                            "not a shared.learner_extension.LearnerExtension")
        out.append(ext)
    return tuple(out)


def lr_multiplier(extensions: Extensions, iteration: int, env_steps: int) -> float:
    """The product of every extension's ``actor_lr_multiplier`` (1.0 for none). Raises
    ValueError naming the extension whose value is not finite or is negative."""
    product = 1.0
    for ext in extensions:
        m = ext.actor_lr_multiplier(iteration, env_steps)
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) or m < 0:
            raise ValueError(f"{type(ext).__name__}.actor_lr_multiplier({iteration}, {env_steps}) returned {m!r}; "
                             "it must be a finite number >= 0")
        product *= float(m)
    return product


@contextmanager
def scaled_lr(opt, multiplier: float) -> Iterator[None]:
    """Every param group's lr times ``multiplier`` inside the block, restored after (so the
    LR backoff and a resume see the configured rates)."""
    saved = [group["lr"] for group in opt.param_groups]
    if multiplier != 1.0:
        for group in opt.param_groups:
            group["lr"] = group["lr"] * multiplier
    try:
        yield
    finally:
        for group, lr in zip(opt.param_groups, saved):
            group["lr"] = lr


def actor_terms(extensions: Sequence[LearnerExtension], terms: ActorTerms, sums: dict[str, Any]):
    """The sum of the extensions' actor-loss terms for one minibatch (None when none adds one);
    their metric sums are added into ``sums``. Raises ValueError naming an extension whose loss
    is not a scalar."""
    total = None
    for ext in extensions:
        out = ext.actor_loss(terms)
        if out is None:
            continue
        if out.loss.dim() != 0:
            raise ValueError(f"{type(ext).__name__}.actor_loss returned a loss of shape {tuple(out.loss.shape)}; "
                             "it must be a scalar")
        total = out.loss if total is None else total + out.loss
        for key, value in out.sums.items():
            v = value.detach().double() if hasattr(value, "detach") else float(value)
            sums[key] = sums[key] + v if key in sums else v
    return total


def end_update(extensions: Extensions, stats: dict[str, float]) -> dict[str, float]:
    """Every extension's row values after an update, merged in order."""
    out: dict[str, float] = {}
    for ext in extensions:
        out.update(ext.end_update({**stats, **out}))
    return out


def states(extensions: Extensions) -> dict[str, dict]:
    """``{class name: state}`` for the checkpoint's update_state (empty for none)."""
    return {type(ext).__name__: ext.state() for ext in extensions}


def load_states(extensions: Extensions, stored: dict[str, dict]) -> None:
    for ext in extensions:
        if type(ext).__name__ in stored:
            ext.load_state(stored[type(ext).__name__])


def start(parts, *, fresh: bool) -> None:
    """``fresh_start`` (a run without a checkpoint) or ``resumed`` of every extension, given
    ``parts`` (``LearnerParts``). Raises SystemExit with an extension's ExtensionRefused text."""
    from shared.learner_extension import ExtensionRefused, StartContext

    if not parts.extensions:
        return
    ctx = StartContext(cfg=parts.cfg, model=parts.model, device=parts.device, run_dir=parts.run_dir,
                       spec=parts.pf.spec, codec=parts.pf.codec, identity=parts.identity, say=parts.say)
    for ext in parts.extensions:
        try:
            (ext.fresh_start if fresh else ext.resumed)(ctx)
        except ExtensionRefused as exc:
            raise SystemExit(f"learner: refusing to start run {parts.cfg.run_name!r}: {exc}") from None


HOOKS = ("fresh_start", "resumed", "actor_lr_multiplier", "actor_loss", "end_update", "state", "load_state")
"""Every hook of ``shared.learner_extension.LearnerExtension``."""


def unhonoured(extensions: Extensions, honoured: frozenset[str]) -> list[str]:
    """``"<class>.<hook>"`` of every hook an extension overrides that is not in ``honoured``
    (an algorithm's ``extension_hooks``): what it would silently not do."""
    from shared.learner_extension import LearnerExtension

    return [f"{type(ext).__name__}.{hook}" for ext in extensions for hook in HOOKS
            if hook not in honoured and getattr(type(ext), hook) is not getattr(LearnerExtension, hook)]
