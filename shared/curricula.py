"""Curricula as components: how a training battle starts and when it ends early.

Two ``EnvConfig`` fields name RoyaleGym's curriculum pieces by dotted path with kwargs, exactly
like ``env.reward_fn`` (shared/components.py resolves them, with the same allow-list):

* ``env.state_mutator``: how each training episode STARTS, a RoyaleGym ``StateMutator``:
  ``royalegym.MidGameStateMutator`` (a clock already run, random elixir and tower damage),
  ``royalegym.ScriptedBoardStateMutator`` (units already on the board), a
  ``royalegym.SnapshotStateMutator`` bank (saved moments, by file path),
  ``royalegym.DefaultStateMutator`` (a normal start), or the user's own subclass.
* ``env.done_condition``: when a training episode ENDS besides the game being over (and besides
  ``env.max_steps``), a RoyaleGym ``TerminationCondition`` (``royalegym.FirstCrownCondition``:
  the first crown decides the episode) or ``TruncationCondition`` (``royalegym.TickLimitCondition``:
  cut at an engine tick, bootstrapped). A termination is OR-ed with the game-over condition, a
  truncation with the step limit (``end_slots``), so neither can make a battle run past its end.

Two RoyaleGym classes take other components as arguments; here they are written as JSON:
``royalegym.WeightedStateMutator`` takes ``mutators: [{"cls", "kwargs", "weight"}, ...]``
(a mix drawn per episode, e.g. half default starts, half mid-game starts), and
``royalegym.AnyCondition`` / ``royalegym.AllCondition`` take ``conditions: [{"cls", "kwargs"},
...]`` (all of one role). A ``ScriptedBoardStateMutator``'s ``spawns`` are JSON objects of
RoyaleGym's ``SpawnSpec`` fields (``team``, ``card_id``, ``x``, ``y``, ``hp``), or ``card`` (a
card NAME, looked up in the engine's catalogue) in place of ``card_id``.

Where they apply: the rollouts' training battles only (and what is built from the training env:
preflight's codec sample, ``replay`` of a training episode, ``demos record``). The evaluation env
(``shared.evaluation.eval_env_config``: the evaluator, strength, the gate, ``royalefleet eval``,
``play``, ``load_bot``) drops both, so every evaluation game is a full match from the default
start and strength stays comparable across curricula.

Determinism: RoyaleGym hands a mutator the episode's reset generator, which the rollout seeds
from the named stream ``env/battle/{battle}/ordinal/{ordinal}`` (services/rollout/battles.py), so
a start is a pure function of (master seed, battle, ordinal) and a resume or a replay draws it
again exactly, provided the mutator draws only from that generator (RoyaleGym's do).

What is refused at load (``curriculum_problems``, each problem naming its field): what
``shared.components.problems`` finds (a module not allowed, a missing name, kwargs that do not
bind), a constructor that refuses its kwargs, an object of the wrong kind (not a StateMutator; a
condition with no role), a nested part with any of those, ``env.state_mutator`` together with
``env.deck`` or ``env.seat_decks`` (each decides the decks; give the mutator ``decks`` instead),
and a start the engine refuses (one start is drawn and reset on a real engine at load).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shared import components
from shared.components import ComponentError

START_FIELD = "env.state_mutator"
END_FIELD = "env.done_condition"


@dataclass(frozen=True)
class Part:
    """A nested component written as JSON inside another's kwargs (``cls``, ``kwargs``): the
    shape ``shared.components`` reads, without the config module."""

    cls: str
    kwargs: dict[str, Any] = field(default_factory=dict)


def _part(value: Any, where: str) -> Part:
    """``value`` (a JSON object ``{"cls": str, "kwargs": {...}, ...}``) as a Part; ComponentError
    naming ``where`` when it is not one."""
    if not isinstance(value, dict) or not isinstance(value.get("cls"), str):
        raise ComponentError(f"{where}: {value!r} is not an object with a dotted path under 'cls'")
    kwargs = value.get("kwargs", {})
    if not isinstance(kwargs, dict):
        raise ComponentError(f"{where}.kwargs: {kwargs!r} is not an object of keyword arguments")
    return Part(value["cls"], dict(kwargs))


def _subclass(obj: Any, base: type) -> bool:
    return isinstance(obj, type) and issubclass(obj, base)


# ----------------------------------------------------------------------------- starts


def build_start(spec, extra, where: str = START_FIELD):
    """The RoyaleGym ``StateMutator`` ``spec`` (``cls``/``kwargs``) names, with a
    ``WeightedStateMutator``'s ``mutators`` and a ``ScriptedBoardStateMutator``'s ``spawns``
    built from their JSON form (module docstring). Raises ComponentError naming ``where`` (or the
    nested part, ``where.kwargs.mutators[i]``) for anything that cannot be built or is not a
    StateMutator."""
    from royalegym import ScriptedBoardStateMutator, SnapshotStateMutator, StateMutator, WeightedStateMutator

    obj = components.resolve(spec.cls, extra, where)
    kwargs = dict(spec.kwargs)
    if _subclass(obj, WeightedStateMutator):
        mix = kwargs.pop("mutators", None)
        if not isinstance(mix, list) or not mix:
            raise ComponentError(f"{where}.kwargs.mutators: {mix!r}; give a non-empty list of "
                                 '{"cls": ..., "kwargs": {...}, "weight": w}')
        built = []
        for i, entry in enumerate(mix):
            at = f"{where}.kwargs.mutators[{i}]"
            weight = entry.get("weight") if isinstance(entry, dict) else None
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not np.isfinite(weight) or weight < 0:
                raise ComponentError(f"{at}.weight: {weight!r}; give a finite number >= 0 (the draw's weight)")
            built.append((build_start(_part(entry, at), extra, at), float(weight)))
        return _made(obj, Part(spec.cls, {**kwargs, "mutators": built}), where, StateMutator)
    if _subclass(obj, ScriptedBoardStateMutator) and "spawns" in kwargs:
        kwargs["spawns"] = _spawns(kwargs["spawns"], f"{where}.kwargs.spawns")
    made = _made(obj, Part(spec.cls, kwargs), where, StateMutator)
    bank = made.snapshots if isinstance(made, SnapshotStateMutator) else ()
    capped = [i for i, s in enumerate(bank) if getattr(s, "max_ticks", None)]
    if capped:
        raise ComponentError(f"{where}: snapshots {capped[:5]} carry max_ticks, which a rollout's saved battle state "
                             "does not keep (a battle restored mid-episode would run uncapped); save them without "
                             "it and cut episodes with env.max_steps or env.done_condition")
    return made


def _made(obj, spec: Part, where: str, kind: type):
    """``obj(**spec.kwargs)`` checked to be a ``kind``; ComponentError naming ``where`` otherwise."""
    try:
        made = obj(**spec.kwargs)
    except (TypeError, ValueError, OSError) as exc:
        raise ComponentError(f"{where}: {spec.cls}(...) refused its kwargs: {type(exc).__name__}: {exc}") from None
    if not isinstance(made, kind):
        raise ComponentError(f"{where}: {spec.cls} built a {type(made).__module__}.{type(made).__qualname__}, "
                             f"not a RoyaleGym {kind.__name__}; subclass royalegym.{kind.__name__}")
    return made


def _spawns(value: Any, where: str) -> list:
    """RoyaleGym ``SpawnSpec``s from their JSON form; a ``card`` name is looked up in the engine's
    catalogue. ComponentError naming the entry for a malformed one."""
    import msgspec
    from royalegym.protocol import SpawnSpec

    if not isinstance(value, list):
        raise ComponentError(f"{where}: {value!r} is not a list of spawns")
    out = []
    for i, s in enumerate(value):
        if isinstance(s, SpawnSpec):
            out.append(s)
            continue
        if not isinstance(s, dict):
            raise ComponentError(f"{where}[{i}]: {s!r} is not an object of SpawnSpec fields")
        s = dict(s)
        if "card" in s:
            s["card_id"] = _card_id(s.pop("card"), f"{where}[{i}].card")
        try:
            out.append(msgspec.convert(s, SpawnSpec))
        except msgspec.ValidationError as exc:
            raise ComponentError(f"{where}[{i}]: {exc} (fields: team, card or card_id, x, y, hp)") from None
    return out


def _card_id(name: Any, where: str) -> int:
    import difflib

    cards = _cards()
    ids = {c.name: c.card_id for c in cards}
    if name not in ids:
        raise ComponentError(f"{where}: {name!r} is not in the engine's catalogue of {len(cards)} cards "
                             f"(close: {difflib.get_close_matches(str(name), list(ids), n=3)})")
    return int(ids[name])


@functools.cache
def _cards() -> tuple:
    """The engine's card catalogue, read once per process (building an engine costs ~0.3 s)."""
    from royalegym import RustEngine

    return tuple(RustEngine().cards())


