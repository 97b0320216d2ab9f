"""The actor-critic: two separate convolutional networks over the 32x18 board.

Architecture (royalelearn-facts §5, the reference's shipped network; written here from that
description, no code taken from it):

* Board input, per sample: every spatial plane (static ones included), the ``hand_slots``
  per-slot mask planes ("where could each hand card go", derived from the flat mask), two
  coordinate planes y/(H-1) and x/(W-1) (the arena is not translation-invariant), and the
  vector embedded by ``Linear(V, E)`` and broadcast over the board:
  ``planes + hand_slots + 2 + E`` input channels. With card identity (``spec.id_planes``,
  RoyaleGym's ``card_ids``) and ``net.card_id_embed`` K > 0, each tile's card id of each id
  plane is embedded by ``Embedding(id_vocab, K)`` (row 0, an empty tile, fixed at zero) and
  adds ``id_planes * K`` channels: the count planes say how many units stand on a tile, the
  ids say which card they are.
* Trunk: ``Conv3x3 -> GroupNorm -> ReLU``, then ``blocks`` residual blocks
  ``Conv3x3 -> GN -> ReLU -> Conv3x3 -> GN -> +skip -> ReLU``. GroupNorm, never BatchNorm:
  BatchNorm computes a different function at rollout and at update time. Convolutions carry
  no bias (the GroupNorm after each one has its own).
* Actor head (pointer head): the action space IS a (slot, y, x) C-order grid plus the no-op
  at index 0, so each hand slot's card embedding becomes a query that is dotted with per-tile
  features. About 1/25 of the parameters of a flat ``Linear(., 2305)`` head. A query reads
  its slot's card, cost and affordability, and with ``net.slot_index`` the slot's index too
  (one-hot): without it the queries cannot tell two slots apart, so a choice that depends on
  hand order (RoyaleGym's rungs play their FIRST playable slot) cannot be represented. With ability
  buttons (``env.ability_buttons``) a button head scores the ``n_buttons`` actions after the
  grid from the pooled tile features and the buttons' readiness bits.
* Critic head: ``[mean-pool, max-pool] ++ Linear(V, E)(vector) ++ legal_frac`` ->
  ``Linear(., value_hidden) -> ReLU -> Linear(value_hidden, 1)``.

The two networks share no parameter, so the learner gives each its own Adam and one summed
loss can be backpropagated once (the entropy gradient into the critic is exactly zero).

Observation batch ("obs"): a dict of tensors on the model's device,
``spatial`` (B, C_planes, H, W) float32, ``vector`` (B, V) float32, ``mask`` (B, A) bool, and
with frame stacking (``spec.frame_stack`` k > 1) ``history`` (B, (k-1) (C_planes + hand_slots),
H, W) float32 (``shared.nn.frame_stack.history_planes``),
and with card identity ``card_ids`` (B, id_planes, H, W) uint8,
with A = 1 + hand_slots * H * W + n_buttons and ``mask[:, 0]`` (the no-op) True on every row.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn

from shared.config import NetConfig
from shared.envs import ObsSpec

# Vector fields the pointer head reads, looked up by NAME in the environment's declared layout.
HAND_CARDS_FIELD = "own_hand_cards"
HAND_COST_FIELD = "own_hand_cost"
HAND_AFFORDABLE_FIELD = "own_hand_affordable"

# Init gains (royalelearn-facts §5): near-zero pointer and no-op outputs give a near-uniform
# policy over the legal set at the start, whatever the trunk computes.
HIDDEN_GAIN = math.sqrt(2.0)
HEAD_GAIN = 0.01
VALUE_GAIN = 1.0
EMBED_STD = 0.02
CARD_ID_STD = 1.0
"""The card-id embedding's init: a tile's card enters the stem at the scale of one unit on a
count plane (a 0.02 embedding would be drowned by those planes until Adam grew it)."""


# ----------------------------------------------------------------------------- precision


def autocast_enabled(device_type: str, setting: str) -> bool:
    """Whether the forward passes run under bf16 autocast: on CUDA with ``net.autocast``
    "bfloat16" only. The CPU always computes in float32 (its bf16 kernels are slower on the
    machines this runs on, and a CPU run should not change numbers with a setting meant for
    GPUs). Raises ValueError for a setting other than "bfloat16" / "off"."""
    if setting not in ("bfloat16", "off"):
        raise ValueError(f"net.autocast {setting!r}: expected 'bfloat16' or 'off'")
    return device_type == "cuda" and setting == "bfloat16"


def precision(device_type: str, setting: str):
    """The context the forward passes run in: ``torch.autocast(cuda, bfloat16)`` when
    ``autocast_enabled``, else a null context. Logits and values are cast to float32 at the
    end of each head either way (royalelearn-facts §5, Precision)."""
    if autocast_enabled(device_type, setting):
        return torch.autocast(device_type=device_type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


PRECISIONS = ("fp32", "tf32", "bf16")
"""The precisions a forward can run in, finest first (``coarser`` picks by this order). The
names are the keys of ``shared.alarms.RATIO_ATOL``."""


def forward_precision(device_type: str) -> str:
    """The precision a forward computes its convolutions and matmuls in if it starts NOW, read
    from torch's live state rather than from the config, so an autocast context entered by a
    caller counts too: "bf16" inside a bfloat16 autocast of ``device_type``; on CUDA outside
    autocast "tf32" when cuDNN or cuBLAS may use TF32 (``torch.backends.cudnn.allow_tf32``, on
    by default, or ``torch.backends.cuda.matmul.allow_tf32``), else "fp32". Raises ValueError
    for an autocast dtype other than bfloat16 (float16 autocast is not a setting of this
    network: its fill value and ratio tolerance are not defined)."""
    if torch.is_autocast_enabled(device_type):
        dtype = torch.get_autocast_dtype(device_type)
        if dtype != torch.bfloat16:
            raise ValueError(f"a forward under {dtype} autocast on {device_type}: only bfloat16 autocast is supported")
        return "bf16"
    if device_type == "cuda" and (torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32):
        return "tf32"
    return "fp32"


def coarser(a: str, b: str) -> str:
    """The coarser of two precision names (``PRECISIONS`` order). Raises ValueError for an
    unknown name."""
    for name in (a, b):
        if name not in PRECISIONS:
            raise ValueError(f"precision {name!r}: expected one of {', '.join(PRECISIONS)}")
    return max(a, b, key=PRECISIONS.index)


# ----------------------------------------------------------------------------- input assembly


def mask_planes(mask: torch.Tensor, spec: ObsSpec) -> torch.Tensor:
    """(B, A) bool -> (B, hand_slots, H, W) bool: plane ``s`` at (y, x) is action
    ``1 + s*H*W + y*W + x`` (the action encoding of ObsSpec, C order). The ability buttons
    after the grid (``spec.n_buttons``) are not planes."""
    return mask[:, 1 : spec.n_grid_actions].reshape(mask.shape[0], spec.hand_slots, spec.height, spec.width)


def legal_fraction(mask: torch.Tensor, spec: ObsSpec) -> torch.Tensor:
    """(B, A) bool -> (B, hand_slots) float32: share of each slot's H*W tiles that are legal."""
    return mask[:, 1 : spec.n_grid_actions].reshape(mask.shape[0], spec.hand_slots, -1).float().mean(-1)


