"""The warm start (issue 27 item 3): a fresh run's actor, and its critic when the clone kept
one, start from a clone snapshot; the actor is held still for the first iterations while the
critic adapts.

Config (an extension section; the snapshot id is the sha256 prefix of the actor's weights, so
the section's digest in the run identity names the weights)::

    "warm_start": {"snapshot": "snap:<id>", "hold_actor_iterations": 5}

A resume takes the checkpoint's weights and says the warm start was not applied again.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from services.learner.extensions.clone_snapshot import SNAPSHOT_PATTERN, load_clone
from shared.learner_extension import LearnerExtension, StartContext


class WarmStartSection(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """``warm_start``: where a fresh run's weights come from."""

    snapshot: Annotated[str, msgspec.Meta(pattern=SNAPSHOT_PATTERN)] = ""
    """``snap:<id>``, a clone in this run's snapshot store (``royalefleet clone`` prints it)."""
    hold_actor_iterations: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Iterations 1..N train the critic only: the actor's learning rate is multiplied by 0."""
    critic: bool = True
    """Also load ``<run>/clones/<id>/critic.safetensors`` when the clone wrote one."""

    def learner_extension(self) -> LearnerExtension:
        return WarmStart(self)


class WarmStart(LearnerExtension):
    """The hooks of ``WarmStartSection`` (module docstring)."""

    def __init__(self, section: WarmStartSection):
        self.section = section

    def fresh_start(self, ctx: StartContext) -> None:
        from shared.nn.statefiles import bytes_to_module

        s = self.section
        clone = load_clone(ctx, s.snapshot, "warm_start.snapshot")
        ctx.model.actor.load_state_dict(clone.actor.state_dict())
        if s.critic and clone.critic_bytes is not None:
            bytes_to_module(ctx.model.critic, clone.critic_bytes)
            critic = "and critic from the clone's critic.safetensors"
        else:
            critic = ("critic fresh (warm_start.critic is false)" if not s.critic
                      else "critic fresh (the clone folder holds no critic.safetensors)")
        hold = (f"; the actor is held still for iterations 1-{s.hold_actor_iterations}"
                if s.hold_actor_iterations else "")
        ctx.say(f"learner: warm start: actor from snapshot {clone.id} (probe rows verify, largest difference "
                f"{clone.probe_diff:.2g} nats), {critic}{hold}")

    def resumed(self, ctx: StartContext) -> None:
        ctx.say(f"learner: warm start from {self.section.snapshot} not applied again: the run resumed a checkpoint, "
                "whose weights it keeps")

    def actor_lr_multiplier(self, iteration: int, env_steps: int) -> float:
        return 0.0 if iteration <= self.section.hold_actor_iterations else 1.0
