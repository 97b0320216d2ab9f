"""Frame stacking (``obs.frame_stack``): the config refuses bad values by name, the identity and
the arch digest record k, the learner's history gathers each cell's previous rows (zeros before
an episode's first decision, the exact previous planes at decision j, across an iteration
boundary and its checkpoint, reset at an episode start), and the network's input holds them."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
import torch

from services.learner.frame_history import FrameHistory, make_frame_history
from services.learner.rectangle import Rectangle
from shared.config import ConfigError, RunConfig, load_config
from shared.identity import config_digests, digest, _without
from shared.messages import GROUP_FROZEN, GROUP_LEARNER, GROUP_SCRIPTED
from shared.nn.frame_stack import FILL, SeatHistory, history_channels, history_planes
from shared.nn.model import ActorCritic, board_input_channels
from tests.shared.nn.test_model import SPEC as SPEC1, TINY

ROW_BYTES = 4


# ----------------------------------------------------------------------------- config and identity


@pytest.mark.parametrize("bad, said", [(0, "Expected `int` >= 1 (got 0)"), (-2, "Expected `int` >= 1 (got -2)"),
                                       (True, "Expected `int`, got `bool` (got True)"),
                                       (17, "Expected `int` <= 16 (got 17)"),
                                       (2.0, "Expected `int`, got `float` (got 2.0)")])
def test_a_bad_frame_stack_is_refused_naming_the_field_and_the_value(bad, said):
    with pytest.raises(ConfigError) as info:
        load_config({"obs": {"frame_stack": bad}})
    assert info.value.problems == [f"obs.frame_stack: {said}"]


def test_frame_stack_is_in_the_identity_and_the_arch_digest_and_k1_keeps_the_old_digest():
    one, two = load_config({"profile": "cpu"}), load_config({"profile": "cpu", "obs": {"frame_stack": 2}})
    # the net's fields as they were before net.slot_index, which enters the digest only when on,
    # and net.card_id_embed, which enters it only when not its default
    assert config_digests(one)["arch_digest"] == digest(_without(one.net, "device", "autocast", "slot_index",
                                                                 "card_id_embed"))
    assert config_digests(two)["arch_digest"] != config_digests(one)["arch_digest"]
    assert config_digests(two)["arch_digest"] == digest(_without(two.net, "device", "autocast", "slot_index",
                                                                 "card_id_embed") | {"frame_stack": 2})
    assert {k for k in config_digests(one) if config_digests(one)[k] != config_digests(two)[k]} == {"arch_digest"}


# ----------------------------------------------------------------------------- the learner's history


def rect_with(T: int, R: int) -> Rectangle:
    return Rectangle(T, R, ROW_BYTES, ROW_BYTES)


def file_cycle(rect, fh, t, ticks, groups, ordinals, value):
    """Every slot's row t is ``value + 10 * slot`` in each byte; frozen rows via the hook."""
    R = rect.R
    slots = np.arange(R)
    group = np.asarray(groups, np.int8)
    held = group >= 0
    rows = np.repeat((value + 10 * slots[held]).astype(np.uint8)[:, None], ROW_BYTES, axis=1)
    learner, frozen, frozen_rows = rect.store_obs(t, slots, group, np.asarray(ticks, np.int32), rows)
    fh.file(t, slots, group, np.asarray(ordinals, np.int64), frozen, frozen_rows)


def byte(h, i, j):
    return int(h.rows[i, j, 0]) if h.valid[i, j] else None


def test_first_decision_is_all_fill_and_decision_j_holds_the_exact_previous_rows():
    """k = 3, two slots (a learner seat and a frozen one) of battle 7, T = 4: ticks 0, 10, 20,
    0 (a new episode at cycle 3), 10."""
    rect, fh = rect_with(4, 2), FrameHistory(3, ROW_BYTES)
    fh.begin(rect, np.array([7]))
    groups = [GROUP_LEARNER, GROUP_FROZEN]
    for t, tick, ordinal in zip(range(5), (0, 10, 20, 0, 10), (0, 0, 0, 1, 1)):
        file_cycle(rect, fh, t, [tick, tick], groups, [ordinal, ordinal], value=100 + t)
    # the frozen seat's rows are kept in the rectangle for its history, never trained
    assert rect.rows[2, 1, 0] == 112 and not rect.trainable()[:, 1].any()
    h = fh.history(np.repeat(np.arange(5), 2), np.tile([0, 1], 5))
    got = [[byte(h, i, j) for j in range(2)] for i in range(10)]
    assert got == [  # (cycle, slot) in order; per cell [decision t - 1, decision t - 2]
        [None, None], [None, None],  # cycle 0: the episode's first decision
        [100, None], [110, None],    # cycle 1: decision 0's row, then nothing
        [101, 100], [111, 110],      # cycle 2: decisions 1 and 0
        [None, None], [None, None],  # cycle 3: tick 0, a new episode: reset
        [103, None], [113, None],    # cycle 4: the new episode's decision 0 only
    ]
    assert not h.rows[~h.valid].any()  # a missing frame is zeros


