"""The scripted players' table (shared/scripted.py): every bot of RoyaleGym's ladder under
``scripted:<rung>``, in the config, the evaluator, the rollout's seats and the CLI."""

from __future__ import annotations

import numpy as np
import pytest

from shared.config import ConfigError, load_config
from shared.envs import build_env, make_scripted
from shared.evaluation import check_player, eval_env_config
from shared.scripted import SCRIPTED_PLAYERS


def test_the_table_is_royalegyms_ladder_plus_the_runs_two_anchors():
    from royalegym.opponents import ladder

    rungs = [name for name, _ in ladder()]
    assert rungs[0] == "noop"
    assert SCRIPTED_PLAYERS == ("scripted:noop", "scripted:random_legal",
                                *("scripted:" + r for r in rungs[1:]))
    assert len(SCRIPTED_PLAYERS) == 7


def test_make_scripted_builds_the_ladders_bot_a_fresh_one_per_call():
    from royalegym.opponents import ladder

    classes = {f"scripted:{n}": type(b).__name__ for n, b in ladder()}
    for pid in SCRIPTED_PLAYERS[2:]:
        one, two = make_scripted(pid, 0.9), make_scripted(pid, 0.9)
        assert type(one).__name__ == classes[pid] and one is not two
    assert make_scripted("scripted:noop", 0.9) is None
    assert type(make_scripted("scripted:random_legal", 0.9)).__name__ == "RandomLegalOpponent"
    with pytest.raises(ValueError, match=r"unknown scripted player 'scripted:nobody'; known: scripted:noop, "
                                         r"scripted:random_legal, scripted:random, scripted:first-affordable"):
        make_scripted("scripted:nobody", 0.9)


def test_the_config_takes_every_scripted_id_and_refuses_another_naming_the_known_ones():
    cfg = load_config({"profile": "tiny", "ladder": {"scripted_opponents": list(SCRIPTED_PLAYERS)}})
    assert tuple(cfg.ladder.scripted_opponents) == SCRIPTED_PLAYERS
    with pytest.raises(ConfigError) as exc:
        load_config({"profile": "tiny", "ladder": {"scripted_opponents": ["scripted:noop", "scripted:pusher"]}})
    text = str(exc.value)
    assert "ladder.scripted_opponents" in text and "'scripted:pusher'" in text
    assert "known: " + ", ".join(SCRIPTED_PLAYERS) in text


def test_evaluation_players_are_every_scripted_id_and_a_snapshot():
    for pid in SCRIPTED_PLAYERS:
        assert check_player(pid) is None
    assert check_player("snap:0123456789abcdef") is None
    problem = check_player("scripted:first_affordable")
    assert problem.startswith("player 'scripted:first_affordable': expected snap:<snapshot_id> or one of ")
    assert "scripted:first-affordable" in problem


@pytest.mark.slow
def test_a_ladder_bot_plays_cards_from_a_mask_only_seat_and_beats_noop():
    """A mask_only seat still carries the mask planes the ladder bots read: first-affordable plays
    cards (a bot that saw no planes would only wait) and wins both sides against scripted:noop."""
    from services.evaluator.games import decision_cap, play_job
    from services.evaluator.players import ScriptedPlayer

    cfg = load_config({"profile": "tiny", "run_name": "t"})
    players = {p: ScriptedPlayer(p, cfg.ladder.random_legal_noop_prob)
               for p in ("scripted:first-affordable", "scripted:noop")}
    assert all(p.scripted_seat for p in players.values())
    seeds = np.array([11, 12], dtype=np.int64)
    records = play_job(build_env(eval_env_config(cfg.env)), players, job=0, a="scripted:first-affordable",
                       b="scripted:noop", seeds=[0], seed_set=seeds, master_seed=cfg.master_seed,
                       decision_ms=cfg.env.decision_ms)
    assert decision_cap(cfg.env.decision_ms) > 0 and len(records) == 4
    bot = [r for r in records if r.player == "scripted:first-affordable"]
    assert [r.outcome for r in bot] == [1, 1]
    assert all(r.cards_played > 0 for r in bot)
    assert all(r.cards_played == 0 for r in records if r.player == "scripted:noop")
