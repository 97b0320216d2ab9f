"""What one iteration's collection hands the training and the row: ``Collected`` (built by
``collection.collect_iteration``)."""

from __future__ import annotations

from dataclasses import dataclass

from services.learner.fleet import SlotMap
from services.learner.frozen import FrozenCounts
from services.learner.rectangle import Rectangle
from services.learner.rounds import CollectionStats


@dataclass
class Collected:
    """One iteration's collected rectangle and what happened while collecting it."""

    iteration: int
    sched: dict
    """``evaluate_schedules`` at the env steps the iteration started from."""
    members: list
    slot_map: SlotMap
    T: int
    learner_rows: int
    roles: list
    rect: Rectangle
    stats: CollectionStats
    seconds: float
    """Wall seconds of the collection (the rounds, not the boundary)."""
    inference_precision: str | None
    t_start: float
    """``time.perf_counter()`` when the boundary began (``time/iteration`` runs from it)."""
    policy: object = None
    """What inferred the rounds: a ``Policy``, or an ``overlap.BehaviourPolicy``."""
    frozen_counts: FrozenCounts | None = None
    """The frozen actors' load counts when the collection ended (``frozen_metrics``), before
    an overlapped boundary resets them."""
    ordinals: dict | None = None
    """Each battle's episode ordinal at the end of the collection (the checkpoint's)."""