def coordinate_planes(spec: ObsSpec, *, device, dtype=torch.float32) -> torch.Tensor:
    """(2, H, W): y/(H-1) and x/(W-1), each in [0, 1]."""
    ys = torch.linspace(0.0, 1.0, spec.height, device=device, dtype=dtype)
    xs = torch.linspace(0.0, 1.0, spec.width, device=device, dtype=dtype)
    grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([grid_y, grid_x])


def board_input_channels(spec: ObsSpec, net: NetConfig) -> int:
    """Stem input channels: planes + per-slot mask planes + 2 coordinates + vector embedding,
    and with frame stacking (``spec.frame_stack`` k > 1) the previous k - 1 decisions' planes
    and mask planes (shared/nn/frame_stack.py)."""
    return (spec.frame_stack * (len(spec.plane_names) + spec.hand_slots) + 2 + net.vector_embed
            + card_id_channels(spec, net))


def card_id_channels(spec: ObsSpec, net: NetConfig) -> int:
    """Stem input channels of the embedded card ids: ``id_planes * net.card_id_embed`` with card
    identity, 0 without it or with ``net.card_id_embed`` 0 (the ids are then not read)."""
    return spec.id_planes * net.card_id_embed


def slot_input_width(spec: ObsSpec, net: NetConfig) -> int:
    """Features of one hand slot's pointer query input: its card embedding (``channels``), cost
    and affordability, and with ``net.slot_index`` the slot's one-hot index (``hand_slots``)."""
    return net.channels + 2 + (spec.hand_slots if net.slot_index else 0)


