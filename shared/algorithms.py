"""The learner algorithms' declarations: one fixed table, read by everything outside the learner.

Each learner algorithm (``services/learner/registry.py`` builds its ``Algorithm``) declares, in
a torch-free module, what the rest of the tree must know about it: its ``learner.algorithm``
name, its config section, its metric row keys, its seed streams, what of the config goes in its
run identity, its cross-section config rules, and whether the rollouts search for it. The
config's ``learner.algorithm`` choices, ``RunConfig``'s algorithm sections, the metric schema,
the seed stream table, the algo digest, ``royalefleet up --algorithm`` and ``royalefleet
replay`` all read ``ALGORITHMS``. A config's bytes only pick an entry by name: the table is
code, never a module a config names (docs/iteration.md, "Adding a learner algorithm").

PPO, DQN and AlphaZero are declared here, their sections, row keys and streams still where they
were (``shared/config_schema.py``, ``shared/metric_schema.py``, ``shared/seeding.py``): their
folders' packages import torch (``services.learner.ppo``), and their sections are read by the
rollout's search. An algorithm since has its declaration in its own folder
(``services/learner/expert_iteration/declare.py``) and two lines here.

This module must stay torch-free (the rollout image has none), and so must every declaration
module it imports (``tests/services/rollout/test_no_torch.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from services.learner.expert_iteration import declare as expert_iteration
from services.learner.treestrap import declare as treestrap
from shared.algorithm_spec import AlgorithmSpec

if TYPE_CHECKING:
    from shared.config_schema import RunConfig


def _dqn_identity(cfg: RunConfig) -> dict[str, Any]:
    return {"algorithm": "dqn", "dqn": cfg.dqn}


def _alphazero_identity(cfg: RunConfig) -> dict[str, Any]:
    return {"algorithm": "alphazero", "alphazero": cfg.alphazero.identity_part()}


PPO = AlgorithmSpec("ppo")
DQN = AlgorithmSpec("dqn", "n-step Double DQN from prioritized replay; docs/design.md", identity=_dqn_identity)
ALPHAZERO = AlgorithmSpec("alphazero", "the rollouts search the learner's choice decisions, the actor learns the "
                          "search's policy; docs/learning.md", identity=_alphazero_identity, searches=True)

ALGORITHMS: tuple[AlgorithmSpec, ...] = (
    PPO,
    DQN,
    ALPHAZERO,
    expert_iteration.SPEC,
    treestrap.SPEC,
)
"""Every learner algorithm, in ``learner.algorithm``'s order (that of the choices and of the
algorithm sections at the end of ``RunConfig``). Adding one: its declaration module's import
above and its ``SPEC`` here, beside its factory in ``services/learner/registry.py``."""


def algorithm_names() -> tuple[str, ...]:
    """The ``learner.algorithm`` choices, in table order."""
    return tuple(spec.name for spec in ALGORITHMS)


def algorithm(name: str) -> AlgorithmSpec:
    """The declaration of ``name``. Raises KeyError naming the value and the declared ones."""
    for spec in ALGORITHMS:
        if spec.name == name:
            return spec
    raise KeyError(f"learner.algorithm {name!r} is not declared; declared: {', '.join(algorithm_names())} "
                   "(shared/algorithms.py)")


def identity_part(cfg: RunConfig) -> dict[str, Any]:
    """What ``cfg``'s algorithm adds to the algo digest (its declaration's ``identity``); {} for
    a name no algorithm declares (refused at load; ``royalefleet config --explain`` digests a
    placeholder there to see which identity fields a field moves)."""
    for spec in ALGORITHMS:
        if spec.name == cfg.learner.algorithm:
            return spec.identity(cfg)
    return {}


def algorithm_sections() -> list[AlgorithmSpec]:
    """The declarations with a config section of their own, in table order."""
    return [spec for spec in ALGORITHMS if spec.section is not None]


def declared(table: str) -> dict[str, Any]:
    """Every algorithm's ``row_keys`` or ``seed_streams`` (``table``), in table order, merged.
    Raises ValueError naming a key two algorithms declare."""
    out: dict[str, Any] = {}
    for spec in ALGORITHMS:
        for key, value in getattr(spec, table).items():
            if key in out:
                raise ValueError(f"{table} {key!r}: declared by two algorithms (the second {spec.name})")
            out[key] = value
    return out


def merged(core: dict[str, Any], table: str, where: str) -> dict[str, Any]:
    """``core`` with the algorithms' ``table`` entries appended (``declared``). Raises ValueError
    naming a declared key ``core`` (``where``) already holds."""
    extra = declared(table)
    clash = sorted(set(core) & set(extra))
    if clash:
        raise ValueError(f"{table} {', '.join(clash)}: declared by an algorithm and already in {where}; rename it")
    return {**core, **extra}
