"""Behaviour cloning: the run's own actor-critic (``shared.nn.model.ActorCritic`` of the run's
``net`` config) trained to copy demonstrations (royalefleet/clone_data.py).

* Actor: masked cross-entropy ``-log pi(a_teacher | s)`` (``shared.nn.distribution``'s masked
  softmax) on choice rows only. A forced row (only the no-op legal) has log-probability 0 under
  every weight: it carries nothing, and counting it in the mean would only shrink the loss.
  With a searching teacher's scores (``shared.demos.SEARCH_ARRAYS``) and ``soft_tau`` or
  ``margin_weight``, a searched row's target is softmax(score / tau) over its candidates and its
  weight 1 + margin_weight x its margin (``soft_targets``, ``soft_ce``).
* Critic: ``0.5 (V(s) - G)^2`` on the demonstrations' returns ``G`` (the recorded seat's
  discounted return-to-go at the run's starting gamma), on choice rows and the kept forced rows,
  so a warm-started run does not begin with advantages from an untrained critic.
* Validation by battle, early stopping on the validation cross-entropy (``patience`` epochs
  without a new best), the best epoch's weights kept.
* Deterministic: initial weights from stream ``clone/init``, the row order of epoch e from
  ``clone/epoch/{e}``, the run's ``determinism.torch_threads``, deterministic algorithms under
  ``run_exact``. The same demonstrations and config give the same snapshot id.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from royalefleet.clone_data import CloneRows


@dataclass(frozen=True)
class CloneSettings:
    """The clone's own knobs (``royalefleet clone --help`` shows the defaults)."""

    max_epochs: int = 20
    patience: int = 3
    """Epochs without a new best validation cross-entropy before stopping."""
    batch_size: int = 256
    """Choice rows per actor step (the critic's step takes its rows in the same proportion)."""
    actor_lr: float = 1e-3
    critic_lr: float = 1e-3
    max_grad_norm: float = 1.0
    soft_tau: float = 0.0
    """Above 0: a searched row's actor target is softmax(score / soft_tau) over the candidates the
    teacher's search chose among (``clone_data.search_choices``), not its one move; 0 (and a row
    that was not searched): the move."""
    margin_weight: float = 0.0
    """Above 0: a searched row's actor loss is weighted 1 + margin_weight x its margin (the best
    survivor's score minus the runner-up's, ``search_margins``), so the decisions the search
    found clear weigh more than those it found close; 0: every choice row weighs alike."""
    keep_last: bool = False
    """Keep the last epoch's weights, not those of the best validation cross-entropy (give
    ``patience`` >= ``max_epochs`` to train them all): the cross-entropy against one noisy move
    rewards a hedged policy (docs/learning.md, "Trained on past the early stop": a searched
    teacher's clone kept at epoch 30 played 0.520, at 20 0.4475, early-stopped 0.470)."""
    soft_all: bool = False
    """With ``soft_tau``: the softmax runs over every candidate the search scored, sequential
    halving's losers too (their means are of fewer playouts), not only the survivors."""
    init: str = ""
    """``snap:<id>``, a snapshot of the run to start from (its actor, and the critic its clone
    kept), not fresh weights: a generation fine-tuned from its predecessor
    (royalefleet/clone_init.py); empty: fresh weights from stream ``clone/init``."""


@dataclass
class EpochStats:
    epoch: int
    train_ce: float
    train_agreement: float
    train_value_loss: float
    val_ce: float
    val_agreement: float
    val_value_loss: float
    seconds: float
    val_entropy: float = 0.0
    """The policy's mean entropy (nats) on the validation choice rows: what a sampled player
    spreads. Labels that differ for like states (a search's noise) raise it, and a sampled
    player then plays more moves at random (docs/learning.md, "Fine-tuned from generation 0")."""


@dataclass
class CloneResult:
    model: object  # ActorCritic, the best epoch's weights
    epochs: list[EpochStats] = field(default_factory=list)
    best_epoch: int = 0
    stopped: str = ""
    best_state: dict | None = None

    @property
    def best(self) -> EpochStats:
        return self.epochs[self.best_epoch - 1]


def _obs(codec, rows: np.ndarray):
    import torch

    return {k: torch.tensor(v) for k, v in codec.unpack(rows).items()}


