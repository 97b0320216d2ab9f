"""Search at play on real RoyaleGym battles (tiny profile): the battle a search saves is left as
it was, candidates tie when they are the same action, a searched game is a pure function of its
job, and the CLI names a searching player and what its search cost."""

from __future__ import annotations

import numpy as np
import pytest

from services.evaluator.games import play_job
from services.evaluator.players import ScriptedPlayer
from services.evaluator.searched import SearchedPlayer, opponent_model
from shared.config import load_config
from shared.envs import build_env
from shared.evaluation import eval_env_config, eval_seed_set
from shared.search.lookahead import Lookahead, board_value
from shared.search.spec import SearchSpec

NOOP, DEFEND = "scripted:noop", "scripted:defend"


@pytest.fixture(scope="module")
def cfg():
    return load_config({"profile": "tiny", "run_name": "t"})


def first_choice(env, seed: int):
    """The env reset on ``seed`` and stepped with no-ops until blue has more than the no-op legal."""
    obs, _ = env.reset(seed=seed)
    for _ in range(400):
        if int(np.count_nonzero(obs["blue"]["action_mask"])) > 1:
            return obs
        obs, *_ = env.step({"blue": 0, "red": 0})
    raise AssertionError("no choice decision in 400 decisions")


def test_a_simulation_leaves_the_battle_as_it_was_and_the_same_candidate_scores_the_same(cfg):
    env = build_env(eval_env_config(cfg.env))
    obs = first_choice(env, 11)
    legal = np.flatnonzero(obs["blue"]["action_mask"])
    play = int(legal[-1])
    before = env.engine.state_hash()
    look = Lookahead(eval_env_config(cfg.env), depth=6)
    defend = ScriptedPlayer(DEFEND, 0.9)
    scores = look.scores(env, "blue", [0, play, play, 0], defend, seed=5)
    assert env.engine.state_hash() == before  # the real battle is untouched
    assert scores[1] == scores[2] and scores[0] == scores[3]  # common random numbers: same action, same score
    assert look.stats.decisions == 1 and look.stats.simulations == 4 and look.stats.sim_steps == 4 * 7
    # the real battle stepped with the same commands as the simulation's first decision matches it
    theirs = defend.act(obs["red"], np.random.default_rng((5, 2)))
    sim = look.sim_env()
    sim.reset(options={"snapshot": env.snapshot(), "mask_only": ["blue", "red"]})
    sim.step({"blue": play, "red": theirs})
    env.step({"blue": play, "red": theirs})
    assert sim.engine.state_hash() == env.engine.state_hash()
    assert board_value(sim.battle_state, 0) == board_value(env.battle_state, 0)


def test_a_searched_game_is_a_pure_function_of_its_job_and_carries_the_searched_id(cfg):
    base = ScriptedPlayer(DEFEND, cfg.ladder.random_legal_noop_prob)
    sid = DEFEND + "+search:3:4"

    def run():
        players = {sid: SearchedPlayer(sid, base, SearchSpec(3, 4), eval_env_config(cfg.env)),
                   NOOP: ScriptedPlayer(NOOP, 0.9)}
        recs = play_job(build_env(eval_env_config(cfg.env)), players, job=3, a=sid, b=NOOP, seeds=[0],
                        seed_set=eval_seed_set(cfg.master_seed, cfg.ladder.pool.eval_seed_count), master_seed=cfg.master_seed,
                        decision_ms=cfg.env.decision_ms)
        return recs, players[sid].stats

    first, stats = run()
    again, _ = run()
    assert first == again
    assert [(r.player, r.opponent) for r in first] == [(sid, NOOP), (NOOP, sid), (NOOP, sid), (sid, NOOP)]
    assert stats.decisions > 0 and stats.simulations <= 3 * stats.decisions
    assert stats.sim_steps <= 5 * stats.simulations


def test_the_opponent_in_a_simulation_is_the_battles_own_when_it_keeps_no_state(cfg):
    defend = ScriptedPlayer(DEFEND, 0.9)
    assert opponent_model(defend) is defend
    searched = SearchedPlayer(DEFEND + "+search:2", defend, SearchSpec(2), eval_env_config(cfg.env))
    assert opponent_model(searched) is defend  # no search inside a search: its base plays
    stateful = type("Stacked", (), {"stateless": False, "id": "snap:x"})()
    assert opponent_model(stateful).id == "scripted:random"


