"""A Welcome never decides what a rollout imports (issue 38): a learner (or whoever answers at
its address) whose Welcome names a module this rollout's own allow-list does not hold is
refused by name, with a Failure to the learner, before anything is imported or built; the
Welcome's own env.extra_component_modules allows nothing here."""

from __future__ import annotations

import sys
import uuid

import msgspec
import pytest

from services.rollout.service import RolloutService, welcome_refusal
from shared import components
from shared.config import ComponentSpec, RolloutConfig, profile
from shared.messages import Decoder, Failure, ToRollout, Welcome, encode
from tests.services.rollout.test_battles_refusal import ENGINE, TABLE


@pytest.fixture
def evil(tmp_path, monkeypatch):
    """(package name, marker): a package whose import creates the marker file."""
    monkeypatch.delenv(components.ALLOW_ENV, raising=False)
    monkeypatch.delenv(components.USER_PACKAGES_ENV, raising=False)
    monkeypatch.setattr(components, "_LOCAL", set())
    name = "evil_" + uuid.uuid4().hex[:8]
    marker = tmp_path / "ran"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).touch()\n"
                                                 "class Builder:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, marker
    sys.modules.pop(name, None)


def welcome(env) -> Welcome:
    run = msgspec.structs.replace(RolloutConfig(), battles=4, shards=2)
    msg = Welcome(env=env, master_seed=1, codec=TABLE, engine=ENGINE, random_legal_noop_prob=0.9, rollout=run)
    # as it arrives: encoded by the peer, decoded by the rollout's own decoder
    return Decoder(ToRollout).decode(encode(msg))[0]


def test_a_welcome_naming_a_foreign_module_is_refused_by_name_and_nothing_is_imported(evil):
    name, marker = evil
    env = msgspec.structs.replace(profile("tiny").env, extra_component_modules=["os", name],
                                  obs_builder=ComponentSpec(cls=f"{name}.Builder"),
                                  reward_fn=ComponentSpec(cls="os.system", kwargs={"command": f"touch {marker}"}))
    sent = []
    service = RolloutService("tcp://127.0.0.1:9", battles=4, shards=2, say=lambda _: None)
    try:
        service.engine = ENGINE
        service._send = sent.append
        with pytest.raises(SystemExit, match=rf"Welcome names code of modules \['{name}', 'os'\]"):
            service._on_welcome(welcome(env))
        (failure,) = sent
        assert isinstance(failure, Failure) and failure.kind == "refused"
        assert failure.message == (
            f"the learner's Welcome names code of modules ['{name}', 'os'], which this rollout does not allow "
            f"(allowed here: []); nothing was imported. If that is your own installed package, allow it on this "
            f"host: ROYALEFLEET_ALLOW_MODULES={name},os (FLEET_USER_PACKAGES under Compose)")
        assert service.welcome is None and not service.shards
        assert not marker.exists() and name not in sys.modules
    finally:
        service.sock.close(linger=0)


def test_a_part_nested_in_a_curriculum_or_a_forbidden_package_is_foreign_too(evil, monkeypatch):
    name, _ = evil
    mix = ComponentSpec(cls="royalegym.WeightedStateMutator", kwargs={"mutators": [
        {"cls": "royalegym.DefaultStateMutator", "kwargs": {}, "weight": 1.0},
        {"cls": f"{name}.starts.Drill", "kwargs": {}, "weight": 1.0}]})
    env = msgspec.structs.replace(profile("tiny").env, state_mutator=mix)
    assert components.foreign_code(env) == [f"{name}.starts"]
    assert welcome_refusal(welcome(env), ENGINE, 4, 2).startswith(
        f"the learner's Welcome names code of modules ['{name}.starts']")
    services = msgspec.structs.replace(profile("tiny").env, extra_component_modules=["services"],
                                       reward_fn=ComponentSpec(cls="services.learner.ppo.Thing"))
    assert components.foreign_code(services) == ["services", "services.learner.ppo"]
    # this host's own settings allow the user's package; the shipped ones need nothing
    monkeypatch.setenv(components.ALLOW_ENV, name)
    assert components.foreign_code(env) == [] and welcome_refusal(welcome(env), ENGINE, 4, 2) is None
