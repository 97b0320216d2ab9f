"""Playing evaluation games: one battle between two players on one seed and one side.

A game is named by (job, seed index, side): ``side`` 0 seats player ``a`` blue, 1 seats it red
(the record's ``ordinal``). Its env seed is entry ``seed`` of the fixed evaluation seed set
(``shared.evaluation.eval_seed_set``), its env is the evaluation env (training env, no
truncation: a full match), and each seat draws from its own stream
``eval/act/job/{job}/seed/{seed}/side/{side}/seat/{seat}``. So a game is a pure function of the
master seed, the env config, the two players' weights and those four numbers: the same job
gives the same records wherever and whenever it is played (tests/services/evaluator/test_service.py).

Each game becomes two EpisodeRecords (blue seat, red seat) with ``role="eval"``,
``iteration`` = the job id, ``battle`` = the seed index, ``ordinal`` = the side, and
``player`` / ``opponent`` the seat's player ids (the team's fixed interface;
``services.ladder.rating.extract_games`` fits exactly these).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from shared.envs import episode_record
from shared.evaluation import EVAL_ROLE
from shared.messages import SEATS, EpisodeRecord
from shared.seeding import stream

MAX_MATCH_SECONDS = 1800.0
"""Game time after which a match that has not ended is an error, not a result: a regulation
match with overtime lasts about 5 minutes (615 decisions at 500 ms), so 30 minutes means the
env lost its game-over condition."""


class GameError(RuntimeError):
    """A game that could not be played to its end; the text names the job, seed and side."""


def decision_cap(decision_ms: int) -> int:
    """Decisions after which a match is refused as endless (``MAX_MATCH_SECONDS``)."""
    return math.ceil(MAX_MATCH_SECONDS * 1000.0 / decision_ms)


def seat_rng(master_seed: int, job: int, seed: int, side: int, seat: int) -> np.random.Generator:
    return stream(master_seed, "eval/act/job/{job}/seed/{seed}/side/{side}/seat/{seat}",
                  job=job, seed=seed, side=side, seat=seat)


def play_game(env, a, b, *, job: int, seed: int, side: int, env_seed: int, master_seed: int,
              max_decisions: int, recorder=None) -> list[EpisodeRecord]:
    """Play one full match of ``a`` against ``b`` on an evaluation env (``build_env`` of
    ``shared.evaluation.eval_env_config``) and return its two records, blue seat first.

    ``a`` and ``b`` are players (``services.evaluator.players``); ``side`` 0 seats ``a`` blue.
    ``recorder`` (a ``royalegym.replay.ReplayRecorder``) is attached for this game only and holds
    its trace afterwards; without one the env records nothing (``env.recorder`` is None).
    Raises ValueError for a side other than 0/1, GameError for a match that does not start at
    tick 0 (a training curriculum's start), that has not ended after ``max_decisions`` decisions
    or that the env truncated.
    """
    if side not in (0, 1):
        raise ValueError(f"side {side!r}: 0 seats player a blue, 1 seats it red")
    env.recorder = recorder
    try:
        return _play(env, a, b, job=job, seed=seed, side=side, env_seed=env_seed, master_seed=master_seed,
                     max_decisions=max_decisions)
    finally:
        env.recorder = None


def _play(env, a, b, *, job, seed, side, env_seed, master_seed, max_decisions) -> list[EpisodeRecord]:
    seated = (a, b) if side == 0 else (b, a)
    # under frame stacking each seat of a game keeps its own history (players.StackedSeat)
    seated = seat_players(env, [getattr(p, "for_game", lambda p=p: p)() for p in seated])
    rngs = [seat_rng(master_seed, job, seed, side, s) for s in (0, 1)]
    # a searching seat saves the battle (env.snapshot), which needs every seat's observation memory
    snapshots = any(getattr(p, "saves_battle", False) for p in seated)
    mask_only = [] if snapshots else [SEATS[s] for s in (0, 1) if seated[s].scripted_seat]
    obs, _ = env.reset(seed=int(env_seed), options={"mask_only": mask_only} if mask_only else None)
    if env.battle_state.tick != 0:
        raise GameError(f"job {job} seed {seed} side {side}: the evaluation match started at tick "
                        f"{env.battle_state.tick}, not 0; the evaluation env must start every match from the default "
                        "start (shared.evaluation.eval_env_config drops env.state_mutator)")
    returns = [0.0, 0.0]
    cards = [0, 0]
    n_grid = getattr(getattr(env, "action_parser", None), "n_tile_actions", 1 << 30)
    for _ in range(max_decisions):
        chosen = {SEATS[s]: seated[s].act(obs[SEATS[s]], rngs[s]) for s in (0, 1)}
        obs, reward, term, trunc, info = env.step(chosen)
        for s in (0, 1):
            name = SEATS[s]
            returns[s] += float(reward[name])
            # a button press (env.ability_buttons) is not a card, as the rollout counts
            if chosen[name] != 0 and int(info[name].get("deploy_status", -1)) == 0 and chosen[name] < n_grid:
                cards[s] += 1
        if trunc["blue"] and not term["blue"]:
            raise GameError(f"job {job} seed {seed} side {side}: the env truncated an evaluation match; "
                            "the evaluation env must have no step limit (shared.evaluation.eval_env_config)")
        if term["blue"]:
            return [_record(s, seated, info[SEATS[s]], returns[s], cards[s], job, seed, side) for s in (0, 1)]
    raise GameError(f"job {job} seed {seed} side {side}: no game over after {max_decisions} decisions "
                    f"({MAX_MATCH_SECONDS:.0f} s of game time)")


def seat_players(env, seated: list) -> tuple:
    """The two seats' players (blue, red) of one game on ``env``: a searching player
    (``services.evaluator.searched.SearchedPlayer``) is bound to the env, its seat and its
    opponent as seated; every other player is kept."""
    out = list(seated)
    for s in (0, 1):
        if getattr(seated[s], "searches", False):
            out[s] = seated[s].bind(env, SEATS[s], seated[1 - s])
    return tuple(out)


def _record(seat: int, seated, info: Mapping, ret: float, cards: int, job: int, seed: int,
            side: int) -> EpisodeRecord:
    return episode_record(
        info, truncated=False,
        battle=seed, ordinal=side, seat=SEATS[seat], role=EVAL_ROLE,
        player=seated[seat].id, opponent=seated[1 - seat].id,
        cards_played=cards, undiscounted_return=ret, iteration=job,
    )


def play_job(env, players: Mapping[str, object], *, job: int, a: str, b: str, seeds: Sequence[int],
             seed_set: np.ndarray, master_seed: int, decision_ms: int,
             on_game: Callable[[int, int], None] | None = None, record_games: int = 0,
             traces: list | None = None, frame_every_tick: bool = False) -> list[EpisodeRecord]:
    """Every game of one job: for each seed index in ``seeds`` (in order), ``a`` blue then
    ``a`` red. ``players`` maps player id -> player and must hold ``a`` and ``b``. Returns
    4 * len(seeds) records. ``on_game(games_done, games_total)`` is called after each game.

    The first ``record_games`` games are played with a ``royalegym.replay.ReplayRecorder``
    (``frame_every_tick`` as given) and ``(seed index, side, trace)`` is appended to ``traces``
    for each; the others with none. Recording changes no action: the recorder only reads the
    engine.

    Raises ValueError for a seed index outside the seed set or a player not in ``players``."""
    for p in (a, b):
        if p not in players:
            raise ValueError(f"job {job}: no player {p!r} loaded")
    for s in seeds:
        if not 0 <= s < len(seed_set):
            raise ValueError(f"job {job}: seed index {s} is outside the evaluation seed set of "
                             f"{len(seed_set)} seeds (ladder.pool.eval_seed_count)")
    out: list[EpisodeRecord] = []
    total, cap = 2 * len(seeds), decision_cap(decision_ms)
    for s in seeds:
        for side in (0, 1):
            recorder = None
            if len(out) // 2 < record_games:
                from royalegym.replay import ReplayRecorder

                recorder = ReplayRecorder(frame_every_tick=frame_every_tick)
            out += play_game(env, players[a], players[b], job=job, seed=int(s), side=side,
                             env_seed=int(seed_set[s]), master_seed=master_seed, max_decisions=cap,
                             recorder=recorder)
            if recorder is not None and recorder.trace is not None and traces is not None:
                traces.append((int(s), side, recorder.trace))
            if on_game is not None:
                on_game(len(out) // 2, total)
    return out
