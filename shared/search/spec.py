"""The search suffix of a player id: ``<player>+search:N`` or ``<player>+search:N:D``.

Any evaluation player (``snap:<id>``, ``latest``, ``champion``, ``scripted:<name>``) can be
asked to search at its choice decisions: ``snap:0123456789abcdef+search:8`` tries 8 candidate
actions per choice decision, each followed by ``D`` decisions of lookahead (default
``DEFAULT_DEPTH``: 15 s of game time at the 500-ms decision), and plays the best
(``shared.search.lookahead``). The searched player is a player of its own: its id, suffix
included, is what the records, ratings and strength tables carry, so a snapshot with and
without search are two rows side by side.

Torch-free: the ladder validates ids with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SEARCH_MARK = "+search:"
DEFAULT_DEPTH = 30
"""Decisions played after a candidate before it is scored: 15 s of game time at 500 ms, long
enough for a placed troop to reach a tower or a defence to meet its push
(/work/shared/reference/search-probe.md measured 30 decisions beating ``defend`` 29-11)."""
MAX_CANDIDATES = 64
MAX_DEPTH = 240
_SUFFIX = re.compile(r"^(\d+)(?::(\d+))?$")


@dataclass(frozen=True)
class SearchSpec:
    """How much a searched player searches: ``candidates`` actions tried per choice decision
    (>= 2: the no-op and at least one play), each followed by ``depth`` decisions (>= 1)."""

    candidates: int
    depth: int = DEFAULT_DEPTH

    def suffix(self) -> str:
        """The id suffix naming this spec (the depth only when it is not the default)."""
        tail = "" if self.depth == DEFAULT_DEPTH else f":{self.depth}"
        return f"{SEARCH_MARK}{self.candidates}{tail}"


def split_search(player: str) -> tuple[str, SearchSpec | None]:
    """``(base player id, SearchSpec)`` of ``player``; ``(player, None)`` without a suffix.

    Raises ValueError naming the id and the grammar for a malformed suffix, a candidate count
    outside 2..``MAX_CANDIDATES``, a depth outside 1..``MAX_DEPTH``, or a suffix twice.
    """
    if SEARCH_MARK not in player:
        return player, None
    base, _, tail = player.partition(SEARCH_MARK)
    grammar = (f"expected <player>{SEARCH_MARK}N or <player>{SEARCH_MARK}N:D with N candidates per choice decision "
               f"(2..{MAX_CANDIDATES}) and D decisions of lookahead (1..{MAX_DEPTH}, default {DEFAULT_DEPTH})")
    m = _SUFFIX.match(tail)
    if not base or m is None or SEARCH_MARK in base:
        raise ValueError(f"player {player!r}: {grammar}")
    n = int(m.group(1))
    d = int(m.group(2)) if m.group(2) is not None else DEFAULT_DEPTH
    if not 2 <= n <= MAX_CANDIDATES or not 1 <= d <= MAX_DEPTH:
        raise ValueError(f"player {player!r}: {grammar}")
    return base, SearchSpec(n, d)


def with_search(base: str, spec: SearchSpec | None) -> str:
    """The player id of ``base`` searching with ``spec`` (``base`` itself for None)."""
    return base if spec is None else base + spec.suffix()


import msgspec  # noqa: E402  (the wire struct below; the rest of the module needs nothing)


class RolloutSearch(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """What a rollout searches at its learner seats' choice decisions (sent in ``Welcome.search``
    under ``learner.algorithm = "alphazero"``; services/rollout/search.py): at most
    ``candidates`` actions per searched decision (the learner names them in the Step), each
    followed by ``depth`` decisions of playout; ``c_scale`` as ``AlphaZeroConfig.c_scale``."""

    candidates: int
    depth: int = DEFAULT_DEPTH
    c_scale: float = 0.1
    sim_opponent: str = "battle"
    """``AlphaZeroConfig.sim_opponent``: "battle" asks the learner (``SimActQuery``) for a network
    opponent's moves in the simulations; "random" plays RoyaleGym's ``random`` there."""
    leaf_value: str = "board"
    """``AlphaZeroConfig.leaf_value``: "board" scores a leaf in the rollout; "critic" asks the
    learner (``LeafQuery``) for each leaf's n-step return with its critic's V(leaf)."""
    """sigma's scale in the move rule (``shared.search.targets.gumbel_move_index``)."""
