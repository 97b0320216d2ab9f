"""Components by dotted path (issue 16): a user reward changes rewards as written, is checked at
load for what it refuses at build, is recorded by content in the identity (user_code), and a
rollout with other user code is refused at Hello naming both digests."""

from __future__ import annotations

import sys
import time
import uuid

import msgspec
import pytest
import zmq

from services.learner.rounds import Collector
from services.learner.fleet import Fleet
from shared import components, transport
from shared.config import ConfigError, load_config
from shared.identity import compute_identity, identity_differences, run_id
from shared.messages import Decoder, EngineBuild, Hello, Refused, ToLearner, ToRollout
from tests.stack import free_ports
from tests.user_package import reward_doc, write_package

ENGINE = EngineBuild(engine_class="royalegym.rust_engine.RustEngine", calibration_digest="c", build_digest="b",
                     binary_sha256="e42383517b50bfe1", cards_digest="k", royalegym_version="0.1.25")


@pytest.fixture
def user_pkg(tmp_path, monkeypatch):
    """(name, folder) of a fresh throwaway package on sys.path; forgotten afterwards."""
    name = "mybot_" + uuid.uuid4().hex[:8]
    folder = write_package(tmp_path, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(components.ALLOW_ENV, name)  # installed here and allowed by this machine's settings
    yield name, folder
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]


def ident(doc):
    cfg = load_config({"profile": "tiny", **doc})
    return compute_identity(cfg, engine=ENGINE, obs_digest="o", action_digest="a", codec_table_digest="t",
                            device_kind="cpu:x86_64", torch_version="2.14.1")


def test_a_user_reward_pays_exactly_what_it_says_on_a_scripted_battle(user_pkg):
    from shared.envs import build_env

    name, _ = user_pkg
    cfg = load_config({"profile": "tiny", "env": reward_doc(name, per_tick=0.25, red_bonus=0.5)})
    env = build_env(cfg.env)
    env.reset(seed=11)
    # decision_ms 500 is 10 engine ticks: blue 0.25 * 10 = 2.5, red 2.5 + 0.5 = 3.0, every decision
    paid = [env.step({"blue": 0, "red": 0})[1] for _ in range(5)]
    assert paid == [{"blue": 2.5, "red": 3.0}] * 5
    cfg2 = load_config({"profile": "tiny", "env": reward_doc(name, per_tick=0.125, red_bonus=0.0)})
    env2 = build_env(cfg2.env)
    env2.reset(seed=11)
    assert env2.step({"blue": 0, "red": 0})[1] == {"blue": 1.25, "red": 1.25}


@pytest.mark.parametrize("value,says", [
    (float("nan"), "per_tick=nan is not finite"), (-0.5, "per_tick=-0.5 is negative"),
    (True, "per_tick=True is a bool"), ("0.3", "per_tick='0.3' is not a number"),
])
def test_the_config_is_refused_at_load_for_what_the_reward_refuses_at_build(user_pkg, value, says):
    name, _ = user_pkg
    with pytest.raises(ConfigError) as err:
        load_config({"profile": "tiny", "env": reward_doc(name, per_tick=value)})
    assert any(p.startswith("env.reward_fn.kwargs: ") and says in p for p in err.value.problems), err.value.problems
    # and the component itself refuses the same value when built directly
    mod = __import__(f"{name}.rewards", fromlist=["TickReward"])
    with pytest.raises(ValueError, match=says.split(" ")[0].replace("(", r"\(")):
        mod.TickReward(per_tick=value)


def test_a_shipped_reward_by_path_is_refused_for_a_bad_weight_naming_the_field():
    with pytest.raises(ConfigError) as err:
        load_config({"profile": "tiny", "env": {"reward_fn": {"cls": "shared.rewards.default_potential_reward",
                                                             "kwargs": {"crown": -1.0, "elixir": False}}}})
    assert err.value.problems == ["env.reward_fn.kwargs: crown=-1.0 is negative; a weight must be zero or more",
                                  "env.reward_fn.kwargs: elixir=False is a bool, not a number"]


def test_a_class_that_does_not_exist_a_module_not_listed_and_a_bad_keyword_are_named(user_pkg):
    name, _ = user_pkg
    doc = {"env": {"reward_fn": {"cls": f"{name}.rewards.NoSuchReward"}, "extra_component_modules": [name],
                   "obs_builder": {"cls": "elsewhere.obs.Builder"},
                   "action_parser": {"cls": "royalegym.TileActionParser", "kwargs": {"bogus": 1}}}}
    with pytest.raises(ConfigError) as err:
        load_config({"profile": "tiny", **doc})
    problems = err.value.problems
    assert problems[0].startswith(f"env.reward_fn.cls: module '{name}.rewards' has no 'NoSuchReward' (it defines [")
    assert "TickReward" in problems[0]
    assert problems[1] == ("env.obs_builder.cls: module 'elsewhere.obs' is not listed in env.extra_component_modules "
                           f"(listed: ['{name}']); add 'elsewhere' there to allow it (and allow it on this machine: "
                           "ROYALEFLEET_ALLOW_MODULES or --allow-module)")
    assert problems[2].startswith("env.action_parser.kwargs: ['bogus'] do not fit royalegym.TileActionParser")
    assert len(problems) == 3
    with pytest.raises(ConfigError, match="lives in 'services'"):
        load_config({"profile": "tiny", "env": {"reward_fn": {"cls": "services.learner.ppo.Thing"},
                                                "extra_component_modules": ["services"]}})


