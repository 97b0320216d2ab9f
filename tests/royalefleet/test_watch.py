"""Watching games: the evaluators' recorded games in the run folder, `royalefleet replay` and
`royalefleet play`, and the pages opened in headless Chromium. Real RoyaleGym battles, tiny
networks (fresh snapshots of the tiny profile's actor)."""

from __future__ import annotations

import copy
import json
import shutil
import struct
import subprocess
import zlib

import msgspec
import numpy as np
import pytest

from services.evaluator.games import decision_cap, play_game, play_job
from services.evaluator.players import ScriptedPlayer, run_facts
from shared.config import load_config
from shared.envs import build_env
from shared.evaluation import eval_env_config, eval_seed_set
from shared.messages import EvalJobRequest, EvalReport, GameTrace, NoJob
from shared.replays import read_index

NOOP, RAND = "scripted:noop", "scripted:random_legal"


@pytest.fixture(scope="module")
def cfg():
    return load_config({"profile": "tiny", "run_name": "t",
                        "ladder": {"pool": {"eval_seed_count": 4},
                                   "gate": {"champion_games": 2, "anchor_games": 2, "stratified_snapshots": 0,
                                            "stratified_games": 2, "bootstrap_resamples": 100}},
                        "evaluation": {"job_seeds": 1}})


@pytest.fixture(scope="module")
def facts(cfg):
    return run_facts(cfg)


def make_snapshot(cfg, facts, runs_dir, seed: int, iteration: int) -> str:
    """A freshly initialised actor, stored in fp16 as the learner stores a pool candidate."""
    from services.checkpoint.snapshots import SnapshotStore
    from shared.nn.model import ActorCritic
    from shared.nn.statefiles import module_to_bytes

    actor = module_to_bytes(ActorCritic(facts.spec, cfg.net, seed=seed).actor.half())
    spec = msgspec.json.encode({"arch_digest": facts.arch_digest, "obs_digest": facts.obs_digest,
                                "codec_table_digest": facts.codec_table_digest, "dtype": "float16",
                                "env_steps": 10 * iteration, "iteration": iteration, "run_id": "test"})
    sid, _, _ = SnapshotStore(runs_dir / cfg.run_name / "snapshots").write(actor, spec)
    return "snap:" + sid


@pytest.fixture(scope="module")
def gated_run(cfg, facts, tmp_path_factory):
    """A run whose ladder played a champion's strength jobs and a candidate's gate through an
    in-process evaluator (the service's loop without the sockets), recording as configured."""
    from royalefleet.players import LocalPlayers
    from services.ladder.gate_runner import GateRunner
    from services.ladder.pool import Candidate, PoolState

    root = tmp_path_factory.mktemp("runs")
    run_cfg = msgspec.structs.replace(cfg, runs_dir=str(root))
    champ, cand = make_snapshot(cfg, facts, root, 0, 1), make_snapshot(cfg, facts, root, 1, 2)
    pool = PoolState.for_run(root, "t", cfg.ladder)
    pool.submit(Candidate(id=champ, env_steps=10, iteration=1))
    pool.submit(Candidate(id=cand, env_steps=20, iteration=2))
    pool.save()
    said: list[str] = []
    runner = GateRunner(run_cfg, root, say=said.append)
    players = LocalPlayers(run_cfg)
    env = build_env(eval_env_config(cfg.env))
    seed_set = eval_seed_set(cfg.master_seed, cfg.ladder.pool.eval_seed_count)
    jobs, recorders_seen = [], []
    real_reset = env.reset

    def spying_reset(*a, **k):  # which games ran with a recorder attached
        recorders_seen.append(env.recorder is not None)
        return real_reset(*a, **k)

    env.reset = spying_reset
    for k in range(20):
        j = runner.request_job(EvalJobRequest(request_id=k, worker="test"))
        if isinstance(j, NoJob):
            break
        traces: list = []
        recs = play_job(env, {p: players.get(p) for p in (j.a, j.b)}, job=j.job_id, a=j.a, b=j.b, seeds=j.seeds,
                        seed_set=seed_set, master_seed=cfg.master_seed, decision_ms=cfg.env.decision_ms,
                        record_games=j.record_games, traces=traces)
        jobs.append((j, recs, [r for r in recorders_seen]))
        recorders_seen.clear()
        runner.report(EvalReport(request_id=k, job_id=j.job_id, run_name="t", worker="test", records=recs,
                                 replays=[GameTrace(seed=s, side=side, trace=msgspec.msgpack.encode(t))
                                          for s, side, t in traces]))
    cfg_file = root / "c.json"
    cfg_file.write_bytes(msgspec.json.encode(run_cfg))
    return {"root": root, "cfg": run_cfg, "cfg_file": cfg_file, "champ": champ, "cand": cand, "jobs": jobs,
            "said": said}


