"""Who plays whom: the mirror / pool / scripted mixture turned into battles and episodes.

Three layers, each a pure function of its arguments (no state, no global RNG):

* ``role_counts`` turns the configured mixture into whole battles (a COUNT, fixed for the
  run, not a per-episode probability: royalelearn-facts 6.2; seed 004, role_counts);
* ``battle_roles`` lays those counts over battle indices with a seeded permutation, so the
  mirror battles spread across rollouts instead of filling the first ones;
* ``assign`` decides one episode of one battle (opponent and learner seat), drawn from that
  episode's own stream, so the same episode meets the same opponent whichever iteration or
  rollout happens to play it.

``plan_assignments`` is what the ladder answers a PlanRequest with. torch-free on purpose:
the ladder and the rollouts import it.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from fractions import Fraction

from shared.messages import Assignment
from shared.seeding import stream

ROLES = ("mirror", "pool", "scripted")
"""The three roles, in the order of ``ladder.mix`` and of ``role_counts``' result."""

LEARNER = "learner"
"""The opponent id of a mirror battle: the live policy plays both seats."""

_HALF = Fraction(1, 2)


def _exact(value: float) -> Fraction:
    """A mix share as the decimal it was written as.

    ``Fraction(repr(float(x)))``: the shortest decimal that round-trips to the float, i.e. the
    number in the config's JSON. Not ``Fraction(x)``, the float's exact binary value: 0.3 is
    stored as 0.29999999999999998890, so ``Fraction(0.3) * 5`` falls just below the half
    1.5 and would round DOWN, whereas the user asked for 0.3 of 5 battles = 1.5 -> 2. Not an
    epsilon either: any fixed epsilon is wrong for some n. With decimals every half is exact.
    """
    return Fraction(repr(float(value)))


def _round_half_up(x: Fraction) -> int:
    """floor(x + 1/2): halves round UP. Never Python's ``round``, which rounds halves to even
    and would give a 1-battle run under the shipped mixture no mirror (seed 004, role_counts)."""
    return math.floor(x + _HALF)


def _whole(value: object, name: str) -> int:
    """``value`` as a Python int >= 0 (numpy integers accepted, bools and floats refused).
    Raises ValueError naming it."""
    try:
        if isinstance(value, bool):
            raise TypeError
        n = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{name} {value!r}: expected a whole number >= 0") from None
    if n < 0:
        raise ValueError(f"{name} {value!r}: expected a whole number >= 0")
    return n


def _check_mix(mix: Sequence[float]) -> tuple[Fraction, Fraction, Fraction]:
    """The mix as three exact non-negative shares. Raises ValueError naming the mix for a
    wrong length, a non-number, a negative or non-finite share, or an all-zero mix."""
    try:
        values = [float(v) for v in mix]
    except (TypeError, ValueError):
        raise ValueError(f"ladder mix {mix!r}: expected three numbers (mirror, pool, scripted)") from None
    if len(values) != 3:
        raise ValueError(f"ladder mix {mix!r}: expected three shares (mirror, pool, scripted), got {len(values)}")
    for role, v in zip(ROLES, values):
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"ladder mix {mix!r}: the {role} share {v!r} must be a finite number >= 0")
    shares = tuple(_exact(v) for v in values)
    if sum(shares) == 0:
        raise ValueError(f"ladder mix {mix!r} is all zero; give at least one role a share")
    return shares  # type: ignore[return-value]


