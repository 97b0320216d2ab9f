"""demos record with a searched teacher and in DAgger mode (tiny profile, 120-decision episodes):
the set replays exactly, a searched teacher's labels are not its base's, DAgger's apprentice
changes the battles but not who labels them, and bad arguments are refused naming them."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest

from royalefleet.cmd_demos import check_players
from services.rollout.demos import WorkerJob, dagger_beta
from shared.demos import DemosError, read_manifest

TEACHER = "scripted:defend+search:3:6,p=2,sh=1,cont=defend,opp=defend/random_legal"


def _record(tmp_path, name, *extra, teacher=TEACHER, workers=1):
    from royalefleet.cli import main

    cfg_path = tmp_path / "cfg.json"
    cfg_path.write_text(json.dumps({"profile": "tiny", "env": {"max_steps": 120}}))
    assert main(["demos", "record", "bc", "--teacher", teacher, "--battles", "2", "--name", name, "--opponent",
                 "scripted:random_legal", "--workers", str(workers), "--shard-battles", "1", *extra,
                 "--config", str(cfg_path), "--runs-dir", str(tmp_path / "runs")]) == 0
    return read_manifest(tmp_path / "runs" / "bc" / "demos" / name)


@pytest.mark.slow
def test_a_searched_teacher_records_a_set_that_replays_exactly_and_differs_from_its_base(tmp_path):
    one = _record(tmp_path, "one")
    two = _record(tmp_path, "two", workers=2)
    assert one.teachers == [TEACHER] and one.choice_rows > 0
    assert [s.sha256 for s in one.shards] == [s.sha256 for s in two.shards]  # whatever the workers
    plain = _record(tmp_path, "plain", teacher="scripted:defend")
    assert one.digest != plain.digest  # the search overruled defend somewhere


def test_dagger_lets_the_apprentice_play_a_decaying_share_and_beta_zero_is_the_plain_set(tmp_path, capsys):
    base = _record(tmp_path, "base", teacher="scripted:defend")
    zero = _record(tmp_path, "zero", "--apprentice", "scripted:random_legal", "--beta", "0", teacher="scripted:defend")
    assert [s.sha256 for s in zero.shards] == [s.sha256 for s in base.shards]
    assert zero.apprentice == "scripted:random_legal" and zero.beta == 0.0
    half = _record(tmp_path, "half", "--apprentice", "scripted:random_legal", "--beta", "1",
                   teacher="scripted:defend")
    assert half.shards[0].sha256 != base.shards[0].sha256  # battle 0 played by the apprentice alone
    assert half.shards[1].sha256 == base.shards[1].sha256  # beta decayed to 0 at the last battle
    assert half.beta_decay == "linear"
    held = _record(tmp_path, "held", "--apprentice", "scripted:random_legal", "--beta", "1", "--beta-decay", "none",
                   teacher="scripted:defend")
    assert held.shards[0].sha256 == half.shards[0].sha256  # battle 0 at beta 1 either way
    assert held.shards[1].sha256 != base.shards[1].sha256  # the last battle too: the apprentice's alone
    assert held.beta_decay == "none" and held.beta == 1.0
    manifest = tmp_path / "runs" / "bc" / "demos" / "held" / "manifest.json"
    manifest.write_bytes(manifest.read_bytes().replace(b'"beta_decay": "none"', b'"beta_decay": "always"'))
    with pytest.raises(DemosError, match=r"Invalid enum value 'always' - at `\$.beta_decay`"):
        read_manifest(manifest.parent)
    manifest.write_bytes(manifest.read_bytes().replace(b'"beta_decay": "always"', b'"beta_decay": "none"'))
    from royalefleet.cli import main

    capsys.readouterr()
    assert main(["demos", "list", "bc", "--runs-dir", str(tmp_path / "runs")]) == 0
    listing = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert listing["base"].endswith(f"digest {base.digest}")  # a plain set: no DAgger words
    assert listing["half"].endswith("; DAgger: scripted:random_legal played a share (beta 1 decaying to 0)")
    assert listing["held"].endswith("; DAgger: scripted:random_legal played a share (beta 1 in every battle)")


def test_beta_decays_linearly_from_the_first_battle_to_zero_at_the_last_or_is_held():
    job = WorkerJob(worker=0, env_cfg=None, net_cfg=None, table=None, statics=np.zeros(0), spec=None, master_seed=0,
                    noop_prob=0.9, gamma=0.99, digests=None, arch_digest="", snapshots={}, shards=[],
                    shard_indices=[], staging="", apprentice="snap:0123456789abcdef", beta=0.6, first_battle=100,
                    battles=5)
    assert [dagger_beta(job, b) for b in range(100, 105)] == pytest.approx([0.6, 0.45, 0.3, 0.15, 0.0])
    job.beta_decay = "none"
    assert [dagger_beta(job, b) for b in range(100, 105)] == [0.6] * 5
    job.apprentice = ""
    assert dagger_beta(job, 100) == 0.0


def test_a_searched_teacher_is_checked_on_its_base_and_its_suffix():
    assert check_players([TEACHER, "snap:0123456789abcdef+search:8"], ["scripted:push"],
                         ["snap:0123456789abcdef"]) == []
    problems = check_players(["scripted:defnd+search:8", "scripted:defend+search:8,p=0"], [], [])
    assert problems[0].startswith("unknown teacher 'scripted:defnd+search:8'; known: ")
    assert problems[1] == "teacher: player 'scripted:defend+search:8,p=0': p='0': playouts per candidate are 1..64"


def test_a_bad_apprentice_or_beta_is_refused_naming_it(tmp_path, capsys):
    from royalefleet.cli import main

    code = main(["demos", "record", "bc", "--teacher", "scripted:defend", "--battles", "1", "--apprentice",
                 "scripted:defend+search:4", "--beta", "1.5", "--profile", "tiny", "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert ("--apprentice 'scripted:defend+search:4': expected an unsearched scripted player or one of this run's "
            "snapshots (snap:<id>)") in err
    assert "--beta 1.5: the apprentice's share is in [0, 1]" in err
    assert main(["demos", "record", "bc", "--teacher", "scripted:defend", "--battles", "1", "--beta-decay", "none",
                 "--profile", "tiny", "--runs-dir", str(tmp_path)]) == 2
    assert ("--beta-decay none: schedules DAgger's apprentice; give --apprentice PLAYER too, or leave it out"
            in capsys.readouterr().err)


def test_a_searched_teachers_set_keeps_its_scores_and_they_give_back_every_searched_move(tmp_path, capsys):
    from royalefleet.clone_data import search_choices
    from shared.demos import SEARCH_ARRAYS, load_set

    m = _record(tmp_path, "scored")
    _, a = load_set(tmp_path / "runs" / "bc" / "demos" / "scored", m.digests)
    # the recording says how many decisions its search saw and how often it left its base player's pick
    searched_rows = np.diff(a["search_offsets"]) > 0
    overruled = sum(int(a["actions"][r] != a["search_actions"][a["search_offsets"][r]]) for r in np.flatnonzero(searched_rows))
    assert (f"  the search: {int(searched_rows.sum()):,} searched decisions; it overruled the teacher's base player "
            f"on {overruled / searched_rows.sum():.3f} of them\n") in capsys.readouterr().out
    assert set(SEARCH_ARRAYS) <= set(a)
    counts = np.diff(a["search_offsets"])
    searched = counts > 0
    assert not searched[a["forced"]].any()  # one legal action: nothing searched
    assert searched.sum() == (~a["forced"]).sum() > 0  # every choice searched, 3 candidates each
    assert set(counts[searched].tolist()) == {3}
    assert a["search_keep"][searched].tolist() == [0.0] * int(searched.sum())  # TEACHER keeps nothing
    acts, scores = search_choices(a, np.flatnonzero(searched))
    assert (acts[np.arange(len(acts)), np.argmax(scores, axis=1)] == a["actions"][searched]).all()
    plain = _record(tmp_path, "plain", teacher="scripted:defend")
    _, b = load_set(tmp_path / "runs" / "bc" / "demos" / "plain", plain.digests)
    assert not set(SEARCH_ARRAYS) & set(b)  # an unsearched teacher's shards are as they were
    # the clone trains on them with --soft-tau, and refuses it on a set without scores
    from royalefleet.cli import build_parser
    from royalefleet.cmd_clone import cmd_clone

    common = ["--config", str(tmp_path / "cfg.json"), "--runs-dir", str(tmp_path / "runs"), "--max-epochs", "1"]
    out = io.StringIO()
    assert cmd_clone(build_parser().parse_args(["clone", "bc", "--demos", "scored", "--soft-tau", "0.1",
                                                "--margin-weight", "2", *common]), out) == 0
    n = int((~a["forced"]).sum())
    assert f"soft targets at tau 0.1: {n:,} of the {n:,} choice rows train on softmax(score / tau)" in out.getvalue()
    # --keep-last keeps the last epoch whatever the validation said
    common3 = [x if x != "1" else "3" for x in common] + ["--patience", "3", "--keep-last"]
    out = io.StringIO()
    assert cmd_clone(build_parser().parse_args(["clone", "bc", "--demos", "scored", *common3]), out) == 0
    assert "max epochs (3) reached; last epoch (--keep-last) 3: validation CE" in out.getvalue()
    text = out.getvalue()
    assert "held-out choices the last epoch missed" in text
    # every held-out choice was searched, so the margin bands cover them all, printed and in the report
    n_val = int(re.search(r"of the ([\d,]+) held-out choices", text).group(1).replace(",", ""))
    assert "held-out choices by the search's margin (its best survivor's score minus the runner-up's)" in text
    sid = re.search(r"wrote snap:([0-9a-f]{16})", text).group(1)
    report = json.loads((tmp_path / "runs" / "bc" / "clones" / sid / "report.json").read_text())
    assert sum(b["choices"] for b in report["held_out_by_margin"]) == n_val > 0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["clone", "bc", "--demos", "plain", "--soft-all", "yes", *common])  # a switch
    args = build_parser().parse_args(["clone", "bc", "--demos", "plain", "--soft-tau", "0.1", *common])
    err = io.StringIO()
    import contextlib

    with contextlib.redirect_stderr(err):
        assert cmd_clone(args, io.StringIO()) == 2
    assert ("royalefleet clone: --soft-tau 0.1 --margin-weight 0.0: no set holds a searching teacher's scores (plain: "
            "an unsearched teacher, or recorded before scores were kept)") in err.getvalue()


def test_a_confirming_teacher_records_its_fresh_scores_and_counts_what_it_sent_back(tmp_path, capsys):
    """``confirm=2`` on the real engine: every searched decision's visits are the halving's (3
    candidates, p=2: 2 for the finalists) or, where the halving left the own pick, 2 more for all
    three contenders; the move is the pick rule's over the recorded scores either way, and the
    recording's line counts the departures sent back (the moves that stayed the own pick after the
    confirming playouts)."""
    from royalefleet.clone_data import search_choices
    from shared.demos import load_set

    m = _record(tmp_path, "confirmed", teacher=TEACHER + ",confirm=2")
    _, a = load_set(tmp_path / "runs" / "bc" / "demos" / "confirmed", m.digests)
    off = a["search_offsets"]
    rows = np.flatnonzero(np.diff(off) > 0)
    tops = [int(a["search_visits"][off[r]:off[r + 1]].max()) for r in rows]
    assert set(tops) <= {2, 4} and 4 in tops
    acts, scores = search_choices(a, rows)
    assert (acts[np.arange(len(acts)), np.argmax(scores, axis=1)] == a["actions"][rows]).all()
    own = a["search_actions"][off[rows]]
    overruled = int((a["actions"][rows] != own).sum())
    sent_back = sum(int(t == 4 and a["actions"][r] == o) for t, r, o in zip(tops, rows, own))
    tail = f" ({sent_back:,} more overrules not confirmed by fresh playouts)" if sent_back else ""
    assert (f"  the search: {len(rows):,} searched decisions; it overruled the teacher's base player on "
            f"{overruled / len(rows):.3f} of them{tail}\n") in capsys.readouterr().out


@pytest.mark.slow
def test_a_snapshot_opponent_plays_its_seat_unrecorded_and_a_searching_teacher_simulates_it(tmp_path, capsys):
    """``--opponent snap:<id>``: the snapshot plays the other seat unsearched (its frozen seat, not
    recorded), so two snapshots give two different sets from the same battles while the recorded
    seats and decisions stay the scripted plan's; a searching teacher without ``opp=`` simulates
    it; a searching or unknown opponent is refused."""
    from royalefleet.cli import main

    common = ["--config", str(tmp_path / "cfg.json"), "--runs-dir", str(tmp_path / "runs")]
    (tmp_path / "cfg.json").write_text(json.dumps({"profile": "tiny", "env": {"max_steps": 120}}))
    assert main(["demos", "record", "bc", "--teacher", "scripted:defend", "--battles", "2", "--name", "d",
                 "--opponent", "scripted:random_legal", *common]) == 0
    sids = []
    for lr in ("0.002", "0"):  # a trained actor and the untrained one: two different snapshots
        assert main(["clone", "bc", "--demos", "d", "--max-epochs", "1", "--actor-lr", lr, *common]) == 0
        sids.append(re.search(r"wrote snap:([0-9a-f]{16})", capsys.readouterr().out).group(1))
    assert sids[0] != sids[1]
    sets = []
    for i, sid in enumerate(sids):
        assert main(["demos", "record", "bc", "--teacher", "scripted:defend", "--battles", "2", "--name", f"vs{i}",
                     "--opponent", sid, *common]) == 0
        sets.append(read_manifest(tmp_path / "runs" / "bc" / "demos" / f"vs{i}"))
    assert sets[0].opponents == [f"snap:{sids[0]}"]
    assert [b.recorded_seats for b in sets[0].battles] == [[0], [1]]  # one seat a battle, in turn
    assert [b.opponent for b in sets[1].battles] == [f"snap:{sids[1]}"] * 2
    assert sets[0].digest != sets[1].digest  # the other snapshot played the other seat
    # a searching teacher simulates the snapshot opponent as itself (no opp=): it records and is not its base
    assert main(["demos", "record", "bc", "--teacher", "scripted:defend+search:3:6,p=2,sh=1", "--battles", "2",
                 "--name", "searched", "--opponent", sids[0], *common]) == 0
    searched = read_manifest(tmp_path / "runs" / "bc" / "demos" / "searched")
    assert searched.choice_rows > 0 and searched.digest != sets[0].digest  # the search left defend somewhere
    assert main(["demos", "record", "bc", "--teacher", "scripted:defend", "--battles", "1", "--opponent",
                 f"snap:{sids[0]}+search:4", "--opponent", "snap:0123456789abcdef", *common]) == 2
    err = capsys.readouterr().err
    assert (f"opponent 'snap:{sids[0]}+search:4': an opponent plays unsearched; drop its +search suffix (a "
            "searching player is a --teacher)") in err
    assert "unknown opponent 'snap:0123456789abcdef'; known: mirror, scripted:noop" in err
    assert f"and this run's snapshots (snap:{sids[0]}, snap:{sids[1]})" in err or \
        f"and this run's snapshots (snap:{sids[1]}, snap:{sids[0]})" in err


def test_a_searching_teacher_is_bound_against_the_snapshot_opponent_itself():
    """``Recorder._seated``: the searching teacher's simulated opponent is the frozen snapshot
    player when there is one, the teacher itself in a mirror, else the planned scripted player."""
    from services.evaluator.players import ScriptedPlayer
    from services.rollout.demos import MIRROR, PlannedBattle, Recorder

    class Teacher:
        def bind(self, env, seat, other):
            return (seat, other)

    recorder = Recorder.__new__(Recorder)
    recorder.job = WorkerJob(worker=0, env_cfg=None, net_cfg=None, table=None, statics=np.zeros(0), spec=None,
                             master_seed=0, noop_prob=0.9, gamma=0.99, digests=None, arch_digest="", snapshots={},
                             shards=[], shard_indices=[], staging="")
    teacher, frozen = Teacher(), object()
    snap = PlannedBattle(battle=3, teacher="t", opponent="snap:0123456789abcdef", seat=1)
    assert recorder._seated(teacher, None, [1], snap, frozen) == {1: ("red", frozen)}
    assert recorder._seated(teacher, None, [0, 1], PlannedBattle(3, "t", MIRROR, -1)) == {
        0: ("blue", teacher), 1: ("red", teacher)}
    seat, other = recorder._seated(teacher, None, [0], PlannedBattle(3, "t", "scripted:defend", 0))[0]
    assert seat == "blue" and isinstance(other, ScriptedPlayer) and other.id == "scripted:defend"
