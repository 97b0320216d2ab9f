"""The learner's side of an overlapped collection (``rollout.overlap``; ``overlap.py`` says
how it runs): start it with a behaviour snapshot before an update, join it, and count the rows
a stop leaves untrained."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from services.learner.collection import collect_iteration
from services.learner.overlap import (INLINE, BehaviourPolicy, OverlappedCollection, behaviour_snapshot,
                                      overlap_threads, untrained_rows)

if TYPE_CHECKING:
    from collections.abc import Callable

    from services.learner.collected import Collected
    from services.learner.parts import IterationState, LearnerParts, RunOptions


def start_overlap(parts: LearnerParts, state: IterationState, options: RunOptions, c: Collected) -> BehaviourPolicy | None:
    """Start iteration ``c.iteration + 1``'s collection (``state.collection``) with a behaviour
    snapshot of the actor as it is now, before update ``c.iteration``; returns the behaviour
    policy, to switch to the updated actor once the update is done. None when overlap is off or
    no further iteration is wanted (``--iterations`` or ``timestep_limit`` reached by this
    update)."""
    from shared.nn.policy import Policy

    cfg = parts.cfg
    if not cfg.rollout.overlap or (0 < options.iterations_limit <= c.iteration):
        return None
    if 0 < cfg.timestep_limit <= state.timesteps + int(np.count_nonzero(c.rect.trainable())):
        return None
    behaviour = BehaviourPolicy(Policy(behaviour_snapshot(parts.model), parts.pf.codec, parts.device), lag=1)
    it, env_steps, members = c.iteration, state.env_steps + c.stats.env_steps, c.members
    timeout_s = cfg.rollout.round_timeout_s
    state.collection = OverlappedCollection(
        it + 1, behaviour, overlap_threads(cfg),
        gather=lambda: parts.battle_states.gather(parts.collector, members, it, timeout_s),
        collect=lambda: collect_iteration(parts, state, options.min_rollouts, it + 1, env_steps, behaviour))
    return behaviour


def take_collection(state: IterationState, collect: Callable[[], Collected]) -> tuple[Collected | None, Collected | None]:
    """The next iteration's ``Collected`` from whoever owns the rollouts' socket
    (``state.collection``: the overlapped thread, joined, or ``collect`` run here), and the
    collection whose rows a stop leaves untrained (``count_untrained``); the main thread owns
    the socket again."""
    owner, state.collection = state.collection, INLINE
    c = owner.collected(collect)
    return c, owner.untrained(c)


def stop_collection(parts: LearnerParts, state: IterationState) -> None:
    """Stop a collection running beside the main thread and count the rows it inferred; the
    main thread owns the socket again."""
    owner, state.collection = state.collection, INLINE
    owner.stop(parts.collector)
    count_untrained(parts, state, owner.untrained(owner.collected(lambda: None)))  # inline: nothing to collect


def count_untrained(parts: LearnerParts, state: IterationState, collected, why: str = "collected under overlap") -> None:
    """Count the rows of ``collected`` that nothing will train (a stop): rows an overlapped
    collection inferred, or (``why`` says so) the rows of an update the stop abandoned.
    ``state.untrained_rows``, ``royalefleet_learner_untrained_rows_total`` and one log line."""
    n = untrained_rows(collected)
    if n:
        state.untrained_rows += n
        parts.metrics.untrained_rows.inc(n)
        parts.say(f"learner: {n} rows of iteration {collected.iteration} {why} are not trained "
                    f"(the run stops at iteration {state.iteration}); counted in "
                    "royalefleet_learner_untrained_rows_total")
