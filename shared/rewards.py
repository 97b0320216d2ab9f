"""The default reward: the terminal objective plus three potential-based shaping terms.

Every shaping term is ``F = gamma * Phi(s') - Phi(s)`` (Ng, Harada and Russell 1999), so over an
episode it sums to ``gamma^T Phi(s_T) - Phi(s_0)`` and cannot change which policy is optimal. Only
``WinLossReward`` is the objective; the rest makes the signal denser (seed 004, royalelearn.rewards;
royalegym-notes section 7).

    default_potential_reward()  ==  WinLossReward            x 1.0   (the objective, "terminal")
                                  + PotentialCrownReward     x 0.2   Phi = (own - foe crowns) / 3
                                  + PotentialTowerHPReward   x 0.1   Phi = (sum own hp/max - foe's) / 3
                                  + CommittedElixirPotential x 0.05  Phi = ((bar + board) - foe's) / 10

EXACT ARITHMETIC. A potential is a ``fractions.Fraction``, the discounting is done on fractions and
there is one conversion to float, at the end. ``Phi(s, red) == -Phi(s, blue)`` holds as rationals
(each potential is a difference of two per-side quantities), and float() of a rational rounds
symmetrically, so every term gives the two seats rewards that are exact negatives as floats too.
``PotentialReward.exact_reward`` returns the Fraction, which is what the tests telescope.

THE DISCOUNT IS THE RUN'S. ``set_gamma(reward, gamma)`` must be called with the value the
``advantage.gamma`` schedule is at, once per iteration, on the reward of every environment (the
discount GAE bootstraps with and the one the shaping is computed with are then one number). Until it
is called the shaping terms use gamma = 1. It is deliberately not in ``config()``: it moves every
iteration and does not identify the environment.

A FINISHED BATTLE HAS POTENTIAL ZERO. Phi(s_T) is taken as 0 when ``state.game_over``, so the episode
sum is ``-Phi(s_0)``, the same whatever the policy does; read off the final state, Phi(s_T) would be
the margin (a 3-0 win three times a 1-0 win in crowns) and the shaping would pay for it beside the
objective. A TRUNCATION (a step limit) is not a finished battle: the position keeps its potential
and the value estimator bootstraps from it.

READING THE TERMS PER STEP AND PER SEAT (for ``env/reward_terms_step_abs/<term>``). After every
``env.step`` the environment has called ``get_reward`` for both seats, and
``env.reward_fn.terms_for(team)`` holds that step's WEIGHTED value of each term for ``team``, keyed
by term name: ``TERMINAL_REWARD_TERM`` ("terminal") for the objective, the class name for each
shaping term. The values sum to the seat's reward. ``TermMagnitudes`` accumulates, per seat, the sum
of ``|F_t|`` over an episode: call ``add(env.reward_fn)`` after every step and ``finish(team)`` when
the seat's episode ends; the metric is the mean of those per-seat sums over the iteration's
episodes. Take |.| per seat and per step, never after adding the two seats (a zero-sum term sums to
exactly zero across seats) and never of the episode's signed sum (for a potential that telescopes to
about (1 - gamma) times how far it wandered). ``ClashParallelEnv(log_reward_terms=True)`` puts the
same numbers in ``info[seat]["reward/<term>"]`` (absent from the reset info), and the terminal info
always carries the signed episode sums as ``reward_sum/<term>``.

Imports numpy-free, torch-free: rollout processes import this.
"""

from __future__ import annotations

import math
import numbers
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from royalegym.protocol import BattleState, CardInfo, DeployResult, EntityKind, EntityState
from royalegym.reward import CombinedReward, RewardFunction, WinLossReward

#: The key the objective's term is filed under in ``PotentialCombinedReward.terms_for``.
TERMINAL_REWARD_TERM = "terminal"

#: The shaping weights ``default_potential_reward`` takes, in the order of the composition.
SHAPING_WEIGHTS = ("crown", "tower_hp", "elixir")

#: Elixir is reported in thousandths.
ELIXIR_MILLI = 1000

#: Crown towers per side: the crown and tower potentials divide by it.
TOWERS = 3

_TOWER_KINDS = (EntityKind.KING_TOWER, EntityKind.PRINCESS_TOWER)