def hand_card_ids(head, vector: torch.Tensor) -> torch.Tensor:
    """(B, V) -> (B, hand_slots) int64: argmax of each slot's one-hot card (``head``: a pointer
    head holding ``spec``, the ``hand_cards`` slice and ``onehot_width``)."""
    return vector[:, head.hand_cards].reshape(vector.shape[0], head.spec.hand_slots, head.onehot_width).argmax(dim=-1)


def slot_inputs(head, vector: torch.Tensor) -> torch.Tensor:
    """(B, V) -> (B, P, slot_input_width) float32: each hand slot's (card embedding, cost,
    affordable[, one-hot slot index]). ``head`` is a pointer head holding ``spec``,
    ``card_embed``, the hand field slices, ``onehot_width`` and ``slot_index`` (``PointerActor``,
    and the DQN's ``PointerQ``, which reads the same inputs)."""
    p = head.spec.hand_slots
    parts = [
        head.card_embed(hand_card_ids(head, vector)),  # (B, P, C)
        vector[:, head.hand_cost, None],  # (B, P, 1)
        vector[:, head.hand_affordable, None],  # (B, P, 1)
    ]
    if head.slot_index:
        eye = torch.eye(p, device=vector.device, dtype=parts[0].dtype)
        parts.append(eye.expand(vector.shape[0], p, p))  # (B, P, P)
    return torch.cat(parts, dim=-1)


# ----------------------------------------------------------------------------- trunk


def _conv3x3(c_in: int, c_out: int) -> nn.Conv2d:
    return nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False)


class ResidualBlock(nn.Module):
    """conv-GN-ReLU-conv-GN, + skip, ReLU. (B, C, H, W) -> (B, C, H, W)."""

    def __init__(self, channels: int, groups: int):
        super().__init__()
        self.conv1 = _conv3x3(channels, channels)
        self.norm1 = nn.GroupNorm(groups, channels)
        self.conv2 = _conv3x3(channels, channels)
        self.norm2 = nn.GroupNorm(groups, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.norm1(self.conv1(x)))
        y = self.norm2(self.conv2(y))
        return F.relu(x + y)


class BoardTrunk(nn.Module):
    """Builds the board input from an obs batch and runs the conv trunk.

    forward(obs) -> (B, C, H, W) features. Each network owns one (actor and critic never share).
    """

    def __init__(self, spec: ObsSpec, net: NetConfig):
        super().__init__()
        self.spec = spec
        self.vector_embed = nn.Linear(spec.vector_size, net.vector_embed)
        self.stem = _conv3x3(board_input_channels(spec, net), net.channels)
        self.stem_norm = nn.GroupNorm(net.norm_groups, net.channels)
        # Built only with card identity, so a network without it keeps its parameters and draws.
        self.card_id_embed = (nn.Embedding(spec.id_vocab, net.card_id_embed, padding_idx=0)
                              if card_id_channels(spec, net) else None)
        self.blocks = nn.Sequential(*(ResidualBlock(net.channels, net.norm_groups) for _ in range(net.blocks)))

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        spatial, vector, mask = obs["spatial"], obs["vector"], obs["mask"]
        b, _, h, w = spatial.shape
        planes = mask_planes(mask, self.spec).to(spatial.dtype)
        coords = coordinate_planes(self.spec, device=spatial.device, dtype=spatial.dtype).expand(b, 2, h, w)
        embedded = self.vector_embed(vector)  # (B, E), broadcast over every tile
        # the previous k - 1 decisions' planes (obs["history"], shared/nn/frame_stack.py)
        stacked = [obs["history"].to(spatial.dtype)] if self.spec.frame_stack > 1 else []
        if self.card_id_embed is not None:
            # (B, P, H, W) ids -> (B, P, H, W, K) -> (B, P K, H, W). A byte past the vocabulary
            # (only a corrupt row can hold one) reads as the last id, not an index error.
            ids = obs["card_ids"].long().clamp_(max=self.card_id_embed.num_embeddings - 1)
            cards = self.card_id_embed(ids).permute(0, 1, 4, 2, 3).reshape(b, -1, h, w).to(spatial.dtype)
            stacked.append(cards)
        board = torch.cat([spatial, planes, *stacked, coords, embedded[:, :, None, None].expand(-1, -1, h, w)], dim=1)
        x = F.relu(self.stem_norm(self.stem(board)))
        return self.blocks(x)


