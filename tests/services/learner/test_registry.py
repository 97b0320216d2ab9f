"""The learner's algorithm registry against the config's choice list and the CLI's."""

import subprocess
import sys
import typing

import pytest

from shared.config_schema import LearnerConfig
from services.learner.registry import ALGORITHMS, build_algorithm


def test_every_configurable_algorithm_is_registered_and_nothing_else():
    choices = typing.get_args(typing.get_type_hints(LearnerConfig)["algorithm"])
    assert sorted(choices) == sorted(ALGORITHMS) == ["alphazero", "dqn", "expert_iteration", "ppo", "treestrap"]


def test_up_offers_exactly_the_configurable_algorithms():
    out = subprocess.run([sys.executable, "-m", "royalefleet", "up", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "{ppo,dqn,alphazero,expert_iteration,treestrap}" in out


def test_an_unregistered_name_is_refused_naming_the_registered_ones():
    class _Learner:
        algorithm = "a2c"

    class _Cfg:
        learner = _Learner()

    class _Parts:
        cfg = _Cfg()

    with pytest.raises(SystemExit, match=r"learner.algorithm 'a2c' is not registered; registered: "
                                         r"alphazero, dqn, expert_iteration, ppo"):
        build_algorithm(_Parts())  # type: ignore[arg-type]