@pytest.mark.slow
def test_the_evaluators_record_what_the_config_asks_and_only_those_games(gated_run):
    root, champ, cand = gated_run["root"], gated_run["champ"], gated_run["cand"]
    jobs = gated_run["jobs"]
    # Strength jobs (the champion's anchor record): 1 game each (replays_per_strength_job 1);
    # the gate: its first 2 games (replays_per_gate 2), i.e. the whole 2-game champion job;
    # the gate's anchor jobs (played only if the candidate beat the champion): none.
    asked = [(j.a, j.b, j.record_games) for j, _, _ in jobs]
    assert asked[:3] == [(champ, NOOP, 1), (champ, RAND, 1), (cand, champ, 2)]
    assert asked[3:] in ([], [(cand, NOOP, 0), (cand, RAND, 0)])
    # Recording must not touch the others: the env had no recorder in any game not asked for.
    assert [seen for _, _, seen in jobs] == [[True, False], [True, False], [True, True]] + [[False, False]] * len(
        asked[3:])
    index = read_index(root / "t" / "replays").entries
    ids = [e.id for e in index]
    j0, j1, j2 = (j.job_id for j, _, _ in jobs[:3])
    assert ids == [f"job{j0}-seed0-side0", f"job{j1}-seed0-side0", f"job{j2}-seed0-side0", f"job{j2}-seed0-side1"]
    assert [e.kind for e in index] == ["strength", "strength", "gate", "gate"]
    assert [(e.blue, e.red) for e in index] == [(champ, NOOP), (champ, RAND), (cand, champ), (champ, cand)]
    assert [e.iteration for e in index] == [1, 1, 2, 2]  # of snapshot a, from the pool's admissions
    seed_set = eval_seed_set(gated_run["cfg"].master_seed, 4)
    for e, (j, recs) in zip(index, [(jobs[0][0], jobs[0][1]), (jobs[1][0], jobs[1][1]),
                                    (jobs[2][0], jobs[2][1]), (jobs[2][0], jobs[2][1])]):
        blue = next(r for r in recs if r.seat == "blue" and r.ordinal == e.side)
        assert e.env_seed == int(seed_set[0])
        assert e.winner == {1: "blue", -1: "red", 0: "draw"}[blue.outcome]
        assert e.crowns == [blue.own_crowns, blue.enemy_crowns]
        assert e.decisions == blue.episode_steps and e.ticks == blue.episode_ticks
        assert (root / "t" / e.trace).is_file() and (root / "t" / e.html).is_file()
        assert e.html == f"replays/{e.id}.html"


@pytest.mark.slow
def test_a_recorded_trace_re_simulates_and_its_page_embeds_it(gated_run):
    from royalegym import RustEngine
    from royalegym.render import extract_view
    from royalegym.replay import load_trace, verify_trace

    root = gated_run["root"] / "t"
    for e in read_index(root / "replays").entries:
        trace = load_trace(root / e.trace)
        assert verify_trace(trace, RustEngine()) == []  # the command log replays hash for hash
        view = extract_view((root / e.html).read_text())
        assert view["source"]["seed"] == str(trace.header.seed) and len(view["frames"]) == len(trace.frames)


