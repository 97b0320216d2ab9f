"""One battle's exact state at an iteration boundary, saved and restored.

A checkpoint that holds only the learner cannot continue an episode in flight: every battle
would begin its episode again from the first decision. ``save`` writes everything the next
decision of a battle depends on, and ``restore`` puts it into a freshly built environment of
the same build, so the battle goes on as if it had never stopped:

==========================  ====================================================================
part                        why it is needed
==========================  ====================================================================
``engine``                  RoyaleGym's engine state (``engine.save_state``, ~35-65 KB; stored
                            zlib level 1, ~30 % of that, in ~0.4 ms) with its own ``state_hash``
                            (checked after the load: a blob that does not load into the same
                            state is refused)
``memory``                  what each seat's observation builder remembers of the match
                            (``ObsBuilder.memory_state``), msgpack; see MASK-ONLY below
``mask_only``               the seats whose observation is only the mask (a scripted player's)
``rng``                     the scripted players' generator WITH its position (PCG64's 128-bit
                            state): ``scripted/battle/{b}/ordinal/{k}`` re-derived by name would
                            start the stream again
``env``                     the env's episode bookkeeping: decisions so far, start tick, elixir
                            leak counts, the per-term reward sums, the step-limit counter
``potentials``              each potential term's Phi(s) for both seats and its gamma: Phi is a
                            pure function of the state, so it is a check, not state: a restored
                            battle whose potentials differ is refused
``ordinal, assignment,      the episode bookkeeping of ``services.rollout.battles.Battle``
groups, players, tick,
cards_played, returns,
terms``
==========================  ====================================================================

MASK-ONLY: RoyaleGym's ``env.snapshot()`` (and ``save_memory``) refuse a battle with a mask-only
seat, because that seat's memory stopped moving at the reset. Its memory is still part of the
battle (``elixir_count_exact`` in that seat's episode record reads it), so it is saved as it
stands through the builder's ``memory_state`` / ``load_memory_state``, packed by RoyaleGym's own
packer, and the restored battle keeps the same seats mask-only (an episode either builds a
seat's observation from its first decision or never does).

A blob names the engine build it was saved with; ``restore`` refuses another build, a battle id
other than the one asked for, an engine hash that does not verify, and potentials that differ,
each with ``StateRefused`` naming the reason (the caller restarts that battle fresh). msgpack
only: loading a state runs no code.
"""

from __future__ import annotations

import json
import zlib
from fractions import Fraction

import msgspec
import numpy as np

from shared.messages import SEATS, Assignment, EngineBuild

STATE_FORMAT = 1
"""Bumped whenever the fields below change meaning; another format is refused."""


class StateRefused(ValueError):
    """A saved battle state that must not be loaded. ``reason`` is a short label
    (``format``, ``engine``, ``battle``, ``hash``, ``potentials``, ``load``) for counters."""

    def __init__(self, reason: str, text: str):
        self.reason = reason
        super().__init__(text)


class EnvBookkeeping(msgspec.Struct, forbid_unknown_fields=True):
    episode_steps: int
    start_tick: int
    leak_steps: list[int]
    term_sums: list[dict[str, float]]
    truncation_steps: int
    """``StepLimitCondition.steps`` (-1: no truncation condition)."""


class BattleState(msgspec.Struct, forbid_unknown_fields=True):
    """One battle at a boundary (see the module docstring for each part)."""

    format: int
    engine_build: EngineBuild
    battle: int
    ordinal: int
    assignment: Assignment | None
    groups: list[int]
    players: list[str]
    tick: int
    cards_played: list[int]
    returns: list[float]
    terms: list[dict[str, float]]
    engine: bytes
    """zlib (level 1) of ``engine.save_state()``."""
    engine_hash: int
    memory: bytes
    mask_only: list[str]
    rng: str
    """JSON of the PCG64 ``bit_generator.state`` (its 128-bit integers do not fit msgpack)."""
    env: EnvBookkeeping
    potentials: list[str]
    """Per potential term, in reward order: "gamma|Phi(blue)|Phi(red)" as exact fractions."""
    decks: list[list[int]] | None = None
    """The card ids dealt to [blue, red] at the episode's reset (shared/envs.py DealRecorder), so
    a restored episode's records name the decks it was dealt; None in states saved before."""


def _potential_terms(reward_fn) -> list:
    """Every leaf of the reward that has a potential (shared.rewards.PotentialReward)."""
    out, stack = [], [reward_fn]
    while stack:
        r = stack.pop(0)
        if hasattr(r, "terms"):
            stack[:0] = [t for t, _ in r.terms]
        elif callable(getattr(r, "potential", None)):
            out.append(r)
    return out


def _potentials(env) -> list[str]:
    state = env.battle_state
    return [f"{Fraction(t._gamma)}|{t.potential(state, 0)}|{t.potential(state, 1)}"
            for t in _potential_terms(env.reward_fn)]


def _pack_memory(builder) -> bytes:
    from royalegym import obs as royale_obs

    return msgspec.msgpack.encode({"format": royale_obs.MEMORY_FORMAT, "parts": royale_obs._pack(builder.memory_state())})


def _unpack_memory(blob: bytes) -> dict:
    from royalegym import obs as royale_obs

    saved = msgspec.msgpack.decode(blob)
    if not isinstance(saved, dict) or saved.get("format") != royale_obs.MEMORY_FORMAT:
        raise StateRefused("format", f"the observation memory is not of RoyaleGym memory format {royale_obs.MEMORY_FORMAT}")
    return royale_obs._unpack(saved["parts"])


