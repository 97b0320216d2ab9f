"""TreeStrap's declaration (shared/algorithms.py): what the tree outside the learner knows of it.
Torch-free: the rollout image loads it with the config.

Its config section (``treestrap``: the ensemble), its metric row keys (``treestrap/``), its seed
streams, its part of the algo digest and its rule between sections (expert iteration's: it rides
expert iteration's searched rollouts, generations and replay, whose section ``expert_iteration``
it reads as they are); the rollouts search for it with the ``alphazero`` section's settings.
``settings(cfg)`` is the section, typed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from msgspec import Meta

from services.learner.expert_iteration import declare as expert_iteration
from shared.algorithm_spec import AlgorithmSpec
from shared.config_types import ConfigSection, PosFloat

if TYPE_CHECKING:
    from shared.config_schema import RunConfig

NAME = "treestrap"


class TreeStrapConfig(ConfigSection):
    """TreeStrap (``learner.algorithm = "treestrap"``; docs/treestrap.md): the search is the
    ``alphazero`` section's, the replay, targets, generations and learning rates of the actor and
    critic are the ``expert_iteration`` section's, the epochs, batch sizes, clip and ``vf_coef``
    the ``ppo`` section's; this section is the ensemble. Every field is part of algo_digest when
    the algorithm is ``treestrap``, and moves nothing otherwise."""

    heads: Annotated[int, Meta(ge=2, le=64)] = 8
    """K, the score heads of the ensemble over the actor's trunk (seed 000's ``heads``); at least
    2, so the Thompson choice and the steadiness keys have two heads to compare."""
    bootstrap_p: Annotated[float, Meta(gt=0.0, le=1.0)] = 0.5
    """The probability that a replayed row is in one head's bootstrap sample (Bernoulli per row
    and head, drawn once when the row enters the replay; 1: every head on every row)."""
    draws: Annotated[int, Meta(ge=1, le=64)] = 1
    """Thompson draws per row and iteration: the proposal's target is the share of D drawn heads
    whose argmax among the searched candidates is each candidate (1: one sampled head's choice)."""
    ensemble_coef: PosFloat = 1.0
    """Weight of the heads' masked cross-entropy beside the proposal's in the actor's loss."""
    head_support: Literal["candidates", "legal"] = "candidates"
    """The set a head's softmax and target are over. ``candidates``: the row's searched candidates,
    the search's target renormalised there (a head learns to rank what the search compared, the
    set the Thompson choice is taken among); ``legal``: the row's whole legal set (seed 000's
    action targets as they are)."""
    lr_heads: PosFloat = 2e-3
    """Adam learning rate of the score heads (the trunk takes the actor's,
    ``expert_iteration.lr_actor``)."""


ROW_KEYS: dict[str, tuple[str, str]] = {
    "treestrap/proposal_loss": ("nats", "TreeStrap: mean cross-entropy of the actor's policy (the proposal) against the Thompson target, per policy row over every forward of the update"),
    "treestrap/head_loss": ("nats", "mean cross-entropy of a score head against the search target, per record/head pair its bootstrap mask includes, over every forward"),
    "treestrap/value_loss": ("reward^2", "mean (V - z)^2 of the critic over every row forwarded"),
    "treestrap/included_frac": ("fraction", "record/head pairs the bootstrap masks include, over policy rows x heads forwarded"),
    "treestrap/optimizer_steps": ("count", "optimizer steps this iteration (each steps the critic, and the actor and heads when the batch has a policy row)"),
    "treestrap/grad_norm_actor": ("norm", "actor gradient norm (trunk and proposal) before clipping, mean over steps"),
    "treestrap/grad_norm_critic": ("norm", "critic gradient norm before clipping, mean over steps"),
    "treestrap/grad_norm_heads": ("norm", "score heads' gradient norm before clipping, mean over steps"),
    "treestrap/head_disagreement": ("fraction", "mean over the replayed rows of the share of head pairs whose argmax among the searched candidates differ (the heads before this iteration's update); 1 minus it is two single heads' top-1 agreement"),
    "treestrap/target_stability": ("fraction", "share of the replayed rows where the mean-score argmax of heads [0, K/2) equals that of heads [K/2, K): two independent half-ensembles' top-1 agreement, beside 1 - treestrap/head_disagreement"),
    "treestrap/search_agreement": ("fraction", "share of the replayed rows where the ensemble's mean-score argmax among the searched candidates is the search target's top-1"),
}
"""Its metric row keys (shared/metric_schema.py appends them): key -> (unit, meaning)."""

SEED_STREAMS: dict[str, str] = {
    "treestrap/heads/init": "the TreeStrap score heads' initial weights",
    "treestrap/bootstrap_masks/iteration/{iteration}":
        "the Bernoulli bootstrap masks (row x head) of the searched rows one TreeStrap iteration adds to the replay",
    "treestrap/thompson/iteration/{iteration}": "the heads drawn per replayed row for one TreeStrap iteration's Thompson targets",
    "treestrap/minibatch/iteration/{iteration}/epoch/{epoch}": "the permutation of the replay's rows in one TreeStrap epoch",
}
"""Its random streams (shared/seeding.py appends them): template -> consumer."""


def settings(cfg: RunConfig) -> TreeStrapConfig:
    """``cfg``'s ``treestrap`` section (a ``RunConfig`` field the table adds)."""
    section = getattr(cfg, NAME)
    assert isinstance(section, TreeStrapConfig)
    return section


def identity(cfg: RunConfig) -> dict[str, Any]:
    """The algo digest's part: the name, the search, expert iteration's section and this one."""
    return {"algorithm": NAME, "alphazero": cfg.alphazero.identity_part(),
            expert_iteration.NAME: expert_iteration.settings(cfg), NAME: settings(cfg)}


SPEC = AlgorithmSpec(NAME, "expert iteration whose policy is a Thompson proposal over K bootstrapped score heads; "
                     "docs/treestrap.md", section=TreeStrapConfig,
                     section_doc="TreeStrap's ensemble, read only when ``learner.algorithm = \"treestrap\"``.",
                     row_keys=ROW_KEYS, seed_streams=SEED_STREAMS, identity=identity,
                     problems=expert_iteration.problems, searches=True,
                     generations=True)
