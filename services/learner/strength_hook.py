"""The learner's side of the standing strength measurement (``evaluation.strength``): which
iterations are measured, and the one request that hands a stored snapshot to the ladder
(services/ladder/strength.py plans and plays it; the learner never waits for the games)."""

from __future__ import annotations

from collections.abc import Callable

from shared.messages import Ack, MeasureStrength
from shared.transport import ServiceTimeout


def strength_due(every_iterations: int, iteration: int) -> bool:
    """True when ``iteration`` (>= 1) is measured: a multiple of ``every_iterations`` (0: never)."""
    return every_iterations > 0 and iteration > 0 and iteration % every_iterations == 0


def request_strength(client, run_name: str, snapshot_id: str, *, iteration: int, env_steps: int, timesteps: int,
                     timeout_s: float, say: Callable[[str], None]) -> None:
    """Send MeasureStrength for a stored snapshot over the learner's ladder ``client`` with a short
    deadline; say what came of it (a timeout or refusal is said, never raised: strength is
    reported, never needed)."""
    try:
        reply, _ = client.request(MeasureStrength(request_id=client.next_id(), run_name=run_name,
                                                  snapshot_id=snapshot_id, env_steps=env_steps, iteration=iteration,
                                                  timesteps=timesteps), timeout_s=timeout_s)
    except ServiceTimeout as exc:
        say(f"learner: strength snapshot snap:{snapshot_id} not handed to the ladder: {exc}")
        return
    if isinstance(reply, Ack):
        say(f"learner: strength snapshot snap:{snapshot_id} of iteration {iteration}: the ladder planned "
            f"{reply.count} evaluation jobs")
    else:
        say(f"learner: the ladder refused strength snapshot snap:{snapshot_id}: {getattr(reply, 'reason', reply)}")