# ----------------------------------------------------------------------------- actor


class PointerActor(nn.Module):
    """The policy network: board trunk + pointer head. ``forward(obs) -> (B, A) float32`` raw
    logits (no mask, no softmax): ``[no-op, slot 0 tiles (y, x C order), slot 1 tiles, ...]``."""

    def __init__(self, spec: ObsSpec, net: NetConfig):
        super().__init__()
        self.spec = spec
        self.channels = net.channels
        # Hand fields by name: ObsSpec.field raises KeyError listing the declared fields.
        self.hand_cards = spec.field(HAND_CARDS_FIELD)
        self.hand_cost = spec.field(HAND_COST_FIELD)
        self.hand_affordable = spec.field(HAND_AFFORDABLE_FIELD)
        p = spec.hand_slots
        cards_width = self.hand_cards.stop - self.hand_cards.start
        if cards_width % p:
            raise ValueError(
                f"vector field {HAND_CARDS_FIELD!r} has {cards_width} values, not a multiple of "
                f"hand_slots={p}; the layout declares: {spec.vector_fields}"
            )
        for name, sl in ((HAND_COST_FIELD, self.hand_cost), (HAND_AFFORDABLE_FIELD, self.hand_affordable)):
            if sl.stop - sl.start != p:
                raise ValueError(
                    f"vector field {name!r} has {sl.stop - sl.start} values, expected one per hand "
                    f"slot ({p}); the layout declares: {spec.vector_fields}"
                )
        self.onehot_width = cards_width // p  # card ids 0..n-1 plus "empty slot"

        c = net.channels
        self.trunk = BoardTrunk(spec, net)
        self.tile_conv = _conv3x3(c, c)
        self.tile_norm = nn.GroupNorm(net.norm_groups, c)
        self.card_embed = nn.Embedding(self.onehot_width, c)
        self.slot_index = bool(net.slot_index)
        self.query = nn.Linear(slot_input_width(spec, net), c)
        self.query_bias = nn.Linear(slot_input_width(spec, net), 1)
        self.noop = nn.Linear(2 * c, 1)
        self.noop_bias = float(net.noop_bias)  # a constant, not a parameter (net.noop_bias)
        # The button head (the reference's button_head): one logit per ability button from the
        # pooled tile features and the buttons' readiness (the mask's last n_buttons bits).
        # Only built with buttons, so a network without them keeps its parameters and draws.
        self.n_buttons = spec.n_buttons
        self.button_head = nn.Linear(2 * c + spec.n_buttons, spec.n_buttons) if spec.n_buttons else None

    def hand_card_ids(self, vector: torch.Tensor) -> torch.Tensor:
        """(B, V) -> (B, hand_slots) int64: argmax of each slot's one-hot."""
        return hand_card_ids(self, vector)

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        vector = obs["vector"]
        b = vector.shape[0]
        tiles = F.relu(self.tile_norm(self.tile_conv(self.trunk(obs))))  # Fp: (B, C, H, W)

        # One query and one scalar bias per hand slot.
        slot_in = slot_inputs(self, vector).to(tiles.dtype)  # (B, P, slot_input_width)
        q = self.query(slot_in)  # (B, P, C)
        bias = self.query_bias(slot_in)  # (B, P, 1)
        # Scaled dot product (C**-0.5 keeps the logit scale independent of the width).
        tile_logits = torch.einsum("bchw,bpc->bphw", tiles, q) * self.channels**-0.5 + bias[..., None]

        pooled = torch.cat([tiles.mean(dim=(2, 3)), tiles.amax(dim=(2, 3))], dim=1)  # (B, 2C)
        noop_logit = self.noop(pooled) + self.noop_bias  # (B, 1)
        parts = [noop_logit, tile_logits.reshape(b, -1)]
        if self.button_head is not None:
            ready = obs["mask"][:, self.spec.n_grid_actions :].to(pooled.dtype)  # (B, n_buttons)
            parts.append(self.button_head(torch.cat([pooled, ready], dim=1)))  # (B, n_buttons)
        # float32 always: the masked softmax fills illegal entries with finfo(float32).min.
        return torch.cat(parts, dim=1).float()


