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

import math
import re
from dataclasses import dataclass

from shared.scripted import LADDER_RUNGS

SEARCH_MARK = "+search:"
DEFAULT_DEPTH = 30
"""Decisions played after a candidate before it is scored: 15 s of game time at 500 ms, long
enough for a placed troop to reach a tower or a defence to meet its push
(/work/shared/reference/search-probe.md measured 30 decisions beating ``defend`` 29-11)."""
MAX_CANDIDATES = 64
MAX_DEPTH = 240
_SUFFIX = re.compile(r"^(\d+)(?::(\d+))?$")


OPTION_NAMES = ("p", "sh", "cont", "opp", "vs", "keep", "cand", "redeal", "confirm", "own")
"""The options of a search suffix after N[:D], ``,name=value`` each, in this canonical order
(``SearchSpec`` says what each means); an option at its default is left out of the id."""
MAX_PLAYOUTS = 64
SIM_BOTS = ("noop", "random_legal") + LADDER_RUNGS
"""The scripted players a simulation may play (``scripted:<name>``): a continuation (``cont``)
or a simulated opponent (``opp``)."""
SELF = "self"
"""``cont=self``: the searching player's own base continues its candidates (a snapshot's policy,
a scripted bot's own choices)."""
DEFAULT_CONT = "random"
CANDIDATE_SOURCES = ("random", "plans")
"""``cand=``: where a player's candidates after its own pick and the no-op come from: random
legal plays for a scripted player and the policy's Gumbel-top-k for a snapshot (the default), or
``plans`` (``shared.search.plans``: each card at ``defend``'s anchor and pushed down either lane)."""
OWN_PICKS = ("sample", "argmax")
"""``own=``: a snapshot's own pick, the candidate ``keep`` favours: a sample of its policy (the
default, the Gumbel draw's first) or its argmax, so that where the search finds nothing better
the label is the network's mode, not a sample of its spread (docs/learning.md, "Fine-tuned from
generation 0")."""


@dataclass(frozen=True)
class SearchSpec:
    """How much a searched player searches: ``candidates`` actions tried per choice decision
    (>= 2: the no-op and at least one play), each followed by ``depth`` decisions (>= 1).

    The options (docs/search.md, "Targets worth distilling"); every default is the original
    search's, so ``+search:N[:D]`` plays exactly as it always did:

    * ``playouts`` (``p=K``, 1..64): playouts per candidate, each with its own seeds (playout j of
      every candidate shares j's streams: common random numbers across candidates);
    * ``halving`` (``sh=1``): sequential halving over the candidates with the budget of
      ``candidates x playouts`` playouts (ceil(log2 N) rounds, the better half by mean score kept
      after each, the player's own pick always kept), as Gumbel AlphaZero's root does;
    * ``cont`` (``cont=<name>``): who plays the searching seat after its candidate: RoyaleGym's
      ``random`` (the default), any of ``SIM_BOTS``, or ``self`` (the player's own base);
    * ``opponents`` (``opp=a/b/c``): the other seat in the simulations, playout j played by
      ``opponents[j mod len]`` (scripted names of ``SIM_BOTS``); empty: the battle's own opponent;
    * ``value_scale`` (``vs=S``, tower HP): each playout's board difference mapped to
      tanh(diff / S) in [-1, 1] before averaging (a fixed scale, no per-decision min-max); 0: the
      raw board difference;
    * ``keep`` (``keep=M``, in score units: tanh units under ``vs``): the player's own pick is
      played unless another candidate's mean score beats it by more than M;
    * ``cand`` (``cand=plans``): the candidates after the player's own pick (a scripted player's
      move, a snapshot's sample of its policy) and the no-op are its cards' plan moves
      (``shared.search.plans.slot_plans``), not random legal plays or the policy's Gumbel draw
      (``CANDIDATE_SOURCES``);
    * ``redeal`` (``redeal=1``): every playout starts from the battle with the enemy's cards the
      searching seat has not seen redealt (``shared.search.hidden``), so the search does not choose
      by the enemy's real hand, which the seat cannot see;
    * ``confirm`` (``confirm=C``, 0 off, up to 64): when the move leaves the player's own pick, the
      own pick and the two best other finalists are played again, C more playouts each on streams
      none has seen, and those fresh playouts alone choose (``keep`` still favouring the own pick;
      ``shared.search.halving.confirm``): a departure chosen on noise rarely repeats;
    * ``own`` (``own=argmax``, a snapshot only): its own pick is its policy's argmax, not a sample
      (``OWN_PICKS``); the other candidates are drawn as before.
    """

    candidates: int
    depth: int = DEFAULT_DEPTH
    playouts: int = 1
    halving: bool = False
    cont: str = DEFAULT_CONT
    opponents: tuple[str, ...] = ()
    value_scale: float = 0.0
    keep: float = 0.0
    cand: str = "random"
    redeal: bool = False
    confirm: int = 0
    own: str = "sample"

    def options(self) -> str:
        """The ``,name=value`` options of the id, canonical (defaults left out)."""
        parts = []
        if self.playouts != 1:
            parts.append(f"p={self.playouts}")
        if self.halving:
            parts.append("sh=1")
        if self.cont != DEFAULT_CONT:
            parts.append(f"cont={self.cont}")
        if self.opponents:
            parts.append("opp=" + "/".join(self.opponents))
        if self.value_scale:
            parts.append(f"vs={self.value_scale:g}")
        if self.keep:
            parts.append(f"keep={self.keep:g}")
        if self.cand != "random":
            parts.append(f"cand={self.cand}")
        if self.redeal:
            parts.append("redeal=1")
        if self.confirm:
            parts.append(f"confirm={self.confirm}")
        if self.own != "sample":
            parts.append(f"own={self.own}")
        return "".join("," + p for p in parts)

    def suffix(self) -> str:
        """The id suffix naming this spec (the depth only when it is not the default)."""
        tail = "" if self.depth == DEFAULT_DEPTH else f":{self.depth}"
        return f"{SEARCH_MARK}{self.candidates}{tail}{self.options()}"


