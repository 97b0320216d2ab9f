"""A throwaway user package for the component tests: a reward of the user's own, on disk.

``write_package(root, name)`` writes ``<root>/<name>/{__init__,util,rewards}.py``: a
``TickReward(per_tick, red_bonus)`` paying ``per_tick * ticks elapsed + red_bonus * team`` each
decision (blue is team 0, red team 1), whose multiplier lives in ``util.py`` so that an edit to
a helper, not only to the reward, is an edit to the package. ``config_problems`` refuses what
the constructor would, as the component protocol asks (shared/components.py).
"""

from __future__ import annotations

from pathlib import Path

REWARDS = '''from royalegym.reward import RewardFunction

from shared.rewards import shaping_weight_problems

from {name}.util import ticks_between


class TickReward(RewardFunction):
    """per_tick * (ticks since the last decision) + red_bonus * team."""

    def __init__(self, per_tick: float = 0.25, red_bonus: float = 0.5):
        problems = self.config_problems({{"per_tick": per_tick, "red_bonus": red_bonus}})
        if problems:
            raise ValueError("; ".join(problems))
        self.per_tick, self.red_bonus = per_tick, red_bonus

    @staticmethod
    def config_problems(kwargs):
        # the shipped rule for a weight: a finite real number, not negative, not a bool or a string
        named = {{"crown": kwargs.get("per_tick", 0.25), "tower_hp": kwargs.get("red_bonus", 0.5)}}
        return [p.replace("crown", "per_tick").replace("tower_hp", "red_bonus")
                for p in shaping_weight_problems(named)]

    def get_reward(self, team, prev, state, results):
        return self.per_tick * ticks_between(prev, state) + self.red_bonus * team
'''

UTIL = '''def ticks_between(prev, state):
    return state.tick - prev.tick
'''


def write_package(root: Path, name: str) -> Path:
    """The package folder ``root/name``, written; put ``root`` on sys.path to import it."""
    pkg = root / name
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "util.py").write_text(UTIL)
    (pkg / "rewards.py").write_text(REWARDS.format(name=name))
    return pkg


def reward_doc(name: str, **kwargs) -> dict:
    """The ``env`` part of a config using ``<name>.rewards.TickReward``."""
    return {"extra_component_modules": [name],
            "reward_fn": {"cls": f"{name}.rewards.TickReward", "kwargs": kwargs}}
