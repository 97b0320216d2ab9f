"""The assignment table: (battle id, episode ordinal) -> the ``Assignment`` the ladder planned
for that episode (who plays the learner's seat, the opponent). Both sides of the wire keep one,
applied by the same rule (``take``): a rollout's shard reads it when a battle begins an episode
(services/rollout), the learner to know which snapshot holds a frozen seat (services/learner/
fleet.py). One rule, so the learner's copy is what the rollout plays.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from shared.messages import Assignment


class AssignmentTable(dict):
    """``dict[(battle, ordinal), Assignment]`` with the plan rule ``take``."""

    def take(self, assignments: Iterable[Assignment], *, live: Collection[int], floor: Mapping[int, int],
             in_flight: Collection[tuple[int, int]] = ()) -> None:
        """Take a plan's ``assignments`` in place.

        Each one is entered (replacing an earlier answer for the same episode) except an entry
        listed in ``in_flight`` that the table already holds: that episode began under the
        earlier assignment, which it keeps. Then entries of battles not in ``live`` and of
        ordinals below ``floor[battle]`` (the episode the battle stands at; an absent battle
        has no floor) are dropped."""
        for a in assignments:
            key = (a.battle, a.ordinal)
            if key in in_flight and key in self:
                continue
            self[key] = a
        for key in [k for k in self if k[0] not in live or k[1] < floor.get(k[0], 0)]:
            del self[key]