def test_the_index_keeps_the_newest_and_deletes_the_files_of_the_rest(tmp_path):
    from shared.replays import ReplayEntry, add_entries

    folder = tmp_path / "run" / "replays"
    folder.mkdir(parents=True)

    def entry(k):
        for ext in ("msgpack", "html"):
            (folder / f"g{k}.{ext}").write_text("x")
        return ReplayEntry(id=f"g{k}", kind="gate", blue="a", red="b", a="a", b="b", job=k, seed_index=0, side=0,
                           env_seed=1, iteration=-1, winner="blue", crowns=[1, 0], ticks=10, decisions=1,
                           trace=f"replays/g{k}.msgpack", html=f"replays/g{k}.html", written="now")

    add_entries(folder, [entry(0), entry(1)], keep=3)
    dropped = add_entries(folder, [entry(2), entry(3)], keep=3)
    assert [e.id for e in dropped] == ["g0"]
    assert [e.id for e in read_index(folder).entries] == ["g1", "g2", "g3"]
    assert sorted(p.name for p in folder.iterdir()) == ["g1.html", "g1.msgpack", "g2.html", "g2.msgpack",
                                                        "g3.html", "g3.msgpack", "index.json"]
    with pytest.raises(ValueError, match="keep 0: at least 1"):
        add_entries(folder, [], keep=0)


def _line_of(root, job_id, seat="blue", side=0):
    from services.ladder.results import ResultLog

    for n, line in enumerate(ResultLog.for_run(root, "t").read().lines, start=1):
        r = line.record
        if r.role == "eval" and r.iteration == job_id and r.seat == seat and r.ordinal == side and r.battle == 0:
            return n
    raise AssertionError("no such line")


def replay_argv(run, line, *extra):
    return ["replay", "t", str(line), "--runs-dir", str(run["root"]), "--config", str(run["cfg_file"]),
            "--per-decision", *extra]


@pytest.mark.slow
def test_replay_of_a_recorded_gate_game_verifies(gated_run, capsys):
    from royalefleet.cli import main

    j2 = gated_run["jobs"][2][0].job_id
    line = _line_of(gated_run["root"], j2, seat="red", side=1)
    assert main(replay_argv(gated_run, line)) == 0
    out = capsys.readouterr().out
    assert f"verified: line {line} replays to the logged records and the recorded trace" in out
    assert (gated_run["root"] / "t" / "replays" / "replayed" / f"job{j2}-seed0-side1.html").is_file()
    # A game the run kept no trace of is checked against its records only, and says so.
    j0 = gated_run["jobs"][0][0].job_id  # its side 1 game was not recorded
    assert main(replay_argv(gated_run, _line_of(gated_run["root"], j0, side=1))) == 0
    assert "(the run kept no trace of this game)" in capsys.readouterr().out


@pytest.mark.slow
def test_replay_with_another_seed_diverges_at_decision_0(gated_run, monkeypatch, capsys):
    import shared.evaluation
    from royalefleet.cli import main

    real = shared.evaluation.eval_seed_set
    monkeypatch.setattr(shared.evaluation, "eval_seed_set", lambda master, count: real(master, count) + 1)
    j2 = gated_run["jobs"][2][0].job_id
    assert main(replay_argv(gated_run, _line_of(gated_run["root"], j2))) == 1
    out = capsys.readouterr().out
    assert "DIFFERS  first divergence from the recorded trace: decision 0 (tick 0): the battles start from " \
           "different states: engine seed" in out


