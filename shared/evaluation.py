"""What every evaluation game shares: the fixed seed set, the evaluation env, the player ids.

Evaluation is kept apart from training (royalelearn-facts 6.4 "Evaluation separation"):

* the env is the training env with truncation removed (``EnvConfig.max_steps = 0``): full
  matches, because a step cap turns most games into draws; and without the training
  curriculum (``env.state_mutator``, ``env.done_condition``): every game starts at tick 0;
* the seeds are a fixed set of ``ladder.pool.eval_seed_count`` env seeds drawn ONCE from the
  named stream ``eval/seed_set``; a game names a seed by its index in the set, and the gate's
  decision record carries the set's hash, so two gates are comparable only on one set;
* a player is a frozen snapshot ``snap:<snapshot_id>`` or a scripted player
  (``shared.scripted.SCRIPTED_PLAYERS``: the gate's anchors ``scripted:noop``,
  ``scripted:random_legal`` and RoyaleGym's ladder bots, the strength measurement's anchors),
  either of them optionally searching at its choice decisions (``<player>+search:N[:D]``,
  ``shared.search.spec``).

Torch-free: the ladder (gate runner) and the evaluator both read it.
"""

from __future__ import annotations

import hashlib

import msgspec
import numpy as np

from shared.config import EnvConfig
from shared.messages import snapshot_of
from shared.scripted import SCRIPTED_PLAYERS
from shared.seeding import stream

EVAL_ROLE = "eval"
"""``EpisodeRecord.role`` of an evaluation game (``services.ladder.rating.kind_of``)."""
ANCHORS = ("scripted:noop", "scripted:random_legal")
"""The scripted anchors of the gate's condition 2 (royalelearn-facts 6.4)."""
SEED_HIGH = 2**63 - 1
"""Env seeds are drawn in [0, 2^63 - 1): gymnasium's signed 64-bit seed check accepts them."""


def eval_env_config(env: EnvConfig) -> EnvConfig:
    """The evaluation env: ``env`` with truncation removed (``max_steps`` 0: full matches) and
    without the training curriculum (``state_mutator`` and ``done_condition`` None,
    shared/curricula.py): every evaluation game starts as a normal match at tick 0 and ends at
    game over, so strength measured under one curriculum compares with another's."""
    return msgspec.structs.replace(env, max_steps=0, state_mutator=None, done_condition=None)


def eval_seed_set(master_seed: int, count: int) -> np.ndarray:
    """(count,) int64 env seeds, drawn once from stream ``eval/seed_set``: a pure function of
    the master seed and the count (the first k seeds of a longer set are NOT the set of size k,
    so the count is part of the set's identity). Raises ValueError for count < 1."""
    if count < 1:
        raise ValueError(f"eval seed count {count}: expected >= 1 (ladder.pool.eval_seed_count)")
    return stream(master_seed, "eval/seed_set").integers(0, SEED_HIGH, size=count, dtype=np.int64)


def seed_set_hash(seeds: np.ndarray) -> str:
    """sha256 (16 hex) of the seed set's little-endian int64 bytes, for the decision record."""
    return hashlib.sha256(np.asarray(seeds, dtype="<i8").tobytes()).hexdigest()[:16]


def seeds_for_games(games: int) -> int:
    """Seeds a paired comparison of ``games`` battles plays: each seed twice (both sides), so
    ceil(games / 2). ``shared.config.check_consistency`` keeps it within the seed set."""
    return (games + 1) // 2


GREEDY_MARK = "+greedy"
"""The suffix of a snapshot that plays its policy's argmax (temperature 0) instead of a sample:
``snap:<id>+greedy`` (services/evaluator/players.py ``GreedyPlayer``; docs/learning.md, "A fixed
deck: labels against the predecessor", measured it)."""


def split_greedy(player: str) -> tuple[str, bool]:
    """``(base id, True)`` for ``<base>+greedy``, else ``(player, False)``."""
    if player.endswith(GREEDY_MARK):
        return player[: -len(GREEDY_MARK)], True
    return player, False


def check_player(player: str) -> str | None:
    """Why ``player`` is not an evaluation player id (None when it is one). A searching player
    (``<player>+search:N[:D]``, ``shared.search.spec``) is checked on its base and its suffix; a
    greedy one (``snap:<id>+greedy``) must be an unsearched snapshot."""
    from shared.search.spec import SEARCH_MARK, split_search

    whole = player
    player, _ = split_greedy(player)
    if GREEDY_MARK in whole:
        if GREEDY_MARK in player or SEARCH_MARK in player:  # not at the end, twice, or with a search
            return (f"player {whole!r}: {GREEDY_MARK} plays a snapshot's argmax unsearched, so it ends the id once "
                    f"and takes no search (snap:<id>{GREEDY_MARK}, or snap:<id>+search:N alone)")
        if snapshot_of(player) is None:
            return (f"player {whole!r}: {GREEDY_MARK} takes the argmax of a network's policy; only a snapshot "
                    f"(snap:<snapshot_id>{GREEDY_MARK}) has one")
    try:
        player, spec = split_search(player)
    except ValueError as exc:
        return str(exc)
    sid = snapshot_of(player)
    if spec is not None and spec.own != "sample" and sid is None:
        return (f"player {whole!r}: own={spec.own} picks from a network's policy; only a snapshot has one "
                "(snap:<id>+search:N,...,own=argmax)")
    if sid is not None:
        if len(sid) == 16 and all(c in "0123456789abcdef" for c in sid):
            return None
        return f"player {player!r}: a snapshot id is 16 lowercase hex characters (snap:<snapshot_id>)"
    if player in SCRIPTED_PLAYERS:
        return None
    return f"player {player!r}: expected snap:<snapshot_id> or one of {', '.join(SCRIPTED_PLAYERS)}"


SCORE_OF_OUTCOME = {1: 1.0, 0: 0.5, -1: 0.0}
"""A seat's score from its outcome: a draw counts half (royalelearn-facts 6.4)."""


def side_scores(records, a: str, b: str, seeds) -> np.ndarray:
    """(len(seeds), 2) float64: player ``a``'s score against ``b`` on each seed, column 0 with
    ``a`` blue (ordinal 0), column 1 with ``a`` red (ordinal 1), each in {0, 0.5, 1}: the shape
    ``services.ladder.gate.decide_gate`` takes. ``records`` are evaluation EpisodeRecords (any
    seat: a game is read from whichever of its two records comes first). Raises ValueError
    naming the first seed and side with no record of a game between ``a`` and ``b``."""
    found: dict[tuple[int, int], float] = {}
    for rec in records:
        if rec.role != EVAL_ROLE or {rec.player, rec.opponent} != {a, b} or rec.ordinal not in (0, 1):
            continue
        key = (rec.battle, rec.ordinal)
        if key not in found:
            score = SCORE_OF_OUTCOME[int(rec.outcome)]
            found[key] = score if rec.player == a else 1.0 - score
    out = np.zeros((len(seeds), 2))
    for i, s in enumerate(seeds):
        for side in (0, 1):
            if (s, side) not in found:
                raise ValueError(f"no evaluation game of {a} vs {b} on seed {s} with {a} "
                                 f"{'blue' if side == 0 else 'red'}")
            out[i, side] = found[(s, side)]
    return out