def test_the_history_crosses_the_boundary_and_the_checkpoint_and_a_new_episode_does_not_take_it():
    rect, fh = rect_with(2, 4), FrameHistory(3, ROW_BYTES)
    fh.begin(rect, np.array([3, 5]))
    groups = [GROUP_LEARNER, GROUP_SCRIPTED, GROUP_LEARNER, GROUP_LEARNER]
    for t in range(3):
        file_cycle(rect, fh, t, [40 + 10 * t] * 4, groups, [2, 2, 4, 4], value=50 + t)
    fh.end()
    assert sorted(fh.carry) == [(3, 0), (5, 0), (5, 1)]  # the scripted seat has no history
    saved = fh.files()
    resumed = make_frame_history(3, ROW_BYTES)
    resumed.load(saved)
    rect2 = rect_with(2, 4)
    # after the resume battle 5 sits in slots 0-1 and battle 3 in slots 2-3; battle 5 continues
    # (same ordinal and tick), battle 3 restarted (ordinal 3, tick 0)
    resumed.begin(rect2, np.array([5, 3]))
    file_cycle(rect2, resumed, 0, [60, 60, 0, 0], [GROUP_LEARNER, GROUP_LEARNER, GROUP_LEARNER, GROUP_SCRIPTED],
               [4, 4, 3, 3], value=200)
    file_cycle(rect2, resumed, 1, [70, 70, 10, 10], [GROUP_LEARNER, GROUP_LEARNER, GROUP_LEARNER, GROUP_SCRIPTED],
               [4, 4, 3, 3], value=210)
    h0 = resumed.at(0, np.array([0, 1, 2]))
    assert [[byte(h0, i, j) for j in range(2)] for i in range(3)] == [[71, 70], [81, 80], [None, None]]
    h1 = resumed.at(1, np.array([0, 1, 2]))
    assert [[byte(h1, i, j) for j in range(2)] for i in range(3)] == [[200, 71], [210, 81], [220, None]]
    # a carry of another episode (ordinal) is not taken
    other = make_frame_history(3, ROW_BYTES)
    other.load(saved)
    rect3 = rect_with(1, 2)
    other.begin(rect3, np.array([3]))
    file_cycle(rect3, other, 0, [60, 60], [GROUP_LEARNER, GROUP_SCRIPTED], [9, 9], value=1)
    assert not other.at(0, np.array([0])).valid.any()
    with pytest.raises(ValueError, match="a carry of frame_stack 3 and 4 B rows; this run stacks 2 frames"):
        FrameHistory(2, ROW_BYTES).load(saved)


def test_a_seat_history_holds_the_last_rows_newest_first():
    s = SeatHistory(3, 2)
    assert not s.history().valid.any()
    for v in (1, 2, 3):
        s.push(np.full(2, v, np.uint8))
    h = s.history()
    assert h.rows[0, :, 0].tolist() == [3, 2] and h.valid.tolist() == [[True, True]]
    s.reset()
    assert not s.history().valid.any()


# ----------------------------------------------------------------------------- the network's input


def test_the_stacked_input_is_the_previous_planes_and_zeros_where_missing():
    spec = msgspec.structs.replace(SPEC1, frame_stack=3)
    c, p = len(spec.plane_names), spec.hand_slots
    assert history_channels(spec) == 2 * (c + p)
    assert board_input_channels(spec, TINY) == 3 * (c + p) + 2 + TINY.vector_embed
    g = torch.Generator().manual_seed(0)
    b, h, w = 2, spec.height, spec.width
    expanded = {"spatial": torch.rand(b * 2, c, h, w, generator=g),
                "mask": torch.rand(b * 2, spec.n_actions, generator=g) < 0.3}
    valid = torch.tensor([[True, False], [True, True]])
    planes = history_planes(expanded, valid, spec)
    assert planes.shape == (b, 2 * (c + p), h, w)
    frame = lambda i: torch.cat([expanded["spatial"][i], expanded["mask"][i, 1:].reshape(p, h, w).float()])  # noqa: E731
    assert torch.equal(planes[0, : c + p], frame(0))
    assert torch.equal(planes[0, c + p :], torch.full((c + p, h, w), FILL))
    assert torch.equal(planes[1, : c + p], frame(2)) and torch.equal(planes[1, c + p :], frame(3))
    # the model takes it: the history moves the logits, the k = 1 model has no such input
    model = ActorCritic(spec, TINY, seed=1)
    obs = {"spatial": torch.rand(b, c, h, w, generator=g), "vector": torch.rand(b, spec.vector_size, generator=g),
           "mask": torch.ones(b, spec.n_actions, dtype=torch.bool), "history": planes}
    other = dict(obs, history=torch.zeros_like(planes))
    assert not torch.equal(model.actor_logits(obs), model.actor_logits(other))
    assert not torch.equal(model.value(obs), model.value(other))