@pytest.mark.slow
def test_replay_with_another_snapshot_diverges_at_the_first_decision_the_two_disagree(gated_run, monkeypatch,
                                                                                      capsys):
    from royalefleet.cli import main
    from royalefleet.players import LocalPlayers

    run, cfg = gated_run, gated_run["cfg"]
    champ, cand = run["champ"], run["cand"]
    j2 = run["jobs"][2][0].job_id  # cand (a) vs champ, side 0: cand blue
    real = LocalPlayers(cfg)
    original, planted = real.get(cand), real.get(champ)

    class Probe:
        """The original player; on the side, the planted one asked the same question with a copy
        of the same generator: where they first differ is where the replay must say it diverges."""

        def __init__(self):
            self.id, self.scripted_seat, self.t, self.first = cand, False, 0, None

        def act(self, obs, rng):
            other = planted.act(obs, copy.deepcopy(rng))
            mine = original.act(obs, rng)
            if self.first is None and other != mine:
                self.first = self.t
            self.t += 1
            return mine

    probe = Probe()
    seed_set = eval_seed_set(cfg.master_seed, 4)
    play_game(build_env(eval_env_config(cfg.env)), probe, real.get(champ), job=j2, seed=0, side=0,
              env_seed=int(seed_set[0]), master_seed=cfg.master_seed, max_decisions=decision_cap(500))
    assert probe.first is not None and probe.first >= 9  # the opening lockout forces the no-op

    class Planted(LocalPlayers):
        def get(self, player):
            return planted_as_cand if player == cand else super().get(player)

    class PlantedPlayer:
        id, scripted_seat = cand, False

        def act(self, obs, rng):
            return planted.act(obs, rng)

    planted_as_cand = PlantedPlayer()
    monkeypatch.setattr("royalefleet.players.LocalPlayers", Planted)
    assert main(replay_argv(run, _line_of(run["root"], j2))) == 1
    out = capsys.readouterr().out
    assert f"DIFFERS  first divergence from the recorded trace: decision {probe.first} (tick {10 * probe.first}): " \
           "recorded " in out


def test_replay_refuses_a_training_episode_without_provenance_and_says_why(tmp_path, capsys):
    """A result log written before the learner stamped provenance (or an episode it did not see
    whole): the seats the learner or a snapshot held cannot be reproduced, and replay says which."""
    from royalefleet.cli import main
    from services.ladder.results import ResultLog
    from shared.messages import EpisodeRecord

    def rec(iteration, seat, player, opponent, role):
        return EpisodeRecord(battle=3, ordinal=7, seat=seat, role=role, player=player, opponent=opponent, outcome=1,
                             truncated=False, episode_steps=250, episode_ticks=2500, own_crowns=1, enemy_crowns=0,
                             own_tower_hp_frac=1.0, enemy_tower_hp_frac=0.5, elixir_leak_steps=0,
                             elixir_count_exact=True, cards_played=5, undiscounted_return=1.0, iteration=iteration)

    ResultLog.for_run(tmp_path, "r").append([rec(4, "blue", "learner", RAND, "scripted"),
                                            rec(6, "red", "learner", "learner", "mirror")])
    base = ["replay", "r", "--runs-dir", str(tmp_path), "--profile", "tiny"]
    assert main(base[:2] + ["1"] + base[2:]) == 2
    err = capsys.readouterr().err
    assert "line 1: cannot reproduce blue (learner): its record carries no provenance (written by a learner that " \
           "did not stamp it, or one that did not see every decision of the episode): where its decisions were " \
           "taken is unknown. The episode spanned iteration(s) unknown; replay does not stand other weights in" in err
    assert main(base[:2] + ["--battle", "3", "--ordinal", "7", "--seat", "red"] + base[2:]) == 2
    err = capsys.readouterr().err
    assert "cannot reproduce blue (learner): its record is not in the result log: where its decisions were taken " \
           "is unknown; red (learner): its record carries no provenance" in err
    assert main(base[:2] + ["--battle", "3", "--ordinal", "7"] + base[2:]) == 2
    assert "2 records have battle 3 ordinal 7; give the line number" in capsys.readouterr().err
    assert main(base[:2] + ["9"] + base[2:]) == 2
    assert "EPISODE 9: the result log has lines 1..2" in capsys.readouterr().err


