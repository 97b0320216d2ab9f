"""The run configuration: profiles, overlaying a JSON document on a profile, refusals that list
every problem at once (each naming its field), canonical dumps and dotted differences."""

import json
import pathlib
import subprocess
import sys

import msgspec
import pytest

from shared.config import (
    FORMAT_VERSION, PROFILES, ConfigError, RunConfig, check_consistency, config_differences,
    config_hash, dump_config, load_config, profile,
)


def refusal(source, **kw) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(source, **kw)
    problems = info.value.problems
    # The exception text lists the same problems, one a line.
    for p in problems:
        assert f"  - {p}" in str(info.value)
    return problems


def the_one(problems: list[str], field: str) -> str:
    hits = [p for p in problems if p.startswith(field + ":")]
    assert len(hits) == 1, (field, problems)
    return hits[0]


# ----------------------------------------------------------------------------- profiles


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_is_consistent_and_names_itself(name):
    cfg = profile(name)
    assert isinstance(cfg, RunConfig)
    assert cfg.profile == name
    assert cfg.format_version == FORMAT_VERSION
    assert check_consistency(cfg) == []
    # A document naming only the profile gives exactly that profile.
    assert load_config({"profile": name}) == cfg


def test_profiles_differ_only_in_numbers_they_declare():
    # laptop's declared numbers, and the cpu defaults for everything it does not set.
    diffs = config_differences(profile("cpu"), profile("laptop"))
    assert diffs == {
        "profile": ("cpu", "laptop"),
        "rollout.battles": (16, 32),
        "local.rollouts": (1, 3),
        "net.channels": (32, 64),
        "net.blocks": (1, 4),
        "ppo.timesteps_per_iteration": (4096, 32768),
        "ppo.batch_size": (1024, 4096),
        "determinism.torch_threads": (2, 4),
        # the cpu profile's own: a candidate within the first hour at ~55 env steps/s (docs/ladder.md)
        "ladder.pool.candidate_every_env_steps": (100_000, 4_000_000),
        # and a gate its one evaluator finishes inside one candidate interval (docs/ladder.md)
        "ladder.gate.champion_games": (200, 1000),
        "ladder.gate.anchor_games": (100, 200),
        "ladder.gate.stratified_snapshots": (4, 8),
        "ladder.gate.stratified_games": (40, 100),
    }


def test_unknown_profile_is_refused_with_the_choices():
    with pytest.raises(ConfigError) as info:
        profile("gpu")
    assert info.value.problems == [
        "profile: unknown profile 'gpu'; choose one of cpu, laptop, workstation, many_core, tiny"
    ]
    assert refusal({"profile": "gpu"}) == info.value.problems
    assert refusal({}, profile_name="gpu") == info.value.problems
    # A profile that is not even a string.
    assert refusal({"profile": 3}) == [
        "profile: unknown profile 3; choose one of cpu, laptop, workstation, many_core, tiny"
    ]


# ----------------------------------------------------------------------------- overlay


def test_a_file_that_sets_one_number_gets_the_rest_of_its_profile(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"profile": "tiny", "ppo": {"clip_range": 0.1}}))
    cfg = load_config(str(path))
    assert cfg.ppo.clip_range == 0.1
    # Everything else is tiny's, including the other fields of the struct the file touched.
    assert config_differences(profile("tiny"), cfg) == {"ppo.clip_range": (0.2, 0.1)}
    assert cfg.ppo.batch_size == 64 and cfg.ppo.n_epochs == 2 and cfg.net.channels == 8
    # A PathLike and a JSON string read the same.
    assert load_config(path) == cfg
    assert load_config(path.read_text()) == cfg


def test_document_profile_wins_over_profile_name_and_overrides_go_last():
    cfg = load_config({"profile": "tiny", "master_seed": 7}, profile_name="laptop",
                      overrides={"master_seed": 8, "rollout": {"battles": 6}})
    assert cfg.profile == "tiny"
    assert cfg.master_seed == 8
    assert cfg.rollout.battles == 6 and cfg.rollout.shards == 2  # 6 is a multiple of tiny's 2 shards
    assert cfg.env.max_steps == 40  # tiny's, untouched
    # Without "profile" in the document, profile_name chooses.
    assert load_config({"master_seed": 1}, profile_name="workstation").net.channels == 96


