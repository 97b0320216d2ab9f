"""The compose integration test's restart check (deploy/podman/compose_it.py, unrun here: it needs
podman): episode ordinals in the result log across a learner restart neither repeat nor go back,
and an episode ending after the restart with more decisions than were played since shows it was
carried over in the checkpoint's battle states."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parents[2] / "deploy" / "podman" / "compose_it.py"
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


def test_the_example_reward_check_finds_an_episode_paid_by_another_reward():
    paid = [dict(rec(0, 0, 2, 40), undiscounted_return=4.000000000000002),
            dict(rec(1, 0, 2, 7, "red"), undiscounted_return=0.7000000000000001)]
    assert compose_it.user_reward_problems(paid) == []
    shipped = dict(rec(2, 0, 2, 40), undiscounted_return=-1.0)  # a loss under the shipped reward
    assert compose_it.user_reward_problems(paid + [shipped]) == [
        "battle 2 ordinal 0 blue: return -1.0 over 40 decisions, the example reward pays 4.0"]
    assert compose_it.user_reward_problems([]) == ["the result log holds no episode"]


def test_the_example_config_names_the_example_package_and_its_per_tick(monkeypatch):
    import json
    import sys

    # allowed as Compose allows it (compose_it.py sets FLEET_USER_PACKAGES, which compose.yaml passes
    # to every service as ROYALEFLEET_ALLOW_MODULES; issue 38)
    monkeypatch.setenv("ROYALEFLEET_ALLOW_MODULES", "fleet_example_bot")

    root = _path.parents[2]
    doc = json.loads((root / "deploy" / "config" / compose_it.EXAMPLE_CONFIG).read_text())
    assert doc["env"]["reward_fn"] == {"cls": "fleet_example_bot.rewards.TickReward",
                                       "kwargs": {"per_tick": compose_it.EXAMPLE_PER_TICK}}
    sys.path.insert(0, str(root / "deploy" / "podman" / "example_user"))
    try:
        from shared.config import load_config
        from shared.envs import build_env

        env = build_env(load_config(doc).env)
        env.reset(seed=3)
        step = env.step({"blue": 0, "red": 0})[1]
        assert step == {"blue": compose_it.EXAMPLE_PER_TICK * compose_it.TICKS_PER_DECISION} | {
            "red": compose_it.EXAMPLE_PER_TICK * compose_it.TICKS_PER_DECISION}
    finally:
        sys.path.remove(str(root / "deploy" / "podman" / "example_user"))
        for m in [m for m in sys.modules if m.startswith("fleet_example_bot")]:
            del sys.modules[m]
