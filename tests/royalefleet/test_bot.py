"""A trained bot in the user's own code (royalefleet/bot.py): exported, loaded without its run,
playing exactly as the evaluator plays the snapshot, in royalegym.evaluate as in `royalefleet
play`, and refused by name when it cannot play here."""

from __future__ import annotations

import subprocess
import sys

import msgspec
import pytest

from royalefleet.bot import BOT_FILE, BotRefused, export_bot, load_bot
from services.evaluator.games import play_game
from services.evaluator.players import ScriptedPlayer, run_facts
from shared.config import load_config
from shared.envs import build_env
from shared.evaluation import eval_env_config
from tests.services.evaluator.test_service import make_snapshot

RAND = "scripted:random_legal"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    cfg = load_config({"profile": "tiny", "run_name": "t", "runs_dir": str(root)})
    (root / "t").mkdir()
    (root / "t" / "config.json").write_bytes(msgspec.json.encode(cfg))
    facts = run_facts(cfg)
    sid = make_snapshot(cfg, facts, root, seed=3)
    bot = load_bot(sid, run="t", runs_dir=root)
    folder = export_bot(bot, root / "exported")
    return {"cfg": cfg, "root": root, "sid": sid, "bot": bot, "folder": folder}


class AsPlayer:
    """A RoyaleGym opponent as an evaluation player (what the evaluator's games call)."""

    def __init__(self, bot):
        self.bot, self.id, self.scripted_seat = bot, bot.id, False

    def act(self, obs, rng):
        return self.bot.act(obs, obs["action_mask"], rng)


@pytest.mark.slow
def test_an_exported_bot_plays_every_decision_as_the_evaluator_plays_its_snapshot(run):
    from royalefleet.players import LocalPlayers

    cfg = run["cfg"]
    exported = load_bot(run["folder"])
    assert exported.id == run["sid"] and exported.manifest.run_name == "t" and exported.manifest.engine
    env = build_env(eval_env_config(cfg.env))
    rand = ScriptedPlayer(RAND, cfg.ladder.random_legal_noop_prob)
    kw = dict(job=7, seed=1, env_seed=12345, master_seed=cfg.master_seed, max_decisions=5000)
    evaluator = play_game(env, LocalPlayers(cfg).get(run["sid"]), rand, side=0, **kw)
    ours = play_game(env, AsPlayer(exported), rand, side=0, **kw)
    assert ours == evaluator