# ----------------------------------------------------------------------------- critic


class Critic(nn.Module):
    """The value network. ``forward(obs) -> (B,) float32``."""

    def __init__(self, spec: ObsSpec, net: NetConfig):
        super().__init__()
        self.spec = spec
        c = net.channels
        self.trunk = BoardTrunk(spec, net)
        # Its own vector embedding for the head (the trunk's is consumed by the convolutions).
        self.vector_embed = nn.Linear(spec.vector_size, net.vector_embed)
        self.hidden = nn.Linear(2 * c + net.vector_embed + spec.hand_slots, net.value_hidden)
        self.out = nn.Linear(net.value_hidden, 1)

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        x = self.trunk(obs)
        head_in = torch.cat(
            [
                x.mean(dim=(2, 3)),
                x.amax(dim=(2, 3)),
                self.vector_embed(obs["vector"]),
                legal_fraction(obs["mask"], self.spec).to(x.dtype),
            ],
            dim=1,
        )
        return self.out(F.relu(self.hidden(head_in))).squeeze(-1).float()


# ----------------------------------------------------------------------------- the pair


class ActorCritic(nn.Module):
    """Separate actor and critic (disjoint parameters; ``actor`` and ``critic`` attributes get
    one optimizer each).

    Initial weights are a pure function of ``seed``: modules are built on the meta device (so
    torch's default initialisers never draw from the global RNG) and every parameter is then
    drawn from one local ``torch.Generator``.
    """

    def __init__(self, spec: ObsSpec, net: NetConfig, seed: int = 0):
        super().__init__()
        self.spec = spec
        self.net_config = net
        with torch.device("meta"):
            actor = PointerActor(spec, net)
            critic = Critic(spec, net)
        self.actor = actor.to_empty(device="cpu")
        self.critic = critic.to_empty(device="cpu")
        self.reset_parameters(seed)
        self.last_precision: dict[str, str] = {}
        """The precision (``PRECISIONS``) of the last actor and critic forward, by network:
        what the learner reports (``run/train_precision``) and the ratio tolerance follows."""

    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        """Orthogonal init (gain sqrt 2 hidden, 0.01 pointer query/bias and no-op, 1.0 value
        output), zero biases, GroupNorm (1, 0), embeddings N(0, 0.02), the board's card-id embedding
        N(0, 1) with its padding row (an empty tile) zero. Draw order is the module
        registration order, so the weights depend on the seed and the architecture only."""
        gen = torch.Generator(device="cpu").manual_seed(int(seed))
        head = {self.actor.query, self.actor.query_bias, self.actor.noop, self.actor.button_head}
        done: set[int] = set()
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                gain = HEAD_GAIN if module in head else VALUE_GAIN if module is self.critic.out else HIDDEN_GAIN
                nn.init.orthogonal_(module.weight, gain=gain, generator=gen)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, EMBED_STD if module.padding_idx is None else CARD_ID_STD,
                                generator=gen)
                if module.padding_idx is not None:
                    module.weight[module.padding_idx].zero_()
            elif isinstance(module, nn.GroupNorm):
                nn.init.ones_(module.weight)
            else:
                continue
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
            done.update(id(p) for p in module.parameters(recurse=False))
        missed = [name for name, p in self.named_parameters() if id(p) not in done]
        if missed:  # to_empty left them as uninitialised memory
            raise RuntimeError(f"reset_parameters has no rule for: {', '.join(missed)}")

    def actor_logits(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, A) float32 raw logits (float32 under bf16 autocast too). Records the precision
        the forward ran in as ``last_precision["actor"]`` (``forward_precision``)."""
        device_type = obs["spatial"].device.type
        with precision(device_type, self.net_config.autocast):
            self.last_precision["actor"] = forward_precision(device_type)
            return self.actor(obs)

    def value(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B,) float32. Records ``last_precision["critic"]``."""
        device_type = obs["spatial"].device.type
        with precision(device_type, self.net_config.autocast):
            self.last_precision["critic"] = forward_precision(device_type)
            return self.critic(obs)

    def parameter_count(self) -> dict[str, int]:
        return {
            "actor": sum(p.numel() for p in self.actor.parameters()),
            "critic": sum(p.numel() for p in self.critic.parameters()),
        }