def _exact(value: object, what: str) -> Fraction:
    """``value`` as an exact rational (a binary float is one), refusing bools, non-numbers and
    non-finite values by name."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what}: {value!r} is not a real number")
    if isinstance(value, numbers.Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    as_float = float(value)  # exact for float, numpy float32/float64
    if not math.isfinite(as_float):
        raise ValueError(f"{what}: {value!r} is not finite")
    return Fraction(as_float)


class PotentialReward(RewardFunction):
    """``gamma * Phi(s') - Phi(s)`` for a potential a subclass computes, exactly.

    A subclass writes ``side_value(state, team)``, a per-side quantity; the potential is
    ``(side_value(s, team) - side_value(s, foe)) / divisor`` and so exactly antisymmetric in the
    seat. The per-side values of the last few states are memoised, since the environment asks for
    both seats on the same (prev, state) pair and ``prev`` was the previous step's ``state``.
    """

    #: Phi = (own - foe) / divisor. An exact rational; a subclass sets its own.
    divisor: Fraction = Fraction(1)

    def __init__(self) -> None:
        self._gamma = Fraction(1)
        self._memo: list[tuple[BattleState, tuple[Fraction, Fraction]]] = []

    @property
    def gamma(self) -> float:
        """The discount the term currently uses, as a float (exactly the one last set)."""
        return float(self._gamma)

    def set_gamma(self, gamma: float) -> None:
        """Take the discount the schedule is at, exactly: a binary float is a rational.

        Raises TypeError for a bool or a non-number, ValueError outside [0, 1] or non-finite.
        """
        g = _exact(gamma, "gamma")
        if not 0 <= g <= 1:
            raise ValueError(f"gamma: {gamma!r} is outside [0, 1]")
        self._gamma = g

    def reset(self, state: BattleState) -> None:
        self._memo = []

    @abstractmethod
    def side_value(self, state: BattleState, team: int) -> Fraction:
        """What ``team``'s own side of the potential holds in ``state``, before the division."""

    def _sides(self, state: BattleState) -> tuple[Fraction, Fraction]:
        for seen, values in self._memo:
            if seen is state:
                return values
        values = (self.side_value(state, 0), self.side_value(state, 1))
        # Holding the state keeps its id from being reused while it is remembered.
        self._memo = [(state, values), *self._memo[:2]]
        return values

    def potential(self, state: BattleState, team: int) -> Fraction:
        """Phi(state) from ``team``'s point of view, exact. Exactly -Phi(state, 1 - team).

        This is the position's potential whether or not the battle is over; ``exact_reward``
        is what takes a finished battle's potential as zero.
        """
        sides = self._sides(state)
        return (sides[team] - sides[1 - team]) / self.divisor

    def _phi(self, state: BattleState, team: int) -> Fraction:
        return Fraction(0) if state.game_over else self.potential(state, team)

    def exact_reward(self, team: int, prev: BattleState, state: BattleState) -> Fraction:
        """``gamma * Phi(state) - Phi(prev)`` as a Fraction, Phi of a finished battle being 0."""
        return self._gamma * self._phi(state, team) - self._phi(prev, team)

    def get_reward(
        self, team: int, prev: BattleState, state: BattleState, results: Sequence[DeployResult]
    ) -> float:
        """The shaping reward for ``team``: ``exact_reward`` converted to float once."""
        del results
        return float(self.exact_reward(team, prev, state))


class PotentialCrownReward(PotentialReward):
    """Phi = (own crowns - enemy crowns) / 3: the scoreboard as a fraction of a whole win."""

    divisor = Fraction(TOWERS)

    def side_value(self, state: BattleState, team: int) -> Fraction:
        return Fraction(state.players[team].crowns)


class PotentialTowerHPReward(PotentialReward):
    """Phi = (sum own hp/max - sum foe hp/max) / 3 over the three crown towers.

    The crown scoreboard read continuously, on the crown potential's scale: a tower at a third of
    its health is a third of the way to the crown it will give up.
    """

    divisor = Fraction(TOWERS)

    def side_value(self, state: BattleState, team: int) -> Fraction:
        p = state.players[team]
        return sum(
            (Fraction(max(0, hp), max(1, top)) for hp, top in zip(p.tower_hp, p.tower_max_hp)),
            Fraction(0),
        )


class CommittedElixirPotential(PotentialReward):
    """Phi = ((own bar + own board) - (foe bar + foe board)) / scale.

    ``bar`` is the elixir held (``elixir_milli / 1000``); ``board`` is the elixir value of the
    player's units on the field, each at ``Fraction(card.elixir, card.count)`` of its card, crown
    towers excluded. A unit card played moves elixir from bar to board (net zero); a unit lost
    costs what it cost, one killed gains it; sitting on a full bar loses ground because the foe's
    bar keeps rising. Zero-sum, unlike a leak penalty.

    WHICH UNITS ARE PRICED: only an entity that IS its card's own unit, i.e. matches the card's
    catalogue row in hitpoints, collision radius and air/ground. The engine files everything a
    play produced under the played card (a Goblin Gang's spear goblins, a Tri Wizards' Electro and
    Ice Wizard, a Golem's golemites); priced by that card they would inflate a play several-fold.
    Anything that is not the card's own unit is worth zero: an understatement, on purpose. What
    it keeps true is that ONE PLAY OF A UNIT CARD PUTS EXACTLY THAT CARD'S ELIXIR ON THE BOARD,
    because the card's summon count covers exactly the units its row describes (a Goblin Gang's
    three goblins, 1 elixir each; its spear goblins 0). Known gap (RoyaleGym 0.1.25 / RoyaleSim
    0.1.42): a Goblin Drill's row is its digging form (2560 hp, radius 0); about 2 s after the tap
    it is replaced by the surfaced drill (a new unit, 1313 hp), which the row does not describe,
    so the term reads the play as its whole 4 elixir lost at that moment.

    HITPOINTS AT THE UNIT'S LEVEL. Where the entity reports a level (``EntityState.level``) other
    than the catalogue's own (``engine.card_level``) and the engine lists its units' hitpoints
    (``RustEngine.unit_hitpoints``), the entity is matched against the card's "own" row at that
    level. That is what prices a Mirror's copy, one level up (a Knight copy has 1938 hp against the
    row's 1766), as the copied card's unit: A MIRROR PLAY LOSES EXACTLY ITS OWN ONE ELIXIR (the bar
    pays the copied card's cost plus one; the board gains the copied card's cost). An engine that
    reports no level or lists no rows is matched against the catalogue row alone.

    SPELLS ARE CHARGED AT THE TAP, through the bar, by construction: the bar drops by the spell's
    cost and nothing a spell leaves is priced (its card's count is 0), so the elixir comes back
    only through what the spell kills. A spell that leaves units (a Goblin Barrel) is the same.
    """

    def __init__(self, scale: float = 10.0) -> None:
        super().__init__()
        s = _exact(scale, "scale")
        if s <= 0:
            raise ValueError(f"scale: {scale!r} must be above zero")
        self.scale = float(scale)
        self.divisor = s
        self._rows: dict[int, CardInfo] = {}
        self._value: dict[int, Fraction] = {}
        self._level_hp: dict[tuple[int, int], int | None] = {}
        self._rows_at_level: Any = None
        self._card_level: int | None = None
        self._bound = False

    def config(self) -> dict[str, object]:
        return {"scale": self.scale}

    def bind(self, engine: Any) -> None:
        """Read the catalogue, the catalogue's level and (where the engine has them) the
        engine's per-level unit rows."""
        cards: Sequence[CardInfo] = engine.cards()
        self._rows = {c.card_id: c for c in cards if c.count > 0 and c.hitpoints > 0}
        self._value = {c.card_id: Fraction(c.elixir, c.count) for c in self._rows.values()}
        self._rows_at_level = getattr(engine, "unit_hitpoints", None)
        level = getattr(engine, "card_level", None)
        self._card_level = int(level) if isinstance(level, int) and not isinstance(level, bool) else None
        self._level_hp = {}
        self._bound = True

    def own_hitpoints(self, card_id: int, level: int) -> int | None:
        """The hitpoints of ``card_id``'s own unit at ``level`` from the engine's rows, or None
        where the engine has no rows, no such level, or no "own" row for the card."""
        key = (card_id, level)
        if key not in self._level_hp:
            hp: int | None = None
            if self._rows_at_level is not None:
                try:
                    rows = self._rows_at_level(card_id, level)
                except NotImplementedError:
                    self._rows_at_level = None
                    rows = []
                except ValueError:
                    rows = []
                hp = next((int(h) for role, _, h in rows if role == "own"), None)
            self._level_hp[key] = hp
        return self._level_hp[key]

    def unit_value(self, e: EntityState) -> Fraction:
        """What one entity on the board is worth: its card's per-unit elixir if it is that card's
        own unit (hitpoints at its level, radius, air/ground), else zero. Crown towers are zero."""
        if not self._bound:
            raise RuntimeError("CommittedElixirPotential used before bind(engine)")
        if e.kind in _TOWER_KINDS:
            return Fraction(0)
        row = self._rows.get(e.card_id)
        if row is None or e.radius != row.radius or bool(e.flying) != bool(row.flying):
            return Fraction(0)
        expected: int | None = row.hitpoints
        if e.level >= 0 and self._rows_at_level is not None and e.level != self._card_level:
            expected = self.own_hitpoints(e.card_id, e.level)
        if e.max_hp != expected:
            return Fraction(0)
        return self._value[e.card_id]

    def board(self, state: BattleState, team: int) -> Fraction:
        """The elixir value of ``team``'s units on the field."""
        return sum(
            (self.unit_value(e) for e in state.entities if e.team == team and e.kind not in _TOWER_KINDS),
            Fraction(0),
        )

    def bar(self, state: BattleState, team: int) -> Fraction:
        """The elixir ``team`` holds."""
        return Fraction(state.players[team].elixir_milli, ELIXIR_MILLI)

    def side_value(self, state: BattleState, team: int) -> Fraction:
        return self.bar(state, team) + self.board(state, team)


class PotentialCombinedReward(CombinedReward):
    """RoyaleGym's weighted sum, naming which term is the objective and forwarding the discount.

    ``terminal`` is the index of the objective among ``terms``; ``terms_for(team)`` files that
    term under ``TERMINAL_REWARD_TERM`` and every other under its class name, so the metrics can
    tell the objective from the shaping without matching a class name. Two terms that would be
    filed under one name are refused (the breakdown would silently keep only one of them).
    ``set_gamma`` reaches every term that takes a discount, in nested compositions too.
    """

    def __init__(self, terms: Sequence[tuple[RewardFunction, float]], *, terminal: int = 0) -> None:
        super().__init__(terms)
        if isinstance(terminal, bool) or not isinstance(terminal, int) or not 0 <= terminal < len(self.terms):
            raise ValueError(f"terminal: {terminal!r} is not the index of one of the {len(self.terms)} terms")
        self.terminal = terminal
        self.names = [
            TERMINAL_REWARD_TERM if i == terminal else type(t).__name__ for i, (t, _) in enumerate(self.terms)
        ]
        dupes = sorted({n for n in self.names if self.names.count(n) > 1})
        if dupes:
            raise ValueError(
                f"terms {dupes} would share one name in the breakdown; subclass one to keep them apart"
            )

    @property
    def terminal_class(self) -> str:
        """The class name the objective's term would otherwise be filed under."""
        return type(self.terms[self.terminal][0]).__name__

    @property
    def shaping_names(self) -> list[str]:
        """The breakdown names of every term that is not the objective."""
        return [n for i, n in enumerate(self.names) if i != self.terminal]

    def config(self) -> dict[str, object]:
        return {**super().config(), "terminal": self.terminal}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> PotentialCombinedReward:
        if "class" in config and "params" in config:
            config = config["params"]
        plain = CombinedReward.from_config({"terms": config.get("terms") or []})
        return cls(plain.terms, terminal=int(config.get("terminal", 0)))

    def set_gamma(self, gamma: float) -> int:
        """Give ``gamma`` to every term that takes one; returns how many did."""
        return sum(set_gamma(t, gamma) for t, _ in self.terms)

    def get_reward(
        self, team: int, prev: BattleState, state: BattleState, results: Sequence[DeployResult]
    ) -> float:
        total = 0.0
        breakdown: dict[str, float] = {}
        self.last_terms[team] = breakdown
        for name, (t, w) in zip(self.names, self.terms):
            v = w * t.get_reward(team, prev, state, results)
            breakdown[name] = v
            total += v
        return total


def set_gamma(reward: RewardFunction, gamma: float) -> int:
    """Give ``gamma`` to every term of ``reward`` that takes one, however it is composed.

    Walks ``CombinedReward``s (RoyaleGym's or this module's) down to their leaves and calls each
    leaf's own ``set_gamma`` where it has one; a term without one (the terminal objective) is left
    alone. Returns the number of leaves that took the discount. The value is checked once, before
    any leaf changes, so a refused gamma leaves the whole composition as it was.
    """
    g = _exact(gamma, "gamma")
    if not 0 <= g <= 1:
        raise ValueError(f"gamma: {gamma!r} is outside [0, 1]")
    if isinstance(reward, CombinedReward):
        return sum(set_gamma(t, gamma) for t, _ in reward.terms)
    method = getattr(reward, "set_gamma", None)
    if callable(method):
        method(gamma)
        return 1
    return 0


def shaping_weight_problems(weights: Mapping[str, object]) -> list[str]:
    """Everything wrong with a set of shaping weights, every one named, all at once.

    A weight must be a real number, finite and not negative: not a bool (Python would take True
    as 1), not a string (it would build and then fail inside a worker on the first step), not NaN
    or infinite (it reaches every return it touches), not negative (it pays a seat for losing
    ground). Names other than ``SHAPING_WEIGHTS`` are named too.
    """
    problems = []
    for name, w in weights.items():
        if name not in SHAPING_WEIGHTS:
            problems.append(f"{name}: not a shaping weight; the weights are {', '.join(SHAPING_WEIGHTS)}")
        elif isinstance(w, bool):
            problems.append(f"{name}={w!r} is a bool, not a number")
        elif not isinstance(w, numbers.Real):
            problems.append(f"{name}={w!r} is not a number ({type(w).__name__})")
        elif not math.isfinite(float(w)):
            problems.append(f"{name}={w!r} is not finite")
        elif w < 0:
            problems.append(f"{name}={w!r} is negative; a weight must be zero or more")
    return problems


def default_potential_reward(
    *, crown: float = 0.2, tower_hp: float = 0.1, elixir: float = 0.05
) -> PotentialCombinedReward:
    """The shipped composition: ``WinLossReward`` x 1.0 (the objective), then the crown, tower and
    committed-elixir potentials at the given weights. A weight scales a term's per-step loudness
    (read ``env/reward_terms_step_abs/<term>``) and cannot move the optimum.

    Raises ValueError naming every bad weight (``shaping_weight_problems``).
    """
    problems = shaping_weight_problems({"crown": crown, "tower_hp": tower_hp, "elixir": elixir})
    if problems:
        raise ValueError("bad shaping weights: " + "; ".join(problems))
    return PotentialCombinedReward(
        [
            (WinLossReward(), 1.0),
            (PotentialCrownReward(), float(crown)),
            (PotentialTowerHPReward(), float(tower_hp)),
            (CommittedElixirPotential(), float(elixir)),
        ],
        terminal=0,
    )


default_potential_reward.config_problems = shaping_weight_problems
"""What ``env.reward_fn`` with this class path refuses at load (shared/components.py
``problems``): exactly what the function refuses at build."""


class TermMagnitudes:
    """Per seat, the episode's sum of ``|weighted term value|`` per step, for
    ``env/reward_terms_step_abs/<term>``.

    ``add(reward_fn)`` after every ``env.step`` (it reads ``terms_for`` of both seats);
    ``finish(team)`` when that seat's episode ends returns ``{term: sum |F_t|}`` and starts the
    seat afresh. A reward without a breakdown (not a ``CombinedReward``) gives an empty dict.
    """

    def __init__(self, teams: Sequence[int] = (0, 1)) -> None:
        self.sums: dict[int, dict[str, float]] = {t: {} for t in teams}

    def add(self, reward_fn: RewardFunction) -> None:
        terms_for = getattr(reward_fn, "terms_for", None)
        if not callable(terms_for):
            return
        for team, into in self.sums.items():
            for name, value in terms_for(team).items():
                into[name] = into.get(name, 0.0) + abs(float(value))

    def finish(self, team: int) -> dict[str, float]:
        out, self.sums[team] = self.sums[team], {}
        return out
