"""Ability buttons (``env.ability_buttons``): the action space grows by the engine's button
count, the actor's button head scores the actions after the grid, the codec and both wire
codecs carry the extra mask bits, a press reaches the engine as its button command, and the
learner's row counts presses.

Sizes: RoyaleSim reports ``ability_button_count == 3``; the grid is 1 + 4 x 32 x 18 = 2305
actions, so the space is 2308 and button k is action 2305 + k.
"""

from __future__ import annotations

import json

import msgspec
import numpy as np
import pytest
import torch

from shared.codec import Codec, RowCompressor, RowDecompressor, compress_round, decompress_round
from shared.config import EnvConfig, NetConfig
from shared.envs import ObsSpec, build_env, obs_spec
from shared.identity import action_digest_of, config_digests, digest
from shared.nn.distribution import MaskedCategorical
from shared.nn.model import ActorCritic, legal_fraction, mask_planes
from tests.shared.nn.test_model import PLANES, SPEC as GRID_SPEC, TINY, VECTOR_FIELDS

CHAMPION_DECK = ("ArcherQueen", "Archer", "Giant", "Minions", "Fireball", "Zap", "Cannon", "Musketeer")
GRID = 1 + 4 * 32 * 18  # 2305
SPEC = msgspec.structs.replace(GRID_SPEC, n_actions=GRID + 3, n_buttons=3)


@pytest.fixture(scope="module")
def button_env():
    return build_env(EnvConfig(ability_buttons=True, deck=CHAMPION_DECK))


# ----------------------------------------------------------------------------- the layout


def test_the_spec_reads_the_engines_buttons_and_a_spec_without_them_keeps_its_digest(button_env):
    spec = obs_spec(button_env)
    assert (spec.n_buttons, spec.n_grid_actions, spec.n_actions) == (3, GRID, GRID + 3)
    assert spec.n_buttons == button_env.engine.ability_button_count
    plain = obs_spec(build_env(EnvConfig()))
    assert (plain.n_buttons, plain.n_actions) == (0, GRID)
    # n_buttons is not encoded when 0: the digest is the one of the fields that existed before
    # (nor frame_stack at 1, nor the card-id fields at 0)
    fields = {f: getattr(plain, f) for f in plain.__struct_fields__
              if f not in ("n_buttons", "frame_stack", "id_planes", "id_vocab")}
    assert b"n_buttons" not in msgspec.json.encode(plain)
    assert plain.digest() == __import__("hashlib").sha256(msgspec.json.encode(fields)).hexdigest()[:16]


def test_buttons_are_in_the_action_digest_and_the_env_digest_records_the_switch_only_when_on(button_env):
    plain = obs_spec(build_env(EnvConfig()))
    old = digest({"n_actions": GRID, "hand_slots": 4, "height": 32, "width": 18, "decision_ms": 500,
                  "parser": "TileActionParser"})
    assert action_digest_of(plain) == old
    assert action_digest_of(obs_spec(button_env)) != old
    from shared.config import RunConfig

    on = RunConfig(env=EnvConfig(ability_buttons=True))
    off = RunConfig()
    assert config_digests(on)["env_spec_digest"] != config_digests(off)["env_spec_digest"]
    # off (and no component or curriculum set), the digest is the one of the env fields that
    # existed before the switch
    before = ("max_steps", "decision_ms", "reward", "reward_weights", "deck")
    old_fields = {k: v for k, v in msgspec.to_builtins(off.env).items() if k in before}
    assert config_digests(off)["env_spec_digest"] == digest(old_fields)


def test_a_parser_the_grid_does_not_explain_is_refused_by_name(button_env):
    class Odd:
        n_buttons = 2  # the parser says 2, the space holds 3 after the grid

    env = build_env(EnvConfig(ability_buttons=True))
    env.action_parser = Odd()
    with pytest.raises(RuntimeError, match="2308 is not 1 \\+ 4 hand slots x 32x18 tiles \\+ 2 ability buttons"):
        obs_spec(env)


# ----------------------------------------------------------------------------- the network


def obs_batch(b, seed=0, ready=(True, False, True)):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(b, SPEC.n_actions, generator=g) < 0.2
    mask[:, 0] = True
    mask[:, GRID:] = torch.tensor(ready)
    return {"spatial": torch.rand(b, len(PLANES), 32, 18, generator=g),
            "vector": torch.rand(b, SPEC.vector_size, generator=g), "mask": mask}