def role_counts(mix: Sequence[float], n_battles: int) -> tuple[int, int, int]:
    """(mirror, pool, scripted) battle counts for ``n_battles`` battles (seed 004, role_counts).

    The mix is normalised by its sum, so it need not sum to 1. Two-stage rounding, each stage
    to the nearest whole battle with halves rounding up, the last share taking the rest:

        mirror   = floor(n * m0 / (m0 + m1 + m2) + 1/2)
        pool     = floor((n - mirror) * m1 / (m1 + m2) + 1/2)      (0 when m1 + m2 == 0)
        scripted = n - mirror - pool

    So the three always sum to ``n_battles`` and each lies within one battle of its exact share
    (each stage is off by at most a half; the second's input is already off by at most a half).
    A quota under half a battle is 0: three battles cannot hold a tenth of one. Arithmetic is
    exact in fractions of the decimal shares (see ``_exact``), so no float error at halves.

    Raises ValueError for a bad mix (see ``_check_mix``) or a negative / non-integer n_battles.
    """
    n_battles = _whole(n_battles, "n_battles")
    m0, m1, m2 = _check_mix(mix)
    mirror = _round_half_up(n_battles * m0 / (m0 + m1 + m2))
    rest = n_battles - mirror
    pool = _round_half_up(rest * m1 / (m1 + m2)) if m1 + m2 else 0
    return mirror, pool, rest - pool


def battle_roles(master_seed: int, n_battles: int, mix: Sequence[float]) -> list[str]:
    """The role of every battle index, ``'mirror' | 'pool' | 'scripted'``, length n_battles.

    Exactly ``role_counts(mix, n_battles)`` of each, laid over the indices by a permutation
    drawn from stream ``match/roles/battles/{n_battles}`` (so it depends on the master seed and
    the battle count only, and mirror battles are spread across rollouts rather than packed
    into the first ones). Raises ValueError as ``role_counts`` does.
    """
    counts = role_counts(mix, n_battles)
    ordered = [role for role, count in zip(ROLES, counts) for _ in range(count)]
    order = stream(master_seed, "match/roles/battles/{battles}", battles=n_battles).permutation(n_battles)
    return [ordered[int(i)] for i in order]


def assign(master_seed: int, battle: int, ordinal: int, role: str, scripted_opponents: Sequence[str],
           pool_members: Sequence[str] = (), pool_weights: Sequence[float] | None = None) -> Assignment:
    """Who plays episode ``ordinal`` of battle ``battle``, a pure function of the arguments.

    * ``mirror``: opponent ``"learner"``, learner_seat -1 (the live policy holds both seats).
    * ``scripted``: opponent uniform over ``scripted_opponents``, learner_seat uniform 0/1.
    * ``pool``: opponent drawn from ``pool_members`` (the ladder's resident set) with
      probabilities ``pool_weights`` (its PFSP weights; None: uniform), learner_seat uniform
      0/1; while the pool is empty, a scripted opponent drawn exactly as for ``scripted`` and
      the role stays ``pool`` (a pool fallback: see ``is_pool_fallback``).

    Draws come from stream ``match/battle/{battle}/ordinal/{ordinal}``: the seat first, then the
    opponent, so an episode's seat does not depend on how many candidates there are (the pool
    filling up changes who the learner meets, not which side it plays).

    Raises ValueError for an unknown role, a negative battle or ordinal, or no candidate to
    draw from (empty ``scripted_opponents`` where one is needed).
    """
    if role not in ROLES:
        raise ValueError(f"role {role!r}: expected one of {', '.join(ROLES)}")
    battle, ordinal = _whole(battle, "battle"), _whole(ordinal, "ordinal")
    if role == "mirror":
        return Assignment(battle, ordinal, "mirror", LEARNER, -1)
    candidates = pool_members if role == "pool" and pool_members else scripted_opponents
    if not candidates:
        raise ValueError(f"battle {battle} is a {role} battle but scripted_opponents is empty")
    rng = stream(master_seed, "match/battle/{battle}/ordinal/{ordinal}", battle=battle, ordinal=ordinal)
    seat = int(rng.integers(2))
    if role == "pool" and pool_members and pool_weights is not None:
        opponent = candidates[_weighted_index(rng.random(), _cumulative(pool_weights, len(pool_members)))]
    else:
        opponent = candidates[int(rng.integers(len(candidates)))]
    return Assignment(battle, ordinal, role, opponent, seat)  # type: ignore[arg-type]


