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
    from collections.abc import Callable

    from services.learner.collected import Collected


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


class InlineCollection:
    """The next collection runs on the main thread, after the update (``rollout.overlap`` off,
    or none started): the main thread owns the rollouts' socket. ``OverlappedCollection`` is the
    other owner; ``IterationState.collection`` holds one or the other, and every caller asks it
    rather than checking which."""

    def gather_states(self, gather: Callable[[], object], timeout_s: float) -> None:
        """The previous iteration's battle states: gathered here, now."""
        gather()

    def collected(self, collect: Callable[[], Collected | None]) -> Collected | None:
        """The next iteration's ``Collected``: collected here, now."""
        return collect()

    def stop(self, collector) -> None:
        """Nothing runs beside the main thread: nothing to stop."""

    def untrained(self, collected: Collected | None) -> Collected | None:
        """A stop's untrained rows of ``collected``: none counted (nothing inferred them ahead)."""
        return None


INLINE = InlineCollection()


class OverlappedCollection:
    """Iteration ``iteration``'s collection in a thread, started before the previous update.

    First it gathers the previous iteration's battle states (``states_gathered`` is set then,
    answered or not), then the boundary and the rounds. ``join`` returns the ``Collected``
    (None when a stop ended it before a rectangle existed) and restores the torch threads."""

    def __init__(self, iteration: int, behaviour: BehaviourPolicy, torch_threads: int, gather: Callable[[], object],
                 collect: Callable[[], Collected]):
        """``gather``: the previous iteration's battle states gathered over the rollouts'
        socket; ``collect``: the boundary and rounds of ``iteration`` (``collect_iteration``),
        both run in the thread, which alone uses the socket until ``join``; ``torch_threads``:
        the intra-op threads while it runs (``overlap_threads``)."""
        import torch

        self.iteration, self.behaviour = iteration, behaviour
        self.states_gathered = threading.Event()
        self.result: Collected | None = None
        self.error: BaseException | None = None
        self.threads_before = torch.get_num_threads()
        torch.set_num_threads(torch_threads)

        def run():
            try:
                gather()
                self.states_gathered.set()
                self.result = collect()
            except StopRequested:
                pass
            except BaseException as exc:  # re-raised in the main thread by join
                self.error = exc
            finally:
                self.states_gathered.set()

        self.thread = threading.Thread(target=run, name=f"collect-{iteration}", daemon=True)
        self.thread.start()

    def join(self) -> Collected | None:
        import torch

        self.thread.join()
        torch.set_num_threads(self.threads_before)
        if self.error is not None:
            raise self.error
        return self.result

    def gather_states(self, gather: Callable[[], object], timeout_s: float) -> None:
        """The previous iteration's battle states: the thread owns the socket and gathers them;
        wait (at most ``timeout_s``) until it has."""
        self.states_gathered.wait(timeout_s)

    def collected(self, collect: Callable[[], Collected | None]) -> Collected | None:
        """The thread's ``Collected`` (``join``); ``collect`` is not called."""
        return self.join()

    def stop(self, collector) -> None:
        """End the thread's collection at its next round (``collector.stop_requested``)."""
        collector.stop_requested = True

    def untrained(self, collected: Collected | None) -> Collected | None:
        """A stop's untrained rows: every row the thread inferred (``collected``, counted)."""
        return collected


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