def test_user_code_is_in_the_identity_by_content_and_an_edit_is_a_drift_named_user_code(user_pkg):
    name, folder = user_pkg
    base = ident({})
    mine = ident({"env": reward_doc(name)})
    assert base.user_code is None and set(mine.user_code) == {name} and len(mine.user_code[name]) == 64
    assert run_id(mine) != run_id(base)
    # listing a module changes nothing; using it does
    assert run_id(ident({"env": {"extra_component_modules": [name]}})) == run_id(base)
    # an edit to a helper the reward imports is an edit to the run
    (folder / "util.py").write_text("def ticks_between(prev, state):\n"
                                    "    return 2 * (state.tick - prev.tick)\n")
    edited = ident({"env": reward_doc(name)})
    diffs = identity_differences(mine, edited)
    assert list(diffs) == ["user_code"]
    assert diffs["user_code"][0][name] != diffs["user_code"][1][name]
    assert run_id(edited) != run_id(mine)
    # the digest is over relative paths and bytes: the same files elsewhere are the same code
    assert components.package_digest(name) == edited.user_code[name]


def test_an_identity_without_user_code_or_extensions_keeps_its_run_id():
    ours = ident({})
    data = msgspec.to_builtins(ours)
    assert data["user_code"] is None and data["extensions"] is None
    # encoded the way a checkpoint from before these fields existed was: neither key at all
    old = {k: v for k, v in data.items() if k not in ("user_code", "extensions")}
    import hashlib

    assert run_id(ours) == hashlib.sha256(msgspec.json.encode(old, order="sorted")).hexdigest()[:16]
    assert msgspec.json.decode(msgspec.json.encode(old), type=type(ours)) == ours


def _hello_reply(learner_code, hello_code):
    port = free_ports(1)[0]
    server = transport.bind_router(f"tcp://127.0.0.1:{port}")
    said = []
    collector = Collector(server, Decoder(ToLearner), Fleet(), lambda codec: None, ENGINE, said.append)
    collector.user_code = learner_code
    client = transport.connect_dealer(f"tcp://127.0.0.1:{port}")
    try:
        transport.send(client, Hello(instance="x1", host="h", pid=1, battles=2, shards=1, engine=ENGINE,
                                     user_code=hello_code))
        deadline = time.monotonic() + 10
        while not said and time.monotonic() < deadline:
            collector.poll(100, lambda *a: None)
        assert client.poll(5000, zmq.POLLIN)
        _, reply, _ = transport.recv(client, Decoder(ToRollout))
        return reply, collector, said
    finally:
        client.close(0)
        server.close(0)


def test_a_rollout_whose_user_package_differs_is_refused_at_hello_with_both_digests():
    learner, rollout = "a" * 64, "b" * 64
    reply, collector, said = _hello_reply({"mybot": learner}, {"mybot": rollout})
    assert isinstance(reply, Refused)
    assert reply.reason.startswith(f"user code differs (mybot: the learner's user_code is {'a' * 16}, "
                                   f"the rollout's is {'b' * 16})")
    assert "ROYALEFLEET_USER_PACKAGES=mybot" in reply.reason
    assert collector.fleet.members == {} and "refused rollout x1@h" in said[0]
    # a rollout that sent nothing for the package is refused the same way, saying so
    reply, _, _ = _hello_reply({"mybot": learner}, {})
    assert isinstance(reply, Refused) and "the rollout's is not sent" in reply.reason


def test_the_same_user_code_is_welcomed():
    from shared.messages import Welcome  # noqa: F401  (the welcome_for stub returns None: nothing is sent)

    port = free_ports(1)[0]
    server = transport.bind_router(f"tcp://127.0.0.1:{port}")
    collector = Collector(server, Decoder(ToLearner), Fleet(), lambda codec: None, ENGINE, lambda s: None)
    collector.user_code = {"mybot": "c" * 64}
    client = transport.connect_dealer(f"tcp://127.0.0.1:{port}")
    try:
        transport.send(client, Hello(instance="x2", host="h", pid=1, battles=2, shards=1, engine=ENGINE,
                                     user_code={"mybot": "c" * 64}))
        deadline = time.monotonic() + 10
        while not collector.fleet.members and time.monotonic() < deadline:
            collector.poll(100, lambda *a: None)
        assert list(collector.fleet.members) == ["x2"]
    finally:
        client.close(0)
        server.close(0)


def test_a_rollout_digests_the_packages_the_launcher_names(user_pkg):
    name, _ = user_pkg
    got = components.hello_user_code({components.USER_PACKAGES_ENV: f"{name}, not_installed_pkg_x"})
    assert got == {name: components.package_digest(name), "not_installed_pkg_x": "missing"}
    assert components.hello_user_code({}) == {}
    from royalefleet.launcher import service_environments

    cfg = load_config({"profile": "tiny", "env": reward_doc(name)})
    envs = service_environments(cfg, "/tmp/c.json", "/tmp/runs")
    assert envs["rollout-0"][components.USER_PACKAGES_ENV] == name


def test_a_component_that_builds_something_else_is_refused_at_build_naming_the_field(user_pkg):
    from shared.envs import build_env

    name, folder = user_pkg
    (folder / "notareward.py").write_text("def make(scale=1.0):\n    return {'scale': scale}\n")
    cfg = load_config({"profile": "tiny", "env": {"extra_component_modules": [name],
                                                  "reward_fn": {"cls": f"{name}.notareward.make"}}})
    with pytest.raises(components.ComponentError) as err:
        build_env(cfg.env)
    assert str(err.value) == ("env.reward_fn: built a builtins.dict, not a RoyaleGym RewardFunction; subclass "
                              "royalegym.RewardFunction")