def evaluate(model, codec, rows: CloneRows, batch: int = 512,
             picks: list | None = None) -> tuple[float, float, float, float]:
    """(mean cross-entropy and top-1 agreement over the choice rows, mean value loss over all
    rows, mean policy entropy in nats over the choice rows) of ``model`` on ``rows``; agreement
    is argmax of the masked policy == teacher action.
    ``picks``: a list that gets the argmax of every choice row, in row order (int64 arrays)."""
    import torch

    from shared.nn.distribution import MaskedCategorical

    ce = agree = vloss = entropy = 0.0
    n_choice = int(rows.choice.sum())
    with torch.no_grad():
        for lo in range(0, len(rows.actions), batch):
            sl = slice(lo, lo + batch)
            obs = _obs(codec, rows.observations[sl])
            vloss += float((0.5 * (model.value(obs) - torch.from_numpy(rows.returns[sl])) ** 2).sum())
            c = torch.from_numpy(rows.choice[sl])
            if bool(c.any()):
                sub = {k: v[c] for k, v in obs.items()}
                dist = MaskedCategorical(model.actor_logits(sub), sub["mask"])
                a = torch.from_numpy(rows.actions[sl])[c]
                ce -= float(dist.log_prob(a).sum())
                mode = dist.mode()
                agree += float((mode == a).sum())
                entropy += float(dist.entropy().sum())
                if picks is not None:
                    picks.append(mode.numpy())
    n = max(n_choice, 1)
    return ce / n, agree / n, vloss / max(len(rows.actions), 1), entropy / n


def train_clone(spec, net, codec, train: CloneRows, val: CloneRows, master_seed: int,
                settings: CloneSettings = CloneSettings(), say=print, init=None) -> CloneResult:
    """Train an ActorCritic (fresh, or from ``init``) on ``train``, stop early on ``val``; the caller has set torch's
    threads and determinism. ``say`` gets one line per epoch. Ctrl-C after the first epoch stops
    training and keeps the best epoch so far (``stopped`` says so); before it, it propagates.
    ``init``: royalefleet.clone_init.InitWeights to start from (its validation figures said as
    epoch 0), or None for fresh weights."""
    import copy

    import torch

    from shared.nn.model import ActorCritic
    from shared.seeding import derive_int

    model = ActorCritic(spec, net, seed=derive_int(master_seed, "clone/init"))
    if init is not None:
        from shared.nn.statefiles import bytes_to_module

        model.actor.load_state_dict(init.actor_state)
        if init.critic_bytes is not None:
            bytes_to_module(model.critic, init.critic_bytes)
        model.eval()
        v_ce, v_agree, v_value, v_entropy = evaluate(model, codec, val)
        critic = "the critic its clone kept" if init.critic_bytes is not None else "a fresh critic"
        say(f"  epoch  0: snap:{init.sid} as loaded ({critic}) | validation CE {v_ce:.4f}, agreement {v_agree:.3f}, value loss {v_value:.4f}, "
            f"entropy {v_entropy:.2f}")
    opt_a = torch.optim.Adam(model.actor.parameters(), lr=settings.actor_lr)
    opt_c = torch.optim.Adam(model.critic.parameters(), lr=settings.critic_lr)
    choice_idx = np.flatnonzero(train.choice)
    if not len(choice_idx) or not val.choice.any():
        raise ValueError(f"no choice rows to clone ({len(choice_idx)} in training, {int(val.choice.sum())} in "
                         "validation): record more battles")
    steps = max(1, math.ceil(len(choice_idx) / settings.batch_size))
    # the critic's step takes as many rows as the actor's: an epoch shows it a different
    # random part of its rows (choice and kept forced), at half the cost of all of them
    critic_batch = min(settings.batch_size, math.ceil(len(train.actions) / steps))
    result = CloneResult(model=model, best_state=copy.deepcopy(model.state_dict()))
    try:
        _epochs(model, codec, train, val, master_seed, settings, say, result, choice_idx, steps, critic_batch,
                opt_a, opt_c)
    except KeyboardInterrupt:
        if not result.epochs:
            raise
        result.stopped = f"stopped by Ctrl-C during epoch {len(result.epochs) + 1}"
    model.load_state_dict(result.best_state)
    model.eval()
    return result