def test_an_int_is_accepted_for_a_float_field():
    cfg = load_config({"profile": "tiny", "ppo": {"max_grad_norm": 1}})
    assert cfg.ppo.max_grad_norm == 1.0 and isinstance(cfg.ppo.max_grad_norm, float)


# ----------------------------------------------------------------------------- refusals


def test_every_field_problem_is_listed_at_once_each_naming_its_field():
    problems = refusal({
        "profile": "tiny",
        "ppo": {"clip_range": "0.1", "n_epochs": True, "clip_rnge": 0.1, "batch_size": 64},
        "rollout": {"battles": 0},
        "ppo2": {},
        "net": {"device": "tpu"},
        "ladder": {"mix": [0.5, 0.5]},
        "services": {"learner_port": 70000},
    })
    assert len(problems) == 8, problems
    assert the_one(problems, "ppo.clip_range") == "ppo.clip_range: Expected `float`, got `str` (got '0.1')"
    assert the_one(problems, "ppo.n_epochs") == "ppo.n_epochs: Expected `int`, got `bool` (got True)"
    assert the_one(problems, "ppo.clip_rnge") == "ppo.clip_rnge: unknown field; did you mean 'clip_range'?"
    assert the_one(problems, "rollout.battles") == "rollout.battles: Expected `int` >= 1 (got 0)"
    assert the_one(problems, "ppo2") == (
        "ppo2: unknown field, and no installed package provides a section 'ppo2' (entry point group "
        "royalefleet.extensions; installed sections: imitation, warm_start); did you mean 'ppo'?")
    assert "tpu" in the_one(problems, "net.device")
    assert "(got [0.5, 0.5])" in the_one(problems, "ladder.mix")
    assert the_one(problems, "services.learner_port") == "services.learner_port: Expected `int` <= 65535 (got 70000)"


def test_an_unknown_field_with_no_close_name_lists_the_struct_fields():
    problems = refusal({"profile": "tiny", "env": {"zzzz": 1}})
    assert problems == ["env.zzzz: unknown field; EnvConfig has max_steps, decision_ms, reward, reward_weights, deck, "
                        "reward_fn, obs_builder, action_parser, extra_component_modules, seat_decks, state_mutator, "
                        "done_condition, ability_buttons"]


@pytest.mark.parametrize("doc, expected", [
    ({"ppo": {"clip_range": 1.5}}, "ppo.clip_range: Expected `float` < 1.0 (got 1.5)"),
    ({"ppo": {"clip_range": 0.0}}, "ppo.clip_range: Expected `float` > 0.0 (got 0.0)"),
    ({"rollout": {"battles": 0}}, "rollout.battles: Expected `int` >= 1 (got 0)"),
    ({"rollout": {"battles": 2.0}}, "rollout.battles: Expected `int`, got `float` (got 2.0)"),
    ({"env": {"decision_ms": 10}}, "env.decision_ms: Expected `int` >= 50 (got 10)"),
    ({"advantage": {"gae_lambda": 1.01}}, "advantage.gae_lambda: Expected `float` <= 1.0 (got 1.01)"),
    ({"master_seed": -1}, "master_seed: Expected `int` >= 0 (got -1)"),
    ({"local": {"restart_rollouts": 1}}, "local.restart_rollouts: Expected `bool`, got `int` (got 1)"),
    ({"local": {"restart_evaluators": "no"}}, "local.restart_evaluators: Expected `bool`, got `str` (got 'no')"),
    ({"ppo": 3}, "ppo: expected an object, got int 3"),
])
def test_out_of_range_and_wrong_type_refusals(doc, expected):
    assert refusal({"profile": "tiny", **doc}) == [expected]


def test_the_removed_refit_interval_is_an_unknown_field():
    """ladder.pool.refit_every_iterations is gone: the ladder refits whenever evaluation games
    arrive (docs/ladder.md), so a config still naming it is refused rather than ignored."""
    (problem,) = refusal({"profile": "tiny", "ladder": {"pool": {"refit_every_iterations": 10}}})
    assert problem.startswith("ladder.pool.refit_every_iterations: unknown field; PoolConfig has ")