@pytest.mark.slow
def test_royalegym_evaluate_of_the_bot_gives_royalefleet_plays_score(run, capsys):
    from royalegym import RandomLegalOpponent
    from royalegym.evaluate import evaluate

    from royalefleet.cli import main

    bot = load_bot(run["folder"])
    result = evaluate(bot, RandomLegalOpponent(run["cfg"].ladder.random_legal_noop_prob), bot.make_env, games=2, seed=0)
    assert main(["play", run["sid"], RAND, "--games", "2", "--seed", "0", "--profile", "tiny", "--run-name", "t",
                 "--runs-dir", str(run["root"]), "--out", str(run["root"] / "pages")]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert f"{result.wins}-{result.losses}-{result.draws} (won-lost-drawn) over 2 games" in line


def test_a_changed_or_foreign_bot_is_refused_by_name(run, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(run["folder"], bad)
    data = bytearray((bad / "actor.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (bad / "actor.safetensors").write_bytes(bytes(data))
    with pytest.raises(BotRefused, match="sha256 .* is not the manifest's .*: the weights were changed or damaged"):
        load_bot(bad)
    other = tmp_path / "other"
    shutil.copytree(run["folder"], other)
    doc = msgspec.json.decode((other / BOT_FILE).read_bytes())
    doc["engine"]["binary_sha256"] = "0" * 16
    (other / BOT_FILE).write_bytes(msgspec.json.encode(doc))
    with pytest.raises(BotRefused, match="engine binary_sha256 '0000000000000000' \\(here '.*'\\); it was trained on "
                                         "another RoyaleGym build"):
        load_bot(other)
    with pytest.raises(BotRefused, match="is no exported bot folder"):
        load_bot(tmp_path)
    with pytest.raises(FileExistsError, match="holds a bot already"):
        export_bot(run["bot"], run["folder"])


def test_export_from_the_command_line_and_importing_royalefleet_costs_no_torch(run, capsys):
    from royalefleet.cli import main

    out = run["root"] / "cli-export"
    argv = ["export", "latest", str(out), "--profile", "tiny", "--run-name", "t", "--runs-dir", str(run["root"])]
    assert main(argv) == 0
    assert f"exported {run['sid']} (run 't', iteration 0) to {out}" in capsys.readouterr().out
    assert (out / "actor.safetensors").read_bytes() == (run["folder"] / "actor.safetensors").read_bytes()
    assert main(argv) == 2
    assert "holds a bot already" in capsys.readouterr().err
    code = "import sys, royalefleet; royalefleet.load_bot; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_a_searched_export_records_its_budget_and_loads_searching(run, capsys):
    from royalefleet.bot_search import SearchedBot
    from royalefleet.cli import main

    out = run["root"] / "searched-export"
    assert main(["export", "t", "latest+search:3:4", str(out), "--runs-dir", str(run["root"])]) == 0
    said = capsys.readouterr().out
    assert f"exported {run['sid']}+search:3:4 (run 't', iteration 0, searching 3 candidates 4 decisions deep)" in said
    assert msgspec.json.decode((out / BOT_FILE).read_bytes())["search"] == {"candidates": 3, "depth": 4}
    bot = load_bot(out)
    assert isinstance(bot, SearchedBot) and bot.id == run["sid"] + "+search:3:4"
    assert (bot.search.candidates, bot.search.depth) == (3, 4)
    assert not isinstance(load_bot(run["folder"]), SearchedBot)  # an export without "search" plays unsearched
    doc = msgspec.json.decode((out / BOT_FILE).read_bytes())
    doc["search"] = {"candidates": 99, "depth": 4}
    (out / BOT_FILE).write_bytes(msgspec.json.encode(doc))
    with pytest.raises(BotRefused, match=r"search \{'candidates': 99, 'depth': 4\}: player .* expected <player>\+search:N"):
        load_bot(out)


def test_a_searched_bot_refuses_a_battle_it_has_not_seen(run):
    import numpy as np

    from royalefleet.bot_search import BattleUnseen

    bot = load_bot(run["sid"] + "+search:2:2", run="t", runs_dir=run["root"])
    env = build_env(eval_env_config(run["cfg"].env))  # not bot.make_env(), not watched
    obs, _ = env.reset(seed=0)
    with pytest.raises(BattleUnseen, match="a searching bot searches in the battle it plays and has not seen this one: "
                                         r"build its battles with bot.make_env\(\)"):
        bot.act(obs["blue"], obs["blue"]["action_mask"], np.random.default_rng(0))
    bot.watch(env)
    obs, _ = env.reset(seed=0)
    assert 0 <= bot.act(obs["blue"], obs["blue"]["action_mask"], np.random.default_rng(0)) < len(obs["blue"]["action_mask"])


@pytest.mark.slow
def test_a_searched_bot_in_royalegym_evaluate_scores_as_royalefleet_play_of_the_searched_player(run, capsys):
    from royalegym import RandomLegalOpponent
    from royalegym.evaluate import evaluate

    from royalefleet.cli import main

    p = run["cfg"].ladder.random_legal_noop_prob
    player = run["sid"] + "+search:2:3"
    out = run["root"] / "searched-for-evaluate"
    assert main(["export", "t", player, str(out), "--runs-dir", str(run["root"])]) == 0
    bot = load_bot(out).assume_opponent(RandomLegalOpponent(p))  # the model play's search uses: the opponent itself
    result = evaluate(bot, RandomLegalOpponent(p), bot.make_env, games=2, seed=0)
    assert bot.stats.decisions > 0  # it searched
    capsys.readouterr()
    assert main(["play", "t", player, RAND, "--games", "2", "--seed", "0", "--runs-dir", str(run["root"]),
                 "--out", str(run["root"] / "searched-pages")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"{result.wins}-{result.losses}-{result.draws} (won-lost-drawn) over 2 games" in lines[-1]
    ticks = [int(x.split(" ticks")[0].rsplit(" ", 1)[1]) for x in lines if " ticks: " in x]
    assert len(ticks) == 2 and sum(ticks) / 2 == result.mean_ticks  # the same two battles, tick for tick