# ----------------------------------------------------------------------------- an evaluation seat


class _Spy:
    """A policy that records what it was asked (frame_stack 2) and plays the no-op."""

    frame_stack = 2

    def __init__(self):
        self.calls = []

    def act(self, rows, n_legal, uniforms, history=None):
        self.calls.append((rows.copy(), history))
        return np.zeros(len(rows), np.int64), np.zeros(len(rows), np.float32)


class _Codec:
    row_bytes = 3

    def pack_many(self, observations):
        return np.array([[o["v"]] * 3 for o in observations], np.uint8), 0, 0


def test_an_evaluation_seat_keeps_its_own_history_from_the_games_first_decision():
    from services.evaluator.players import SnapshotPlayer, StackedSeat

    def obs(v, n_legal):
        mask = np.zeros(5, np.int8)
        mask[:n_legal] = 1
        return {"v": v, "action_mask": mask}

    spy = _Spy()
    player = SnapshotPlayer("snap:x", spy, _Codec())
    seat, other = player.for_game(), player.for_game()
    assert isinstance(seat, StackedSeat) and seat is not other
    rng = np.random.default_rng(0)
    seat.act(obs(7, 3), rng)  # the game's first decision: no history
    seat.act(obs(8, 1), rng)  # forced: no forward, but its row is history
    other.act(obs(50, 2), rng)  # the other seat's history is its own
    seat.act(obs(9, 2), rng)
    (r0, h0), (_, h_other), (r2, h2) = spy.calls
    assert not h0.valid.any() and not h0.rows.any() and not h_other.valid.any()
    assert h2.valid.tolist() == [[True]] and h2.rows[0, 0].tolist() == [8, 8, 8] and r2[0].tolist() == [9, 9, 9]
    spy.frame_stack = 1
    assert player.for_game() is player  # without stacking a game seats the player itself


# ----------------------------------------------------------------------------- a real episode, end to end


@pytest.mark.slow
def test_the_policys_stacked_input_in_a_real_episode_is_zeros_then_the_exact_previous_planes():
    """Real rows of one battle (both seats learner-held), filed cycle by cycle as the collector
    files them, k = 3: the Policy's ``history`` input is all zeros at the episode's first
    decision, the previous decision's exact planes and zeros at the second, and decisions j - 1
    and j - 2 from the third on (the codec's own expansion of the stored rows)."""
    from royalegym import RandomLegalOpponent

    from shared.config import EnvConfig
    from shared.envs import build_env
    from shared.nn.policy import Policy
    from shared.preflight import run_preflight

    pf = run_preflight(EnvConfig(), 3, frame_stack=3)
    assert pf.spec.frame_stack == 3
    model = ActorCritic(pf.spec, TINY, seed=2)
    policy = Policy(model, pf.codec, torch.device("cpu"))
    env, bot, rng = build_env(EnvConfig()), RandomLegalOpponent(0.5), np.random.default_rng(4)
    T = 14
    rect = Rectangle(T, 2, pf.codec.row_bytes, pf.codec.omask)
    fh = FrameHistory(3, pf.codec.row_bytes)
    fh.begin(rect, np.array([0]))
    obs, _ = env.reset(seed=9)
    tick, c, hw = 0, len(pf.spec.plane_names), (pf.spec.height, pf.spec.width)
    for t in range(T + 1):
        rows, _, _ = pf.codec.pack_many([obs["blue"], obs["red"]])
        group = np.array([GROUP_LEARNER, GROUP_LEARNER], np.int8)
        _, frozen, frozen_rows = rect.store_obs(t, np.arange(2), group, np.array([tick, tick], np.int32), rows)
        fh.file(t, np.arange(2), group, np.array([0, 0]), frozen, frozen_rows)
        stacked = policy.obs_batch(rect.rows[t], fh.at(t, np.arange(2)))["history"]
        assert stacked.shape == (2, 2 * (c + pf.spec.hand_slots), *hw)
        for j in (1, 2):
            got = stacked[:, (j - 1) * (c + pf.spec.hand_slots) : j * (c + pf.spec.hand_slots)]
            if t - j < 0:
                assert torch.equal(got, torch.zeros_like(got)), (t, j)
            else:
                u = pf.codec.unpack(rect.rows[t - j])
                want = np.concatenate([u["spatial"], u["mask"][:, 1:].reshape(2, pf.spec.hand_slots, *hw)], axis=1)
                assert np.array_equal(got.numpy(), want), (t, j)
        obs, _, term, trunc, info = env.step({s: bot.act(obs[s], obs[s]["action_mask"], rng) for s in ("blue", "red")})
        tick = int(info["blue"]["tick"])
        assert not (term["blue"] or trunc["blue"])
