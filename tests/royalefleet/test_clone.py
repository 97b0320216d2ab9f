"""royalefleet demos record / clone: the actor's loss, the chance level, the plan, the refusals,
and (slow) a clone of scripted:defend that agrees with it on battles it never saw."""

from __future__ import annotations

import io
import math
import re

import numpy as np
import pytest
import torch

from royalefleet.clone import describe_misses, masked_ce, miss_kinds
from royalefleet.clone_data import CloneRows, first_slot_share, load_rows, split_by_battle
from royalefleet.cmd_clone import chance_agreement
from royalefleet.cmd_demos import check_players
from services.rollout.demos import MIRROR, PlannedBattle, plan_battles
from shared.demos import DemoDigests, DemosError
from shared.scripted import SCRIPTED_PLAYERS


def test_masked_ce_is_the_mean_over_choice_rows_and_forced_rows_carry_no_gradient():
    logits = torch.zeros(3, 4, requires_grad=True)
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    actions = torch.tensor([0, 1, 3])
    forced = mask.sum(1) == 1
    loss = masked_ce(logits, mask, actions, forced)
    # uniform over the legal: -log(1/2) and -log(1/4), the forced row left out of the mean
    assert loss.item() == pytest.approx((math.log(2) + math.log(4)) / 2, abs=1e-6)
    assert loss.item() != pytest.approx((0 + math.log(2) + math.log(4)) / 3, abs=1e-3)
    loss.backward()
    assert torch.count_nonzero(logits.grad[0]) == 0
    # d/dlogit of mean CE: (p - onehot) / 2 on row 1's legal pair
    assert logits.grad[1].tolist() == pytest.approx([0.25, -0.25, 0.0, 0.0])
    all_forced = masked_ce(logits, mask, actions, torch.ones(3, dtype=torch.bool))
    assert all_forced.item() == 0.0


class _Codec:
    omask = 0


class _MaskCodec:
    """A row is its legal mask as bytes (the test's stand-in for shared.codec's packing)."""

    def unpack(self, rows):
        return {"mask": rows.astype(bool)}


class _Uniform:
    """A model whose policy is uniform over the legal actions and whose value is 0."""

    def actor_logits(self, obs):
        return torch.zeros(obs["mask"].shape)

    def value(self, obs):
        return torch.zeros(obs["mask"].shape[0])


def test_the_validation_figures_of_a_uniform_policy_are_log_n_legal_on_choice_rows():
    from royalefleet.clone import evaluate

    masks = np.zeros((4, 8), np.uint8)
    masks[0, 0] = 1  # forced: left out of CE, agreement and entropy
    masks[1, :2] = 1
    masks[2, :4] = 1
    masks[3, [0, 5, 6, 7]] = 1
    rows = CloneRows(masks, np.array([0, 0, 3, 5]), np.array([1.0, -1.0, 0.5, 0.0], np.float32),
                     np.arange(4), masks.sum(1) > 1, 0, 1, [])
    ce, agreement, value_loss, entropy = evaluate(_Uniform(), _MaskCodec(), rows, batch=3)
    # uniform over 2, 4 and 4 legal actions: entropy and CE log 2, log 4, log 4
    assert entropy == pytest.approx((math.log(2) + 2 * math.log(4)) / 3, abs=1e-6)
    assert ce == pytest.approx(entropy, abs=1e-6)
    # the uniform policy's mode is its first legal action: row 1's 0 agrees, rows 2 (3) and 3 (5) do not
    assert agreement == pytest.approx(1 / 3)
    assert value_loss == pytest.approx(0.5 * (1 + 1 + 0.25 + 0) / 4)


