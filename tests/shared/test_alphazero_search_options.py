"""The ``alphazero`` section's search options (the ``+search`` players' ``p``, ``sh``, ``cont``,
``opp``, ``vs``, ``keep``): refused with the fix named where they cannot run (critic leaves with
the players' move rule, an unknown bot), carried to the rollouts' ``RolloutSearch`` unchanged,
and left out of algo_digest at their defaults (a run that does not use them keeps its digest)."""

from __future__ import annotations

import msgspec
import pytest

from services.learner.alphazero.book import rollout_search_of
from shared.config import load_config
from shared.config_schema import ConfigError
from shared.identity import config_digests, digest
from shared.search.spec import RolloutSearch, split_search

NEW = ("playouts", "halving", "continuation", "sim_opponents", "value_scale", "keep", "full_search_share",
       "candidates_from", "redeal", "own_pick")


def _problems(**alphazero) -> list[str]:
    algorithm = alphazero.pop("algorithm", "alphazero")
    with pytest.raises(ConfigError) as info:
        load_config({"profile": "tiny", "learner": {"algorithm": algorithm}, "alphazero": alphazero,
                     "expert_iteration": {"value_target": "return"}})
    return info.value.problems


@pytest.mark.parametrize("option, value", [("playouts", 4), ("halving", True), ("value_scale", 2000.0),
                                           ("keep", 0.05)])
@pytest.mark.parametrize("algorithm", ["alphazero", "expert_iteration"])
def test_critic_leaves_with_the_players_rule_are_refused_naming_the_option_and_the_fix(option, value, algorithm):
    problems = _problems(algorithm=algorithm, leaf_value="critic", **{option: value})
    assert len(problems) == 1
    assert problems[0].startswith("alphazero.leaf_value: \"critic\" values one leaf a candidate")
    assert f"(alphazero.{option} set)" in problems[0]
    assert "set alphazero.leaf_value \"board\", or leave playouts 1, halving false, value_scale 0 and keep 0" \
        in problems[0]


def test_critic_leaves_take_a_continuation_and_simulated_opponents():
    cfg = load_config({"profile": "tiny", "learner": {"algorithm": "alphazero"},
                       "alphazero": {"leaf_value": "critic", "continuation": "defend", "sim_opponents": ["push"]}})
    assert not cfg.alphazero.stable()


def test_unknown_bots_and_repeated_opponents_are_refused_with_the_choices():
    problems = _problems(continuation="self", sim_opponents=["defend", "defend", "nobody"])
    assert problems[0].startswith("alphazero.continuation: 'self' is not a simulation bot; choose one of noop, "
                                  "random_legal, random, first-affordable, defend")
    assert problems[1].startswith("alphazero.sim_opponents: ['defend', 'defend', 'nobody'] must be distinct names of")


def test_the_options_are_not_checked_against_critic_when_the_learner_does_not_search():
    cfg = load_config({"profile": "tiny", "alphazero": {"leaf_value": "critic", "playouts": 4}})
    assert cfg.learner.algorithm == "ppo"


def test_the_rollouts_search_carries_the_options_as_the_players_id_spells_them():
    cfg = load_config({"profile": "tiny", "learner": {"algorithm": "expert_iteration"},
                       "alphazero": {"candidates": 8, "playouts": 4, "halving": True, "continuation": "defend",
                                     "sim_opponents": ["random_legal", "defend"], "value_scale": 2000.0,
                                     "keep": 0.05, "redeal": True},
                       "expert_iteration": {"value_target": "return"}})
    wire = rollout_search_of(cfg.alphazero)
    assert wire.spec() == split_search(
        "x+search:8,p=4,sh=1,cont=defend,opp=random_legal/defend,vs=2000,keep=0.05,redeal=1")[1]
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(wire), type=RolloutSearch) == wire


def test_defaults_keep_the_digest_and_the_welcome_bytes_and_each_option_moves_the_digest():
    cfg = load_config({"profile": "tiny", "learner": {"algorithm": "alphazero"}})
    old = {k: v for k, v in msgspec.to_builtins(cfg.alphazero).items() if k not in NEW}
    assert cfg.alphazero.identity_part() == old
    assert set(msgspec.to_builtins(cfg.alphazero)) - set(old) == set(NEW)
    base = config_digests(cfg)["algo_digest"]
    assert digest(cfg.alphazero.identity_part()) == digest(old)
    wire = rollout_search_of(cfg.alphazero)
    a = cfg.alphazero  # the Welcome's search as it was built before the options existed
    assert msgspec.msgpack.encode(wire) == msgspec.msgpack.encode(
        RolloutSearch(candidates=a.candidates, depth=a.depth, c_scale=a.c_scale, leaf_value=a.leaf_value,
                      sim_opponent=a.sim_opponent))
    for option, value in (("playouts", 2), ("halving", True), ("continuation", "defend"), ("sim_opponents", ["push"]),
                          ("value_scale", 100.0), ("keep", 0.1), ("full_search_share", 0.5)):
        moved = load_config({"profile": "tiny", "learner": {"algorithm": "alphazero"}, "alphazero": {option: value}})
        assert config_digests(moved)["algo_digest"] != base, option
    # plans and redeal need the players' rule: each against keep alone
    rule = {"profile": "tiny", "learner": {"algorithm": "alphazero"}, "alphazero": {"keep": 0.1}}
    for option, value in (("candidates_from", "plans"), ("redeal", True), ("own_pick", "argmax")):
        moved = load_config({**rule, "alphazero": {"keep": 0.1, option: value}})
        assert config_digests(moved)["algo_digest"] != config_digests(load_config(rule))["algo_digest"], option


@pytest.mark.parametrize("option, value, spelled", [("candidates_from", "plans", '"plans"'), ("redeal", True, "true"),
                                                    ("own_pick", "argmax", '"argmax"')])
@pytest.mark.parametrize("algorithm", ["alphazero", "expert_iteration"])
def test_plan_candidates_and_redeal_without_the_players_rule_are_refused_naming_the_fix(option, value, spelled,
                                                                                        algorithm):
    problems = _problems(algorithm=algorithm, **{option: value})
    assert problems == [f"alphazero.{option}: {spelled} needs the players' move rule (the prior's own pick played "
                        "unless another candidate beats it by keep); set alphazero.keep (the fixed-deck teachers "
                        "used 0.1) or alphazero.playouts above 1"]
    load_config({"profile": "tiny", "learner": {"algorithm": algorithm}, "alphazero": {option: value, "keep": 0.1},
                 "expert_iteration": {"value_target": "return"}})