def save(battle, engine_build: EngineBuild) -> bytes:
    """The exact state of ``battle`` (a ``services.rollout.battles.Battle`` whose env is between
    two decisions) as msgpack bytes. Costs about one engine save (~3 ms) and the memory's pack."""
    env = battle.env
    trunc = getattr(env, "truncation", None)
    state = BattleState(
        format=STATE_FORMAT, engine_build=engine_build, battle=battle.battle_id, ordinal=battle.ordinal,
        assignment=battle.assignment, groups=list(battle.groups), players=list(battle.players), tick=battle.tick,
        cards_played=list(battle.cards_played), returns=list(battle.returns),
        terms=[dict(battle.terms.sums[0]), dict(battle.terms.sums[1])],
        engine=zlib.compress(env.engine.save_state(), 1), engine_hash=int(env.engine.state_hash()),
        memory=_pack_memory(env.obs_builder), mask_only=sorted(env._mask_only),
        rng=json.dumps(battle.rng.bit_generator.state),
        env=EnvBookkeeping(
            episode_steps=int(env._episode_steps), start_tick=int(env._start_tick),
            leak_steps=[int(env._leak_steps[0]), int(env._leak_steps[1])],
            term_sums=[dict(env._term_sums[0]), dict(env._term_sums[1])],
            truncation_steps=int(trunc.steps) if trunc is not None and hasattr(trunc, "steps") else -1),
        potentials=_potentials(env), decks=getattr(env.state_mutator, "last_decks", None),
    )
    return msgspec.msgpack.encode(state)


def decode(blob: bytes) -> BattleState:
    """The BattleState in ``blob``; StateRefused("format") for anything else."""
    try:
        state = msgspec.msgpack.decode(blob, type=BattleState)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise StateRefused("format", f"not a battle state of format {STATE_FORMAT}: {exc}") from None
    if state.format != STATE_FORMAT:
        raise StateRefused("format", f"battle state format {state.format}; this build reads {STATE_FORMAT}")
    return state


def restore(battle, blob: bytes, *, battle_id: int, engine_build: EngineBuild, make_scripted) -> BattleState:
    """Load ``blob`` into ``battle`` (its env built from the run's EnvConfig, its reward's gamma
    already set for the iteration) so that it continues exactly. ``make_scripted(opponent)``
    builds a scripted player by id. Raises StateRefused before touching ``battle`` for a wrong
    format, engine build or battle id; after a load whose engine hash or potentials do not
    verify (the caller must then restart the battle fresh)."""
    from royalegym import Snapshot

    from shared.messages import GROUP_SCRIPTED
    from shared.rewards import TermMagnitudes

    s = decode(blob)
    if s.engine_build != engine_build:
        raise StateRefused("engine", f"battle {s.battle} was saved by engine {s.engine_build.describe()}; "
                                     f"this rollout runs {engine_build.describe()}")
    if s.battle != battle_id:
        raise StateRefused("battle", f"the state is of battle {s.battle}, offered for battle {battle_id}")
    try:
        memory = _unpack_memory(s.memory)
        env = battle.env
        env.reset(options={"snapshot": Snapshot(zlib.decompress(s.engine)), "mask_only": list(s.mask_only)})
        if hasattr(env.state_mutator, "last_decks"):  # a snapshot reset deals nothing: the saved deal
            env.state_mutator.last_decks = s.decks
        if int(env.engine.state_hash()) != s.engine_hash:
            raise StateRefused("hash", f"battle {s.battle}: the engine state hashes to {env.engine.state_hash()} "
                                       f"after the load, the state says {s.engine_hash}")
        env.obs_builder.load_memory_state(memory)
        env._episode_steps, env._start_tick = s.env.episode_steps, s.env.start_tick
        env._leak_steps = {0: s.env.leak_steps[0], 1: s.env.leak_steps[1]}
        env._term_sums = {0: dict(s.env.term_sums[0]), 1: dict(s.env.term_sums[1])}
        if s.env.truncation_steps >= 0 and env.truncation is not None:
            env.truncation.steps = s.env.truncation_steps
        # The reset built the learner seats' observations from a fresh memory; build them again
        # from the restored one (a build of the memory's own tick is the observation it had).
        env._refresh(env.battle_state)
        terms = _potential_terms(env.reward_fn)
        if len(terms) != len(s.potentials):
            raise StateRefused("potentials", f"battle {s.battle}: the state has {len(s.potentials)} potential "
                                             f"terms, this reward {len(terms)}")
        for term, saved in zip(terms, s.potentials):
            term.set_gamma(Fraction(saved.split("|")[0]))  # the saved iteration's; the Plan sets the next
        if _potentials(env) != s.potentials:
            raise StateRefused("potentials", f"battle {s.battle}: the reward potentials after the load differ "
                                             "from the saved ones (another reward or gamma)")
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = json.loads(s.rng)
    except StateRefused:
        raise
    except (ValueError, KeyError, TypeError, RuntimeError, msgspec.DecodeError, zlib.error) as exc:
        raise StateRefused("load", f"battle {s.battle}: the state does not load: {exc}") from None
    battle.battle_id, battle.ordinal, battle.assignment = s.battle, s.ordinal, s.assignment
    battle.groups, battle.players = list(s.groups), list(s.players)
    battle.scripted = [make_scripted(p) if g == GROUP_SCRIPTED else None for g, p in zip(s.groups, s.players)]
    battle.rng = rng
    battle.obs = {seat: env._obs[seat] for seat in SEATS}
    battle.tick, battle.cards_played, battle.returns = s.tick, list(s.cards_played), list(s.returns)
    battle.terms = TermMagnitudes()
    battle.terms.sums = {0: dict(s.terms[0]), 1: dict(s.terms[1])}
    return s
