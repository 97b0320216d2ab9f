"""How an iteration ends early: the exceptions the stages raise and the learner's loop catches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class StopRequested(Exception):
    """SIGINT/SIGTERM or an operator halt: leave the stage at its next safe point (a round, a
    minibatch); the checkpoint written is the state the last metric row describes."""


class AlarmHalt(Exception):
    """A halt-severity alarm spent its patience: the checkpoint and the bundle are written."""


class SaveHalt(Exception):
    """``checkpoint.max_failed_saves`` saves in a row failed: stop, without a bundle (the disk
    that refused the checkpoints would refuse it too)."""


def stoppable(fetch: Callable[[Any], Any], stopping: Callable[[], bool]) -> Callable[[Any], Any]:
    """``fetch`` that first raises StopRequested when ``stopping()``: called once per minibatch,
    it is the point where a stop abandons an update (the checkpoint written is then the last
    row's state, not this iteration's)."""

    def fetch_or_stop(cells):
        if stopping():
            raise StopRequested
        return fetch(cells)

    return fetch_or_stop