def test_play_between_two_scripted_bots_matches_royalegym_evaluate(cfg, tmp_path, capsys):
    from royalegym import RandomLegalOpponent
    from royalegym.evaluate import evaluate
    from royalegym.opponents import ladder
    from royalegym.replay import load_trace

    from royalefleet.cli import main

    cfg_file = tmp_path / "c.json"
    cfg_file.write_bytes(msgspec.json.encode(cfg))
    out_dir = tmp_path / "games"
    assert main(["play", RAND, "scripted:push", "--games", "4", "--seed", "100", "--config", str(cfg_file),
                 "--runs-dir", str(tmp_path), "--out", str(out_dir), "--per-decision"]) == 0
    out = capsys.readouterr().out
    want = evaluate(RandomLegalOpponent(cfg.ladder.random_legal_noop_prob), dict(ladder())["push"],
                    lambda: build_env(eval_env_config(cfg.env)), games=4, seed=100)
    score = (want.wins + 0.5 * want.draws) / want.games
    assert f"{RAND} vs scripted:push: {want.wins}-{want.losses}-{want.draws} (won-lost-drawn) over 4 games, " \
           f"score {score:.4f}" in out
    # Per seat too: evaluate's first half is A blue on seeds 100, 101, its second A red.
    said = [line.split(": ")[1].split()[0:2] for line in out.splitlines() if line.startswith("  seed")]
    blue_wins = sum(s == ["A", "won"] for s in said[:2])
    assert blue_wins == want.by_seat[0].wins
    for stem in ("seed100-a_blue", "seed101-a_blue", "seed100-a_red", "seed101-a_red"):
        assert len(load_trace(out_dir / f"{stem}.msgpack").steps) > 9  # past the opening lockout
        assert (out_dir / f"{stem}.html").stat().st_size > 10_000


def test_play_refuses_unknown_players_and_a_run_without_snapshots(cfg, tmp_path, capsys):
    from royalefleet.cli import main

    base = ["--profile", "tiny", "--runs-dir", str(tmp_path)]
    assert main(["play", "latest", NOOP, *base]) == 2
    assert f"run 'default' has no snapshot under {tmp_path}/default/snapshots; `latest` needs one" \
        in capsys.readouterr().err
    assert main(["play", "champion", NOOP, *base]) == 2
    assert "has no champion yet" in capsys.readouterr().err
    assert main(["play", "scripted:nobody", NOOP, *base]) == 2
    err = capsys.readouterr().err
    assert "player 'scripted:nobody'" in err and "scripted:first-affordable" in err


def test_eval_resolves_latest_and_champion_as_play_does(cfg, tmp_path, capsys):
    from royalefleet.cli import main

    base = ["--profile", "tiny", "--runs-dir", str(tmp_path)]
    assert main(["eval", NOOP, "latest", *base]) == 2
    assert (f"royalefleet eval: run 'default' has no snapshot under {tmp_path}/default/snapshots; `latest` needs one"
            in capsys.readouterr().err)
    assert main(["eval", "champion", NOOP, *base]) == 2
    assert "royalefleet eval: run 'default' has no champion yet" in capsys.readouterr().err


@pytest.mark.slow
def test_play_latest_and_champion_resolve_from_the_run(gated_run):
    from royalefleet.players import resolve

    cfg = gated_run["cfg"]
    assert resolve("latest", cfg) == gated_run["cand"]  # iteration 2 is the newest snapshot
    assert resolve("champion", cfg) in (gated_run["champ"], gated_run["cand"])
    from services.ladder.pool import PoolState

    assert resolve("champion", cfg) == PoolState.for_run(cfg.runs_dir, "t", cfg.ladder).champion


# ----------------------------------------------------------------------------- the page in a browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium not installed (Debian: apt-get install -y --no-install-recommends "
    "chromium; .ci/run installs it)")