def test_every_cross_field_problem_is_listed_at_once():
    problems = refusal({
        "profile": "cpu",
        "rollout": {"battles": 9, "shards": 2},
        "ppo": {"minibatch_size": 2048, "batch_size": 1024},
        "net": {"norm_groups": 5},
        "services": {"ladder_port": 5555},
    })
    assert problems == [
        "rollout.battles: 9 battles do not split evenly into rollout.shards=2; make battles a multiple of shards",
        "ppo.minibatch_size: 2048 is larger than ppo.batch_size=1024",
        "net.norm_groups: 5 does not divide net.channels=32",
        "services.ladder_port: port 5555 is also services.learner_port",
    ]


def test_more_cross_field_rules():
    assert refusal({"profile": "tiny", "ppo": {"batch_size": 256}}) == [
        "ppo.batch_size: 256 is larger than ppo.timesteps_per_iteration=192; an iteration would hold no whole batch"
    ]
    assert refusal({"profile": "tiny", "ladder": {"mix": [0, 0, 0]}}) == [
        "ladder.mix: [0.0, 0.0, 0.0] sums to zero; give at least one role a share"
    ]
    assert refusal({"profile": "tiny", "ladder": {"scripted_opponents": []}}) == [
        "ladder.scripted_opponents: empty while ladder.mix gives scripted battles a share"
    ]
    # ... but an empty list is fine when no battle is scripted.
    assert load_config({"profile": "tiny", "ladder": {"scripted_opponents": [], "mix": [1, 0, 0]}}).ladder.mix == (1.0, 0.0, 0.0)
    assert refusal({"profile": "tiny", "run_name": "a/b"}) == ["run_name: 'a/b' is not a usable folder name"]
    assert refusal({"profile": "tiny", "run_name": ".."}) == ["run_name: '..' is not a usable folder name"]
    assert refusal({"profile": "tiny", "format_version": 2}) == [
        f"format_version: 2 is not {FORMAT_VERSION}, the one this build reads"
    ]
    # Port 0 (disabled) may repeat.
    cfg = load_config({"profile": "tiny", "services": {"learner_metrics_port": 0, "ladder_metrics_port": 0}})
    assert check_consistency(cfg) == []


def test_check_consistency_on_a_struct_built_in_code():
    cfg = msgspec.structs.replace(profile("tiny"), profile="nope")
    assert check_consistency(cfg) == [
        "profile: unknown profile 'nope'; choose one of cpu, laptop, workstation, many_core, tiny"
    ]