def test_eval_prints_what_the_search_cost_and_refuses_a_bad_suffix(tmp_path, capsys):
    from royalefleet.cli import main

    base = ["--profile", "tiny", "--runs-dir", str(tmp_path)]
    assert main(["eval", NOOP + "+search:1", NOOP, *base]) == 2
    assert "royalefleet eval: player 'scripted:noop+search:1': expected <player>+search:N" in capsys.readouterr().err
    assert main(["eval", "latest+search:4", NOOP, *base]) == 2
    assert "has no snapshot under" in capsys.readouterr().err
    assert main(["eval", "scripted:random_legal+search:2:3", NOOP, "--games", "2", *base]) == 0
    out = capsys.readouterr().out
    assert "scripted:random_legal+search:2:3 vs scripted:noop: score" in out
    assert "  scripted:random_legal+search:2:3: " in out and "searched decisions/s" in out


def test_eval_record_writes_the_first_games_as_pages_and_changes_no_score(tmp_path, capsys):
    from royalefleet.cli import main

    base = ["scripted:random_legal", NOOP, "--games", "2", "--profile", "tiny", "--runs-dir", str(tmp_path)]
    assert main(["eval", *base]) == 0
    plain = capsys.readouterr().out.splitlines()
    assert main(["eval", *base, "--record", "1", "--out", str(tmp_path / "pages")]) == 0
    recorded = capsys.readouterr().out.splitlines()
    score = [line for line in plain if " vs scripted:noop: score " in line]
    assert score and score == [line for line in recorded if " vs scripted:noop: score " in line]
    page = tmp_path / "pages" / "job0-seed0-a_blue.html"
    assert f"  recorded seed 0, A blue: {page}" in recorded
    assert page.is_file() and (tmp_path / "pages" / "job0-seed0-a_blue.msgpack").is_file()
    assert sorted(p.name for p in (tmp_path / "pages").iterdir()) == ["job0-seed0-a_blue.html", "job0-seed0-a_blue.msgpack"]


def test_the_evaluator_counts_what_its_searching_players_spent_per_job():
    from prometheus_client import generate_latest

    from services.evaluator.service import EvaluatorMetrics, search_totals
    from shared.search.lookahead import SearchStats

    class Searching:
        def __init__(self, *numbers):
            self.stats = SearchStats(*numbers)

    plain = object()
    players = {"snap:a+search:8": Searching(3, 24, 700, 1.5), NOOP: plain}
    metrics = EvaluatorMetrics()
    before = search_totals(players)
    assert before == {"snap:a+search:8": (3, 24, 700, 1.5)}
    players["snap:a+search:8"].stats.add(SearchStats(2, 16, 480, 1.0))  # what the job spent
    metrics.count_search(before, players)
    text = generate_latest(metrics.registry).decode()
    assert "royalefleet_evaluator_search_decisions_total 2.0" in text
    assert "royalefleet_evaluator_search_simulations_total 16.0" in text
    assert "royalefleet_evaluator_search_sim_steps_total 480.0" in text
    assert "royalefleet_evaluator_search_seconds_total 1.0" in text


def test_the_eval_line_says_how_many_overrules_fresh_playouts_did_not_confirm():
    from royalefleet.cmd_eval import search_line
    from shared.search.lookahead import SearchStats

    class Searching:
        id = "scripted:defend+search:12,confirm=6"
        stats = SearchStats(decisions=40, simulations=900, sim_steps=18_000, seconds=20.0, chose_other=10,
                            unconfirmed=3)

    line = search_line(Searching(), games=2, elapsed_s=25.0)
    assert line == ("  scripted:defend+search:12,confirm=6: 40 searched decisions (20.0 a game), 900 simulations, "
                    "18000 simulated decisions; 20 s of the 25 s in search (2.00 searched decisions/s); the search "
                    "overruled the player's own pick at 25% of them (3 more overrules not confirmed by fresh playouts)")
    Searching.stats = SearchStats(decisions=40, chose_other=10)
    assert search_line(Searching(), games=2, elapsed_s=25.0).endswith("at 25% of them")