def test_chance_agreement_is_the_mean_of_one_over_n_legal_on_choice_rows():
    masks = np.zeros((3, 16), bool)
    masks[0, :2] = True  # 2 legal
    masks[1, :4] = True  # 4 legal
    masks[2, 0] = True  # forced: not counted
    rows = CloneRows(observations=np.packbits(masks, axis=1, bitorder="little"), actions=np.zeros(3, np.int64),
                     returns=np.zeros(3, np.float32), battles=np.arange(3), choice=np.array([True, True, False]),
                     illegal_left_out=0, forced_rows=1, manifests=[])
    assert chance_agreement(rows, _Codec()) == pytest.approx((1 / 2 + 1 / 4) / 2)


def test_first_slot_share_counts_rows_with_two_playable_slots_where_the_teacher_took_the_first():
    # 3 slots of 2x2 tiles: action 1 + slot * 4 + tile; 13 grid actions
    codec = _Codec()
    codec.table = type("T", (), {"height": 2, "width": 2})()
    masks = np.zeros((6, 13), bool)
    masks[:, 0] = True
    masks[0, [5, 9]] = True  # slots 1 and 2 playable, teacher plays slot 1 (the first): counted, first
    masks[1, [2, 6]] = True  # slots 0 and 1, teacher plays slot 1: counted, not first
    masks[2, [3, 4, 12]] = True  # slots 0 (two tiles) and 2, teacher plays slot 0's tile 3: counted, first
    masks[3, [7, 8]] = True  # slot 1 only: not counted
    masks[4, [2, 6]] = True  # two slots, but the teacher waits: not counted
    masks[5, [2, 6]] = True  # a forced row (choice False): not counted
    rows = CloneRows(observations=np.packbits(masks, axis=1, bitorder="little"),
                     actions=np.array([5, 6, 3, 7, 0, 2]), returns=np.zeros(6, np.float32), battles=np.arange(6),
                     choice=np.array([True, True, True, True, True, False]), illegal_left_out=0, forced_rows=1,
                     manifests=[])
    assert first_slot_share(rows, codec, hand_slots=3) == (pytest.approx(2 / 3), 3)


def test_miss_kinds_split_the_misses_by_slot_tile_and_wait():
    # 3 slots of 2x2 tiles: action 1 + slot * 4 + tile; 13 grid actions, 13 and up are buttons
    picks = [5, 2, 6, 0, 4, 13, 7]
    teacher = [1, 1, 1, 3, 0, 2, 7]  # the last row agrees
    kinds = miss_kinds(np.array(picks), np.array(teacher), height=2, width=2, hand_slots=3)
    assert kinds == {"slot": 1, "tile": 1, "slot_and_tile": 1, "wait": 1, "play": 1, "other": 1}
    assert describe_misses({**dict.fromkeys(kinds, 0), "slot": 284}, 1980) == (
        "royalefleet clone: of the 1,980 held-out choices the best epoch missed 284: "
        "284 another hand slot on the teacher's tile")
    assert describe_misses({**dict.fromkeys(kinds, 0), "wait": 3}, 12, "the last epoch") == (
        "royalefleet clone: of the 12 held-out choices the last epoch missed 3: 3 a wait where the teacher played")


def test_a_new_run_may_clone_sets_given_as_folders_but_not_sets_given_by_name(tmp_path, capsys):
    """A run with no folder is refused when a set is named (it would live under the run), and
    passes that check when every set is a folder: the refusal then comes from the set itself."""
    from royalefleet.cli import main

    elsewhere = tmp_path / "other" / "demos" / "plans"
    elsewhere.mkdir(parents=True)
    common = ["--runs-dir", str(tmp_path / "runs"), "--profile", "tiny"]
    assert main(["clone", "fresh", "--demos", "plans", *common]) == 2
    assert "no run 'fresh': there is no folder" in capsys.readouterr().err
    assert main(["clone", "fresh", "--demos", str(elsewhere), *common]) == 2
    err = capsys.readouterr().err
    assert "no run" not in err and str(elsewhere) in err, err