def png_pixels(data: bytes) -> np.ndarray:
    """(H, W, 3) uint8 of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes), by the
    PNG specification's five row filters (no imaging library in the environment)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0
            channels = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, 1 + width * channels)
    out = np.zeros((height, width, channels), np.uint8)
    prev = np.zeros((width, channels), np.int32)
    for y in range(height):
        f, line = raw[y, 0], raw[y, 1:].reshape(width, channels).astype(np.int32)
        if f == 0:
            cur = line
        elif f == 1:
            cur = np.cumsum(line, axis=0) & 0xFF
        elif f == 2:
            cur = (line + prev) & 0xFF
        else:
            cur = np.zeros_like(line)
            for x in range(width):
                a = cur[x - 1] if x else np.zeros(channels, np.int32)
                b, c = prev[x], prev[x - 1] if x else np.zeros(channels, np.int32)
                if f == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = np.abs(p - a), np.abs(p - b), np.abs(p - c)
                    pred = np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))
                cur[x] = (line[x] + pred) & 0xFF
        out[y], prev = cur, cur
    return out[..., :3]


def screenshot(page, png, profile) -> np.ndarray:
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={profile}", "--window-size=1200,900", "--force-device-scale-factor=0.5",
                    "--hide-scrollbars",
                    "--virtual-time-budget=3000", f"--screenshot={png}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    return png_pixels(png.read_bytes())


@needs_chromium
@pytest.mark.slow
def test_a_recorded_page_opens_in_headless_chromium_and_its_board_is_drawn(gated_run, tmp_path):
    entry = read_index(gated_run["root"] / "t" / "replays").entries[0]
    page = gated_run["root"] / "t" / entry.html
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    shot = screenshot(page, tmp_path / "page.png", tmp_path / "profile1")
    empty = screenshot(blank, tmp_path / "blank.png", tmp_path / "profile2")
    assert shot.shape == empty.shape == (450, 600, 3)
    shot, empty = shot.astype(int), empty.astype(int)
    differs = (np.abs(shot - empty).sum(axis=2) > 30).mean()

    def grass(img):  # the board's grass: green well above red and blue
        return ((img[..., 1] > img[..., 0] + 20) & (img[..., 1] > img[..., 2] + 20)).mean()

    assert differs > 0.3 and grass(shot) > 0.05, (differs, grass(shot))
    assert grass(empty) == 0.0


@pytest.mark.slow
def test_status_names_the_newest_recorded_games(gated_run, capsys):
    from royalefleet.cli import main

    assert main(["status", "--run-name", "t", "--runs-dir", str(gated_run["root"]), "--config",
                 str(gated_run["cfg_file"])]) in (0, 1)
    out = capsys.readouterr().out
    newest = read_index(gated_run["root"] / "t" / "replays").entries[-1]
    assert "replays    recorded games: 4 in " in out
    assert f"{newest.blue} (blue) vs {newest.red} (red), {newest.kind}, job {newest.job}" in out
    assert str(gated_run["root"] / "t" / newest.html) in out


def test_a_scripted_seat_recorded_with_the_mask_only_shortcut_still_verifies(cfg):
    """The evaluators skip the observation of a scripted seat (``mask_only``): the trace is the
    engine's command log, not observations, so it must still re-simulate exactly."""
    from royalegym import RustEngine
    from royalegym.replay import ReplayRecorder, verify_trace

    players = {p: ScriptedPlayer(p, cfg.ladder.random_legal_noop_prob) for p in (NOOP, RAND)}
    env = build_env(eval_env_config(cfg.env))
    rec = ReplayRecorder(frame_every_tick=True)
    play_game(env, players[RAND], players[NOOP], job=0, seed=1, side=1, env_seed=77, master_seed=cfg.master_seed,
              max_decisions=decision_cap(500), recorder=rec)
    assert env.recorder is None  # detached after the game
    assert env._mask_only == frozenset({"blue", "red"})  # both seats were scripted: both mask-only
    assert sum(len(s.commands) for s in rec.trace.steps) > 0
    assert verify_trace(rec.trace, RustEngine()) == []


