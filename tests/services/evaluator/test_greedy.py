"""A snapshot playing its argmax (``snap:<id>+greedy``): the id's rules, the player's pick and
streams against a known policy, and a real snapshot played greedily by ``royalefleet eval``."""

from __future__ import annotations

import re

import msgspec
import numpy as np
import pytest

from services.evaluator.players import GreedyPlayer
from shared.evaluation import check_player, split_greedy

SID = "snap:0123456789abcdef"


def test_a_greedy_id_is_an_unsearched_snapshot_with_the_suffix_once():
    assert split_greedy(SID + "+greedy") == (SID, True) and split_greedy(SID) == (SID, False)
    assert check_player(SID + "+greedy") is None
    assert check_player("scripted:defend+greedy") == (
        "player 'scripted:defend+greedy': +greedy takes the argmax of a network's policy; only a snapshot "
        "(snap:<snapshot_id>+greedy) has one")
    for bad in (SID + "+greedy+search:8", SID + "+search:8+greedy", SID + "+greedy+greedy"):
        assert check_player(bad) == (
            f"player {bad!r}: +greedy plays a snapshot's argmax unsearched, so it ends the id once and takes no "
            "search (snap:<id>+greedy, or snap:<id>+search:N alone)")
    assert check_player("snap:0123+greedy").startswith("player 'snap:0123': a snapshot id is 16 lowercase hex")


class KnownPolicy:
    """A stand-in snapshot whose log-probabilities are given."""

    id, stateless = SID, True

    def __init__(self, log_probs):
        self.values, self.calls = np.asarray(log_probs, np.float64), 0

    def log_probs(self, obs):
        self.calls += 1
        return self.values


def test_the_greedy_player_plays_the_argmax_and_draws_the_sampled_players_uniform():
    rng = np.random.default_rng(4)
    base = KnownPolicy([-np.inf, -2.3, -0.4, -1.1, -np.inf])
    player = GreedyPlayer(SID + "+greedy", base)
    obs = {"action_mask": np.array([True, True, True, True, False])}
    twin = np.random.default_rng(4)
    for _ in range(3):
        assert player.act(obs, rng) == 2
        twin.random(1, dtype=np.float32)
    assert rng.random() == twin.random()  # one float32 a decision, as SnapshotPlayer draws
    forced = {"action_mask": np.array([True, False, False, False, False])}
    assert player.act(forced, rng) == 0 and base.calls == 3  # only the no-op legal: no forward
    assert player.for_game() is player and not player.scripted_seat
    tie = GreedyPlayer(SID + "+greedy", KnownPolicy([-1.0, -0.5, -0.5]))
    assert tie.act({"action_mask": np.ones(3, bool)}, rng) == 1  # a tie: the lower index

    class Stacked(KnownPolicy):
        stateless = False

        class policy:
            frame_stack = 4

    with pytest.raises(ValueError, match=r"greedy play needs obs.frame_stack 1 \(the run stacks 4 frames\); "
                                         r"play snap:0123456789abcdef sampled"):
        GreedyPlayer(SID + "+greedy", Stacked([0.0]))


def test_a_real_snapshot_plays_greedily_in_eval_and_by_its_argmax(tmp_path, capsys):
    from royalefleet.cli import main
    from royalefleet.players import LocalPlayers, resolve
    from services.evaluator.players import run_facts
    from shared.config import load_config
    from shared.envs import build_env
    from shared.evaluation import eval_env_config
    from tests.services.evaluator.test_service import make_snapshot

    cfg = load_config({"profile": "tiny", "run_name": "t", "runs_dir": str(tmp_path),
                       "env": {"max_steps": 120}})
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "config.json").write_bytes(msgspec.json.encode(cfg))
    sid = make_snapshot(cfg, run_facts(cfg), tmp_path, seed=3)
    assert resolve("latest+greedy", cfg) == sid + "+greedy"
    players = LocalPlayers(cfg)
    greedy, sampled = players.get(sid + "+greedy"), players.get(sid)
    assert isinstance(greedy, GreedyPlayer) and greedy.base is sampled
    env = build_env(eval_env_config(cfg.env))
    obs, _ = env.reset(seed=5)
    rng, choices = np.random.default_rng(0), 0
    for _ in range(120):
        mask = obs["blue"]["action_mask"]
        if np.count_nonzero(mask) > 1:
            choices += 1
            lp = sampled.log_probs(obs["blue"])
            assert greedy.act(obs["blue"], rng) == int(np.argmax(lp)) and mask[int(np.argmax(lp))]
        obs, _, term, trunc, _ = env.step({"blue": 0, "red": 0})
        if term["blue"] or trunc["blue"]:
            break
    assert choices > 10
    code = main(["eval", sid + "+greedy", sid, "--games", "2", "--run-name", "t", "--runs-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert re.search(rf"^{re.escape(sid)}\+greedy vs {re.escape(sid)}: score [\d.]+ over 2 games", out, re.M)
    assert main(["eval", "scripted:defend+greedy", sid, "--games", "2", "--run-name", "t",
                 "--runs-dir", str(tmp_path)]) == 2
    assert ("royalefleet eval: player 'scripted:defend+greedy': +greedy takes the argmax of a network's policy; only "
            "a snapshot has one (snap:<id>+greedy, latest+greedy, champion+greedy)") in capsys.readouterr().err
    code = main(["eval", "t", "latest+greedy", sid, "--games", "2", "--runs-dir", str(tmp_path)])
    assert code == 0 and f"{sid}+greedy vs {sid}: score" in capsys.readouterr().out