def _epochs(model, codec, train, val, master_seed, settings, say, result, choice_idx, steps, critic_batch,
            opt_a, opt_c) -> None:
    """The epochs of ``train_clone``, each followed by its validation; the best epoch's weights
    kept in ``result.best_state``."""
    import copy
    import time

    from shared.seeding import stream

    best, since = math.inf, 0
    targets = soft_targets(train, settings.soft_tau, settings.margin_weight)
    for epoch in range(1, settings.max_epochs + 1):
        t0 = time.monotonic()
        rng = stream(master_seed, "clone/epoch/{epoch}", epoch=epoch)
        order_a, order_c = rng.permutation(choice_idx), rng.permutation(len(train.actions))
        sums = np.zeros(3)
        model.train()
        for k in range(steps):
            sums += _step(model, codec, train, order_a[k * settings.batch_size:(k + 1) * settings.batch_size],
                          order_c[k * critic_batch:(k + 1) * critic_batch], opt_a, opt_c, settings.max_grad_norm,
                          targets)
        model.eval()
        v_ce, v_agree, v_value, v_entropy = evaluate(model, codec, val)
        stats = EpochStats(epoch, float(sums[0] / len(choice_idx)), float(sums[1] / len(choice_idx)),
                           float(sums[2] / min(len(train.actions), steps * critic_batch)), v_ce, v_agree, v_value,
                           time.monotonic() - t0, v_entropy)
        result.epochs.append(stats)
        better = v_ce < best
        if better:
            best, since = v_ce, 0
        else:
            since += 1
        if better or settings.keep_last:
            result.best_epoch = epoch
            result.best_state = copy.deepcopy(model.state_dict())
        say(f"  epoch {epoch:>2}: train CE {stats.train_ce:.4f}, agreement {stats.train_agreement:.3f}, value loss "
            f"{stats.train_value_loss:.4f} | validation CE {v_ce:.4f}, agreement {v_agree:.3f}, value loss "
            f"{v_value:.4f}, entropy {v_entropy:.2f} | {stats.seconds:.0f} s{'  (best)' if better else ''}")
        if since >= settings.patience:
            result.stopped = f"early stop: no better validation CE for {settings.patience} epochs"
            break
    else:
        result.stopped = f"max epochs ({settings.max_epochs}) reached"


def _step(model, codec, rows: CloneRows, actor_idx, critic_idx, opt_a, opt_c, max_norm: float,
          targets=None) -> np.ndarray:
    """One actor step (masked CE on ``actor_idx``, choice rows; against ``targets``' soft targets
    where given) and one critic step (value loss on ``critic_idx``); (summed CE against the
    teacher's move, agreements, summed value loss) before the step."""
    import torch

    from shared.nn.distribution import MaskedCategorical

    obs = _obs(codec, rows.observations[actor_idx])
    logits = model.actor_logits(obs)
    a = torch.from_numpy(rows.actions[actor_idx])
    forced = ~torch.from_numpy(rows.choice[actor_idx])
    if targets is None:
        loss = masked_ce(logits, obs["mask"], a, forced)
    else:
        cand, prob, weight = targets
        loss = soft_ce(logits, obs["mask"], torch.from_numpy(cand[actor_idx]), torch.from_numpy(prob[actor_idx]),
                       forced, torch.from_numpy(weight[actor_idx]))
    opt_a.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.actor.parameters(), max_norm)
    opt_a.step()
    cobs = _obs(codec, rows.observations[critic_idx])
    err = model.value(cobs) - torch.from_numpy(rows.returns[critic_idx])
    vloss = 0.5 * err**2
    opt_c.zero_grad(set_to_none=True)
    vloss.mean().backward()
    torch.nn.utils.clip_grad_norm_(model.critic.parameters(), max_norm)
    opt_c.step()
    with torch.no_grad():
        dist = MaskedCategorical(logits.detach(), obs["mask"])
        ce_sum = -float(dist.log_prob(a).sum())
    return np.array([ce_sum, float((dist.mode() == a).sum()), float(vloss.detach().sum())])


def masked_ce(logits, mask, actions, forced):
    """Mean masked cross-entropy over the rows that are not ``forced`` (a (B,) bool tensor):
    the actor loss's definition, for a test to hold it to. 0.0 when every row is forced."""
    from shared.nn.distribution import MaskedCategorical

    keep = ~forced
    if not bool(keep.any()):
        return logits.sum() * 0.0
    dist = MaskedCategorical(logits[keep], mask[keep])
    return -dist.log_prob(actions[keep]).mean()