def _cumulative(weights: Sequence[float], n: int) -> list[float]:
    """Normalised cumulative sums of ``n`` weights. Raises ValueError naming the weights for a
    wrong length, a negative or non-finite weight, or an all-zero list."""
    try:
        w = [float(x) for x in weights]
    except (TypeError, ValueError):
        raise ValueError(f"pool_weights {weights!r}: expected one number per pool member") from None
    if len(w) != n:
        raise ValueError(f"pool_weights {w}: {len(w)} weights for {n} pool members; one each")
    if any(not math.isfinite(x) or x < 0 for x in w) or sum(w) <= 0:
        raise ValueError(f"pool_weights {w}: expected finite numbers >= 0, not all 0")
    total, acc, out = math.fsum(w), 0.0, []
    for x in w:
        acc += x
        out.append(acc / total)
    return out


def _weighted_index(u: float, cumulative: Sequence[float]) -> int:
    """The first k with u < cumulative[k] (u in [0, 1)); the last index if rounding left the
    total a hair under 1."""
    for k, c in enumerate(cumulative):
        if u < c:
            return k
    return len(cumulative) - 1


def is_pool_fallback(assignment: Assignment) -> bool:
    """True for a pool battle playing a scripted opponent because the pool was empty."""
    return assignment.role == "pool" and assignment.opponent.startswith("scripted:")


MAX_BATTLES = 1_000_000
"""Largest ``n_battles`` a PlanRequest may name: the role permutation is built over all of them.
The ladder refuses bigger requests; a learner refuses a rollout whose Hello would take its fleet
past these limits (services/learner/admission.py)."""
MAX_LOOKAHEAD = 10_000
MAX_PLAN_ASSIGNMENTS = 100_000
"""Assignments one PlanRequest may ask for (len(battles) * lookahead). Each costs ~70 us to
draw, so this bounds one reply at ~7 s of ladder time and a few MB on the wire."""


def plan_assignments(master_seed: int, n_battles: int, battles: Sequence[int], next_ordinals: Sequence[int],
                     lookahead: int, mix: Sequence[float], scripted_opponents: Sequence[str], *,
                     pool_members: Sequence[str] = (), pool_weights: Sequence[float] | None = None) -> list[Assignment]:
    """``lookahead`` assignments per listed battle, battle-major: for each ``battles[i]`` in
    order, ordinals ``next_ordinals[i] .. next_ordinals[i] + lookahead - 1``. Length
    ``len(battles) * lookahead``.

    ``battles`` are the iteration's global battle ids in slot order (a rollout keeps its ids
    while it lives, so after a loss they need not be 0..n-1); the roles are laid over their
    POSITIONS: ``battles[i]`` plays ``battle_roles(master_seed, n_battles, mix)[i]``, so the
    iteration holds exactly ``role_counts(mix, n_battles)`` whatever the ids. The episode draws
    use the id (``match/battle/{id}/ordinal/{k}``). ``pool_members`` / ``pool_weights`` are the
    ladder's resident set and its PFSP weights (see ``assign``), passed in so that the plan
    stays a pure function of its arguments.

    Raises ValueError for a length mismatch (battles, next_ordinals and n_battles must agree),
    lookahead < 1, a negative or repeated battle id, a negative ordinal, pool weights that are
    not one finite number >= 0 per member (not all 0), or anything ``role_counts`` / ``assign``
    refuse.
    """
    if len(battles) != len(next_ordinals):
        raise ValueError(f"{len(battles)} battles but {len(next_ordinals)} next_ordinals; one each")
    if len(battles) != n_battles:
        raise ValueError(f"{len(battles)} battles listed for an iteration of {n_battles}; list every battle")
    if lookahead < 1:
        raise ValueError(f"lookahead {lookahead}: must be >= 1")
    if len(set(battles)) != len(battles) or any(b < 0 for b in battles):
        raise ValueError(f"battles {list(battles)}: ids must be distinct and >= 0")
    if pool_members and pool_weights is not None:
        _cumulative(pool_weights, len(pool_members))  # refuse bad weights even with no pool battle
    roles = battle_roles(master_seed, n_battles, mix)
    out = []
    for position, (battle, first) in enumerate(zip(battles, next_ordinals)):
        for ordinal in range(first, first + lookahead):
            out.append(assign(master_seed, battle, ordinal, roles[position], scripted_opponents, pool_members,
                              pool_weights))
    return out
