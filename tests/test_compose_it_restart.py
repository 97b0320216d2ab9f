"""The compose integration test's restart check (deploy/podman/compose_it.py, unrun here: it needs
podman): episode ordinals in the result log across a learner restart neither repeat nor go back,
and an episode ending after the restart with more decisions than were played since shows it was
carried over in the checkpoint's battle states."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parent.parent / "deploy" / "podman" / "compose_it.py"
_spec = importlib.util.spec_from_file_location("compose_it", _path)
compose_it = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compose_it)


def rec(battle, ordinal, iteration, steps, seat="blue"):
    return {"battle": battle, "ordinal": ordinal, "seat": seat, "iteration": iteration, "episode_steps": steps}


def test_continued_episodes_are_counted_and_ordinals_that_go_back_are_problems():
    # restart after iteration 3, T = 16: battle 0's episode 1 ends in iteration 4 after 40
    # decisions (more than the 16 since the restart: carried over); battle 1's after 10.
    log = [rec(0, 0, 2, 40), rec(0, 1, 4, 40), rec(1, 0, 4, 10, "red")]
    assert compose_it.episodes_across_restart(log, 3, 16) == ([], 1)
    # a battle that started again from an ordinal it had already finished
    problems, _ = compose_it.episodes_across_restart(log + [rec(0, 0, 5, 12)], 3, 16)
    assert problems == ["battle 0 ordinal 0 blue reported twice",
                        "battle 0 reported ordinal 0 in iteration 5 after the restart; it had reached 0 before it"]
