"""How an iteration ends early: the exceptions the stages raise and the learner's loop catches."""

from __future__ import annotations


class StopRequested(Exception):
    """SIGINT/SIGTERM or an operator halt: leave the stage at its next safe point (a round, a
    minibatch); the checkpoint written is the state the last metric row describes."""


class AlarmHalt(Exception):
    """A halt-severity alarm spent its patience: the checkpoint and the bundle are written."""


class SaveHalt(Exception):
    """``checkpoint.max_failed_saves`` saves in a row failed: stop, without a bundle (the disk
    that refused the checkpoints would refuse it too)."""