def _float_option(name: str, text: str, problem) -> float:
    try:
        x = float(text)
    except ValueError:
        raise problem(f"{name}={text!r} is not a number") from None
    if not math.isfinite(x) or x < 0:
        raise problem(f"{name}={text!r} must be a finite number >= 0")
    return x


def parse_options(text: str, problem) -> dict:
    """The ``SearchSpec`` fields of ``,name=value`` options ``text`` (without its first comma).
    ``problem(reason)`` builds the exception raised for a bad one (naming it)."""
    out: dict = {}
    for part in text.split(","):
        name, eq, value = part.partition("=")
        if not eq or name not in OPTION_NAMES:
            raise problem(f"option {part!r}: expected name=value with name one of {', '.join(OPTION_NAMES)}")
        if name in out:
            raise problem(f"option {name!r} given twice")
        out[name] = value
    fields: dict = {}
    if "p" in out:
        if not out["p"].isdigit() or not 1 <= int(out["p"]) <= MAX_PLAYOUTS:
            raise problem(f"p={out['p']!r}: playouts per candidate are 1..{MAX_PLAYOUTS}")
        fields["playouts"] = int(out["p"])
    if "confirm" in out:
        if not out["confirm"].isdigit() or not 0 <= int(out["confirm"]) <= MAX_PLAYOUTS:
            raise problem(f"confirm={out['confirm']!r}: confirming playouts are 0 (off) to {MAX_PLAYOUTS}")
        fields["confirm"] = int(out["confirm"])
    for key, field_name, what in (("sh", "halving", "sequential halving"),
                                  ("redeal", "redeal", "redealing the enemy's unseen cards")):
        if key in out:
            if out[key] not in ("0", "1"):
                raise problem(f"{key}={out[key]!r}: {what} is {key}=1 (on) or {key}=0 (off)")
            fields[field_name] = out[key] == "1"
    if "cont" in out:
        if out["cont"] not in SIM_BOTS + (SELF,):
            raise problem(f"cont={out['cont']!r}: the continuation is one of {', '.join(SIM_BOTS + (SELF,))}")
        fields["cont"] = out["cont"]
    if "opp" in out:
        names = tuple(out["opp"].split("/"))
        bad = [n for n in names if n not in SIM_BOTS]
        if bad or len(set(names)) != len(names):
            raise problem(f"opp={out['opp']!r}: simulated opponents are distinct names of {', '.join(SIM_BOTS)} "
                          "separated by /")
        fields["opponents"] = names
    if "cand" in out:
        if out["cand"] not in CANDIDATE_SOURCES:
            raise problem(f"cand={out['cand']!r}: candidates come from one of {', '.join(CANDIDATE_SOURCES)}")
        fields["cand"] = out["cand"]
    if "own" in out:
        if out["own"] not in OWN_PICKS:
            raise problem(f"own={out['own']!r}: a snapshot's own pick is one of {', '.join(OWN_PICKS)}")
        fields["own"] = out["own"]
    for key, field_name in (("vs", "value_scale"), ("keep", "keep")):
        if key in out:
            fields[field_name] = _float_option(key, out[key], problem)
    return fields


