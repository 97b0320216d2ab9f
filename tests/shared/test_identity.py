"""Run identity: everything that can change a number moves the run id; nothing else does."""

from __future__ import annotations

import msgspec
import pytest

from shared.config import load_config
from shared.identity import compute_identity, identity_differences, run_id
from shared.messages import EngineBuild

ENGINE = EngineBuild(engine_class="royalegym.rust_engine.RustEngine", calibration_digest="c", build_digest="b",
                     binary_sha256="e42383517b50bfe1", cards_digest="k", royalegym_version="0.1.25")


def ident(doc=None, **facts):
    cfg = load_config({"profile": "cpu", **(doc or {})})
    kw = dict(engine=ENGINE, obs_digest="o", action_digest="a", codec_table_digest="t",
              device_kind="cpu:x86_64", torch_version="2.14.1")
    kw.update(facts)
    return compute_identity(cfg, **kw)


BASE = ident()


@pytest.mark.parametrize("doc", [
    {"master_seed": 1}, {"ppo": {"clip_range": 0.1}}, {"ppo": {"minibatch_size": 128}}, {"advantage": {"gae_lambda": 0.95}},
    {"env": {"max_steps": 400}}, {"env": {"reward_weights": {"elixir": 0.1}}}, {"net": {"channels": 16}},
    {"net": {"slot_index": True}},
    {"rollout": {"battles": 8}}, {"ladder": {"mix": [1.0, 0.0, 0.0]}}, {"determinism": {"tier": "throughput"}},
    {"determinism": {"torch_threads": 1}}, {"services": {"wire_codec": 1}},
])
def test_a_setting_that_changes_numbers_moves_the_run_id(doc):
    assert run_id(ident(doc)) != run_id(BASE)


@pytest.mark.parametrize("doc", [
    {"run_name": "other"}, {"runs_dir": "elsewhere"}, {"checkpoint": {"keep": 3, "every_iterations": 1}},
    {"alarms": {"kl_high": 0.1}}, {"services": {"learner_port": 6000}}, {"rollout": {"round_timeout_s": 5.0}},
    {"rollout": {"heartbeat_s": 1.0}}, {"net": {"device": "cpu"}},
])
def test_a_setting_that_cannot_change_numbers_keeps_the_run_id(doc):
    assert run_id(ident(doc)) == run_id(BASE)


@pytest.mark.parametrize("fact,value", [
    ("engine", msgspec.structs.replace(ENGINE, binary_sha256="04d42611db5d6e5a")), ("obs_digest", "o2"),
    ("codec_table_digest", "t2"), ("device_kind", "cuda:RTX:sm_86"), ("torch_version", "2.9.1"),
])
def test_an_environment_or_machine_fact_moves_the_run_id(fact, value):
    assert run_id(ident(**{fact: value})) != run_id(BASE)


def test_the_wire_codec_is_the_identity_codec_version_and_codec_1_keeps_old_run_ids():
    # f0671471b3b5d987: run_id(BASE) computed by the build before wire codec 2 existed. A run
    # on codec 1 (the default until 2026-12-03; its config.json says so) must resume under the
    # new build with the same identity. That build's cpu profile took a candidate every
    # 4,000,000 env steps (now 100,000: issue 20), so its config is that one; its
    # advantage.reward_clip was 10 (now 40: docs/learning.md), and its gate the default one (the
    # cpu profile's is smaller since 2026-12-02: docs/ladder.md).
    old = {"ladder": {"pool": {"candidate_every_env_steps": 4_000_000},
                      "gate": {"champion_games": 1000, "anchor_games": 200, "stratified_snapshots": 8,
                               "stratified_games": 100}},
           "advantage": {"reward_clip": 10.0}, "services": {"wire_codec": 1}}
    assert run_id(ident(old)) == "f0671471b3b5d987"
    packed = ident({"services": {"wire_codec": 1}})
    assert identity_differences(packed, BASE) == {"codec_version": (1, 2)}


def test_a_new_run_uses_wire_codec_2_on_every_profile():
    for name in ("cpu", "laptop", "workstation", "many_core", "tiny"):
        assert load_config({"profile": name}).services.wire_codec == 2, name
    assert BASE.codec_version == 2


def test_run_id_is_sixteen_hex_and_stable():
    rid = run_id(BASE)
    assert len(rid) == 16 and int(rid, 16) >= 0
    assert run_id(ident()) == rid


def test_differences_name_every_differing_field():
    other = ident({"master_seed": 5}, engine=msgspec.structs.replace(ENGINE, binary_sha256="x"))
    diffs = identity_differences(BASE, other)
    assert set(diffs) == {"master_seed", "engine.binary_sha256"}
    assert diffs["master_seed"] == (20260921, 5)
