"""The scripted players' ids: one table, read by the config, the matchmaker, the rollout's
scripted seats, the evaluator's anchors and the CLI (``royalefleet eval`` / ``play``).

``scripted:noop`` and ``scripted:random_legal`` are the run's own anchors (random-legal with
``ladder.random_legal_noop_prob``); the rest are RoyaleGym's scripted ladder
(``royalegym.opponents.ladder()``, weakest first by sophistication), each under
``scripted:<rung name>``. ``scripted:random`` is the ladder's own RandomLegal(0.7), a different
player from ``scripted:random_legal``. Every one of them reads only the mask planes of its
observation, so their seats stay ``mask_only`` (cheap observations).

Torch-free and RoyaleGym-free to import: ``tests/test_scripted.py`` checks the table against
``royalegym.opponents.ladder()``.
"""

from __future__ import annotations

SCRIPTED_PREFIX = "scripted:"
RUN_ANCHORS = ("scripted:noop", "scripted:random_legal")
"""The run's own scripted players (the gate's anchors: shared.evaluation.ANCHORS)."""
LADDER_RUNGS = ("random", "first-affordable", "defend", "push", "patient")
"""RoyaleGym's ladder rungs other than ``noop`` (which is ``scripted:noop``), weakest first."""
SCRIPTED_PLAYERS = RUN_ANCHORS + tuple(SCRIPTED_PREFIX + r for r in LADDER_RUNGS)
"""Every scripted player id, in ladder order after the run's two."""


def unknown_scripted(player: str) -> str:
    """The refusal text for an id that is no scripted player: names it and every known id."""
    return f"unknown scripted player {player!r}; known: {', '.join(SCRIPTED_PLAYERS)}"