def test_the_button_head_scores_the_actions_after_the_grid():
    model = ActorCritic(SPEC, TINY, seed=3)
    obs = obs_batch(4)
    logits = model.actor_logits(obs)
    assert logits.shape == (4, GRID + 3) and logits.dtype == torch.float32
    head = model.actor.button_head
    assert (head.in_features, head.out_features) == (2 * TINY.channels + 3, 3)
    # the button logits are the head over (pooled tiles, readiness): flipping readiness moves only them
    flipped = dict(obs, mask=obs["mask"].clone())
    flipped["mask"][:, GRID:] = ~flipped["mask"][:, GRID:]
    other = model.actor_logits(flipped)
    assert torch.equal(other[:, :GRID], logits[:, :GRID])
    assert not torch.equal(other[:, GRID:], logits[:, GRID:])
    # the grid planes ignore the button bits
    assert mask_planes(obs["mask"], SPEC).shape == (4, 4, 32, 18)
    assert torch.equal(legal_fraction(obs["mask"], SPEC), obs["mask"][:, 1:GRID].reshape(4, 4, -1).float().mean(-1))
    # a ready button has probability > 0, an unready one exactly 0
    dist = MaskedCategorical(logits, obs["mask"])
    p = [dist.log_prob(torch.full((4,), GRID + k)).exp() for k in range(3)]
    assert (p[0] > 0).all() and (p[1] == 0).all() and (p[2] > 0).all()


def test_a_network_without_buttons_has_no_button_head_and_the_actor_draws_the_same_grid_weights():
    model = ActorCritic(GRID_SPEC, TINY, seed=7)
    assert model.actor.button_head is None
    assert not any("button" in name for name, _ in model.named_parameters())
    # the button head is the actor's last module: the actor's grid weights are the same draw with buttons
    with_buttons = dict(ActorCritic(SPEC, TINY, seed=7).actor.named_parameters())
    for name, p in model.actor.named_parameters():
        assert torch.equal(p, with_buttons[name]), name


# ----------------------------------------------------------------------------- the codec and the wire


def test_both_wire_codecs_carry_the_button_bits(button_env):
    spec = obs_spec(button_env)
    from shared.preflight import run_preflight

    pf = run_preflight(EnvConfig(ability_buttons=True, deck=CHAMPION_DECK), master_seed=5)
    assert pf.table.n_actions == GRID + 3
    codec = Codec(pf.table, pf.statics)
    obs, _ = button_env.reset(seed=2)
    rng = np.random.default_rng(0)
    observations = []
    for k in range(8):  # the real observation with each pattern of button bits written into its mask
        o = dict(obs["blue"])
        mask = o["action_mask"].copy()
        mask[GRID:] = [(k >> j) & 1 for j in range(3)]
        mask[1:GRID] = rng.random(GRID - 1) < 0.3
        o["action_mask"] = mask
        observations.append(o)
    rows, _, _ = codec.pack_many(observations)
    want = np.stack([o["action_mask"] != 0 for o in observations])
    assert np.array_equal(codec.unpack(rows)["mask"], want)
    assert codec.mask_bytes == (GRID + 3 + 7) // 8 == 289
    arrays = {"rows": rows, "final_rows": rows[:0], "group": np.zeros(8, np.int8),
              "final_slots": np.zeros(0, np.int64)}
    sent = compress_round(arrays, RowCompressor())
    back = decompress_round(sent, RowDecompressor(codec.row_bytes, 1 << 24))
    assert np.array_equal(back["rows"], rows)  # codec 2: byte for byte, mask bits included
    assert np.array_equal(decompress_round(arrays, None)["rows"], rows)  # codec 1: as they are
    from shared.nn.rows import DeviceRows

    assert torch.equal(DeviceRows(codec, "cpu").expand(torch.from_numpy(rows))["mask"], torch.from_numpy(want))
    assert spec.n_actions == pf.spec.n_actions


# ----------------------------------------------------------------------------- a press in a real battle