def test_the_evaluator_service_sends_the_traces_its_job_asked_for(cfg):
    """The service's glue: ``Evaluator.play`` keeps the traces of the job's first
    ``record_games`` games for its report, and none when the job asks for none."""
    from royalegym.replay import Trace

    from services.evaluator.service import Evaluator
    from shared.messages import EvalJob

    ev = Evaluator(cfg, ladder="tcp://127.0.0.1:1", checkpoint="tcp://127.0.0.1:1", say=lambda s: None)
    try:
        job = EvalJob(request_id=1, job_id=3, run_name="t", a=RAND, b=NOOP, seeds=[0, 1], deadline_s=60.0,
                      record_games=3)
        records = ev.play(job)
        assert [(g.seed, g.side) for g in ev.replays] == [(0, 0), (0, 1), (1, 0)]
        for g in ev.replays:
            trace = msgspec.msgpack.decode(g.trace, type=Trace)
            blue = next(r for r in records if r.battle == g.seed and r.ordinal == g.side and r.seat == "blue")
            assert len(trace.steps) == blue.episode_steps and trace.result.final_tick == blue.episode_ticks
            assert trace.header.frame_every_tick is cfg.evaluation.replay_every_tick is False
        ev.play(msgspec.structs.replace(job, record_games=0))
        assert ev.replays == []
    finally:
        ev.close()


@pytest.mark.slow
def test_a_strength_snapshot_records_its_first_games_for_a_young_run(cfg, facts, tmp_path):
    """The standing strength measurement (services/ladder/strength.py) asks for the snapshot's
    first ``replays_per_strength_snapshot`` games (2: its first job's, both sides, against the
    first anchor) and keeps them as a gate's are: trace, page, ``kind`` ``strength`` with the
    snapshot's iteration; the next job records nothing."""
    from royalefleet.players import LocalPlayers
    from services.ladder.strength import StrengthRunner
    from shared.messages import MeasureStrength

    run_cfg = msgspec.structs.replace(cfg, runs_dir=str(tmp_path), evaluation=msgspec.structs.replace(
        cfg.evaluation, strength=msgspec.structs.replace(cfg.evaluation.strength, games_per_anchor=4,
                                                         anchors=[NOOP, RAND], search=[])))
    snap = make_snapshot(cfg, facts, tmp_path, 0, 10)
    counter = iter(range(100))
    said: list[str] = []
    runner = StrengthRunner(run_cfg, tmp_path, next_job_id=lambda: next(counter), say=said.append)
    runner.submit(MeasureStrength(request_id=1, run_name="t", snapshot_id=snap[5:], env_steps=100, iteration=10,
                                  timesteps=1000))
    players = LocalPlayers(run_cfg)
    env = build_env(eval_env_config(cfg.env))
    seed_set = eval_seed_set(cfg.master_seed, cfg.ladder.pool.eval_seed_count)
    asked = []
    for k in range(2):
        j = runner.request_job(EvalJobRequest(request_id=k, worker="test"))
        traces: list = []
        recs = play_job(env, {p: players.get(p) for p in (j.a, j.b)}, job=j.job_id, a=j.a, b=j.b, seeds=j.seeds,
                        seed_set=seed_set, master_seed=cfg.master_seed, decision_ms=cfg.env.decision_ms,
                        record_games=j.record_games, traces=traces)
        asked.append((j.a, j.b, j.record_games, len(traces)))
        runner.report(EvalReport(request_id=k, job_id=j.job_id, run_name="t", worker="test", records=recs,
                                 replays=[GameTrace(seed=s, side=side, trace=msgspec.msgpack.encode(t))
                                          for s, side, t in traces]))
    assert asked == [(snap, NOOP, 2, 2), (snap, NOOP, 0, 0)]
    index = read_index(tmp_path / "t" / "replays").entries
    assert [(e.kind, e.a, e.b, e.iteration, e.side) for e in index] == [
        ("strength", snap, NOOP, 10, 0), ("strength", snap, NOOP, 10, 1)]
    assert all((tmp_path / "t" / e.trace).is_file() and (tmp_path / "t" / e.html).is_file() for e in index)
    assert any("recorded 2 game(s) of job 0" in line for line in said)