def test_plan_takes_teachers_opponents_and_seats_in_turn():
    plan = plan_battles(6, ["scripted:defend"], [MIRROR, "scripted:random_legal"], first=10)
    d, r = "scripted:defend", "scripted:random_legal"
    assert plan == [
        PlannedBattle(10, d, MIRROR, -1), PlannedBattle(11, d, r, 1), PlannedBattle(12, d, MIRROR, -1),
        PlannedBattle(13, d, r, 0), PlannedBattle(14, d, MIRROR, -1), PlannedBattle(15, d, r, 1),
    ]


def test_an_unknown_teacher_is_refused_with_every_known_one():
    problems = check_players(["scripted:defnd", "snap:0123456789abcdef"], ["scripted:push", "snap:x"],
                             ["snap:fedcba9876543210"])
    assert len(problems) == 3
    assert problems[0].startswith("unknown teacher 'scripted:defnd'; known: " + ", ".join(SCRIPTED_PLAYERS))
    assert problems[0].endswith(" (did you mean 'scripted:defend'?)")
    assert "this run's snapshots (snap:fedcba9876543210)" in problems[0]
    assert problems[1].startswith("unknown teacher 'snap:0123456789abcdef'")
    assert problems[2].startswith("unknown opponent 'snap:x'; known: mirror, scripted:noop")
    assert check_players(["scripted:defend"], [MIRROR], []) == []


def test_split_by_battle_keeps_every_battle_on_one_side():
    battles = np.repeat(np.arange(20), 3)
    n = len(battles)
    rows = CloneRows(np.zeros((n, 1), np.uint8), np.zeros(n, np.int64), np.zeros(n, np.float32), battles,
                     np.ones(n, bool), 0, 0, [])
    train, val = split_by_battle(rows, master_seed=5)
    assert len(set(val.battles.tolist())) == 2 and len(val.actions) == 6
    assert not set(train.battles.tolist()) & set(val.battles.tolist())
    again, _ = split_by_battle(rows, master_seed=5)
    assert np.array_equal(again.battles, train.battles)


def test_a_set_recorded_under_another_env_is_refused_naming_the_field(tmp_path):
    import msgspec

    from shared.demos import MANIFEST, DemoManifest
    from shared.messages import EngineBuild

    theirs = DemoDigests("a" * 16, "o" * 16, "c" * 16, 1, 3)
    ours = DemoDigests("b" * 16, "o" * 16, "c" * 16, 1, 3)
    m = DemoManifest(name="x", run_name="r", teachers=["scripted:defend"], opponents=[MIRROR], master_seed=0,
                     seed_rule="env/battle/{battle}/ordinal/0", gamma=0.997,
                     engine=EngineBuild(engine_class="e", calibration_digest="c", build_digest="b",
                                        binary_sha256="s", cards_digest="d", royalegym_version="v"),
                     digests=theirs, battles=[], shards=[], rows=0,
                     choice_rows=0, forced_rows=0, illegal_actions=0, remapped_actions=0, workers=1, seconds=0.0)
    (tmp_path / MANIFEST).write_bytes(msgspec.json.encode(m))
    with pytest.raises(DemosError) as info:
        load_rows([tmp_path], ours)
    assert info.value.fields == ("env_spec_digest",)
    assert f"env_spec_digest is {'a' * 16!r}, this run's is {'b' * 16!r}" in str(info.value)


