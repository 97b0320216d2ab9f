"""What a learner algorithm declares to the tree outside the learner (``AlgorithmSpec``); the
table of them is ``shared/algorithms.py``. Apart from the table so that a declaration module
imports the record without importing the table that imports it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shared.config_schema import RunConfig
    from shared.config_types import ConfigSection


def _nothing(cfg: RunConfig) -> dict[str, Any]:
    return {}


def _no_problems(cfg: RunConfig) -> list[str]:
    return []


@dataclass(frozen=True)
class AlgorithmSpec:
    """One learner algorithm, as the tree outside the learner sees it.

    ``name``: its ``learner.algorithm`` value, also the key of its config section.
    ``summary``: a phrase for ``royalefleet up --help`` ("" for none).
    ``section``: its config section, a msgspec Struct class whose fields all have defaults (a
    ``RunConfig`` field named ``name``, last, in table order); None when it has none of its own
    here (PPO, DQN, AlphaZero: theirs are ``RunConfig``'s own fields).
    ``section_doc``: the documentation of that ``RunConfig`` field (``royalefleet config --explain``).
    ``row_keys``: metric row key -> (unit, meaning), as ``shared.metric_schema.SCHEMA`` holds them
    (a clash with another key is refused at import).
    ``seed_streams``: stream template -> its consumer, as ``shared.seeding.STREAMS`` holds them.
    ``identity``: what of a config goes in the algo digest when this algorithm is chosen (key ->
    a msgspec-encodable value; merged over the PPO part ``{"ppo", "advantage", "autocast"}``,
    canonical JSON, key order irrelevant; ``shared.identity.config_digests``).
    ``problems``: the rules between sections it adds when chosen, each a sentence naming its
    field and the fix (``RunConfig.problems``).
    ``searches``: the rollouts search the learner's choice decisions with the ``alphazero``
    section's settings (that section is checked, overlap and frame stacking are refused,
    ``royalefleet replay`` refuses the learner's seat).
    ``generations``: the learner's prior advances by generations the ladder's gate promotes (its
    champion chain), so ``evaluation.strength.generations`` measures each one by default
    (``GenerationStrengthConfig.active``).
    """

    name: str
    summary: str = ""
    section: type[ConfigSection] | None = None
    section_doc: str = ""
    row_keys: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    seed_streams: Mapping[str, str] = field(default_factory=dict)
    identity: Callable[[RunConfig], dict[str, Any]] = _nothing
    problems: Callable[[RunConfig], list[str]] = _no_problems
    searches: bool = False
    generations: bool = False