def soft_targets(rows: CloneRows, tau: float, margin_weight: float = 0.0
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """((n, K) int64 actions, (n, K) float32 probabilities, (n,) float32 weights) per row: with
    ``tau`` above 0, softmax(score / ``tau``) over a searched row's candidates
    (``CloneRows.search_scores``), else probability 1 on the teacher's move in column 0 (as for
    every row not searched); padding is action 0 at probability 0. The weight is 1 +
    ``margin_weight`` x ``search_margins`` (1 for a row not searched). None when neither is
    asked, or no row was searched (train on the moves, all alike)."""
    if (tau <= 0 and margin_weight <= 0) or rows.search_actions is None:
        return None
    scores = rows.search_scores.astype(np.float64)
    searched = np.isfinite(scores).any(axis=1)
    n, k = scores.shape
    cand = np.zeros((n, k), np.int64)
    prob = np.zeros((n, k), np.float64)
    if tau > 0:
        z = np.where(np.isfinite(scores), scores / tau, -np.inf)
        z -= np.where(searched, z.max(axis=1, initial=-np.inf, where=np.isfinite(z)), 0.0)[:, None]
        prob[searched] = np.where(np.isfinite(z[searched]), np.exp(z[searched]), 0.0)
        prob[searched] /= prob[searched].sum(axis=1, keepdims=True)
        cand[searched] = np.maximum(rows.search_actions[searched], 0)
    hard = ~searched if tau > 0 else np.ones(n, bool)
    cand[hard, 0], prob[hard, 0] = rows.actions[hard], 1.0
    weight = 1.0 + margin_weight * search_margins(rows.search_scores)
    return cand, prob.astype(np.float32), weight.astype(np.float32)


def search_margins(scores: np.ndarray) -> np.ndarray:
    """(n, K) scores (-inf padding) -> (n,) float: the best score minus the second best, 0 for a
    row with fewer than two candidates (not searched, or one survivor)."""
    top = np.sort(np.where(np.isfinite(scores), scores, -np.inf), axis=1)[:, ::-1]
    if top.shape[1] < 2:
        return np.zeros(len(scores))
    both = np.isfinite(top[:, 1])
    return np.where(both, top[:, 0] - np.where(both, top[:, 1], 0.0), 0.0)


def soft_ce(logits, mask, cand, prob, forced, weight=None):
    """Over the rows not ``forced``, the ``weight``-weighted mean ((B,) float32; all 1 when None)
    of -sum_k prob[:, k] log pi(cand[:, k]) (``cand`` (B, K) int64, ``prob`` (B, K) float32
    summing to 1 a row): the cross-entropy to a target distribution over K actions, which is
    ``masked_ce`` for one action at weight 1."""
    import torch

    from shared.nn.distribution import MaskedCategorical

    keep = ~forced
    if not bool(keep.any()):
        return logits.sum() * 0.0
    dist = MaskedCategorical(logits[keep], mask[keep])
    cand = cand[keep]
    # a candidate our mask refuses (none should: the search drew them from the legal set) adds nothing
    lp = torch.where(dist.mask.gather(-1, cand), dist.log_probs.gather(-1, cand), 0.0)
    ce = -(prob[keep] * lp).sum(dim=-1)
    if weight is None:
        return ce.mean()
    w = weight[keep]
    return (w * ce).sum() / w.sum()


MISS_KINDS = {
    "slot": "another hand slot on the teacher's tile",
    "tile": "the teacher's slot on another tile",
    "slot_and_tile": "another slot and another tile",
    "wait": "a wait where the teacher played",
    "play": "a play where the teacher waited",
    "other": "another ability button, or a button against a card",
}
"""Where a clone's pick departs from its teacher's, by kind (``miss_kinds``), with the words
``royalefleet clone`` prints for each."""


def miss_kinds(picks: np.ndarray, actions: np.ndarray, height: int, width: int, hand_slots: int) -> dict[str, int]:
    """Counts of the rows where ``picks`` (n,) int differ from the teacher's ``actions`` (n,) int,
    by ``MISS_KINDS`` (every kind present, 0 when none). The action encoding is
    ``shared.envs.ObsSpec``'s: 0 the no-op, ``1 + slot * H * W + y * W + x`` a card, and past the
    grid the ability buttons. The split says what a network cannot copy: misses that are all
    "slot" are a teacher following hand order that the network cannot see (``net.slot_index``)."""
    hw = height * width
    grid = 1 + hand_slots * hw
    out = dict.fromkeys(MISS_KINDS, 0)
    picks, actions = np.asarray(picks, np.int64), np.asarray(actions, np.int64)
    miss = picks != actions
    p, a = picks[miss], actions[miss]
    card_p, card_a = (p >= 1) & (p < grid), (a >= 1) & (a < grid)
    out["wait"] = int(np.sum((p == 0) & card_a))
    out["play"] = int(np.sum(card_p & (a == 0)))
    both = card_p & card_a
    same_slot = (p - 1) // hw == (a - 1) // hw
    same_tile = (p - 1) % hw == (a - 1) % hw
    out["slot"] = int(np.sum(both & ~same_slot & same_tile))
    out["tile"] = int(np.sum(both & same_slot & ~same_tile))
    out["slot_and_tile"] = int(np.sum(both & ~same_slot & ~same_tile))
    out["other"] = int(miss.sum()) - sum(out.values())
    return out


def describe_misses(kinds: dict[str, int], n_choice: int, kept: str = "the best epoch") -> str:
    """One line: how many of ``n_choice`` held-out choices the clone missed, and of what kind;
    ``kept`` names the weights that played them (the best epoch, or the last under --keep-last)."""
    missed = sum(kinds.values())
    parts = [f"{k} {MISS_KINDS[name]}" for name, k in kinds.items() if k]
    return (f"royalefleet clone: of the {n_choice:,} held-out choices {kept} missed {missed:,}"
            + (": " + ", ".join(parts) if parts else ""))