# ----------------------------------------------------------------------------- ends


def build_end(spec, extra, where: str = END_FIELD):
    """The RoyaleGym done condition ``spec`` names, with an ``AnyCondition``/``AllCondition``'s
    ``conditions`` built from their JSON form. It must declare its role (subclass
    ``TerminationCondition`` or ``TruncationCondition``; a composite takes its children's common
    role, ``role_of``). Raises ComponentError naming ``where`` otherwise."""
    from royalegym.done_condition import DoneCondition, _CompositeCondition

    obj = components.resolve(spec.cls, extra, where)
    kwargs = dict(spec.kwargs)
    if _subclass(obj, _CompositeCondition):
        parts = kwargs.pop("conditions", None)
        if not isinstance(parts, list) or not parts:
            raise ComponentError(f'{where}.kwargs.conditions: {parts!r}; give a non-empty list of {{"cls": ..., "kwargs": {{...}}}}')
        kwargs["conditions"] = [build_end(_part(p, f"{where}.kwargs.conditions[{i}]"), extra,
                                          f"{where}.kwargs.conditions[{i}]") for i, p in enumerate(parts)]
    made = _made(obj, Part(spec.cls, kwargs), where, DoneCondition)
    role_of(made, where)
    return made


def role_of(cond, where: str = END_FIELD) -> str:
    """``"termination"`` or ``"truncation"``: the slot ``cond`` belongs in. A composite's role is
    its children's, which must agree. ComponentError naming ``where`` for a condition that
    declares none (the env would otherwise have to guess whether the cut is an outcome)."""
    from royalegym.done_condition import TerminationCondition, TruncationCondition, _CompositeCondition

    if isinstance(cond, TerminationCondition):
        return "termination"
    if isinstance(cond, TruncationCondition):
        return "truncation"
    if isinstance(cond, _CompositeCondition):
        roles = {role_of(c, where) for c in cond.conditions}
        if len(roles) == 1:
            return roles.pop()
        raise ComponentError(f"{where}: combines terminations and truncations; an episode's end is one or "
                             "the other, so use one role per condition")
    raise ComponentError(f"{where}: {type(cond).__qualname__} declares no role; subclass "
                         "royalegym.TerminationCondition (the battle is decided: no bootstrap) or "
                         "royalegym.TruncationCondition (the episode is cut: bootstrap from the next state)")


