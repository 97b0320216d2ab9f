"""Expert iteration's declaration (shared/algorithms.py): what the tree outside the learner
knows of it. Torch-free: the rollout image loads it with the config.

Its config section (``expert_iteration``), its metric row keys (``expit/``), its seed stream, its
part of the algo digest and its rule between sections; the rollouts search for it with the
``alphazero`` section's settings. ``settings(cfg)`` is the section, typed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from msgspec import Meta

from shared.algorithm_spec import AlgorithmSpec
from shared.config_types import ConfigSection, NonNegFloat, PosFloat, PosInt

if TYPE_CHECKING:
    from shared.config_schema import RunConfig

NAME = "expert_iteration"


class ExpertIterationConfig(ConfigSection):
    """Expert iteration (``learner.algorithm = "expert_iteration"``; docs/expert-iteration.md):
    the search is the ``alphazero`` section's (candidates, depth, c_scale of the move rule,
    sim_opponent, leaf_value); this section is the target, the replay and the update's learning
    rates (epochs, batch sizes, clip and ``vf_coef`` are the ``ppo`` section's). Every field is
    part of algo_digest when the algorithm is ``expert_iteration``, and moves nothing otherwise."""

    replay_iterations: Annotated[int, Meta(ge=1, le=256)] = 8
    """Iterations whose searched rows the replay holds (the newest K); older ones are dropped."""
    replay_rows: PosInt = 16384
    """The most searched rows the replay holds (the oldest dropped first). A row is one packed
    observation (15,375 B on the 145-card catalogue) and its target: 16,384 rows are ~250 MB in
    memory, less in the checkpoint (its rows are stored zlib level 1)."""
    lr_actor: PosFloat = 2e-3
    """Adam learning rate of the actor (the clone that works used 2e-3; AlphaZero's 2e-4 barely
    moved it), times the warm start's hold multiplier."""
    lr_critic: PosFloat = 1e-3
    """Adam learning rate of the critic."""
    c_scale: PosFloat = 0.3
    """sigma's scale in the policy target (``shared.search.targets.margin_policy``): a candidate
    that beats the prior's own pick by d on the fixed scale gains (50 + 1) x c_scale x (d - keep)
    nats of logit."""
    keep: NonNegFloat = 0.3
    """The margin (fixed-scale units) a candidate must beat the prior's own pick by to gain mass
    in the target; noise below it earns nothing."""
    value_scale: PosFloat = 2000.0
    """Tower HP per unit of the fixed scale for board scores (``alphazero.leaf_value = "board"``):
    a candidate's score is tanh(board difference / value_scale). Critic scores
    (``leaf_value = "critic"``) are already on the critic's scale and are used as they are."""
    value_target: Literal["root", "return"] = "root"
    """The critic's target on a searched row. ``root``: the search's root value, the score of the
    move played (needs ``alphazero.leaf_value = "critic"``: board scores are not in the critic's
    units); ``return``: the realized return-to-go (TD(``alphazero.value_lambda``))."""


ROW_KEYS: dict[str, tuple[str, str]] = {
    "expit/generation": ("count", "expert iteration: the generation whose prior the rollouts searched with this iteration (0: the start; +1 at each champion the ladder's gate promoted)"),
    "expit/generation_switched": ("count", "1 when this iteration's collection was the first with a new generation's prior, else 0"),
    "expit/replay_rows": ("count", "rows in expert iteration's replay after this iteration's were added (the update trains on all of them): the searched rows, and under playout-cap randomisation the value-only fast rows"),
    "expit/replay_iterations": ("count", "iterations whose searched rows the replay holds"),
    "expit/labels_added": ("count", "rows with a policy target this iteration added to the replay (its trainable searched rows; 0 when the iteration's values tripped)"),
    "expit/replay_labels": ("count", "rows with a policy target in the replay after this iteration's were added (expit/replay_rows less the value-only rows of playout-cap randomisation)"),
    "expit/prior_entropy": ("nats", "mean entropy over the legal set of the generation's prior (the network the rollouts played) on this iteration's searched rows"),
    "expit/prior_top1": ("fraction", "share of this iteration's searched rows where the generation's prior's argmax is the target's"),
    "expit/prior_kl_target": ("nats", "mean KL(target || generation's prior) over this iteration's searched rows"),
    "expit/next_entropy": ("nats", "expit/prior_entropy of the network in training (the next generation), after this iteration's update"),
    "expit/next_top1": ("fraction", "expit/prior_top1 of the network in training, after this iteration's update"),
    "expit/next_kl_target": ("nats", "expit/prior_kl_target of the network in training, after this iteration's update"),
    "expit/move_top1": ("fraction", "share of searched decisions whose move played is the target's argmax"),
    "expit/root_value": ("reward", "mean root value over this iteration's searched rows: the score of the move played on the fixed scale (the critic's units under alphazero.leaf_value \"critic\", tanh of the board difference otherwise)"),
}
"""Its metric row keys (shared/metric_schema.py appends them): key -> (unit, meaning)."""

SEED_STREAMS: dict[str, str] = {
    "expit/minibatch/iteration/{iteration}/epoch/{epoch}":
        "the permutation of the replay's rows in one expert-iteration epoch",
}
"""Its random streams (shared/seeding.py appends them): template -> consumer."""


def settings(cfg: RunConfig) -> ExpertIterationConfig:
    """``cfg``'s ``expert_iteration`` section (a ``RunConfig`` field the table adds)."""
    section = getattr(cfg, NAME)
    assert isinstance(section, ExpertIterationConfig)
    return section


def identity(cfg: RunConfig) -> dict[str, Any]:
    """The algo digest's part: the name, the search (``alphazero``'s identity part) and the section."""
    return {"algorithm": NAME, "alphazero": cfg.alphazero.identity_part(), NAME: settings(cfg)}


def problems(cfg: RunConfig) -> list[str]:
    """A root value target needs critic leaves (board scores are not in the critic's units)."""
    if settings(cfg).value_target == "root" and cfg.alphazero.leaf_value != "critic":
        return ["expert_iteration.value_target: \"root\" trains the critic on the search's root value, "
                "which is in the critic's units only under alphazero.leaf_value \"critic\"; set that, or "
                "expert_iteration.value_target \"return\""]
    return []


SPEC = AlgorithmSpec(
    NAME, "generations distilled from the search; docs/expert-iteration.md", section=ExpertIterationConfig,
    section_doc="Expert iteration's settings, read only when ``learner.algorithm = \"expert_iteration\"``.",
    row_keys=ROW_KEYS, seed_streams=SEED_STREAMS, identity=identity, problems=problems, searches=True,
    generations=True)
"""Its declaration, listed in shared/algorithms.py's ``ALGORITHMS``."""
