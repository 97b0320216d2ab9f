"""The one snapshot loader (shared/nn/snapshot.py) that the learner's frozen seats and the
evaluator both use: the spec check naming every field, the fp16 -> float32 actor, and that each
side keeps its own failure policy over the same check."""

from __future__ import annotations

import msgspec
import pytest
import torch
from torch import nn

from shared.nn.snapshot import (
    ARCH_HINT, SPEC_DIGESTS, ActorOnly, SnapshotSpecError, SnapshotWeightsError, check_spec, load_frozen_actor,
)
from shared.nn.statefiles import module_to_bytes

RUN = {"arch_digest": "a" * 16, "obs_digest": "b" * 16, "codec_table_digest": "c" * 16}


def spec(**changes) -> bytes:
    doc = {**RUN, "iteration": 4, "env_steps": 1000, "dtype": "float16", **changes}
    return msgspec.json.encode({k: v for k, v in doc.items() if v is not None})


def linear(seed: int) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(3, 2)


def test_a_fitting_spec_is_returned_decoded():
    assert check_spec("s", spec(), RUN) == {**RUN, "iteration": 4, "env_steps": 1000, "dtype": "float16"}
    # dtype may be absent (float16 is then taken); extra fields are the writer's business.
    assert check_spec("s", spec(dtype=None, run_id="r"), RUN)["run_id"] == "r"


def test_every_mismatched_field_is_named_with_both_values_in_order():
    with pytest.raises(SnapshotSpecError) as info:
        check_spec("s", spec(codec_table_digest="x", arch_digest=None, dtype="float32"), RUN)
    assert info.value.fields == ("arch_digest", "codec_table_digest", "dtype")
    assert info.value.digest_mismatch and info.value.snapshot_id == "s"
    assert str(info.value) == ("snapshot s: spec arch_digest is None, this run's is 'aaaaaaaaaaaaaaaa'" + ARCH_HINT + "; "
                               "spec codec_table_digest is 'x', this run's is 'cccccccccccccccc'; "
                               "spec dtype is 'float32', this run's is 'float16'")


def test_a_dtype_alone_or_a_malformed_spec_is_no_digest_mismatch():
    with pytest.raises(SnapshotSpecError) as info:
        check_spec("s", spec(dtype="bfloat16"), RUN)
    assert info.value.fields == ("dtype",) and not info.value.digest_mismatch
    for raw, text in ((b"[1, 2]", "snapshot s: spec.json is not a JSON object"),
                      (b"{", "snapshot s: spec.json is not JSON (")):
        with pytest.raises(SnapshotSpecError) as info:
            check_spec("s", raw, RUN)
        assert str(info.value).startswith(text) and info.value.fields == () and not info.value.digest_mismatch


def test_the_caller_must_give_every_digest():
    with pytest.raises(ValueError, match=r"expected digests lack \['obs_digest'\]; give every field of SPEC_DIGESTS"):
        check_spec("s", spec(), {k: RUN[k] for k in SPEC_DIGESTS if k != "obs_digest"})


def test_the_frozen_actor_is_the_fp16_values_in_float32_without_gradients():
    source = linear(3)
    actor = load_frozen_actor("s", module_to_bytes(source.half()), lambda: nn.Linear(3, 2), "cpu")
    assert actor.weight.dtype == torch.float32 and not actor.training
    assert not any(p.requires_grad for p in actor.parameters())
    assert torch.equal(actor.weight, source.weight.half().float())
    assert torch.equal(ActorOnly(actor).actor_logits(torch.ones(1, 3)), actor(torch.ones(1, 3)))


def test_weights_of_another_shape_or_dtype_are_refused_naming_the_snapshot():
    with pytest.raises(SnapshotWeightsError, match=r"^snapshot s: its actor does not load into this run's "
                                                   r"architecture: (?s:.*)size mismatch for weight"):
        load_frozen_actor("s", module_to_bytes(nn.Linear(4, 2).half()), lambda: nn.Linear(3, 2))
    with pytest.raises(SnapshotWeightsError, match="holds torch.float32, the module has torch.float16"):
        load_frozen_actor("s", module_to_bytes(nn.Linear(3, 2)), lambda: nn.Linear(3, 2))
    with pytest.raises(SnapshotWeightsError, match="^snapshot s: its actor does not load"):
        load_frozen_actor("s", b"not safetensors", lambda: nn.Linear(3, 2))


@pytest.mark.parametrize("field", SPEC_DIGESTS)
def test_the_learner_and_the_evaluator_refuse_with_the_same_clause_and_their_own_policy(field):
    """Same check, two policies: the learner's seat plays the no-op (reason digest_mismatch),
    the evaluator refuses the job; both texts start with the shared clause."""
    from services.evaluator.players import RunFacts, SnapshotRefused, check_spec as evaluator_check
    from services.learner.frozen import SnapshotUnavailable, check_spec as learner_check

    bad = spec(**{field: "f" * 16})
    clause = f"snapshot s: spec {field} is {'f' * 16!r}, this run's is {RUN[field]!r}"
    clause += ARCH_HINT if field == "arch_digest" else ""
    with pytest.raises(SnapshotUnavailable) as learner:
        learner_check("s", bad, RUN)
    assert learner.value.reason == "digest_mismatch" and str(learner.value).startswith(clause + "; a snapshot of")
    with pytest.raises(SnapshotRefused) as evaluator:
        evaluator_check("s", bad, RunFacts(spec=None, codec=None, **RUN))
    assert str(evaluator.value) == clause + ". Evaluate it with the config of the run that wrote it"
    # A spec naming another dtype is bad weights to the learner, not a digest mismatch.
    with pytest.raises(SnapshotUnavailable) as learner:
        learner_check("s", spec(dtype="float32"), RUN)
    assert learner.value.reason == "bad_weights"
