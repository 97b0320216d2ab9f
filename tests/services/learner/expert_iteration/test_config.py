"""Expert iteration's config: what it refuses, and that it is its own identity."""

from __future__ import annotations

from types import SimpleNamespace

import msgspec
import pytest

from services.learner.expert_iteration.learner import ExpertIterationAlgorithm
from shared.config import ConfigError, load_config
from shared.identity import config_digests


def cfg_of(**over):
    return load_config({"profile": "tiny", "learner": {"algorithm": "expert_iteration"}, **over})


def test_the_root_value_target_needs_critic_scores_and_says_the_fix():
    with pytest.raises(ConfigError, match='alphazero.leaf_value "critic"; set that, or expert_iteration.value_target '
                                          '"return"'):
        cfg_of()
    assert cfg_of(expert_iteration={"value_target": "return"}).expert_iteration.value_target == "return"
    assert cfg_of(alphazero={"leaf_value": "critic"}).learner.algorithm == "expert_iteration"


def test_overlap_is_refused_as_under_alphazero():
    with pytest.raises(ConfigError, match="rollout.overlap: the AlphaZero learner does not overlap"):
        cfg_of(alphazero={"leaf_value": "critic"}, rollout={"overlap": True}, determinism={"tier": "throughput"})


def test_its_section_moves_the_algo_digest_only_when_it_is_the_algorithm():
    base = cfg_of(alphazero={"leaf_value": "critic"})
    other = cfg_of(alphazero={"leaf_value": "critic"}, expert_iteration={"replay_rows": 100})
    assert config_digests(base)["algo_digest"] != config_digests(other)["algo_digest"]
    ppo = load_config({"profile": "tiny"})
    ppo2 = load_config({"profile": "tiny", "expert_iteration": {"replay_rows": 100}})
    assert config_digests(ppo)["algo_digest"] == config_digests(ppo2)["algo_digest"]


def test_extension_sections_that_hook_into_the_ppo_update_are_refused_by_name():
    cfg = msgspec.structs.replace(cfg_of(alphazero={"leaf_value": "critic"}),
                                  extensions={"imitation": {}, "warm_start": {}})
    parts = SimpleNamespace(cfg=cfg, model=None, pf=SimpleNamespace(codec=None), device=None, say=print)
    with pytest.raises(SystemExit, match=r"takes the extension sections \['warm_start'\]; \['imitation'\] hook into"):
        ExpertIterationAlgorithm(parts)


def test_replay_refuses_a_learner_seat_of_an_expert_iteration_run_by_name(tmp_path):
    from royalefleet.replay_training import NotReplayable, plan
    from shared.messages import EpisodeProvenance, EpisodeRecord

    rec = EpisodeRecord(battle=0, ordinal=0, seat="red", role="scripted", player="learner", opponent="scripted:noop",
                        outcome=1, truncated=False, episode_steps=3, episode_ticks=30, own_crowns=0, enemy_crowns=0,
                        own_tower_hp_frac=1.0, enemy_tower_hp_frac=1.0, elixir_leak_steps=0, elixir_count_exact=True,
                        cards_played=0, undiscounted_return=0.0, iteration=1, provenance=EpisodeProvenance(spans=[]))
    with pytest.raises(NotReplayable, match=r"red \(learner\): its choice decisions played the rollouts' search "
                                            r"\(learner.algorithm expert_iteration\)"):
        plan(cfg_of(alphazero={"leaf_value": "critic"}), [SimpleNamespace(record=rec)], rec, tmp_path, None)
