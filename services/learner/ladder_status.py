"""The ladder's status in the learner's metric row: ``ladder/...`` keys (shared/metric_schema.py).

The learner asks the ladder once per iteration (``LadderStatusRequest``, a short deadline:
``services.ladder_status_timeout_s``). A number the ladder does not have (no champion, no fit,
no pair with enough games) is absent from the row, never 0; so is everything when the ladder
did not answer, and ``LadderStatusPoller`` says so once per outage instead of every iteration.
"""

from __future__ import annotations

from collections.abc import Callable

from shared.messages import LadderStatus, LadderStatusRequest
from shared.transport import ServiceTimeout


def ladder_row(status: LadderStatus) -> dict:
    """Row keys for one LadderStatus: counts always, the rest only when they exist.
    ``ladder/rating/{member}`` and ``ladder/rating_se/{member}`` for the members the fit holds
    (at most ``ladder.pool.pool_working_size``, which bounds the gauge's label set)."""
    row: dict = {
        "ladder/pool_size": status.pool_size,
        "ladder/pending_candidates": status.pending,
        "ladder/gates_run": status.gates_run,
        "ladder/gates_passed": status.gates_passed,
        "ladder/consecutive_gate_failures": status.consecutive_gate_failures,
    }
    optional = {
        "ladder/champion_id": status.champion,
        "ladder/champion_env_steps": status.champion_env_steps,
        "ladder/champion_rating": status.champion_rating,
        "ladder/champion_rating_se": status.champion_rating_se,
        "ladder/transitivity_residual": status.transitivity_residual,
        "ladder/pfsp_effective": None if status.pfsp_effective is None else int(status.pfsp_effective),
        "ladder/gate_score_lower_bound": status.gate_score_lower_bound,  # EVAL's gate runner fills it
    }
    row.update({k: v for k, v in optional.items() if v is not None})
    for member, rating in status.ratings.items():
        row["ladder/rating/" + member] = rating
    for member, se in status.rating_se.items():
        row["ladder/rating_se/" + member] = se
    row.update(strength_row(status.strength))
    return row


def strength_row(s) -> dict:
    """``strength/...`` row keys of a ``StrengthSummary``: {} (every key absent, never 0 or 0.5)
    until the ladder has measured a strength snapshot."""
    if s is None:
        return {}
    row: dict = {"strength/iteration": s.iteration, "strength/env_steps": s.env_steps, "strength/rating": s.rating,
                 "strength/rating_se": s.rating_se, "strength/measured": s.measured, "strength/pending": s.pending}
    for anchor, score in s.score.items():
        row["strength/score/" + anchor] = score
        row["strength/score_lo/" + anchor] = s.score_lo[anchor]
        row["strength/score_hi/" + anchor] = s.score_hi[anchor]
        row["strength/games/" + anchor] = s.games[anchor]
    return row


class LadderStatusPoller:
    """Asks the ladder for its status with a short deadline. ``client`` is the learner's
    ladder ``shared.transport.Client``; ``say`` prints. ``poll`` returns the row keys, or {}
    when the ladder did not answer in ``timeout_s`` or refused (said once until it answers)."""

    def __init__(self, client, run_name: str, timeout_s: float, say: Callable[[str], None]):
        self.client, self.run_name, self.timeout_s, self.say = client, run_name, timeout_s, say
        self.silent = False
        self.last: LadderStatus | None = None
        """The last status the ladder answered (None: none yet): an algorithm that follows the
        gate reads it through ``AlgorithmParts.pool.status``."""

    def poll(self) -> dict:
        try:
            reply, _ = self.client.request(LadderStatusRequest(request_id=self.client.next_id(), run_name=self.run_name),
                                           timeout_s=self.timeout_s)
        except ServiceTimeout as exc:
            return self._missing(f"{exc}")
        if not isinstance(reply, LadderStatus):
            return self._missing(f"the ladder refused the status request: {getattr(reply, 'reason', reply)}")
        if self.silent:
            self.say("learner: the ladder answers the status request again; ladder/ keys are back in the row")
            self.silent = False
        self.last = reply
        return ladder_row(reply)

    def _missing(self, why: str) -> dict:
        if not self.silent:
            self.say(f"learner: no ladder status this iteration ({why}); the ladder/ keys stay out of the row "
                     "until it answers (said once)")
            self.silent = True
        return {}
