"""The learner service's Q network at ``dqn.heads`` > 1 or ``dqn.dueling``, and the snapshot
actor it plays by.

``PointerQ`` is the actor's own architecture (``shared.nn.model.PointerActor``: board trunk,
tile features, card embeddings) with its pointer head repeated K times: each head has its own
query, query bias, no-op and button weights over the SHARED tile features, and with dueling its
own value stream ``Linear(2C, 1)`` over the pooled tiles. Head h's advantage row is exactly what
a ``PointerActor`` with head h's weights would output.

``played_actor`` writes the network into a ``PointerActor`` (the run's actor, which every
snapshot, pool seat, evaluator and ``royalefleet eval`` already plays): the shared weights
copied, and each head weight the MEAN over the K heads. Every head is linear in its own weights
given the shared features, so that actor's logits are exactly (up to float rounding) the mean
over heads of the advantage rows, Ā. The heads' mean Q, dueling combined, is
``V̄ + Ā - mean_legal(Ā)``: Ā plus a constant per row. Every player reads a snapshot's logits
only through the masked softmax or the masked argmax over the row's legal set, both unchanged
by a constant per row, so the snapshot plays exactly the policy of the mean Q (a Boltzmann
policy at temperature 1 over it when sampled, its greedy action when argmaxed;
docs/design.md, "A second learner: DQN"). The value streams do not reach the snapshot: they
only add that constant.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from services.learner.dqn.network import dueling_combine
from shared.nn.model import HEAD_GAIN, forward_precision, precision, slot_inputs

SHARED = ("trunk", "tile_conv", "tile_norm", "card_embed")
"""The ``PointerActor`` modules every head shares (copied as they are into the snapshot actor)."""


class PointerQ(nn.Module):
    """``forward(obs) -> (B, K, A)`` float32 Q rows over the obs dict of ``shared.nn.model``
    (``spatial``, ``vector``, ``mask``). Without dueling a head's row is its advantage (pointer)
    row; with dueling ``dueling_combine(V, A, obs["mask"])`` (illegal entries at finfo.min).

    Built from ``actor`` (the run's ``PointerActor``, already initialised from the run's seed):
    the shared modules are deep copies of the actor's, head 0 starts as the actor's own head, and
    heads 1..K-1 and the value streams are drawn (orthogonal, gain ``HEAD_GAIN``, zero biases)
    from ``torch.Generator().manual_seed(seed)``, so the network is a pure function of the run's
    seed. ``autocast`` is ``net.autocast`` (the actor's precision rule)."""

    def __init__(self, actor, heads: int, *, dueling: bool, seed: int, autocast: str = "off"):
        super().__init__()
        if heads < 1:
            raise ValueError(f"dqn.heads must be >= 1, got {heads}")
        self.spec, self.channels = actor.spec, actor.channels
        self.noop_bias, self.n_buttons = actor.noop_bias, actor.n_buttons
        self.hand_cards, self.hand_cost, self.hand_affordable = actor.hand_cards, actor.hand_cost, actor.hand_affordable
        self.onehot_width, self.heads, self.dueling, self.autocast = actor.onehot_width, heads, dueling, autocast
        self.slot_index = actor.slot_index
        for name in SHARED:
            setattr(self, name, copy.deepcopy(getattr(actor, name)))
        c, k, nb = actor.channels, heads, actor.n_buttons
        self.query = nn.Linear(actor.query.in_features, k * c)
        self.query_bias = nn.Linear(actor.query.in_features, k)
        self.noop = nn.Linear(2 * c, k)
        self.button_head = nn.Linear(2 * c + nb, k * nb) if nb else None
        self.value = nn.Linear(2 * c, k) if dueling else None
        self._init_heads(actor, seed)

    @torch.no_grad()
    def _init_heads(self, actor, seed: int) -> None:
        gen = torch.Generator(device="cpu").manual_seed(int(seed))
        for name in ("query", "query_bias", "noop", "button_head"):
            mine, theirs = getattr(self, name), getattr(actor, name)
            if mine is None:
                continue
            rows = theirs.weight.shape[0]
            for h in range(self.heads):
                w = mine.weight[h * rows:(h + 1) * rows]
                if h == 0:
                    w.copy_(theirs.weight)
                    mine.bias[:rows].copy_(theirs.bias)
                else:
                    nn.init.orthogonal_(w, gain=HEAD_GAIN, generator=gen)
                    mine.bias[h * rows:(h + 1) * rows].zero_()
        if self.value is not None:
            nn.init.orthogonal_(self.value.weight, gain=HEAD_GAIN, generator=gen)
            self.value.bias.zero_()

    def _pooled_and_advantage(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        vector = obs["vector"]
        b, k, c, p = vector.shape[0], self.heads, self.channels, self.spec.hand_slots
        tiles = F.relu(self.tile_norm(self.tile_conv(self.trunk(obs))))  # (B, C, H, W)
        slot_in = slot_inputs(self, vector).to(tiles.dtype)  # (B, P, slot_input_width)
        q = self.query(slot_in).view(b, p, k, c)
        bias = self.query_bias(slot_in).view(b, p, k)
        tile_logits = torch.einsum("bchw,bpkc->bkphw", tiles, q) * c**-0.5 + bias.permute(0, 2, 1)[..., None, None]
        pooled = torch.cat([tiles.mean(dim=(2, 3)), tiles.amax(dim=(2, 3))], dim=1)  # (B, 2C)
        parts = [(self.noop(pooled) + self.noop_bias)[..., None], tile_logits.reshape(b, k, -1)]
        if self.button_head is not None:
            ready = obs["mask"][:, self.spec.n_grid_actions:].to(pooled.dtype)
            parts.append(self.button_head(torch.cat([pooled, ready], dim=1)).view(b, k, self.n_buttons))
        return pooled, torch.cat(parts, dim=2).float()

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        with precision(obs["spatial"].device.type, self.autocast):
            self.last_precision = forward_precision(obs["spatial"].device.type)
            pooled, adv = self._pooled_and_advantage(obs)
            if self.value is None:
                return adv
            return dueling_combine(self.value(pooled).float(), adv, obs["mask"])


@torch.no_grad()
def played_actor(qnet: PointerQ, actor) -> None:
    """Write ``qnet`` into ``actor`` (a ``PointerActor`` of the same spec and width), in place:
    the shared modules copied, each head weight and bias the mean over the K heads (the value
    streams dropped: a constant per row). Afterwards ``actor(obs)`` is the mean over heads of
    the advantage rows (tests/services/learner/dqn/test_dqn_heads.py checks it against ``qnet``)."""
    for name in SHARED:
        getattr(actor, name).load_state_dict(getattr(qnet, name).state_dict())
    for name in ("query", "query_bias", "noop", "button_head"):
        mine, theirs = getattr(qnet, name), getattr(actor, name)
        if mine is None:
            continue
        rows = theirs.weight.shape[0]
        theirs.weight.copy_(mine.weight.view(qnet.heads, rows, -1).mean(dim=0))
        theirs.bias.copy_(mine.bias.view(qnet.heads, rows).mean(dim=0))
