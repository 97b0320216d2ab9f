"""The generation the rollouts' prior is: switched only on a promotion by the ladder's gate,
kept in the checkpoint."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import torch

from services.learner.expert_iteration.generations import Generations
from tests.services.learner.rig import _model, tiny_config


def status(champion, gates_passed):
    return SimpleNamespace(champion=champion, gates_passed=gates_passed)


def test_only_a_champion_reached_through_a_passed_gate_switches_the_generation():
    g = Generations()
    steps = [
        (None, None),                  # the ladder did not answer
        (status(None, 0), None),       # no champion yet
        (status("snap:a", 0), None),   # the run's first snapshot, admitted free: no gate passed
        (status("snap:a", 0), None),   # a candidate discarded: the champion stays
        (status("snap:b", 1), "snap:b"),  # promoted by a gate
        (status("snap:b", 1), None),   # seen again: nothing new
        (None, None),                  # the ladder silent: the last status stands
        (status("snap:d", 3), "snap:d"),  # two promotions between two looks: the newest champion, once
    ]
    numbers = []
    for st, expected in steps:
        g.observe(st)
        assert g.due() == expected
        if expected:
            g.switched(expected)
        numbers.append(g.number)
    assert numbers == [0, 0, 0, 0, 1, 1, 1, 2] and g.champion == "snap:d" and g.gates_at_switch == 3


def params(module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.state_dict().values()]


def same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_the_rollouts_prior_is_the_frozen_generation_until_the_gate_promotes_and_survives_a_checkpoint(tmp_path):
    cfg = tiny_config(learner={"algorithm": "expert_iteration"}, alphazero={"leaf_value": "critic"})
    built = _model(cfg, str(tmp_path))
    alg, model = built["algorithm"], built["model"]
    start = params(model)
    behaviour = alg.behaviour(1, built["policy"])
    assert behaviour.model is alg.generation_model and same(params(behaviour.model), start)
    with torch.no_grad():  # the network trains: the generation does not move
        for p in model.parameters():
            p.add_(0.25)
    champion_actor = copy.deepcopy(model.actor)
    with torch.no_grad():
        for p in champion_actor.parameters():
            p.mul_(-1.0)
    fetched = []

    def get(sid):
        fetched.append(sid)
        return SimpleNamespace(model=SimpleNamespace(actor=champion_actor))

    frozen = SimpleNamespace(get=get)
    ladder = SimpleNamespace(last=status("snap:0123456789abcdef", 0))
    parts = SimpleNamespace(frozen=frozen, pool=SimpleNamespace(status=ladder))
    (component,) = alg.components
    component.save(parts, None)  # the capture records the ladder's status: the free first champion
    alg.behaviour(2, built["policy"])
    assert not alg.switched and alg.generations.number == 0 and fetched == []
    assert same(params(alg.generation_model), start)
    ladder.last = status("snap:fedcba9876543210", 1)  # a gate promoted a candidate
    at_promotion = component.save(parts, None)  # the capture that saw it; the switch is the next iteration's
    alg.behaviour(3, built["policy"])
    assert alg.switched and alg.generations.number == 1 and fetched == ["fedcba9876543210"]
    assert same(params(alg.generation_model.actor), params(champion_actor))
    assert same(params(alg.generation_model.critic), params(model.critic))  # the live critic at the switch
    alg.behaviour(4, built["policy"])
    assert not alg.switched and fetched == ["fedcba9876543210"]
    files = component.save(parts, None)
    # a fresh learner's algorithm restored from the checkpoint plays the same generation
    other = _model(tiny_config(learner={"algorithm": "expert_iteration"}, alphazero={"leaf_value": "critic"},
                               master_seed=7), str(tmp_path / "o"))["algorithm"]
    other.components[0].load(parts, None, files)
    assert other.generations == alg.generations
    assert same(params(other.generation_model), params(alg.generation_model))
    other.behaviour(5, built["policy"])
    assert not other.switched and other.generations.number == 1
    # a learner resumed from the checkpoint that saw the promotion switches at its first iteration,
    # as the uninterrupted one did
    resumed = _model(tiny_config(learner={"algorithm": "expert_iteration"}, alphazero={"leaf_value": "critic"},
                                 master_seed=7), str(tmp_path / "o"))["algorithm"]
    resumed.components[0].load(parts, None, at_promotion)
    assert resumed.generations.number == 0 and same(params(resumed.generation_model), start)
    resumed.model = model  # the restored live network (the generic components restore it)
    resumed.behaviour(3, built["policy"])
    assert resumed.switched and resumed.generations == alg.generations
    assert same(params(resumed.generation_model), params(alg.generation_model))
