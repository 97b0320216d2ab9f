"""Learning-rate backoff on a persistently high KL (royalelearn-facts §4 "Learning-rate backoff").

After exactly ``patience`` consecutive iterations whose choice-row KL (``ppo/kl``, never the
all-row mean diluted by ~93 % forced rows: lesson 6) is above ``kl_threshold``, both
optimizers' learning rates are multiplied by ``factor``, floored at ``lr_min``, and the streak
restarts. An iteration at or below the threshold restarts the streak too. There is no other lr
schedule.

An iteration with no KL (no choice row, so the actor did not move) is no evidence either way:
the streak is left as it was. A backoff that changes no rate (both already at ``lr_min``) is not
counted as an event.
"""

from __future__ import annotations

import math

import torch

from shared.config import LrBackoffConfig


def _lr(opt: torch.optim.Optimizer) -> float:
    return float(opt.param_groups[0]["lr"])


class LrBackoff:
    def __init__(self, cfg: LrBackoffConfig):
        self.cfg = cfg
        self.streak = 0
        """Consecutive iterations with kl > kl_threshold since the last backoff or non-breach."""
        self.events = 0
        """Backoffs that lowered at least one rate, over the whole run."""
        self.lr_actor: float | None = None
        self.lr_critic: float | None = None
        """The rates the last backoff set (None before the first): ``apply`` restores them."""

    def observe(self, kl: float | None, opt_actor: torch.optim.Optimizer, opt_critic: torch.optim.Optimizer) -> bool:
        """Feed one iteration's choice-row KL; True when this call lowered a learning rate."""
        if kl is None or math.isnan(kl):
            return False
        if kl <= self.cfg.kl_threshold:
            self.streak = 0
            return False
        self.streak += 1
        if self.streak < self.cfg.patience:
            return False
        self.streak = 0
        changed = False
        for opt in (opt_actor, opt_critic):
            for group in opt.param_groups:
                new = max(group["lr"] * self.cfg.factor, self.cfg.lr_min)
                if new < group["lr"]:
                    group["lr"] = new
                    changed = True
        if changed:
            self.events += 1
            self.lr_actor, self.lr_critic = _lr(opt_actor), _lr(opt_critic)
        return changed

    def apply(self, opt_actor: torch.optim.Optimizer, opt_critic: torch.optim.Optimizer) -> None:
        """After a resume: put the backed-off rates back into the optimizers (the service sets
        them from the config first). A run that never backed off keeps the config's rates."""
        for opt, lr in ((opt_actor, self.lr_actor), (opt_critic, self.lr_critic)):
            if lr is not None:
                for group in opt.param_groups:
                    group["lr"] = lr

    def metrics(self, opt_actor: torch.optim.Optimizer, opt_critic: torch.optim.Optimizer) -> dict[str, float]:
        return {
            "ppo/lr_actor": _lr(opt_actor),
            "ppo/lr_critic": _lr(opt_critic),
            "ppo/lr_backoff_events": float(self.events),
            "ppo/lr_backoff_streak": float(self.streak),
        }

    def state(self) -> dict:
        return {"streak": self.streak, "events": self.events, "lr_actor": self.lr_actor, "lr_critic": self.lr_critic}

    def load_state(self, state: dict) -> None:
        self.streak, self.events = int(state["streak"]), int(state["events"])
        self.lr_actor = None if state.get("lr_actor") is None else float(state["lr_actor"])
        self.lr_critic = None if state.get("lr_critic") is None else float(state["lr_critic"])