@pytest.mark.slow
def test_a_button_press_is_decoded_to_the_engines_button_command(button_env):
    """Seeded random-legal play of the champion deck until a seat's button is ready, then the
    press: the parser makes it ``DeployCommand(hand_slot=4 + k)``, the engine takes it (status
    0) and its readiness bit (the observation's ``ability_ready``) is the mask's tail."""
    from royalegym.protocol import HAND_SIZE

    env, spec = button_env, obs_spec(button_env)
    obs, _ = env.reset(seed=1)
    rng = np.random.default_rng(0)
    for _ in range(3000):
        for team, seat in enumerate(("blue", "red")):
            mask = obs[seat]["action_mask"]
            assert np.array_equal(obs[seat]["ability_ready"], mask[GRID:])
            ready = np.flatnonzero(mask[GRID:])
            if len(ready):
                k = int(ready[0])
                cmd = env.action_parser.parse(GRID + k, env.engine.state(), team)
                assert (cmd.team, cmd.hand_slot) == (team, HAND_SIZE + k)
                assert spec.is_button(GRID + k) and not spec.is_button(GRID - 1)
                elixir = env.engine.state().players[team].elixir_milli
                obs, _, _, _, info = env.step({seat: GRID + k})
                assert info[seat]["deploy_status"] == 0
                assert env.engine.state().players[team].elixir_milli < elixir + 1000  # paid for (regen < 1 elixir)
                return
        acts = {}
        for seat in ("blue", "red"):
            legal = np.flatnonzero(obs[seat]["action_mask"][:GRID])
            acts[seat] = int(rng.choice(legal)) if rng.random() < 0.5 else 0
        obs, _, term, trunc, _ = env.step(acts)
        if term["blue"] or trunc["blue"]:
            obs, _ = env.reset()
    pytest.fail("no ability button became ready in 3000 decisions of champion-deck play")


# ----------------------------------------------------------------------------- the metric row


def test_button_presses_are_counted_over_the_learners_acted_cells():
    from services.learner.measures import button_metrics
    from services.learner.rectangle import Rectangle

    rect = Rectangle(3, 4, 8, 4)
    rect.acted[:] = True
    rect.acted[2, 3] = False  # not acted: a press there is not the learner's
    rect.step_valid[:] = True
    rect.actions[:] = [[0, GRID, GRID + 2, 5], [GRID + 1, 0, 7, GRID], [GRID, GRID - 1, 0, GRID + 2]]
    rect.deploy_status[:] = 0
    rect.deploy_status[1, 0] = 15  # ABILITY_NOT_READY
    assert button_metrics(rect, SPEC) == {"policy/button_presses": 5, "policy/button_presses_accepted": 4}
    assert button_metrics(rect, GRID_SPEC) == {}


# ----------------------------------------------------------------------------- a real run


@pytest.mark.slow
def test_an_ability_card_run_with_frame_stacking_trains_plays_the_pool_and_replays(tmp_path):
    """Two iterations of the tiny stack with the champion deck, the buttons on and two frames
    stacked (obs.frame_stack, shared/nn/frame_stack.py), a pool candidate admitted after the
    first (so iteration 2 has frozen seats played by a snapshot with the button head and its
    own history): both rows carry the press counts, and a learner episode against the snapshot
    replays to its logged records, every inferred decision's action of both seats included (the
    replay rebuilds each seat's history from the episode's start, so the learner's history for
    the learner seat and for the frozen seat must be exactly that)."""
    from royalefleet.cli import main
    from services.ladder.results import ResultLog
    from tests.stack import run_to_exit, tiny_config

    cfg = tiny_config(tmp_path / "runs", env={"max_steps": 12, "ability_buttons": True, "deck": list(CHAMPION_DECK)},
                      obs={"frame_stack": 2}, ladder={"pool": {"candidate_every_env_steps": 100}},
                      checkpoint={"every_iterations": 1})
    up, code = run_to_exit(cfg, "--rollouts", "1", "--iterations", "2", timeout=300)
    assert code == 0, up.tail()
    rows = [json.loads(s) for s in (tmp_path / "runs" / "default" / "metrics.jsonl").read_text().splitlines()]
    assert [r["run/iteration"] for r in rows] == [1, 2]
    for r in rows:
        assert isinstance(r["policy/button_presses"], int) and 0 <= r["policy/button_presses_accepted"] <= r["policy/button_presses"]
    lines = ResultLog.for_run(tmp_path / "runs", "default").read().lines
    assert any(line.record.opponent.startswith("snap:") for line in lines)  # a frozen seat played
    # a learner seat against a frozen one: the replay plays both again, each with its history
    n = next(i for i, line in enumerate(lines, start=1)
             if line.record.opponent.startswith("snap:") and line.record.player == "learner")
    argv = ["replay", "default", str(n), "--config", str(cfg), "--per-decision", "--out", str(tmp_path / "out")]
    assert main(argv) == 0


def test_ability_buttons_with_a_user_action_parser_is_refused_naming_both_fields():
    from shared.config import ConfigError, load_config

    with pytest.raises(ConfigError) as exc:
        load_config({"profile": "tiny", "env": {"ability_buttons": True,
                                                "action_parser": {"cls": "royalegym.TileActionParser"}}})
    assert "env.ability_buttons: applies to the default TileActionParser only; with env.action_parser set" in str(exc.value)
