"""A pool snapshot, from its two stored files to a float32 actor that can play.

A snapshot is what the learner's ``PoolClient.snapshot_actor`` stores (services/learner/pool_client.py):
``actor.safetensors``, the actor's weights in float16, and ``spec.json``, a JSON object naming
the digests of the network, observation layout and codec table it was trained with, and its
dtype. Two services play snapshots: the learner (frozen pool seats, services/learner/frozen.py)
and the evaluator (evaluation games, services/evaluator/players.py). Both load them here; each
keeps its own cache and its own answer to a snapshot that cannot play.

* ``check_spec``: the spec decoded, or ``SnapshotSpecError`` naming every field that differs
  from the run's (royalelearn-facts 6.3: "loads with mismatched arch/obs/codec-table digests are
  refused by field name").
* ``load_frozen_actor``: the fp16 weights loaded into an empty actor of the run's architecture
  (dtype and keys checked by ``shared.nn.statefiles.bytes_to_module``), then upcast to float32
  (fp16 -> fp32 is exact, so the values are exactly the stored ones), in eval mode, with no
  gradient. Or ``SnapshotWeightsError``.
* ``actor_builder``: the empty actor, built on the meta device so that building draws nothing
  from torch's global RNG.
* ``ActorOnly``: wraps an actor as the model ``shared.nn.policy.Policy`` asks for (no critic).

torch is imported inside the functions that need it, so checking a spec does not load torch.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

SPEC_DIGESTS = ("arch_digest", "obs_digest", "codec_table_digest")
"""The spec fields a snapshot must share with the run to play in it: another architecture,
observation layout or codec table would load wrong weights or read rows wrongly."""

SNAPSHOT_DTYPE = "float16"
"""The dtype of a snapshot's actor weights (a spec without ``dtype`` is taken to hold it)."""


class SnapshotSpecError(ValueError):
    """A snapshot whose spec.json does not fit the run.

    ``fields`` names the spec fields that differ from the run's (in ``SPEC_DIGESTS`` order, then
    ``dtype``); it is empty when the spec is not a JSON object at all. The text names the snapshot
    and, for each field, its value and the run's."""

    def __init__(self, snapshot_id: str, text: str, fields: tuple[str, ...] = ()):
        self.snapshot_id, self.fields = snapshot_id, fields
        super().__init__(text)

    @property
    def digest_mismatch(self) -> bool:
        """True when one of the SPEC_DIGESTS differs (not only the dtype, not a malformed spec)."""
        return any(f in SPEC_DIGESTS for f in self.fields)


class SnapshotWeightsError(ValueError):
    """A snapshot whose actor.safetensors does not load into the run's actor (another shape, key
    set or dtype, or not safetensors); the text names the snapshot and torch's reason."""


ARCH_HINT = (" (another network: a net field of the config that made it differs from this run's, such as "
             "net.channels, net.blocks, net.slot_index or net.card_id_embed)")
"""Said after an arch_digest clause: the digest names no field, the user needs to know where to look."""


def check_spec(snapshot_id: str, spec: bytes, expected: dict[str, str]) -> dict:
    """The decoded spec.json of ``snapshot_id``, checked against the run.

    Args:
        spec: the spec.json bytes.
        expected: SPEC_DIGESTS field -> the run's value (every field of SPEC_DIGESTS).

    Raises:
        SnapshotSpecError: the spec is not a JSON object (``fields`` empty), or one or more of
            the digests is missing or differs, or ``dtype`` is present and not float16. Text:
            ``snapshot <id>: spec <field> is <theirs!r>, this run's is <ours!r>``, one clause per
            field (``ARCH_HINT`` after the arch_digest's), joined by "; ". A missing digest is
            refused too: nothing says the weights fit.
        ValueError: ``expected`` lacks a field of SPEC_DIGESTS (a caller's bug).
    """
    missing = [k for k in SPEC_DIGESTS if k not in expected]
    if missing:
        raise ValueError(f"expected digests lack {missing}; give every field of SPEC_DIGESTS")
    try:
        doc = msgspec.json.decode(spec)
    except msgspec.DecodeError as exc:
        raise SnapshotSpecError(snapshot_id, f"snapshot {snapshot_id}: spec.json is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise SnapshotSpecError(snapshot_id, f"snapshot {snapshot_id}: spec.json is not a JSON object")
    wrong = [(k, doc.get(k), expected[k]) for k in SPEC_DIGESTS if doc.get(k) != expected[k]]
    if doc.get("dtype", SNAPSHOT_DTYPE) != SNAPSHOT_DTYPE:
        wrong.append(("dtype", doc.get("dtype"), SNAPSHOT_DTYPE))
    if wrong:
        text = "; ".join(f"spec {k} is {theirs!r}, this run's is {ours!r}" + (ARCH_HINT if k == "arch_digest" else "")
                         for k, theirs, ours in wrong)
        raise SnapshotSpecError(snapshot_id, f"snapshot {snapshot_id}: {text}", tuple(k for k, _, _ in wrong))
    return doc


def load_frozen_actor(snapshot_id: str, actor_bytes: bytes, build: Callable[[], object], device="cpu"):
    """The snapshot's actor, ready to play: float32, on ``device``, eval mode, no gradients.

    Args:
        actor_bytes: actor.safetensors, float16 tensors (``module_to_bytes`` of the halved actor).
        build: () -> an empty actor of the run's architecture (any dtype; its weights are
            overwritten), e.g. ``actor_builder(spec, net)``.
        device: a torch device or its name.

    Raises:
        SnapshotWeightsError: the bytes are not safetensors, hold another dtype than float16, or
            another key set or shape than the run's actor.
    """
    from shared.nn.statefiles import bytes_to_module

    actor = build().half()
    try:
        bytes_to_module(actor, actor_bytes)
    except (ValueError, RuntimeError) as exc:
        raise SnapshotWeightsError(f"snapshot {snapshot_id}: its actor does not load into this run's "
                                   f"architecture: {exc}") from None
    actor = actor.float().to(device).eval()  # the upcast: float32 inference, exactly the fp16 values
    for p in actor.parameters():
        p.requires_grad_(False)
    return actor


def actor_builder(spec, net) -> Callable[[], object]:
    """``build`` for ``load_frozen_actor``: an empty ``shared.nn.model.PointerActor`` for the
    observation layout ``spec`` (``shared.envs.ObsSpec``) and network config ``net``, built on the
    meta device (no initialiser runs, so torch's global RNG is untouched), then given CPU memory
    (float32, values undefined)."""

    def build():
        import torch

        from shared.nn.model import PointerActor

        with torch.device("meta"):
            actor = PointerActor(spec, net)
        return actor.to_empty(device="cpu")

    return build


class ActorOnly:
    """What ``shared.nn.policy.Policy`` needs of a model, for an actor alone: ``actor_logits``.
    A snapshot has no critic, so ``Policy.values`` must not be asked of it."""

    def __init__(self, actor):
        self.actor = actor

    def actor_logits(self, obs):
        return self.actor(obs)
