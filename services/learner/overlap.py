"""Overlapped collection (``rollout.overlap``, the ``throughput`` tier only).

While the learner trains on iteration k's rectangle, a collection thread runs iteration
k + 1's boundary and rounds (``collection.collect_iteration``), its actions inferred by a
behaviour snapshot: a real copy of the actor-critic taken before update k (a reference to the
live module would move under the rounds while claiming lag 0). Cells it infers get policy lag 1.
Once update k is done the thread switches to the live, updated actor: the cells it infers from
then on get lag 0. Update k + 1 cannot start before collection k + 1 is joined, so the lag is
never more than 1.

Each row keeps the log-prob it was sampled with (the PPO ratio is against the behaviour
policy, never recomputed), and the ``ratio_invariant`` check compares the first update batch
with the forward of the actor that inferred each row (``behaviour_ratio_dev``), not with the
updated actor.

Sockets: while the thread runs it alone uses the rollouts' ROUTER socket (it also gathers
iteration k's battle states, which the rollouts send before they read Plan k + 1); the ladder
and checkpoint clients are shared with the main thread behind a lock (``LockedClient``).
Threads: torch's intra-op thread count is one per process; for the overlapped phase it is
``rollout.overlap_torch_threads`` (``overlap_threads``), restored at the join.
"""

from __future__ import annotations

import copy
import threading
from typing import TYPE_CHECKING

import numpy as np

from services.learner.stops import StopRequested

if TYPE_CHECKING:
    from services.learner.parts import IterationState, LearnerParts, RunOptions


def behaviour_snapshot(model):
    """A deep copy of ``model`` (weights and buffers copied, no gradient): what the rollouts'
    rows are inferred with while ``model`` trains."""
    snap = copy.deepcopy(model)
    for p in snap.parameters():
        p.requires_grad_(False)
    return snap


class BehaviourPolicy:
    """The policy the collection thread infers with, and the lag its cells get. ``switch``
    (from the main thread) takes effect at the next round; ``last_lag`` is the lag of the
    policy that answered the last ``act``."""

    def __init__(self, policy, lag: int):
        self._current = (policy, lag)
        self.last_lag = lag
        self.behaviour_model = policy.model
        """The snapshot the lag-1 cells were inferred by (kept for the ratio check)."""

    @property
    def model(self):
        return self._current[0].model

    def switch(self, policy, lag: int) -> None:
        self._current = (policy, lag)  # one assignment: the thread reads the pair whole

    def act(self, rows, n_legal, uniforms, history=None):
        policy, lag = self._current
        out = policy.act(rows, n_legal, uniforms, history=history)
        self.last_lag = lag
        return out


def overlap_threads(cfg) -> int:
    """Torch intra-op threads while the update and the collection thread run at once."""
    return cfg.rollout.overlap_torch_threads or max(1, cfg.determinism.torch_threads // 2)


class LockedClient:
    """A ``transport.Client`` two threads share: one request at a time."""

    def __init__(self, client):
        self._client, self._lock = client, threading.Lock()

    def request(self, *args, **kwargs):
        with self._lock:
            return self._client.request(*args, **kwargs)

    def next_id(self):
        with self._lock:
            return self._client.next_id()

    def __getattr__(self, name):
        return getattr(self._client, name)


class OverlappedCollection:
    """Iteration ``iteration``'s collection in a thread, started before the previous update.

    First it gathers the previous iteration's battle states (``states_gathered`` is set then,
    answered or not), then the boundary and the rounds. ``join`` returns the ``Collected``
    (None when a stop ended it before a rectangle existed) and restores the torch threads."""

    def __init__(self, parts: LearnerParts, state: IterationState, min_rollouts: int, iteration: int, env_steps: int,
                 behaviour: BehaviourPolicy, previous_members: list, previous_iteration: int):
        import torch

        from services.learner.collection import collect_iteration

        self.iteration, self.behaviour = iteration, behaviour
        self.states_gathered = threading.Event()
        self.result = None
        self.error: BaseException | None = None
        self.threads_before = torch.get_num_threads()
        torch.set_num_threads(overlap_threads(parts.cfg))

        def run():
            try:
                parts.battle_states.gather(parts.collector, previous_members, previous_iteration,
                                           parts.cfg.rollout.round_timeout_s)
                self.states_gathered.set()
                self.result = collect_iteration(parts, state, min_rollouts, iteration, env_steps, behaviour)
            except StopRequested:
                pass
            except BaseException as exc:  # re-raised in the main thread by join
                self.error = exc
            finally:
                self.states_gathered.set()

        self.thread = threading.Thread(target=run, name=f"collect-{iteration}", daemon=True)
        self.thread.start()

    def join(self):
        import torch

        self.thread.join()
        torch.set_num_threads(self.threads_before)
        if self.error is not None:
            raise self.error
        return self.result


def untrained_rows(collected) -> int:
    """Learner cells of a collected (or partly collected) rectangle that were inferred: rows
    that a stop leaves untrained (counted, never silently dropped)."""
    if collected is None:
        return 0
    return int(np.count_nonzero(collected.rect.acted))


def behaviour_ratio_dev(actors_by_lag: dict, fetch, cells: np.ndarray, actions: np.ndarray,
                        old_log_probs: np.ndarray, lags: np.ndarray, n_legal: np.ndarray) -> float:
    """max |pi_b(a|s) / pi_old(a|s) - 1| over the choice rows of ``cells`` (indices into the
    update's rows), where pi_b is the forward of the actor that inferred each row:
    ``actors_by_lag[lag]`` (a model with ``actor_logits``). 0.0 when no row has a choice.

    ``fetch(cells)`` -> the obs dict of those rows (``Policy.fetcher``); ``actions``,
    ``old_log_probs``, ``lags``, ``n_legal`` are (N,) over the update's rows."""
    import torch

    from shared.nn.distribution import MaskedCategorical

    dev = 0.0
    cells = np.sort(np.asarray(cells, dtype=np.int64))
    for lag, model in actors_by_lag.items():
        picked = cells[(lags[cells] == lag) & (n_legal[cells] > 1)]
        if not len(picked):
            continue
        with torch.no_grad():
            obs = fetch(picked)
            dist = MaskedCategorical(model.actor_logits(obs), obs["mask"])
            logp = dist.log_prob(torch.as_tensor(actions[picked], device=obs["mask"].device)).float().cpu().numpy()
        dev = max(dev, float(np.abs(np.exp(logp - old_log_probs[picked]) - 1.0).max()))
    return dev


def first_batch(n_rows: int, batch_size: int, epoch0) -> np.ndarray:
    """The rows of the update's first optimizer batch: epoch 0's permutation cut as
    ``ppo_update`` cuts it (``np.array_split`` into max(1, n_rows // batch_size) batches)."""
    return np.array_split(epoch0.permutation(n_rows), max(1, n_rows // batch_size))[0]


# ------------------------------------------------------------------ the learner's side

def start_overlap(parts: LearnerParts, state: IterationState, options: RunOptions, c) -> BehaviourPolicy | None:
    """Start iteration ``c.iteration + 1``'s collection (``state.overlapped``) with a behaviour
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
    state.overlapped = OverlappedCollection(parts, state, options.min_rollouts, c.iteration + 1,
                                            state.env_steps + c.stats.env_steps, behaviour, c.members, c.iteration)
    return behaviour


def join_overlap(state: IterationState):
    """The overlapped collection's ``Collected`` (None when a stop ended it before it had a
    rectangle); ``state.overlapped`` is None again and the torch threads are the run's."""
    overlapped, state.overlapped = state.overlapped, None
    return overlapped.join() if overlapped is not None else None


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