def end_slots(max_steps: int, done=None) -> tuple:
    """(termination, truncation) for ``ClashParallelEnv``: the game-over condition, OR-ed with
    ``done`` when it is a termination; the step limit (``max_steps`` decisions, 0 none), OR-ed
    with ``done`` when it is a truncation (``step_limit_or``); truncation None when there is
    neither."""
    from royalegym import AnyCondition, GameOverCondition, StepLimitCondition

    termination = GameOverCondition()
    truncation = StepLimitCondition(max_steps=max_steps) if max_steps else None
    if done is None:
        return termination, truncation
    if role_of(done) == "termination":
        return AnyCondition([termination, done]), truncation
    return termination, (step_limit_or()(truncation, done) if truncation is not None else done)


@functools.cache
def step_limit_or() -> type:
    """The class ``StepLimitOr`` (below), made on first use: it subclasses RoyaleGym's
    ``AnyCondition``, and importing this module does not import RoyaleGym."""
    from royalegym import AnyCondition

    class StepLimitOr(AnyCondition):
        """The step limit OR a truncation of the user's, exposing the limit's decision counter as
        ``steps`` as ``StepLimitCondition`` does: a rollout's saved battle state
        (services/rollout/battle_state.py) reads and restores ``truncation.steps``, so a battle
        restored mid-episode is cut at the decision it would have been."""

        def __init__(self, limit, other) -> None:
            super().__init__([limit, other])
            self.limit = limit

        @property
        def steps(self) -> int:
            return self.limit.steps

        @steps.setter
        def steps(self, value: int) -> None:
            self.limit.steps = value

    return StepLimitOr



# ----------------------------------------------------------------------------- load


def curriculum_problems(env) -> list[str]:
    """Everything wrong with ``env.state_mutator`` and ``env.done_condition`` (an EnvConfig),
    each naming its field (module docstring). Builds each once; draws one start (generator
    seeded 0) and resets a real engine with it, so a start the engine refuses (a spawn on water,
    a king at 0 hp) is refused here and not in a rollout on another host."""
    problems: list[str] = []
    extra = tuple(env.extra_component_modules)
    start = getattr(env, "state_mutator", None)
    if start is not None:
        if env.deck:
            problems.append(f"{START_FIELD}: set together with env.deck; the mutator deals the decks, so give it "
                            f"'decks' in {START_FIELD}.kwargs and leave env.deck empty")
        if env.seat_decks is not None:
            problems.append(f"{START_FIELD}: set together with env.seat_decks; both decide how an episode starts "
                            "and RoyaleGym mixes starts by choice, not by chaining: use one")
        bind = components.problems(start, extra, START_FIELD)
        problems += bind
        if not bind:
            try:
                problems += [p for p in [trial_start(build_start(start, extra))] if p]
            except ComponentError as exc:
                problems.append(str(exc))
    end = getattr(env, "done_condition", None)
    if end is not None:
        bind = components.problems(end, extra, END_FIELD)
        problems += bind
        if not bind:
            try:
                build_end(end, extra)
            except ComponentError as exc:
                problems.append(str(exc))
    return problems


def trial_start(mutator) -> str | None:
    """Why the engine refuses ``mutator``'s first start (generator seeded 0), or None."""
    from royalegym import RustEngine, Snapshot

    engine = RustEngine()
    try:
        init = mutator.build(np.random.default_rng(0), engine.cards())
        if isinstance(init, Snapshot):
            engine.load_state(init.blob)
        else:
            engine.reset(0, init)
    except Exception as exc:  # noqa: BLE001 - whatever the mutator or the engine says, reported by field
        return f"{START_FIELD}: its first start (generator seeded 0) was refused: {type(exc).__name__}: {exc}"
    return None