@pytest.mark.slow
def test_a_clone_of_defend_agrees_with_it_on_held_out_battles_far_above_chance(tmp_path):
    """tiny profile with 120-decision episodes: 40 battles recorded, cloned, then 10 other
    battles recorded (ids 1000..) and the clone's argmax compared with defend's action on their
    choice rows. Chance (a uniform legal pick) is the mean of 1 / n_legal there: with hundreds of
    legal plays a row it is well under 0.01; the clone must agree on at least half the rows and
    at least 20 times chance."""
    import json

    from royalefleet.cli import main
    from services.checkpoint.snapshots import SnapshotStore
    from shared.nn.distribution import MaskedCategorical
    from shared.nn.snapshot import actor_builder, load_frozen_actor

    cfg_path = tmp_path / "cfg.json"
    cfg_path.write_text(json.dumps({"profile": "tiny", "env": {"max_steps": 120}}))
    common = ["--config", str(cfg_path), "--runs-dir", str(tmp_path / "runs")]
    assert main(["demos", "record", "bc", "--teacher", "scripted:defend", "--battles", "40", "--name", "train",
                 *common]) == 0
    assert main(["demos", "record", "bc", "--teacher", "scripted:defend", "--battles", "10", "--first-battle", "1000",
                 "--name", "held", "--opponent", "scripted:random_legal", *common]) == 0
    out = io.StringIO()
    from royalefleet.cmd_clone import cmd_clone
    from royalefleet.cli import build_parser

    args = build_parser().parse_args(["clone", "bc", "--demos", "train", "--batch-size", "32", "--max-epochs", "12",
                                      *common])
    assert cmd_clone(args, out) == 0
    text = out.getvalue()
    sid = text.rsplit("wrote snap:", 1)[1].split(";")[0]
    from royalefleet.cmd_clone import run_facts
    from royalefleet.run_options import run_config

    cfg = run_config(args)
    pf, digests, _ = run_facts(cfg)
    held = load_rows([tmp_path / "runs" / "bc" / "demos" / "held"], digests)
    choice = held.take(np.flatnonzero(held.choice))
    actor_bytes, _ = SnapshotStore(tmp_path / "runs" / "bc" / "snapshots").read(sid)
    actor = load_frozen_actor(sid, actor_bytes, actor_builder(pf.spec, cfg.net))
    obs = {k: torch.tensor(v) for k, v in pf.codec.unpack(choice.observations).items()}
    with torch.no_grad():
        picks = MaskedCategorical(actor(obs), obs["mask"]).mode().numpy()
    agreement = float(np.mean(picks == choice.actions))
    chance = chance_agreement(choice, pf.codec)
    assert len(choice.actions) >= 50
    assert chance < 0.01
    assert agreement >= 0.5 and agreement >= 20 * chance, (agreement, chance, text)
    # --init starts from the snapshot's very weights: with both learning rates 0 the clone writes
    # the same actor bytes (fp16 -> fp32 -> fp16 is exact), so the same snapshot id
    again = io.StringIO()
    args = build_parser().parse_args(["clone", "bc", "--demos", "train", "--batch-size", "32", "--max-epochs", "1",
                                      "--actor-lr", "0", "--critic-lr", "0", "--init", f"snap:{sid}", *common])
    assert cmd_clone(args, again) == 0
    assert f"wrote snap:{sid};" in again.getvalue()
    assert f"epoch  0: snap:{sid} as loaded (the critic its clone kept)" in again.getvalue()
    # defend plays its first playable slot, and the tiny profile's network cannot tell slots apart
    assert "the teacher played its first playable hand slot on 1.000 of the" in text
    assert "net.slot_index is off" in text
    # the misses line counts what the best epoch's agreement leaves: n (1 - agreement) choices
    best = re.search(r"best epoch \d+: validation CE [\d.]+, top-1 agreement ([\d.]+)", text)
    misses = re.search(r"of the ([\d,]+) held-out choices the best epoch missed ([\d,]+)", text)
    n, missed = (int(g.replace(",", "")) for g in misses.groups())
    assert abs(missed - n * (1 - float(best.group(1)))) <= 0.0005 * n + 1e-9


def test_an_init_that_is_not_a_snapshot_of_the_run_is_refused_naming_it(tmp_path):
    from royalefleet.clone_init import InitRefused, load_init
    from shared.run_dir import RunDir

    run = RunDir.of(tmp_path, "bc")
    with pytest.raises(InitRefused, match=r"--init 'scripted:defend': give a snapshot of this run as snap:<16 hex>"):
        load_init("scripted:defend", run, None, None, None, {})
    with pytest.raises(InitRefused, match=r"--init snap:0123456789abcdef: no snapshot 0123456789abcdef in "):
        load_init("snap:0123456789abcdef", run, None, None, None, {})