def split_search(player: str) -> tuple[str, SearchSpec | None]:
    """``(base player id, SearchSpec)`` of ``player``; ``(player, None)`` without a suffix.

    Raises ValueError naming the id and the grammar for a malformed suffix, a candidate count
    outside 2..``MAX_CANDIDATES``, a depth outside 1..``MAX_DEPTH``, or a suffix twice; naming the
    option and its range for a bad option.
    """
    if SEARCH_MARK not in player:
        return player, None
    base, _, tail = player.partition(SEARCH_MARK)
    grammar = (f"expected <player>{SEARCH_MARK}N or <player>{SEARCH_MARK}N:D with N candidates per choice decision "
               f"(2..{MAX_CANDIDATES}) and D decisions of lookahead (1..{MAX_DEPTH}, default {DEFAULT_DEPTH}), "
               f"then optionally ,name=value options ({', '.join(OPTION_NAMES)}; docs/search.md)")
    head, comma, opts = tail.partition(",")
    m = _SUFFIX.match(head)
    if not base or m is None or SEARCH_MARK in base:
        raise ValueError(f"player {player!r}: {grammar}")
    n = int(m.group(1))
    d = int(m.group(2)) if m.group(2) is not None else DEFAULT_DEPTH
    if not 2 <= n <= MAX_CANDIDATES or not 1 <= d <= MAX_DEPTH:
        raise ValueError(f"player {player!r}: {grammar}")
    fields = parse_options(opts, lambda why: ValueError(f"player {player!r}: {why}")) if comma else {}
    return base, SearchSpec(n, d, **fields)


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
    """sigma's scale in the move rule (``shared.search.targets.gumbel_move_index``)."""
    sim_opponent: str = "battle"
    """``AlphaZeroConfig.sim_opponent``: "battle" asks the learner (``SimActQuery``) for a network
    opponent's moves in the simulations; "random" plays RoyaleGym's ``random`` there."""
    leaf_value: str = "board"
    """``AlphaZeroConfig.leaf_value``: "board" scores a leaf in the rollout; "critic" asks the
    learner (``LeafQuery``) for each leaf's n-step return with its critic's V(leaf)."""
    playouts: int = 1
    """``AlphaZeroConfig.playouts`` (``SearchSpec.playouts``, the players' ``p=K``)."""
    halving: bool = False
    """``AlphaZeroConfig.halving`` (``SearchSpec.halving``, ``sh=1``)."""
    cont: str = DEFAULT_CONT
    """``AlphaZeroConfig.continuation`` (``SearchSpec.cont``, ``cont=``)."""
    opponents: tuple[str, ...] = ()
    """``AlphaZeroConfig.sim_opponents`` (``SearchSpec.opponents``, ``opp=a/b``)."""
    value_scale: float = 0.0
    """``AlphaZeroConfig.value_scale`` (``SearchSpec.value_scale``, ``vs=S``)."""
    keep: float = 0.0
    """``AlphaZeroConfig.keep`` (``SearchSpec.keep``, ``keep=M``)."""
    redeal: bool = False
    """``AlphaZeroConfig.redeal`` (``SearchSpec.redeal``, ``redeal=1``): the rollout passes the
    seat's ``enemy_cards_seen``. (``candidates_from`` is the learner's: it names the candidates.)"""

    def spec(self) -> SearchSpec:
        """The ``SearchSpec`` a ``+search`` player with the same options searches with."""
        return SearchSpec(self.candidates, self.depth, playouts=self.playouts, halving=self.halving, cont=self.cont,
                          opponents=tuple(self.opponents), value_scale=self.value_scale, keep=self.keep,
                          redeal=self.redeal)

    def stable(self) -> bool:
        """True when the move is the players' rule (``shared.search.halving.evaluate``'s pick)
        rather than Gumbel + sigma(min-max q): any of playouts, halving, value_scale, keep set."""
        return self.playouts != 1 or self.halving or self.value_scale > 0 or self.keep > 0