def test_malformed_json_and_missing_file_and_non_object(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"ppo": ')
    problems = refusal(str(bad))
    assert len(problems) == 1
    assert problems[0].startswith(f"config {bad}: not valid JSON (Expecting value: line 1 column 9")
    problems = refusal('{"profile": "tiny",}')
    assert len(problems) == 1 and "not valid JSON" in problems[0]
    missing = tmp_path / "missing.json"
    assert refusal(str(missing)) == [f"config file {missing}: No such file or directory"]
    arr = tmp_path / "list.json"
    arr.write_text("[1, 2]")
    assert refusal(str(arr)) == ["config: expected a JSON object at the top, got list"]


# ----------------------------------------------------------------------------- dump, hash, differences


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_dump_round_trips(name, tmp_path):
    cfg = load_config({"profile": name, "master_seed": 11, "run_name": "rt", "ppo": {"lr_actor": 3.3e-4},
                       "ladder": {"mix": [0.25, 0.25, 0.5]}})
    text = dump_config(cfg)
    assert text.endswith(b"\n") and text.startswith(b'{\n  "format_version": 1,\n  "profile": ')
    path = tmp_path / "cfg.json"
    path.write_bytes(text)
    assert load_config(str(path)) == cfg
    assert load_config(text.decode()) == cfg
    assert load_config(json.loads(text)) == cfg
    assert dump_config(load_config(str(path))) == text
    assert config_hash(load_config(str(path))) == config_hash(cfg)


def test_config_hash_changes_with_any_leaf():
    a = profile("tiny")
    b = load_config({"profile": "tiny", "advantage": {"gamma": 0.99}})
    assert config_hash(a) != config_hash(b)
    assert len(config_hash(a)) == 64


def test_config_differences_gives_dotted_paths():
    a = profile("tiny")
    b = load_config({"profile": "tiny", "ppo": {"clip_range": 0.3}, "ladder": {"mix": [1, 0, 0]},
                     "services": {"host": "0.0.0.0"}, "master_seed": 5})
    assert config_differences(a, b) == {
        "master_seed": (20260921, 5),
        "ppo.clip_range": (0.2, 0.3),
        "ladder.mix": ((0.5, 0.35, 0.15), (1.0, 0.0, 0.0)),
        "services.host": ("127.0.0.1", "0.0.0.0"),
    }
    assert config_differences(a, a) == {}
    # Builtins work too, and a key present on one side only is a difference.
    assert config_differences({"x": {"y": 1}}, {"x": {"y": 1, "z": 2}}) == {"x.z": (None, 2)}


def test_loading_a_document_that_names_its_profile_does_not_import_torch():
    # Regression: load_config used to evaluate default_profile_name() (which imports torch to ask
    # for a GPU) even when the document named its profile.
    code = (
        "import sys; from shared.config import load_config; "
        "cfg = load_config({'profile': 'tiny', 'master_seed': 3}); "
        "assert cfg.master_seed == 3; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=pathlib.Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_dqn_settings_the_wired_learner_cannot_run_are_refused_at_load():
    problems = refusal({"profile": "tiny", "learner": {"algorithm": "dqn"}, "rollout": {"overlap": True},
                        "determinism": {"tier": "throughput"},
                        "dqn": {"behaviour": "thompson", "epsilon_start": 0.1, "epsilon_floor": 0.2}})
    assert the_one(problems, "dqn.behaviour") == (
        'dqn.behaviour: "thompson" draws one of the ensemble\'s heads per episode; with dqn.heads 1 there is nothing '
        'to draw (it would be epsilon_greedy): set dqn.heads 2 or more, or dqn.behaviour "epsilon_greedy"')
    assert "rollout.overlap: the DQN learner does not overlap collection with its update; set it false" in problems
    assert "dqn.epsilon_floor: 0.2 is above dqn.epsilon_start=0.1" in problems
    assert load_config({"profile": "tiny", "learner": {"algorithm": "dqn"}}).learner.algorithm == "dqn"
    k_heads = load_config({"profile": "tiny", "learner": {"algorithm": "dqn"},
                           "dqn": {"heads": 2, "dueling": True, "behaviour": "thompson"}}).dqn
    assert (k_heads.heads, k_heads.dueling, k_heads.behaviour) == (2, True, "thompson")  # no longer refused
    with pytest.raises(ConfigError, match="learner.algorithm: Invalid enum value 'sac'"):
        load_config({"profile": "tiny", "learner": {"algorithm": "sac"}})


def test_dqn_settings_leave_a_ppo_run_identity_alone():
    from shared.identity import config_digests, digest

    cfg = profile("tiny")
    before = digest({"ppo": cfg.ppo, "advantage": cfg.advantage, "autocast": cfg.net.autocast})
    assert config_digests(cfg)["algo_digest"] == before  # the digest every PPO run had before DQN existed
    changed = msgspec.structs.replace(cfg, dqn=msgspec.structs.replace(cfg.dqn, n_step=5))
    assert config_digests(changed)["algo_digest"] == before
    dqn = msgspec.structs.replace(cfg, learner=msgspec.structs.replace(cfg.learner, algorithm="dqn"))
    dqn5 = msgspec.structs.replace(dqn, dqn=changed.dqn)
    assert len({before, config_digests(dqn)["algo_digest"], config_digests(dqn5)["algo_digest"]}) == 3


def test_up_algorithm_sets_the_learner():
    from royalefleet import cli

    parser = cli.build_parser()
    assert cli._load(parser.parse_args(["up", "--profile", "tiny", "--algorithm", "dqn"])).learner.algorithm == "dqn"
    assert cli._load(parser.parse_args(["up", "--profile", "tiny"])).learner.algorithm == "ppo"
