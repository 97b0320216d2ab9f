"""The learner's algorithms by their ``learner.algorithm`` name (``algorithm.Algorithm``).

Adding one is a folder beside ``ppo/``, ``dqn/`` and ``alphazero/`` that implements the
protocol and declares itself (``declare.py``, listed in shared/algorithms.py's ``ALGORITHMS``:
the config's ``learner.algorithm`` choices come from there), and its factory here
(docs/iteration.md, "Adding a learner algorithm"). The name only picks an entry of this fixed
table: a config never chooses a module to import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.learner.algorithm import Algorithm, AlgorithmParts


def _ppo(parts: AlgorithmParts) -> Algorithm:
    from services.learner.ppo.learner import PpoAlgorithm

    return PpoAlgorithm(parts)


def _dqn(parts: AlgorithmParts) -> Algorithm:
    from services.learner.dqn.learner import DqnAlgorithm

    return DqnAlgorithm(parts)


def _alphazero(parts: AlgorithmParts) -> Algorithm:
    from services.learner.alphazero.learner import AlphaZeroAlgorithm

    return AlphaZeroAlgorithm(parts)


def _expert_iteration(parts: AlgorithmParts) -> Algorithm:
    from services.learner.expert_iteration.learner import ExpertIterationAlgorithm

    return ExpertIterationAlgorithm(parts)


def _treestrap(parts: AlgorithmParts) -> Algorithm:
    from services.learner.treestrap.learner import TreeStrapAlgorithm

    return TreeStrapAlgorithm(parts)


ALGORITHMS: dict[str, Callable[[AlgorithmParts], Algorithm]] = {
    "ppo": _ppo,
    "dqn": _dqn,
    "alphazero": _alphazero,
    "expert_iteration": _expert_iteration,
    "treestrap": _treestrap,
}
"""``learner.algorithm`` -> the factory of its ``Algorithm`` (imported when chosen: a PPO run
never imports the DQN learner)."""


def build_algorithm(parts: AlgorithmParts) -> Algorithm:
    """The ``Algorithm`` of ``parts.cfg.learner.algorithm``. Raises SystemExit naming the
    value and the registered ones when it has no entry."""
    name = parts.cfg.learner.algorithm
    factory = ALGORITHMS.get(name)
    if factory is None:
        raise SystemExit(f"learner: learner.algorithm {name!r} is not registered; registered: "
                         f"{', '.join(sorted(ALGORITHMS))} (services/learner/registry.py)")
    return factory(parts)
