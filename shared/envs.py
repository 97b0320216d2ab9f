"""Building a battle from config, and reading what it is from the running environment.

Every piece of the environment is named explicitly (RoyaleGym's defaults differ between
``make_env`` and ``ClashParallelEnv``; see royalegym-notes §1), and every layout fact the
learner needs (plane names, which planes are static, vector field offsets, hand size) is READ
from the built environment, never typed into this repository: a RoyaleGym change must be a
loud refusal, not a silent wrong slice.
"""

from __future__ import annotations

import hashlib
import json

import msgspec
from msgspec import Struct

from shared.config import ComponentSpec, EnvConfig
from shared.messages import EngineBuild, EpisodeRecord


CARD_IDS_KEY = "card_ids"
"""The observation key RoyaleGym's ``SpatialObsBuilder(card_identity=True)`` adds: which card
each tile's unit is (``ObsSpec.id_planes``)."""


class ObsSpec(Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """The observation and action layout of one environment build, as declared by it.

    ``spatial`` is (len(plane_names), height, width) float32 per seat; ``vector`` is
    (vector_size,) float32; the action space is Discrete(n_actions) with action 0 the no-op,
    ``1 + slot * height * width + y * width + x`` a play of hand slot ``slot`` at tile (x, y)
    (the grid: ``n_grid_actions`` actions in all), and ``n_grid_actions + k`` a press of ability
    button k for k < ``n_buttons`` (the parser's, read from it; 0 without buttons).
    ``vector_fields`` maps each declared vector field name to its [start, stop) offsets.
    ``n_buttons`` is encoded only when not 0, so a spec without buttons keeps the digest it had
    before buttons existed.
    """

    plane_names: tuple[str, ...]
    static_planes: tuple[str, ...]
    height: int
    width: int
    vector_size: int
    vector_fields: dict[str, tuple[int, int]]
    n_actions: int
    hand_slots: int
    decision_ms: int
    n_buttons: int = 0
    frame_stack: int = 1
    """Decisions the trunk sees at once (``obs.frame_stack``): the one fact here that is the
    run's, not the environment's, set by ``shared.preflight.run_preflight`` so that every
    network built from the spec (learner, frozen seats, evaluators, replay) has the run's
    input width. Encoded only when not 1."""
    id_planes: int = 0
    """Planes of the observation's ``card_ids`` key (RoyaleGym's ``card_identity``: 2, own and
    enemy, each (height, width) uint8 naming the card of the unit on each tile: 0 none, 1 a tower,
    2 + the card's catalogue position). 0 without card identity; encoded only when not 0, so a
    spec without it keeps its digest."""
    id_vocab: int = 0
    """Distinct values of ``card_ids`` (the declared upper bound + 1: the catalogue's cards + 2),
    the card-id embedding's rows. 0 without card identity."""

    @property
    def n_grid_actions(self) -> int:
        """The no-op plus one action per (hand slot, tile): the part of the action space the
        pointer head lays out as a grid, all of it without buttons."""
        return 1 + self.hand_slots * self.height * self.width

    def is_button(self, action):
        """Whether ``action`` (an int or an integer array) presses an ability button."""
        return action >= self.n_grid_actions

    def field(self, name: str) -> slice:
        """The slice of the vector holding ``name``. A missing name raises KeyError listing the
        fields the layout does declare (a renamed field is otherwise a silently wrong slice)."""
        if name not in self.vector_fields:
            raise KeyError(
                f"the observation builder declares no vector field {name!r}; it declares: "
                + ", ".join(self.vector_fields)
            )
        start, stop = self.vector_fields[name]
        return slice(start, stop)

    def digest(self) -> str:
        return hashlib.sha256(msgspec.json.encode(self)).hexdigest()[:16]


def build_reward(cfg: EnvConfig):
    """The reward: ``cfg.reward_fn`` built by dotted path when set (shared/components.py),
    else the one ``cfg.reward`` names: ``potential`` is ``default_potential_reward`` at
    ``cfg.reward_weights`` (gamma 1 until ``shared.rewards.set_gamma`` is called);
    ``royalegym_default`` is RoyaleGym's ``default_reward()``. Raises ComponentError naming
    ``env.reward_fn`` for a component that cannot be built."""
    from royalegym import default_reward

    from shared import components
    from shared.rewards import default_potential_reward

    if cfg.reward_fn is not None:
        from royalegym.reward import RewardFunction

        return _of_kind(components.build(cfg.reward_fn, cfg.extra_component_modules, "env.reward_fn"),
                        RewardFunction, "env.reward_fn")
    if cfg.reward == "potential":
        w = cfg.reward_weights
        return default_potential_reward(crown=w.crown, tower_hp=w.tower_hp, elixir=w.elixir)
    if cfg.reward == "royalegym_default":
        return default_reward()
    raise ValueError(f"env.reward: unknown reward {cfg.reward!r}; choose potential or royalegym_default")


def _of_kind(obj, kind: type, field: str):
    """``obj`` if it is a ``kind``; ComponentError naming ``field`` otherwise (a component that
    builds something else would fail inside a battle, on another host, much later)."""
    from shared.components import ComponentError

    if not isinstance(obj, kind):
        raise ComponentError(f"{field}: built a {type(obj).__module__}.{type(obj).__qualname__}, not a RoyaleGym "
                             f"{kind.__name__}; subclass royalegym.{kind.__name__}")
    return obj


def _checked_deck(deck: tuple[str, ...], where: str = "env.deck") -> tuple[str, ...]:
    """``deck`` if every name is in the engine's card catalogue; ValueError naming the unknown
    ones (with close matches) otherwise. RoyaleGym itself would fail later, at a reset."""
    import difflib

    from royalegym import RustEngine

    names = [c if isinstance(c, str) else getattr(c, "name", str(c)) for c in _catalogue(RustEngine)]
    unknown = [d for d in deck if d not in names]
    if unknown:
        hints = "; ".join(f"{u!r}: did you mean {difflib.get_close_matches(u, names, n=3)}?" for u in unknown)
        raise ValueError(f"{where}: unknown card name(s) {unknown} ({hints}); the catalogue has {len(names)} cards")
    return deck


_CATALOGUE: list = []


def _catalogue(engine_cls) -> list:
    """The engine's card list, read once per process (building an engine costs ~0.3 s)."""
    if not _CATALOGUE:
        _CATALOGUE.extend(engine_cls().cards())
    return _CATALOGUE


def build_env(cfg: EnvConfig, *, gamma: float | None = None):
    """One ``ClashParallelEnv`` on its own ``RustEngine`` (never shared between envs).

    The episode starts as ``cfg.seat_decks``, ``cfg.state_mutator`` or ``cfg.deck`` says (a
    default start otherwise) and ends at game over, after ``cfg.max_steps`` decisions or when
    ``cfg.done_condition`` says (``shared.curricula.end_slots``). The evaluation env is this with
    ``shared.evaluation.eval_env_config``'s changes. Raises ComponentError naming the field of a
    component that cannot be built.

    ``gamma``, where given, is handed to every shaping term at once (``shared.rewards.set_gamma``);
    the rollout must call ``set_gamma(env.reward_fn, gamma)`` again whenever the schedule moves.
    """
    from royalegym import (
        ActionParser, ClashParallelEnv, DefaultStateMutator, ObsBuilder, RustEngine, SpatialObsBuilder, TileActionParser,
    )

    from shared.rewards import set_gamma

    from shared import components, curricula

    reward_fn = build_reward(cfg)
    if gamma is not None:
        set_gamma(reward_fn, gamma)
    extra = cfg.extra_component_modules
    if cfg.seat_decks is not None:
        _checked_deck(cfg.seat_decks.deck, "env.seat_decks.deck")
        for i, d in enumerate(cfg.seat_decks.field or ()):
            _checked_deck(d, f"env.seat_decks.field[{i}]")
        # Until a battle deals an episode (seat_deal), both seats get the learner's deck: what an
        # evaluation game between two snapshots plays.
        mutator = seat_deal(cfg, learner_seat=-1)
    elif cfg.state_mutator is not None:  # a start curriculum (shared/curricula.py); never with deck or seat_decks
        mutator = curricula.build_start(cfg.state_mutator, extra)
    elif cfg.deck:
        mutator = DefaultStateMutator(decks=[list(_checked_deck(cfg.deck))] * 2)
    else:
        mutator = DefaultStateMutator()
    done = curricula.build_end(cfg.done_condition, extra) if cfg.done_condition is not None else None
    termination, truncation = curricula.end_slots(cfg.max_steps, done)
    return ClashParallelEnv(
        RustEngine(),
        obs_builder=(_of_kind(components.build(cfg.obs_builder, extra, "env.obs_builder"), ObsBuilder,
                              "env.obs_builder") if cfg.obs_builder else SpatialObsBuilder()),
        action_parser=(_of_kind(components.build(cfg.action_parser, extra, "env.action_parser"), ActionParser,
                                "env.action_parser") if cfg.action_parser else TileActionParser(ability_buttons=cfg.ability_buttons)),
        reward_fn=reward_fn,
        termination_cond=termination,
        truncation_cond=truncation,
        state_mutator=DealRecorder(mutator),
        decision_ms=cfg.decision_ms,
    )


def seat_deal(cfg: EnvConfig, learner_seat: int):
    """The state mutator of one episode under ``cfg.seat_decks``: ``learner_seat`` -1 (a mirror
    battle) deals the learner's deck to both seats, mirrored; 0 (blue) or 1 (red) deals it there
    and a deck from the field to the other seat. The draw comes from the episode's reset
    generator, seeded by (master seed, battle, ordinal), so the deal is a pure function of that
    triple. Built from ``cfg.seat_decks.cls`` (RoyaleGym's ``DeckCurriculumStateMutator`` by
    default) with its kwargs; ComponentError naming ``env.seat_decks`` if it refuses."""
    from shared import components

    sd = cfg.seat_decks
    spec = ComponentSpec(cls=sd.cls, kwargs=dict(sd.kwargs))
    return components.build(
        spec, cfg.extra_component_modules, "env.seat_decks",
        deck=list(sd.deck), p=1.0, mirror_p=1.0 if learner_seat < 0 else 0.0,
        seat="blue" if learner_seat <= 0 else "red",
        pool=[list(d) for d in sd.field] if sd.field is not None else None, shuffle=int(sd.shuffle))


class DealRecorder:
    """A state mutator that remembers the decks its inner mutator dealt at the last reset
    (``last_decks``: [blue, red] card ids; None before the first), so an episode's record can
    say which deck each seat played. ``inner`` may be swapped between episodes."""

    def __init__(self, inner):
        self.inner = inner
        self.last_decks: list[list[int]] | None = None

    def build(self, rng, cards):
        setup = self.inner.build(rng, cards)
        self.last_decks = [list(d) for d in setup.decks] if getattr(setup, "decks", None) else None
        return setup

    def __getattr__(self, name):  # config(), bind(), ... of the inner mutator
        return getattr(self.inner, name)


def dealt_deck(env, seat: int) -> list[str]:
    """The card names dealt to ``seat`` (0 blue, 1 red) at the env's last reset; [] when the
    env's mutator records none."""
    decks = getattr(env.state_mutator, "last_decks", None)
    if not decks:
        return []
    names = {c.card_id: c.name for c in env.engine.cards()} if not _NAMES else _NAMES
    _NAMES.update(names)
    return [names.get(int(i), str(i)) for i in decks[seat]]


_NAMES: dict[int, str] = {}


def obs_spec(env) -> ObsSpec:
    """Read the layout off a built environment."""
    space = env.observation_space("blue")
    c, h, w = space["spatial"].shape
    layout = env.obs_builder.spatial_layout()
    names = tuple(name for name, _ in layout)
    if len(names) != c:
        raise RuntimeError(f"spatial_layout() declares {len(names)} planes, the space has {c}")
    mask_planes = space["mask_planes"].shape
    n_actions = int(env.action_space("blue").n)
    n_buttons = int(getattr(env.action_parser, "n_buttons", 0))
    if n_actions != 1 + mask_planes[0] * h * w + n_buttons:
        raise RuntimeError(
            f"action space of {n_actions} is not 1 + {mask_planes[0]} hand slots x {h}x{w} tiles + "
            f"{n_buttons} ability buttons; only the tile grid parser (TileActionParser) is supported"
        )
    offsets = env.obs_builder.vector_offsets()
    ids = space.spaces.get(CARD_IDS_KEY)
    if ids is not None and (len(ids.shape) != 3 or tuple(ids.shape[1:]) != (h, w) or ids.high.max() > 255):
        raise RuntimeError(f"the observation's {CARD_IDS_KEY!r} is {ids.shape} up to {ids.high.max()}; "
                           f"expected (planes, {h}, {w}) with values that fit a byte")
    return ObsSpec(
        plane_names=names,
        static_planes=tuple(name for name, static in layout if static),
        height=h,
        width=w,
        vector_size=int(space["vector"].shape[0]),
        vector_fields={k: (int(s.start), int(s.stop)) for k, s in offsets.items()},
        n_actions=n_actions,
        hand_slots=int(mask_planes[0]),
        decision_ms=int(env.config()["decision_ms"]),
        n_buttons=n_buttons,
        id_planes=0 if ids is None else int(ids.shape[0]),
        id_vocab=0 if ids is None else int(ids.high.max()) + 1,
    )


def engine_build(env) -> EngineBuild:
    """The engine's identity, from its own ``config()`` and card catalogue."""
    import royalegym

    params = env.config()["engine"]["params"]
    cards = [[c.card_id, c.name, c.elixir, c.placement, c.card_kind] for c in env.engine.cards()]
    return EngineBuild(
        engine_class=env.config()["engine"]["class"],
        calibration_digest=str(params.get("calibration_digest", "")),
        build_digest=str(params.get("build_digest", "")),
        binary_sha256=str(params.get("engine_binary_sha256", "")),
        cards_digest=hashlib.sha256(json.dumps(cards, default=str).encode()).hexdigest()[:16],
        royalegym_version=royalegym.__version__,
    )


EPISODE_STAT_KEYS = (
    "episode_steps", "episode_ticks", "own_crowns", "enemy_crowns", "own_tower_hp_frac",
    "enemy_tower_hp_frac", "elixir_leak_steps", "elixir_count_exact",
)
"""The per-seat ``info`` keys RoyaleGym sets at an episode's end, copied into its
``EpisodeRecord`` (0 when absent) by ``episode_record``."""


def episode_record(info, *, truncated: bool, **fields) -> EpisodeRecord:
    """The EpisodeRecord of one seat whose episode just ended, from that seat's final ``info``:
    its EPISODE_STAT_KEYS (0 when absent), the outcome (0, a draw, for a truncated episode)
    and the per-term reward sums (``reward_sum/<term>``). ``fields`` are the caller's own
    (battle, ordinal, seat, role, player, opponent, cards_played, undiscounted_return, ...).
    Used by the rollout's battles and the evaluator's games alike."""
    stats = {k: info.get(k, 0) for k in EPISODE_STAT_KEYS}
    return EpisodeRecord(
        outcome=0 if truncated else int(info.get("outcome", 0)), truncated=truncated,
        episode_steps=int(stats["episode_steps"]), episode_ticks=int(stats["episode_ticks"]),
        own_crowns=int(stats["own_crowns"]), enemy_crowns=int(stats["enemy_crowns"]),
        own_tower_hp_frac=float(stats["own_tower_hp_frac"]),
        enemy_tower_hp_frac=float(stats["enemy_tower_hp_frac"]),
        elixir_leak_steps=int(stats["elixir_leak_steps"]),
        elixir_count_exact=bool(stats["elixir_count_exact"]),
        reward_terms={k[len("reward_sum/"):]: float(v) for k, v in info.items() if k.startswith("reward_sum/")},
        **fields,
    )


def make_scripted(opponent: str, random_legal_noop_prob: float):
    """A scripted player by its id (``shared.scripted.SCRIPTED_PLAYERS``): None for
    ``scripted:noop`` (always the no-op, no object needed), RoyaleGym's
    ``RandomLegalOpponent(random_legal_noop_prob)`` for ``scripted:random_legal``, and a fresh
    bot of ``royalegym.opponents.ladder()`` for ``scripted:<rung>`` (a new object per call: a
    shared instance across battles is what RoyaleGym refuses). Each answers
    ``act(obs, mask, rng)`` and reads only the mask planes. The rollout's scripted seats and the
    evaluator's anchors are built here, so an anchor is exactly the training opponent. Raises
    ValueError naming the id and every known one."""
    from royalegym import RandomLegalOpponent
    from royalegym.opponents import NOOP, ladder  # noqa: F401  (NOOP imported to fail loudly if it moves)

    from shared.scripted import SCRIPTED_PLAYERS, SCRIPTED_PREFIX, unknown_scripted

    if opponent == "scripted:noop":
        return None
    if opponent == "scripted:random_legal":
        return RandomLegalOpponent(random_legal_noop_prob)
    if opponent in SCRIPTED_PLAYERS:
        bots = dict(ladder())
        return bots[opponent[len(SCRIPTED_PREFIX):]]
    raise ValueError(unknown_scripted(opponent))
