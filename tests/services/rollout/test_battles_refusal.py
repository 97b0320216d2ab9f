"""A rollout whose battles or shards differ from the run's refuses to join, naming both and the
settings to change (issue 28: a rollout host started with another machine class's FLEET_BATTLES
would change the run's batch, which the run identity records)."""

from __future__ import annotations

import msgspec
import pytest

from services.rollout.service import RolloutService, battles_mismatch
from shared.codec import CodecTable
from shared.config import RolloutConfig, profile
from shared.messages import EngineBuild, Failure, Welcome

ENGINE = EngineBuild(engine_class="E", calibration_digest="c", build_digest="b", binary_sha256="s",
                     cards_digest="d", royalegym_version="0")
TABLE = CodecTable(version=1, planes=(), height=1, width=1, vector_size=1, n_actions=1, hand_slots=0)


def test_equal_battles_and_shards_pass_and_either_differing_is_named():
    run = profile("workstation").rollout
    assert (run.battles, run.shards) == (32, 2)
    assert battles_mismatch(32, 2, run) is None
    text = battles_mismatch(16, 2, run)
    assert text == ("battles differ from the run's: this rollout runs 16 battles in 2 shards (ROYALEFLEET_BATTLES, "
                    "ROYALEFLEET_SHARDS; FLEET_BATTLES, FLEET_SHARDS under Compose), the learner's config says "
                    "rollout.battles=32, rollout.shards=2, which its run identity records: start this host's rollouts "
                    "with FLEET_BATTLES=32 FLEET_SHARDS=2 (its replica count is its own: FLEET_HOST_ROLLOUTS)")
    assert "this rollout runs 32 battles in 4 shards" in battles_mismatch(32, 4, run)


def test_the_rollout_says_so_to_the_learner_and_exits_on_a_welcome_of_other_battles():
    sent = []
    service = RolloutService("tcp://127.0.0.1:9", battles=16, shards=2, say=lambda _: None)
    try:
        service.engine = ENGINE
        service._send = sent.append
        run = msgspec.structs.replace(RolloutConfig(), battles=32, shards=2)
        welcome = Welcome(env=profile("tiny").env, master_seed=1, codec=TABLE, engine=ENGINE,
                          random_legal_noop_prob=0.9, rollout=run)
        with pytest.raises(SystemExit, match=r"this rollout runs 16 battles in 2 shards .* rollout.battles=32"):
            service._on_welcome(welcome)
        (failure,) = sent
        assert isinstance(failure, Failure) and failure.kind == "refused"
        assert failure.message == battles_mismatch(16, 2, run)
        assert service.welcome is None and not service.shards  # nothing was built
    finally:
        service.sock.close(linger=0)
