"""Which generation the rollouts' prior is (docs/expert-iteration.md, "Generations").

Generation 0 is the network the run starts from (a warm start's clone, or the untrained actor).
The learner offers candidates to the ladder's pool as every run does; the ladder's gate plays a
candidate against the champion unsearched (snapshot players, ``ladder.gate.champion_games``)
and promotes it only when it beats it. The learner reads the gate's verdict from the ladder's
status (``LadderStatus.champion`` and ``gates_passed``), recorded at each checkpoint capture:
a switch is due when the champion is not the current generation's and the ladder has passed
more gates than when the current generation was taken. The run's first snapshot, admitted free
as the first champion (no gate passed), is no promotion: it never switches the prior.
"""

from __future__ import annotations

import msgspec


class Generations(msgspec.Struct, forbid_unknown_fields=True):
    """The generation state, saved with the checkpoint (``expert_iteration/generation.json``)."""

    number: int = 0
    """The current generation (0: the start)."""
    champion: str = ""
    """The snapshot id of the current generation ("" for generation 0)."""
    gates_at_switch: int = 0
    """The ladder's ``gates_passed`` when the current generation was taken."""
    seen_champion: str = ""
    """The ladder's champion at the last capture ("": none yet, or the ladder did not answer)."""
    seen_gates_passed: int = 0
    """The ladder's ``gates_passed`` at the last capture."""

    def observe(self, status) -> None:
        """Record a ``LadderStatus`` (None: the ladder did not answer; the last one stands)."""
        if status is None or status.champion is None:
            return
        self.seen_champion, self.seen_gates_passed = status.champion, int(status.gates_passed)

    def due(self) -> str | None:
        """The champion to switch the prior to, or None (module docstring)."""
        if self.seen_champion and self.seen_champion != self.champion and self.seen_gates_passed > self.gates_at_switch:
            return self.seen_champion
        return None

    def switched(self, champion: str) -> None:
        """The prior is now ``champion``'s: the next generation."""
        self.number += 1
        self.champion, self.gates_at_switch = champion, self.seen_gates_passed
