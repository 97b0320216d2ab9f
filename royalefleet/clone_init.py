"""``royalefleet clone --init snap:<id>``: a clone that starts from a snapshot of the run instead
of fresh weights, so a generation is its predecessor fine-tuned on new labels (expert
iteration's step as AlphaZero takes it: the same network trained on, not a new one drawn).

The snapshot is read as the warm start reads one
(services/learner/extensions/clone_snapshot.py ``read_snapshot``: its id against its bytes, its
architecture, observation and codec digests against the run's, its probe rows, when it has
them, verified after loading). Its actor weights are fp16 upcast:
the starting actor plays exactly as the snapshot does. The critic comes from
``<run>/clones/<id>/critic.safetensors`` when the snapshot is a clone that kept one, else fresh.
"""

from __future__ import annotations

import re
from typing import NamedTuple

SNAPSHOT_REFERENCE = re.compile(r"^snap:([0-9a-f]{16})$")


class InitWeights(NamedTuple):
    sid: str
    actor_state: dict
    """The actor's float32 state dict (``shared.nn.model.PointerActor``), from the fp16 file."""
    critic_bytes: bytes | None
    """``critic.safetensors`` (float32) the clone kept, None when its folder has none."""


class InitRefused(ValueError):
    """The --init snapshot cannot start this run's clone; the text names it and the fix."""


def load_init(reference: str, run, spec, net, codec, ident: dict) -> InitWeights:
    """The weights ``reference`` (``snap:<16 hex>``) names in ``run``'s snapshot store.

    Args:
        run: shared.run_dir.RunDir of the run being cloned into.
        spec, net, codec: the run's ObsSpec, net config and row codec.
        ident: the run's arch_digest, obs_digest and codec_table_digest (``cmd_clone.run_facts``).

    Raises:
        InitRefused: not ``snap:<16 hex>``; no such snapshot; its bytes do not match its id; its
            spec names another architecture, observation or codec; its weights do not load; its
            probe rows do not verify.
    """
    from services.checkpoint.snapshots import SnapshotCorrupt
    from services.learner.extensions.clone_snapshot import read_snapshot
    from shared.nn.probes import ProbeMismatch
    from shared.nn.snapshot import SnapshotSpecError, SnapshotWeightsError

    m = SNAPSHOT_REFERENCE.match(reference)
    if not m:
        raise InitRefused(f"--init {reference!r}: give a snapshot of this run as snap:<16 hex> "
                          "(royalefleet snapshots lists them)")
    sid = m.group(1)
    try:
        actor, _, _, critic = read_snapshot(run, sid, ident, spec, net, codec)
    except FileNotFoundError:
        raise InitRefused(f"--init {reference}: no snapshot {sid} in {run.snapshots} (royalefleet snapshots "
                          "lists this run's)") from None
    except (SnapshotCorrupt, SnapshotSpecError, SnapshotWeightsError, ProbeMismatch) as exc:
        raise InitRefused(f"--init {reference}: refusing it: {exc}") from None
    return InitWeights(sid, {k: v.clone() for k, v in actor.state_dict().items()}, critic)
