"""A clone snapshot (royalefleet/cmd_clone.py) loaded for a learner extension: the actor as the
pool's frozen seats load it (float16 weights upcast), its probe rows verified, and the critic
``royalefleet clone`` keeps beside it (``<run>/clones/<id>/critic.safetensors``) when there."""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from shared.learner_extension import ExtensionRefused, StartContext

SNAPSHOT_PATTERN = r"^snap:[0-9a-f]{16}$"


class CloneSnapshot(NamedTuple):
    id: str
    actor: Any
    """shared.nn.model.PointerActor, float32, eval mode, no gradients, on the context's device."""
    critic_bytes: bytes | None
    """``critic.safetensors`` of ``royalefleet clone`` (float32), None when the folder has none."""
    probe_diff: float
    """The largest |log-prob difference| on the probe rows (nats)."""


def read_snapshot(run, sid: str, expected: dict, spec, net, codec) -> tuple[Any, dict, float | None, bytes | None]:
    """(the cpu float32 actor, its decoded spec, the largest probe difference in nats or None when
    the spec has no probe rows, the ``critic.safetensors`` its clone kept or None) of snapshot
    ``sid`` in ``run``'s (``shared.run_dir.RunDir``) store, read as a frozen seat reads one: its
    bytes against its id, ``check_spec`` against ``expected``, its probe rows verified.
    Raises FileNotFoundError, SnapshotCorrupt, SnapshotSpecError, SnapshotWeightsError,
    ProbeMismatch: each caller words its own refusal."""
    from services.checkpoint.snapshots import SnapshotStore
    from shared.nn.probes import verify_probe
    from shared.nn.snapshot import actor_builder, check_spec, load_frozen_actor

    actor_bytes, spec_bytes = SnapshotStore(run.snapshots).read(sid)
    doc = check_spec(sid, spec_bytes, expected)
    actor = load_frozen_actor(sid, actor_bytes, actor_builder(spec, net))
    diff = verify_probe(sid, actor, codec, doc["probe"]) if isinstance(doc.get("probe"), dict) else None
    critic_path = run.clones / sid / "critic.safetensors"
    return actor, doc, diff, critic_path.read_bytes() if critic_path.is_file() else None


def load_clone(ctx: StartContext, reference: str, field: str) -> CloneSnapshot:
    """The snapshot ``reference`` (``snap:<id>``) of the run's snapshot store, checked as a
    frozen seat's is (architecture, observation and codec digests) and by its probe rows.
    Raises ExtensionRefused naming ``field`` and the snapshot: missing, corrupt, another
    architecture, no probe rows (not a clone), or probe log-probs that differ."""
    from services.checkpoint.snapshots import SnapshotCorrupt
    from shared.nn.probes import ProbeMismatch
    from shared.nn.snapshot import SnapshotSpecError, SnapshotWeightsError
    from shared.run_dir import RunDir

    if not re.match(SNAPSHOT_PATTERN, reference):
        raise ExtensionRefused(f"{field}: {reference!r} is not snap:<16 hex> (royalefleet snapshots lists them)")
    sid = reference[len("snap:"):]
    run = RunDir(ctx.run_dir)
    try:
        expected = {"arch_digest": ctx.identity.arch_digest, "obs_digest": ctx.identity.obs_digest,
                    "codec_table_digest": ctx.identity.codec_table_digest}
        cpu_actor, _, diff, critic = read_snapshot(run, sid, expected, ctx.spec, ctx.cfg.net, ctx.codec)
        if diff is None:
            raise ExtensionRefused(f"{field}: snapshot {sid} carries no probe rows: not a clone written by "
                                   "royalefleet clone, so nothing verifies it after loading")
    except FileNotFoundError:
        raise ExtensionRefused(f"{field}: no snapshot {sid} in {run.snapshots} (royalefleet clone writes one; "
                               "royalefleet snapshots lists them; a clone of another run is named "
                               "<run>:snap:<id>, or by its exported folder, in the --config given to "
                               "royalefleet up, which copies it in)") from None
    except (SnapshotCorrupt, SnapshotSpecError, SnapshotWeightsError, ProbeMismatch) as exc:
        raise ExtensionRefused(f"{field}: refusing snapshot {sid}: {exc}") from None
    return CloneSnapshot(sid, cpu_actor.to(ctx.device), critic, diff)
