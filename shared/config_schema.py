"""The config's schema: one tree of msgspec structs, each with the cross-field rules it checks.

Every struct forbids unknown fields, so a typo is an error at load rather than a setting that
silently does nothing. A struct whose fields must agree with each other says how in its
``problems()`` method, right under its fields; a rule between two sections lives on the struct
that holds both (``LadderConfig`` for the gate against the pool's seed set, ``RunConfig`` for
the rest). Each problem is a sentence naming its field and the fix. ``check_consistency``
(shared/config_load.py) asks ``RunConfig.problems`` for all of them at once.

Every field carries its documentation as the string literal on the line below it: its unit,
what it changes, anything about its range the type cannot say. ``royalefleet config --explain
[FIELD]`` prints it beside what the code says (type and range, defaults per profile, whether the
field is in the run identity; shared/config_docs.py), and tests/shared/test_config_docs.py names any
field without one.

Defaults follow the reference harness (RoyaleLearn 0.5.20, ``python -m royalelearn config``)
where it has the setting; where we differ the field's comment says why.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec
from msgspec import Meta

from shared.algorithms import algorithm, algorithm_names, algorithm_sections
from shared.config_types import ConfigSection, Fraction01, NonNegFloat, NonNegInt, Port, PosFloat, PosInt
from shared.scripted import SCRIPTED_PLAYERS
from shared.schedules import GeometricSpec, LinearSpec, Schedule, schedule_problems

FORMAT_VERSION = 1


if TYPE_CHECKING:
    AlgorithmName = str
else:
    AlgorithmName = Literal[algorithm_names()]
"""A ``learner.algorithm`` name: one of shared/algorithms.py's table, another refused naming them."""

ScriptedId = Literal[SCRIPTED_PLAYERS]
"""A scripted player id (shared/scripted.py); another string is refused naming the known ones."""


_Cfg = ConfigSection
"""Base of every config struct here (shared/config_types.py: unknown fields refused, keyword-only)."""


class ConfigError(ValueError):
    """A config that cannot run. ``problems`` lists every one, each naming its field."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("invalid config:\n" + "\n".join(f"  - {p}" for p in self.problems))


class RewardWeights(_Cfg):
    """Weights of the three shaping potentials under the terminal objective (seed 004,
    default_potential_reward). A weight scales a term's per-step loudness and cannot move the
    optimum (every term is gamma * Phi(s') - Phi(s)); read env/reward_terms_step_abs before
    changing one. Real, finite and not negative."""

    crown: NonNegFloat = 0.2
    """Weight of the crown potential, Phi = (own crowns - enemy crowns) / 3 (shared/rewards.py),
    dimensionless. Its term per decision is weight x (gamma x Phi(s') - Phi(s))."""
    tower_hp: NonNegFloat = 0.1
    """Weight of the tower-health potential, Phi = (sum of own crown towers' hp / max - the
    enemy's) / 3, dimensionless: the crown scoreboard read continuously."""
    elixir: NonNegFloat = 0.05
    """Weight of the elixir potential (elixir held plus the elixir value of units on the field,
    own minus enemy; shared/rewards.py), dimensionless."""

    def problems(self) -> list[str]:
        """A weight that is not a finite number (the type already refuses a negative one)."""
        return [f"env.reward_weights.{name}: {w!r} is not a finite number"
                for name in ("crown", "tower_hp", "elixir") if not math.isfinite(w := getattr(self, name))]


class ComponentSpec(_Cfg):
    """An environment component named by dotted path (shared/components.py): ``cls`` is
    ``package.module.Name``, a class or function in ``royalegym``, ``shared`` or a module listed
    in ``env.extra_component_modules``; ``kwargs`` are passed to it. The path and the kwargs are
    in the run identity (``env_spec_digest``); the user package's source is too (``user_code``)."""

    cls: str
    """``package.module.Name`` of a class or function; refused at load if its module is not
    allowed, does not import or does not define the name."""
    kwargs: dict[str, Any] = {}
    """Keyword arguments it is called with (JSON values); refused at load if they do not bind to
    its signature or its ``config_problems`` names a problem."""


CARD_ID_EMBED = 8
"""``net.card_id_embed``'s default: the one width that stays out of the arch digest
(shared/identity.py), so a network without card identity keeps the digest it had."""
SEAT_DECKS_RESERVED = ("deck", "p", "mirror_p", "seat", "pool", "shuffle")
"""Keywords the deal itself decides; ``env.seat_decks.kwargs`` may not name them."""


class SeatDecks(_Cfg):
    """A deck curriculum: the learner's ``deck`` dealt where the learner sits, against a field.

    A mirror battle deals ``deck`` to both seats (``ShuffleMode.MIRRORED``). A pool or scripted
    battle deals ``deck`` to the learner's seat and a deck drawn from ``field`` to the other:
    uniformly (list a deck twice to weight it), or, with ``field`` None, a random deck of eight
    different cards. Every battle's deal is a pure function of (master seed, battle, ordinal):
    the curriculum draws from the episode's reset generator, which that triple seeds. In the run
    identity (``env_spec_digest``; a user ``cls`` also in ``user_code``)."""

    deck: tuple[str, ...]
    """The learner's 8 card NAMES (checked against the engine's catalogue at the first reset)."""
    field: list[tuple[str, ...]] | None = None
    """The opponents' decks, 8 card names each, drawn uniformly; None: random decks."""
    shuffle: Annotated[int, Meta(ge=0, le=1)] = 1
    """RoyaleGym's ShuffleMode for a non-mirror deal: 0 none, 1 independent (the default)."""
    cls: str = "royalegym.state_mutator.DeckCurriculumStateMutator"
    """The curriculum class: RoyaleGym's by default, or a subclass taking its keywords, resolved
    like any component (its module listed in ``env.extra_component_modules``)."""
    kwargs: dict[str, Any] = {}
    """The class's own extra keywords, merged into the deal's; may not name
    ``SEAT_DECKS_RESERVED``."""


class EnvConfig(_Cfg):
    """How every battle is built (RoyaleGym ``ClashParallelEnv`` on ``RustEngine``)."""

    max_steps: NonNegInt = 480
    """Truncate an episode after this many decisions (StepLimitCondition); 0 = never.
    480 decisions is regulation plus overtime at 500 ms a decision (seed: default_env_spec)."""
    decision_ms: Annotated[int, Meta(ge=50, le=5000)] = 500
    """Game time per decision, in milliseconds (10 engine ticks at the default)."""
    reward: Literal["potential", "royalegym_default"] = "potential"
    """The reward composition. ``potential`` is ``shared.rewards.default_potential_reward`` at
    ``reward_weights`` (the objective plus three potential-based shaping terms);
    ``royalegym_default`` is RoyaleGym's ``default_reward()``, whose elixir-trade term is not a
    potential and rewards never playing (royalelearn-facts lesson 13)."""
    reward_weights: RewardWeights = msgspec.field(default_factory=RewardWeights)
    """Shaping weights of the ``potential`` reward composition."""
    deck: tuple[str, ...] = ()
    """Empty (the default): a random deck of 8 different cards per seat and episode, RoyaleGym's
    ``DefaultStateMutator()``. Otherwise 8 card NAMES (e.g. RoyaleGym's starter deck ``Knight,
    Archer, Giant, Minions, Fireball, Zap, Cannon, Musketeer``) dealt to both seats every
    episode, shuffled independently: a fixed-deck curriculum, like the reference's SeatDecks
    with one deck for both sides. Names are checked against the engine's catalogue when the
    first battle is built. Superseded by ``seat_decks`` (setting both is refused)."""
    reward_fn: ComponentSpec | None = None
    """A reward by dotted path (``{"cls": "mybot.rewards.MyReward", "kwargs": {...}}``); None
    (the default) builds ``reward``. It must be a RoyaleGym ``RewardFunction``; its kwargs are
    checked at load (``shared.components.problems``). In the identity, with its code
    (``user_code``)."""
    obs_builder: ComponentSpec | None = None
    """The observation builder by dotted path; None is RoyaleGym's ``SpatialObsBuilder()``. It
    must declare ``spatial_layout()`` and ``vector_offsets()`` as that one does. In the identity
    (and what it builds is, as ``obs_digest``)."""
    action_parser: ComponentSpec | None = None
    """The action parser by dotted path; None is RoyaleGym's ``TileActionParser()``. Its space
    must be 1 + hand slots x tiles (the pointer head's layout). In the identity
    (``action_digest`` names it)."""
    extra_component_modules: list[str] = []
    """The allow-list: modules (each covering its submodules) a component's ``cls`` may come
    from besides ``royalegym`` and ``shared``, e.g. ``["mybot"]``. NOT in the identity: listing
    a module cannot move a number; using one can, and ``user_code`` records that."""
    seat_decks: SeatDecks | None = None
    """A deck curriculum (``SeatDecks``); None: ``deck`` as above. In the identity."""
    state_mutator: ComponentSpec | None = None
    """How each TRAINING episode starts: a RoyaleGym ``StateMutator`` by dotted path
    (shared/curricula.py, docs/config.md "Curricula"), e.g. ``royalegym.MidGameStateMutator`` (the
    clock already run, random elixir and tower damage), ``royalegym.ScriptedBoardStateMutator``
    (units on the board; ``spawns`` as JSON objects, ``card`` by name), a
    ``royalegym.SnapshotStateMutator`` bank, or ``royalegym.WeightedStateMutator`` with
    ``mutators: [{"cls", "kwargs", "weight"}]`` (one drawn per episode). None (the default): a
    normal start, dealt by ``deck``/``seat_decks``; refused together with either (give the
    mutator ``decks``). Drawn from the episode's reset generator, so a start is a pure function of
    (master seed, battle, ordinal). Never in the evaluation env: every evaluation game starts at
    tick 0. At load one start is drawn and reset on a real engine. In the identity."""
    done_condition: ComponentSpec | None = None
    """When a TRAINING episode ends besides game over and ``max_steps``: a RoyaleGym
    ``TerminationCondition`` (decided, no bootstrap; ``royalegym.FirstCrownCondition``: the first
    crown), OR-ed with game over, or a ``TruncationCondition`` (cut, bootstrapped;
    ``royalegym.TickLimitCondition`` ``{"max_tick": N}``, an absolute engine tick), OR-ed with the
    step limit; ``royalegym.AnyCondition``/``AllCondition`` take ``conditions: [{"cls", "kwargs"}]``
    of one role. None (the default): neither. A condition without a role is refused. Never in the
    evaluation env (full matches). In the identity."""
    ability_buttons: bool = False
    """Give the action parser the engine's ability buttons (RoyaleGym
    ``TileActionParser(ability_buttons=True)``): the action space grows by the engine's
    ``n_buttons`` (3 on RoyaleSim), action ``n_grid_actions + k`` pressing button k (a hero's
    or a champion's ability), scored by the actor's button head. Off (the default), a champion
    plays as a plain troop and its ability is never offered. In the run identity: the action
    digest records ``n_buttons``, and the env digest records this field while it is on (left
    out while off, so a run without buttons keeps the identity it had before it existed)."""

    def problems(self) -> list[str]:
        """A fixed deck that is not 8 different names, what ``env_component_problems`` finds,
        and a reward weight that is not finite."""
        problems = []
        if self.deck and (len(self.deck) != 8 or len(set(self.deck)) != 8):
            problems.append(f"env.deck: {list(self.deck)} must be 8 different card names (or empty for random decks)")
        return problems + env_component_problems(self) + self.reward_weights.problems()


def _deck_problem(where: str, deck) -> str | None:
    if len(deck) != 8 or len(set(deck)) != 8:
        return f"{where}: {list(deck)} must be 8 different card names"
    return None


def env_component_problems(env: EnvConfig) -> list[str]:
    """Everything wrong with the env's components and deck curriculum, each naming its field:
    what ``shared.components.problems`` finds (a module not listed in
    ``env.extra_component_modules``, a class that does not exist, kwargs the component refuses),
    and a ``seat_decks`` whose decks are not 8 different names, whose field is empty, whose
    kwargs name what the deal decides, or that is set together with ``env.deck``; and
    ``ability_buttons`` set together with an ``action_parser`` of the user's; and what
    ``shared.curricula.curriculum_problems`` finds in ``state_mutator`` and ``done_condition``."""
    from shared import components
    from shared.curricula import curriculum_problems

    problems = []
    extra = env.extra_component_modules
    foreign = components.foreign_modules(extra)
    if foreign:  # data never widens the allow-list: refused before anything is imported
        return [f"env.extra_component_modules: {foreign} are not allowed on this machine; a config never decides "
                "what is imported: " + components.allow_hint(foreign)]
    for name in ("reward_fn", "obs_builder", "action_parser"):
        spec = getattr(env, name)
        if spec is not None:
            problems += components.problems(spec, extra, f"env.{name}")
    if env.ability_buttons and env.action_parser is not None:
        problems.append("env.ability_buttons: applies to the default TileActionParser only; with env.action_parser "
                        "set, give your parser its buttons in env.action_parser.kwargs and leave ability_buttons false")
    sd = env.seat_decks
    if sd is not None:
        if env.deck:
            problems.append("env.seat_decks: set together with env.deck; the curriculum deals the learner's deck, "
                            "so leave env.deck empty")
        problems += [p for p in [_deck_problem("env.seat_decks.deck", sd.deck)] if p]
        if sd.field is not None:
            if not sd.field:
                problems.append("env.seat_decks.field: an empty list; give at least one deck, or null for random decks")
            problems += [p for i, d in enumerate(sd.field) if (p := _deck_problem(f"env.seat_decks.field[{i}]", d))]
        reserved = sorted(set(sd.kwargs) & set(SEAT_DECKS_RESERVED))
        if reserved:
            problems.append(f"env.seat_decks.kwargs: {reserved} are decided by the deal itself; remove them "
                            "(set deck, field and shuffle on env.seat_decks)")
        try:
            components.resolve(sd.cls, extra, "env.seat_decks")
        except components.ComponentError as exc:
            problems.append(str(exc))
    return problems + curriculum_problems(env)


class ObsConfig(_Cfg):
    """What the policy sees beyond the environment's own observation."""

    frame_stack: Annotated[int, Meta(ge=1, le=16)] = 1
    """Decisions the trunk sees at once, 1 to 16: 1 (the default) is the current observation
    only; k > 1 widens the trunk's input with the spatial planes and the per-slot mask planes
    of the seat's previous k - 1 decisions (shared/nn/frame_stack.py), gathered from the rows
    already stored, never stored k times. History before the episode's first decision is
    zeros. In the run identity (``frame_stack`` and the arch digest)."""


class RolloutConfig(_Cfg):
    """The shape of one rollout service and how long the learner waits for it."""

    battles: PosInt = 16
    """Battles one rollout process runs (two seats each)."""
    shards: PosInt = 2
    """Independent groups of battles per rollout: one steps while the learner infers for
    another (Sample Factory's double buffering). ``battles`` must divide evenly."""
    round_timeout_s: PosFloat = 30.0
    """A shard whose next round is this late is declared lost for the rest of the iteration."""
    heartbeat_s: PosFloat = 2.0
    """How often an idle rollout tells the learner it is alive."""
    learner_silence_s: PosFloat = 600.0
    """An idle rollout that has heard nothing from the learner for this long says Hello again
    (a restarted learner then takes it in); it never waits forever."""
    mask_only_scripted: bool = True
    """Build only the action mask for seats a scripted opponent plays (RoyaleGym
    ``reset(options={"mask_only": [...]})``, about +30 % env speed): they read nothing else."""
    overlap: bool = False
    """Overlapped collection (docs/iteration.md, "Overlap"): while the learner trains on
    iteration k's rectangle, the rollouts step iteration k + 1's battles, inferred by a copy of
    the actor taken before the update (policy lag 1; rows inferred after the update finishes
    use the updated actor, lag 0; never more). Only under ``determinism.tier = "throughput"``:
    refused under ``run_exact``. Not in the run identity (throughput-tier numbers are not
    reproducible anyway); each row records ``ppo/policy_lag_mean``."""
    inference_max_batch_rows: PosInt = 1024
    """Batched central inference (docs/protocol.md, "Batched inference"): the most learner rows
    one actor forward takes when the learner answers every round that is ready (every shard of
    every rollout that answered) at once. Under ``determinism.tier = "throughput"`` only; under
    ``run_exact`` each round is its own forward (the canonical composition). At least 1; a cap
    that binds costs serving rate (16 rows: 505-546 learner rows/s against 595-672 uncapped, 8
    synthetic tiny rollouts, docs/throughput.md "Batched inference: the defaults", 2026-12-02,
    loaded), so the default 1024 is above any forward of up to 64 shards of 16 rows. Not in the
    run identity."""
    inference_max_wait_ms: NonNegFloat = 0.0
    """How long the learner may wait, once a round is ready, for more rounds to join its batch
    (throughput tier; 0 = answer what has arrived at once, the default). Milliseconds, at most
    the time until every live shard's round is in. Measured (docs/throughput.md "Batched
    inference: the defaults", 2026-12-02, loaded): 2 and 5 ms grew the mean forward (43 -> 52 ->
    58 rows) but not the rows/s beyond one run's spread (633, 595, 672), and a wait delays every
    Step. Not in the run identity."""
    overlap_torch_threads: NonNegInt = 0
    """Torch intra-op threads while the overlapped phase runs (the update and the inference
    thread at once): torch's thread count is one per process, and each of the two calling
    threads runs its own team of that size, so 2 x this many CPU threads are busy. 0 = half of
    ``determinism.torch_threads``, at least 1 (on 2 cores: 1 + 1, no oversubscription).
    ``determinism.torch_threads`` applies again once the overlapped collection is joined. Inert
    without ``overlap``; not in the run identity."""

    def problems(self) -> list[str]:
        """Battles that do not split evenly into shards."""
        if self.battles % self.shards:
            return [f"rollout.battles: {self.battles} battles do not split evenly into "
                    f"rollout.shards={self.shards}; make battles a multiple of shards"]
        return []


class LocalConfig(_Cfg):
    """What ``royalefleet up`` starts on this machine."""

    rollouts: PosInt = 1
    """Rollout processes the local stack starts."""
    restart_rollouts: bool = True
    """Restart a rollout process that died (it rejoins at the next iteration), except one that
    exited 2 (refused: the stack stops). One that keeps exiting within 60 s of its start waits
    1, 2, 4 ... 60 s before each restart (``royalefleet.launcher.restart_delay``)."""
    evaluators: NonNegInt = 1
    """Evaluator processes the local stack starts (``python -m services.evaluator``): they play
    the gate's evaluation games. 0 starts none (gates then wait for an evaluator)."""
    restart_evaluators: bool = True
    """Restart an evaluator process that died, except one that exited 2 (its config was
    refused; a restart would fail the same way), with the same backoff as rollouts. Its job in
    flight is handed out again after ``evaluation.job_deadline_s``. Off: the launcher says so and
    the gate waits for the others."""


class NetConfig(_Cfg):
    """The actor-critic's architecture."""

    channels: PosInt = 32
    """Width of the convolutional trunk over the arena's tiles, in channels (every residual
    block and the tile heads). Must be a multiple of ``norm_groups``. The main size knob:
    parameters grow with its square."""
    blocks: NonNegInt = 1
    """Residual blocks (two 3x3 convolutions with GroupNorm each) after the stem; 0 leaves the
    stem alone. Depth, and with it update time, grows linearly with it."""
    norm_groups: PosInt = 8
    """GroupNorm groups in the stem, every block and the tile head; must divide ``channels``
    (refused at load otherwise)."""
    vector_embed: PosInt = 32
    """Width of the embedding of the observation's vector part (``spec.vector_size`` features),
    broadcast over every tile into the trunk's input and fed to the critic's head, in features."""
    value_hidden: PosInt = 256
    """Hidden units of the critic's value head (one layer before the scalar value)."""
    slot_index: bool = False
    """Each hand slot's pointer query also reads the slot's index (one-hot), so the network can
    tell two affordable slots apart by their place in the hand. Without it a slot is its card,
    cost and affordability alone, and a teacher that plays its first playable slot (RoyaleGym's
    rungs, and a search that keeps their pick) cannot be copied: ``defend``'s clone of 600
    battles missed it on 0.144 of its held-out choices, 284 of the 286 misses another slot
    (docs/design.md, "The pointer query knows its slot"). Off keeps the architecture (and its
    digest) that snapshots made before it have."""
    card_id_embed: NonNegInt = CARD_ID_EMBED
    """Width of the embedding of each tile's card id, in features per id plane, when the
    observation carries card ids (``env.obs_builder`` RoyaleGym's ``SpatialObsBuilder`` with
    ``card_identity``: which card each unit on the board is, where the planes only count units
    and sum their hit points). 0 does not read the ids. Inert without card identity; a value
    other than 8 enters the architecture digest."""
    noop_bias: Annotated[float, Meta(ge=-20.0, le=20.0)] = 0.0
    """A constant added to the no-op logit (royalelearn-facts §5, the pointer head). 0 starts
    with p(no-op) = 1 / n_legal, a policy that plays a card whenever it can; 8 starts nearly
    passive (p(no-op) ~ 0.88 with ~400 legal plays), which the reference's own runs used."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """``auto`` picks cuda when torch sees a GPU, the CPU otherwise."""
    autocast: Literal["bfloat16", "off"] = "bfloat16"
    """Mixed precision of the trunk and heads ON CUDA: ``bfloat16`` autocast (no GradScaler
    needed; logits and values come out float32 whatever this says), or ``off`` for float32
    throughout. Inert on the CPU, which always computes in float32 (royalelearn-facts §5,
    Precision). Not part of the architecture digest (a snapshot moves between precisions);
    part of the algorithm digest, because it changes the numbers a run produces."""

    def problems(self) -> list[str]:
        """Group norm groups that do not divide the trunk's channels."""
        if self.channels % self.norm_groups:
            return [f"net.norm_groups: {self.norm_groups} does not divide net.channels={self.channels}"]
        return []


class PPOConfig(_Cfg):
    """The update (clipped PPO; Schulman et al. 2017)."""

    n_epochs: PosInt = 3
    """Passes over an iteration's rows per update; each is cut into ``timesteps // batch_size``
    optimizer steps. More epochs: more movement per iteration (higher KL and clip fraction) and
    more update time."""
    timesteps_per_iteration: PosInt = 4096
    """Learner transitions collected per iteration (at least this many: the rectangle's
    cycle count is rounded up)."""
    batch_size: PosInt = 1024
    """Rows per optimizer step. An epoch is cut into ``n // batch_size`` equal batches."""
    minibatch_size: PosInt = 256
    """Rows per forward pass: a memory knob only (gradients accumulate over a batch)."""
    clip_range: Annotated[float, Meta(gt=0.0, lt=1.0)] = 0.2
    """PPO's clip epsilon (Schulman et al. 2017): the probability ratio is clipped to [1 - eps,
    1 + eps] in the surrogate, and the clip fraction counts rows with |ratio - 1| > eps. Also
    the value-clipping width when ``value_clipping`` is on. Dimensionless."""
    dual_clip_c: Annotated[float, Meta(gt=1.0)] = 3.0
    """Dual-clip bound (Ye et al. 2020): for A < 0 the objective is at least c * A."""
    vf_coef: NonNegFloat = 1.0
    """Weight of the critic's squared-error loss. The actor and the critic have separate
    networks and optimizers, so it scales the critic's gradient (before ``max_grad_norm`` clips
    it), not a trade-off against the policy loss."""
    ent_coef: Schedule = LinearSpec(start=0.01, end=0.003, over_env_steps=30_000_000)
    """Entropy bonus over the legal set (a number, or a schedule over env steps)."""
    ent_coef_noop: Schedule = LinearSpec(start=0.02, end=0.0, over_env_steps=10_000_000)
    """Bonus on the binary entropy of p(no-op) vs p(play): a warm-start guard against no-op
    collapse, annealed to zero (it peaks at p = 0.5 while a healthy policy waits ~94 %)."""
    value_clipping: bool = False
    """Clip the value loss around the old value by clip_range (off in the reference: judged
    neutral to harmful)."""
    max_grad_norm: PosFloat = 0.5
    """Global L2 norm each network's gradient is clipped to before its optimizer step (actor and
    critic separately; ``ppo/grad_norm_*`` report the norms before clipping)."""
    lr_actor: PosFloat = 2e-4
    """Adam learning rate of the actor (policy), per optimizer step; ``lr_backoff`` may lower it
    during the run (never below ``lr_backoff.lr_min``)."""
    lr_critic: PosFloat = 2e-4
    """Adam learning rate of the critic (value network), per optimizer step; lowered by
    ``lr_backoff`` together with ``lr_actor``."""
    adam_eps: PosFloat = 1e-8
    """Adam's epsilon for both optimizers. 1e-8 (torch's default), not the PPO paper's 1e-5
    the reference ships: the actor's gradients are ~1e-3 to 1e-2 in norm, so at 1e-5 99.5 % of
    its second moments sat below eps (``ppo/adam_eps_floor_frac_actor`` 0.995) and the actor
    moved by KL ~1e-7 an iteration, under the ``kl_dead`` alarm's 1e-5; at 1e-8 the floor share
    fell to 0.16-0.33 and the KL rose 100-fold (docs/learning.md). The reference's developers'
    own run configs used 1e-8 too (royalelearn-facts §4)."""
    lr_backoff: "LrBackoffConfig" = msgspec.field(default_factory=lambda: LrBackoffConfig())
    """Lowering both learning rates while the KL stays high (``LrBackoffConfig``)."""

    def problems(self) -> list[str]:
        """A minibatch larger than its batch, a batch larger than the iteration, an entropy
        schedule that goes negative, and an lr floor above the learning rates it floors."""
        problems = []
        if self.minibatch_size > self.batch_size:
            problems.append(f"ppo.minibatch_size: {self.minibatch_size} is larger than ppo.batch_size={self.batch_size}")
        if self.batch_size > self.timesteps_per_iteration:
            problems.append(
                f"ppo.batch_size: {self.batch_size} is larger than ppo.timesteps_per_iteration="
                f"{self.timesteps_per_iteration}; an iteration would hold no whole batch"
            )
        problems += schedule_problems("ppo.ent_coef", self.ent_coef, low=0.0)
        problems += schedule_problems("ppo.ent_coef_noop", self.ent_coef_noop, low=0.0)
        if self.lr_backoff.lr_min > min(self.lr_actor, self.lr_critic):
            problems.append(f"ppo.lr_backoff.lr_min: {self.lr_backoff.lr_min} is above the learning rates it floors")
        return problems


class LrBackoffConfig(_Cfg):
    """Multiply both learning rates by ``factor`` when the choice-row KL stays above
    ``kl_threshold`` for ``patience`` consecutive iterations; never below ``lr_min``."""

    kl_threshold: PosFloat = 0.02
    """Choice-row KL per iteration (``ppo/kl``, nats) above which an iteration counts toward the
    streak; one at or below it resets the streak."""
    patience: PosInt = 3
    """Consecutive iterations above ``kl_threshold`` before the learning rates are cut, in
    iterations; the streak starts again after each cut."""
    factor: Annotated[float, Meta(gt=0.0, lt=1.0)] = 0.5
    """What a cut multiplies both learning rates by (0.5 halves them)."""
    lr_min: PosFloat = 2e-5
    """The lowest learning rate a cut may reach; must not be above ``ppo.lr_actor`` or
    ``ppo.lr_critic`` (refused at load)."""


class AdvantageConfig(_Cfg):
    """Discounting and GAE (Schulman et al. 2016)."""

    gamma: Schedule = GeometricSpec(start=0.997, end=0.999, over_env_steps=20_000_000)
    """The discount, geometric in 1 - gamma (OpenAI Five's anneal, scaled to a four-minute match)."""
    gae_lambda: Fraction01 = 0.99
    """0.99 at gamma 0.997 gives a credit horizon of ~39 s: deploy, push, tower."""
    standardize_rewards: bool = True
    """Divide rewards by a running std of discounted returns (mean never subtracted, so the
    zero-sum sign structure survives), then clip to +-reward_clip."""
    reward_clip: PosFloat = 40.0
    """Bound on a standardized reward's magnitude: rewards scaled by the running return std are
    clipped to [-reward_clip, +reward_clip] (services/learner/returns.py); the
    ``reward_clipped`` alarm warns when any is. In units of that std. 40, not the reference's
    10: early in a run the return std is 0.05-0.08, so the terminal +-1 is 13-19 std and 10 cut
    the win signal (and broke the shaping's potential form) every iteration; at 40 no reward
    was clipped in 70 iterations of a cpu run (docs/learning.md, "The terminal reward")."""

    def problems(self) -> list[str]:
        """A discount schedule that leaves (0, 1]."""
        return schedule_problems("advantage.gamma", self.gamma, low=1e-6, high=1.0)


class GateConfig(_Cfg):
    """The three conditions a candidate passes to become champion (seed 004, GateConfig)."""

    champion_games: PosInt = 1000
    """Paired battles against the champion (half the seeds on each side)."""
    champion_lower_bound: Fraction01 = 0.52
    """Wilson 95 % lower bound the candidate's score rate must reach."""
    anchor_games: PosInt = 200
    """Battles against each anchor (scripted:noop, scripted:random_legal)."""
    anchor_tolerance_pp: NonNegFloat = 2.0
    """How many percentage points below the champion's recorded anchor score is allowed."""
    stratified_snapshots: NonNegInt = 8
    """Older pool members drawn (variance-weighted PFSP against the champion) for the gate's
    third condition, ``no_pool_collapse``; 0 turns that condition off and the verdict rests on
    the first two."""
    stratified_games: PosInt = 100
    """Paired battles the candidate plays against each member drawn for ``no_pool_collapse``
    (half the seeds on each side; (games + 1) // 2 evaluation seeds, at most
    ``ladder.pool.eval_seed_count``)."""
    bootstrap_resamples: PosInt = 10_000
    """Bootstrap resamples over seeds for the standard error ``no_pool_collapse`` allows
    (services/ladder/gate.py). More: a steadier bound, more ladder CPU per gate."""


class RaterConfig(_Cfg):
    """The Bradley-Terry-Davidson fit over the whole result log."""

    prior_sd: PosFloat = 400.0
    """Gaussian prior on every rating, in Elo: keeps a player with only wins finite."""
    anchor: str = "scripted:noop"
    """Pinned at exactly 0 Elo."""
    draws: Literal["davidson", "half_win"] = "davidson"
    """How a draw enters the rating fit: ``davidson`` fits a draw parameter
    (Bradley-Terry-Davidson), ``half_win`` counts a draw as half a win and half a loss. With
    under 2 % draws observed the fit uses ``half_win`` anyway (services/ladder/rating.py)."""
    min_pair_games: PosInt = 30
    """Pairs with fewer games do not count toward the transitivity residual."""


SHA256_HEX = 64
"""Length of a sha256 digest in hex, as ``sha256sum`` prints it."""


class SeedSnapshot(_Cfg):
    """A frozen actor the pool holds from the run's first iteration and never evicts (seed 004,
    SeedSnapshot; royalelearn-facts 6.2 and 6.3).

    The learner reads it at a FRESH start (services/learner/seeds.py), stores it in the run's
    snapshot store and admits it to the pool as a seed; it is never made champion by admission.
    Its pool member id is ``snap:<sha256[:16]>`` (the snapshot store's content id). Problems
    (bad digest format, weight not > 0, a duplicate) are refused at config load, all at once
    (``check_consistency``), with the entry's index."""

    path: str
    """A folder holding ``actor.safetensors`` (fp16 actor weights) and ``spec.json``: another
    run's ``runs/<run>/snapshots/<id>/``, or an actor written the same way. A relative path is
    read from the folder the learner runs in."""
    sha256: str
    """sha256 of the folder's actor.safetensors, 64 lowercase hex (``sha256sum`` prints it). It
    pins the weights: the same path holding other weights is refused at start-up, and since it
    is part of ``ladder_digest`` other weights are another run."""
    weight: float = 1.0
    """Multiplies this seed's PFSP weight in the resident-set draw, after the floors and before
    the renormalisation (royalelearn-facts 6.2: "multiply by any seed snapshot's own weight").
    Finite and > 0; 1.0 leaves PFSP's weight as it is."""


def seed_snapshot_problems(seeds: list[SeedSnapshot]) -> list[str]:
    """Every problem of ``ladder.pool.seed_snapshots``, each naming the entry by index: an empty
    path, a sha256 that is not 64 lowercase hex, a weight that is not a finite number > 0, and
    an entry repeating an earlier one's path or weights (the same snapshot id)."""
    problems = []
    first_path: dict[str, int] = {}
    first_id: dict[str, int] = {}
    for i, s in enumerate(seeds):
        where = f"ladder.pool.seed_snapshots[{i}]"
        if not s.path:
            problems.append(f"{where}.path: empty; name the folder holding actor.safetensors and spec.json")
        elif s.path in first_path:
            problems.append(f"{where}.path: {s.path!r} is also seed_snapshots[{first_path[s.path]}]; list each "
                            "seed snapshot once")
        else:
            first_path[s.path] = i
        digest = s.sha256
        if len(digest) != SHA256_HEX or any(c not in "0123456789abcdef" for c in digest):
            problems.append(f"{where}.sha256: {digest!r} is not a sha256 digest: expected {SHA256_HEX} lowercase hex "
                            "characters, as `sha256sum actor.safetensors` prints")
        elif digest[:16] in first_id:
            problems.append(f"{where}.sha256: {digest[:16]}... is also seed_snapshots[{first_id[digest[:16]]}] "
                            "(the same snapshot); list each seed snapshot once")
        else:
            first_id[digest[:16]] = i
        if not (math.isfinite(s.weight) and s.weight > 0):
            problems.append(f"{where}.weight: {s.weight!r} must be a finite number > 0 (it multiplies the "
                            "seed's PFSP weight; 1.0 leaves it unchanged)")
    return problems


class PoolConfig(_Cfg):
    """The frozen pool and who the learner meets from it."""

    candidate_every_env_steps: PosInt = 4_000_000
    """The learner sends a snapshot of its actor to the ladder as a pool candidate, which the
    gate then judges, every this many env steps (the run's env-step count: battle decisions).
    4,000,000 is the reference's, for GPU profiles; the cpu profile uses 100,000
    (CPU_CANDIDATE_EVERY: about 30 minutes there). In the run identity (ladder)."""
    max_resident_opponents: PosInt = 2
    """Distinct pool snapshots the learner's pool battles meet at a time (the resident set,
    drawn by PFSP and redrawn when the pool changes: services/ladder/resident.py)."""
    pool_working_size: PosInt = 48
    """Members the PFSP sampler keeps; beyond it eviction thins the sampler (never the archive).
    Also bounds the ``member`` label of the ``ladder/rating/{member}`` gauges."""
    pfsp_weighting: Literal["hard", "variance", "linear", "uniform"] = "hard"
    """Shape of the PFSP weight of a pool member from p, the learner's fitted win probability
    against it (services/ladder/pfsp.py): ``hard`` (1 - p)^power meets the hardest opponents
    most, ``variance`` p (1 - p), ``linear`` 1 - p, ``uniform`` 1."""
    pfsp_power: PosFloat = 2.0
    """The exponent of the ``hard`` PFSP weight (1 - p)^power; ignored by the other shapes.
    Larger: the draw concentrates on the strongest members."""
    pfsp_uniform_floor: Fraction01 = 0.2
    """Share of PFSP weight spread uniformly over the members: the weights are mixed as (1 -
    floor) x w + floor / M, so every member keeps a chance."""
    weight_floor_scale: NonNegFloat = 0.01
    """After mixing, each PFSP weight is floored at weight_floor_scale / M (M members), then
    renormalised: no member's chance falls to zero."""
    eval_seed_count: PosInt = 500
    """Size of the fixed evaluation seed set drawn once from ``master_seed``
    (shared/evaluation.py); every gate plays paired battles on these seeds, so each of its
    conditions needs (games + 1) // 2 of them (refused at load when there are fewer)."""
    seed_snapshots: list[SeedSnapshot] = msgspec.field(default_factory=list)
    """Frozen actors held in the pool from the first iteration, never evicted, never champion by
    admission (``SeedSnapshot``; docs/ladder.md, "Seed snapshots"). Empty: the pool starts
    with the run's own first snapshot."""

    def problems(self) -> list[str]:
        """What ``seed_snapshot_problems`` finds in ``seed_snapshots``."""
        return seed_snapshot_problems(self.seed_snapshots)


class AlarmConfig(_Cfg):
    """Thresholds of the alarm table (shared/alarms.py). Recorded, never part of the run
    identity: an alarm can stop a run and can never alter a number."""

    enabled: bool = True
    """``false`` turns the whole alarm table off: the learner evaluates none (docs/alarms.md).
    Grafana's and Prometheus's generated rules are not affected."""
    ratio_invariant_multiple: PosFloat = 5.0
    """ratio_invariant halts when ppo/ratio_max_abs_dev exceeds this many times ppo/ratio_atol,
    the tolerance of the precision the forwards ran in (shared/alarms.py RATIO_ATOL)."""
    buffer_fill_frac: Fraction01 = 0.98
    """``buffer_overflow`` (halt, patience 1) fires when health/buffer_fill_frac exceeds
    max(1.0, this): the rectangle held more rows than it was sized for. A fraction of the
    buffer."""
    clip_fraction: Fraction01 = 0.5
    """``clip_pinned`` (halt, patience 3) fires when ppo/clip_fraction, the share of rows with
    |ratio - 1| > clip_range, is above this."""
    kl_high: PosFloat = 0.05
    """``kl_high`` (warn, patience 3) fires when the choice-row KL ppo/kl is above this, in
    nats."""
    kl_dead: PosFloat = 1e-5
    """``kl_dead`` (warn, patience 10) fires when ppo/kl is below this, in nats: the policy has
    stopped moving."""
    explained_variance: float = 0.0
    """``ev_negative`` (warn, patience 50) fires when the critic's ppo/explained_variance is
    below this (dimensionless; 1 is a perfect critic, 0 no better than the mean)."""
    cards_per_match_warn: NonNegFloat = 8.0
    """``noop_collapse`` (warn, patience 5) fires when policy/cards_per_match, cards the learner
    plays a match, is below this (about 22 expected)."""
    cards_per_match_halt: NonNegFloat = 3.0
    """``noop_collapse_severe`` (halt, patience 5) fires when policy/cards_per_match is below
    this."""
    noop_entropy_floor: NonNegFloat = 0.02
    """``noop_entropy_floor`` (warn, patience 5) fires when ppo/noop_entropy, the binary entropy
    of play against wait in nats, is below this."""
    tile_top1_share: Fraction01 = 0.25
    """``tile_spam`` (warn, patience 5) fires when policy/tile_top1_share, the share of plays on
    the single most used tile, is above this."""
    card_tile_top10_share: Fraction01 = 0.5
    """``artefact_exploit`` (warn, patience 5) fires when policy/card_tile_top10_share, the
    share of plays on the ten most used (card, tile) pairs, is above this."""
    draw_rate: Fraction01 = 0.5
    """``draw_equilibrium`` (warn, patience 5) fires when env/draw_rate is above this AND
    env/episode_steps_at_cap_frac is above ``episode_steps_at_cap_frac``."""
    episode_steps_at_cap_frac: Fraction01 = 0.8
    """The second half of ``draw_equilibrium``: the share of episodes cut by ``env.max_steps``
    above which, with the draw rate above ``draw_rate``, it fires."""
    elixir_count_exact_frac: Fraction01 = 0.5
    """``elixir_count_inexact`` (warn, patience 3) fires when env/elixir_count_exact_frac, the
    share of the iteration's learner episodes whose opponent-elixir count RoyaleGym kept exact,
    is below this. The reference hard-codes 0.99, but the count is the engine's own and drifts
    in about 1 episode of 5 whatever the learner does (royalegym-notes: 20 of 100 random-legal
    episodes; 0.82 mean over the 85 iterations of the two-hour cpu run, below 0.99 in 67 of
    them, so the alarm fired on 41). Half the episodes is far below the engine's baseline (2 of
    85 iterations under it, never 2 in a row), which a new engine build that broke the count
    would cross."""
    transitivity_residual: Fraction01 = 0.1
    """``transitivity`` (warn, patience 3) fires when ladder/transitivity_residual is above
    this: a scalar rating no longer describes who beats whom."""
    dqn_q_abs_max: PosFloat = 100.0
    """``q_diverging`` (halt, patience 3) fires when dqn/q_abs_max, the largest |Q(s, a)| of an
    update's minibatches, is above this, in reward units: the rewards are bounded (terminal +-1
    plus potential shaping), so no return comes near it (DQN runs only)."""
    dqn_greedy_noop_frac: Fraction01 = 0.999
    """``behaviour_dead`` (warn, patience 5) fires when dqn/greedy_noop_frac, the share of the
    greedy choice rows on which the behaviour policy waited, is at or above this: the Q rows
    rank the no-op first everywhere and only epsilon plays cards (DQN runs only)."""
    capacity_ratio: PosFloat = 1.5
    """``capacity_ratio`` (warn, patience 3) fires when throughput/rollout_capacity_ratio,
    rollout capacity over update capacity, is below this: the learner waits for rows."""
    gate_failures: PosInt = 5
    """``gate_starved`` (warn, patience 1) fires when ladder/consecutive_gate_failures reaches
    this many gates in a row without a promotion."""
    disabled: list[str] = msgspec.field(default_factory=list)
    """Names of alarms the learner does not evaluate (an unknown name is refused when the
    learner starts, with the closest one)."""
    patience_overrides: dict[str, PosInt] = msgspec.field(default_factory=dict)
    """Alarm name -> patience, in consecutive iterations (>= 1), replacing the table's."""
    severity_overrides: dict[str, Literal["warn", "halt"]] = msgspec.field(default_factory=dict)
    """Alarm name -> ``warn`` or ``halt``, replacing the table's severity."""


class LadderConfig(_Cfg):
    """Who the learner plays."""

    mix: tuple[NonNegFloat, NonNegFloat, NonNegFloat] = (0.5, 0.35, 0.15)
    """Shares of battles that are (mirror, pool, scripted): a COUNT of battles, rounded by
    ``shared.matchmaking.role_counts``. Until the pool holds a snapshot, pool battles play a
    scripted opponent."""
    scripted_opponents: list[ScriptedId] = msgspec.field(
        default_factory=lambda: ["scripted:noop", "scripted:random_legal"]
    )
    """The scripted players a ``scripted`` battle draws its opponent from, uniformly
    (shared/matchmaking.py): any of ``shared.scripted.SCRIPTED_PLAYERS`` (the run's two and
    RoyaleGym's ladder rungs ``scripted:random``, ``scripted:first-affordable``,
    ``scripted:defend``, ``scripted:push``, ``scripted:patient``). Must not be empty while
    ``mix`` gives scripted battles a share. In the run identity."""
    random_legal_noop_prob: Fraction01 = 0.9
    """The no-op probability of ``scripted:random_legal`` (the reference's anchor)."""
    pool: PoolConfig = msgspec.field(default_factory=PoolConfig)
    """The frozen pool and who the learner meets from it (``PoolConfig``)."""
    gate: GateConfig = msgspec.field(default_factory=GateConfig)
    """The promotion gate's conditions and game counts (``GateConfig``)."""
    rater: RaterConfig = msgspec.field(default_factory=RaterConfig)
    """The Bradley-Terry-Davidson rating fit (``RaterConfig``)."""

    def problems(self) -> list[str]:
        """A mix of no battles, scripted battles without scripted opponents, a gate condition
        that needs more evaluation seeds than the pool draws, and the pool's own problems."""
        problems = []
        if sum(self.mix) <= 0:
            problems.append(f"ladder.mix: {list(self.mix)} sums to zero; give at least one role a share")
        if self.mix[2] > 0 and not self.scripted_opponents:
            problems.append("ladder.scripted_opponents: empty while ladder.mix gives scripted battles a share")
        seeds = self.pool.eval_seed_count
        for name in ("champion_games", "anchor_games", "stratified_games"):
            games = getattr(self.gate, name)
            if (games + 1) // 2 > seeds:
                problems.append(
                    f"ladder.gate.{name}: {games} paired battles need {(games + 1) // 2} evaluation seeds, but "
                    f"ladder.pool.eval_seed_count is {seeds}; lower the games or raise the seed count"
                )
        return problems + self.pool.problems()


GENERATION_ANCHORS = ("scripted:defend", "scripted:random_legal", "scripted:first-affordable")
"""The scripted anchors a promoted generation is measured against unsearched (issue 37's targets)."""


class GenerationStrengthConfig(_Cfg):
    """Each promoted generation's strength (services/ladder/generation_strength.py;
    docs/ladder.md, "Strength of each generation"): when the ladder's champion chain grows (the
    run's first snapshot, then every champion a gate promotes), the evaluators play that champion
    ``snap:<id>`` unsearched against ``anchors``, searched (``snap:<id>`` + ``search``) against
    ``searched_anchors``, and searched with the simulations' opponent played by ``sim_as``
    (``opp=<sim_as>``: a search that does not model its opponent exactly) against the same
    anchors and against the previous generation's champion (a pool snapshot). Operational (not
    in the run identity, like the whole ``evaluation`` section)."""

    enabled: bool | None = None
    """true: measure every generation; false: never; null (the default): only under a
    ``learner.algorithm`` whose declaration has generations (shared/algorithm_spec.py: expert
    iteration's and TreeStrap's), whose generations these are."""
    anchors: list[ScriptedId] = msgspec.field(default_factory=lambda: list(GENERATION_ANCHORS))
    """Scripted anchors each generation plays unsearched."""
    games: PosInt = 100
    """Unsearched games against each anchor (ceil(n / 2) evaluation seeds, both sides). 100 gives
    a Wilson 95 % half-width of at most 0.10; an unsearched game is about 0.45 s here."""
    search: str = "+search:8"
    """The search suffix of the searched player (docs/search.md's grammar: ``+search:N[:D]``
    and ``,name=value`` options)."""
    searched_anchors: list[ScriptedId] = msgspec.field(default_factory=lambda: ["scripted:defend"])
    """Scripted anchors each generation plays searched (and searched with ``opp=<sim_as>``)."""
    searched_games: PosInt = 20
    """Games of each searched pairing; a searched game costs 6-20x an unsearched one."""
    sim_as: str = "random"
    """The scripted bot the searched player's simulations play for the other seat in the
    pairings that are not an opponent model (``opp=<sim_as>``, one of
    ``shared.search.spec.SIM_BOTS``); "" leaves those pairings out."""

    def active(self, learner_algorithm: str) -> bool:
        """Whether a run of ``learner.algorithm`` ``learner_algorithm`` measures its generations."""
        if self.enabled is not None:
            return self.enabled
        return algorithm(learner_algorithm).generations

    def problems(self, seeds: int | None) -> list[str]:
        """A search suffix that does not parse, an unknown ``sim_as``, games beyond the
        ``seeds`` evaluation seeds (``ladder.pool.eval_seed_count``; None: not checked, the
        measurement is off)."""
        from shared.search.spec import SIM_BOTS, split_search

        problems, where = [], "evaluation.strength.generations"
        try:
            if split_search("snap:0000000000000000" + self.search)[1] is None:
                raise ValueError("no +search: suffix")
        except ValueError as exc:
            problems.append(f"{where}.search: {self.search!r} is not a search suffix ({exc}); write it as "
                            "\"+search:8\" or \"+search:8:30,p=4\" (docs/search.md)")
        if self.sim_as and self.sim_as not in SIM_BOTS:
            problems.append(f"{where}.sim_as: {self.sim_as!r} is not a simulated bot; use one of "
                            f"{', '.join(SIM_BOTS)} or \"\" for none")
        for name in ("games", "searched_games"):
            n = getattr(self, name)
            if seeds is not None and (n + 1) // 2 > seeds:
                problems.append(f"{where}.{name}: {n} games need {(n + 1) // 2} evaluation seeds, but "
                                f"ladder.pool.eval_seed_count is {seeds}; lower the games or raise the seed count")
        return problems


class StrengthConfig(_Cfg):
    """The standing strength measurement (docs/ladder.md, "Strength"): every
    ``every_iterations`` iterations the learner writes its actor of that iteration to the
    snapshot store and the ladder hands the evaluators its games against each anchor on the
    first ``games_per_anchor / 2`` seeds of the fixed evaluation seed set, both sides each.
    Operational (not in the run identity): it changes no training number, and the learner
    never waits for it."""

    every_iterations: NonNegInt = 10
    """Iterations between two strength snapshots (iterations divisible by it are measured);
    0 turns the measurement off. 10 on a cpu run is about 9 minutes of training per
    measurement of 140 games (docs/ladder.md has the measurement)."""
    games_per_anchor: PosInt = 20
    """Games of the snapshot against each anchor (ceil(n / 2) seeds, both sides). Range
    1 .. 2 x ladder.pool.eval_seed_count. 20 gives a Wilson 95 % half-width of at most 0.21."""
    anchors: list[ScriptedId] = msgspec.field(default_factory=lambda: list(SCRIPTED_PLAYERS))
    """The scripted anchors measured against (shared/scripted.py ids); ``scripted:noop``
    must be one of them: the rating pins it at 0."""
    search: list[Annotated[int, Meta(ge=2, le=64)]] = msgspec.field(default_factory=list)
    """Search budgets the snapshot is also measured with: for each N, the player
    ``snap:<id>+search:N`` (N candidate actions tried at each choice decision, docs/search.md)
    plays the same games against the same anchors, and ``royalefleet strength`` shows it on the
    line below the unsearched snapshot. Empty (the default): no searched games. A searched game
    costs about ten unsearched ones at N = 8 (4 s against 0.4 s here)."""
    generations: GenerationStrengthConfig = msgspec.field(default_factory=GenerationStrengthConfig)
    """Each promoted generation's strength, unsearched and searched (GenerationStrengthConfig)."""

    def problems(self) -> list[str]:
        """A measurement without ``scripted:noop`` (the rating's zero) and an anchor named twice.
        Its games against the seed set are checked by ``RunConfig.problems``."""
        problems = []
        if self.every_iterations and "scripted:noop" not in self.anchors:
            problems.append(f"evaluation.strength.anchors: {list(self.anchors)} lacks scripted:noop, which the "
                            "strength rating pins at 0; add it (or set evaluation.strength.every_iterations to 0)")
        if len(set(self.anchors)) != len(self.anchors):
            problems.append(f"evaluation.strength.anchors: {list(self.anchors)} names an anchor twice")
        return problems


class EvaluationConfig(_Cfg):
    """How the ladder hands evaluation games to evaluator workers (operational: never part of
    the run identity; a gate's numbers do not depend on them, royalelearn-facts 6.4)."""

    job_seeds: PosInt = 4
    """Evaluation seeds in one job; each seed is played twice (both sides), so a job is
    2 x job_seeds full matches (about 8 s each on the reference's machine, facts section 10)."""
    job_deadline_s: PosFloat = 900.0
    """A job not reported this long after it was handed out is handed out again."""
    no_job_retry_s: PosFloat = 5.0
    """How long an evaluator waits before asking again when the ladder has no job."""
    snapshot_cache: PosInt = 4
    """Frozen snapshots an evaluator keeps loaded (least recently used dropped first)."""
    replays_per_gate: NonNegInt = 2
    """Games of each promotion gate recorded to ``<run>/replays/`` (trace + HTML page, listed in
    ``replays/index.json``): the first games of the candidate-vs-champion condition. 0: none."""
    replays_per_strength_job: NonNegInt = 1
    """Games recorded from each strength job (a champion's games against the scripted anchors
    that make its anchor record): the job's first games. 0: none."""
    replays_per_strength_snapshot: NonNegInt = 2
    """Games recorded of each snapshot the standing strength measurement plays
    (``evaluation.strength``, every ``every_iterations``; a searched form of it counts as its own
    snapshot): the first games of its first job, against the first anchor. A young run has
    something to watch before its pool has a champion. 0: none."""
    strength: StrengthConfig = msgspec.field(default_factory=StrengthConfig)
    """The standing strength measurement against the scripted anchors (StrengthConfig)."""
    replays_keep: PosInt = 100
    """Recorded games kept in ``<run>/replays/``; the oldest beyond it are deleted."""
    replay_every_tick: bool = False
    """Record a frame per engine tick (smooth to watch, about 3.4 MB a game and twice the play
    time of that game) instead of one per decision (about 0.37 MB, the page can interpolate).
    Unrecorded games are played with no recorder at all either way."""


class CheckpointConfig(_Cfg):
    """When the learner saves a checkpoint and how many are kept (operational: never part of the
    run identity)."""

    every_iterations: PosInt = 5
    """Write a checkpoint every this many iterations (and always at a clean stop)."""
    keep: PosInt = 10
    """Checkpoints kept; older ones are pruned."""
    max_failed_saves: PosInt = 2
    """Consecutive checkpoint saves (each already retried 3 times) that may fail before the
    learner halts: a count, >= 1, default 2. Every failed save widens what a crash would lose
    (``every_iterations`` more iterations), so after this many in a row (a full disk, a
    checkpoint service that refuses) the learner stops with a halt record (``halted.json``,
    exit 3) instead of training on unsaved. Not part of the run identity (nothing a run
    computes depends on it)."""


class ServicesConfig(_Cfg):
    """Loopback addresses of the local stack. Compose sets the same values through the
    environment variables each service reads (``ROYALEFLEET_*``), so one code path runs both."""

    host: str = "127.0.0.1"
    """The address every service binds and connects to in the local stack (loopback by default;
    Compose sets each service's address through ``ROYALEFLEET_*`` variables instead)."""
    learner_port: Port = 5555
    """The learner's ZeroMQ port, where rollouts send rounds and receive actions. Must differ
    from the other services' ports."""
    ladder_port: Port = 5556
    """The ladder's ZeroMQ ROUTER port (plans, results, pool, gate jobs)."""
    checkpoint_port: Port = 5557
    """The checkpoint service's ZeroMQ ROUTER port (saves, loads, the index)."""
    learner_metrics_port: Port = 9100
    """The learner's Prometheus /metrics port; 0 disables it."""
    ladder_metrics_port: Port = 9101
    """The ladder's Prometheus /metrics port; 0 disables it."""
    checkpoint_metrics_port: Port = 9102
    """The checkpoint service's Prometheus /metrics port; 0 disables it."""
    learner_halt_port: Port = 9108
    """The learner's authenticated POST /halt endpoint (Grafana's halt contact point); it only
    starts when ROYALEFLEET_HALT_TOKEN is set. 0 disables it."""
    rollout_metrics_port: Port = 9110
    """The first local rollout's port; the k-th local rollout uses this + k. 0 disables."""
    evaluator_metrics_port: Port = 9200
    """The first local evaluator's /metrics port; the k-th uses this + k. 0 disables."""
    max_message_mb: PosInt = 64
    """Largest message a service accepts (ZMQ_MAXMSGSIZE): a bigger one is dropped by ZeroMQ
    before it is read."""
    request_timeout_s: PosFloat = 30.0
    """How long a request to the ladder or the checkpoint service may take before it is retried."""
    ladder_status_timeout_s: PosFloat = 2.0
    """How long the learner waits, once per iteration, for the ladder's status (the ``ladder/``
    keys of its metric row); without an answer those keys are absent that iteration."""
    wire_codec: Literal[1, 2] = 2
    """How rollouts send observation rows (shared/codec.py, docs/throughput.md "The wire"): 2
    compressed with zstd (the default for new runs: lossless, 213 B a row against 15,391, ~10 us
    a row of rollout CPU, collection 1.078x codec 1 on a quiet machine), 1 as packed (~15.4 kB a
    row). The learner serves 2 to rollouts that speak it and 1 to older ones. In the run identity
    (``codec_version``): a resume keeps its codec, so a run started on codec 1 (the default before
    2026-12-03) stays on it through its own config.json."""

    def problems(self) -> list[str]:
        """Two services on one port (0, disabled, may repeat)."""
        problems = []
        seen: dict[int, str] = {}
        for name in ("learner_port", "ladder_port", "checkpoint_port", "learner_metrics_port", "learner_halt_port",
                     "ladder_metrics_port", "checkpoint_metrics_port"):
            port = getattr(self, name)
            if port and port in seen:
                problems.append(f"services.{name}: port {port} is also services.{seen[port]}")
            seen[port] = name
        return problems


class DeterminismConfig(_Cfg):
    """How reproducible the learner's numbers are (services/learner/startup.py applies it before
    torch starts)."""

    tier: Literal["run_exact", "throughput"] = "run_exact"
    """``run_exact``: deterministic torch algorithms, ``torch_threads`` threads and matching
    BLAS thread variables (the learner refuses to start without them), so one identity gives the
    same metric rows on one device class. ``throughput``: none of that, faster, not
    reproducible."""
    torch_threads: PosInt = 2
    """Fixed torch intra-op threads (a fixed count is part of run-exactness)."""


class LearnerConfig(_Cfg):
    """Which learner trains on the fleet's rows (docs/design.md, "Typed batches and a second learner (DQN)")."""

    algorithm: AlgorithmName = "ppo"
    """One of ``shared/algorithms.py``'s ``ALGORITHMS`` (``royalefleet up --help`` lists them with a
    phrase each). ``ppo``: clipped PPO over each iteration's rectangle (``ppo``, ``advantage``). ``dqn``:
    n-step Double DQN from prioritized replay (``dqn``; services/learner/dqn), its Q rows the
    actor network's logits at ``dqn.heads`` 1 without dueling, else its own K-head network whose
    heads' mean is written into the actor; the pool and evaluators play its snapshots as they
    play a PPO actor). ``alphazero``: the rollouts search the candidates the learner's prior
    names at its choice decisions (``alphazero``; services/rollout/search.py) and the actor
    learns the search's completed-Q policy by cross-entropy, the critic the realized returns
    (services/learner/alphazero). Another declares itself in its own folder, its settings in the
    section of its name (docs/iteration.md, "Adding a learner algorithm").
    Changes every number a run produces: part of algo_digest when it is not ``ppo``."""


class DqnConfig(_Cfg):
    """The DQN learner (``learner.algorithm = "dqn"``): n-step windows, Double DQN targets,
    prioritized replay of packed rows, a target network, K bootstrapped heads (seed 000's
    ``DqnBatch``). Every field is part of algo_digest when the algorithm is ``dqn``, and moves
    nothing under ``ppo``."""

    n_step: Annotated[int, Meta(ge=1, le=10)] = 3
    """Decisions of the seat's own per window (its own decisions, not env ticks). The n-step
    estimator is uncorrected off-policy (Rainbow's convention): keep it small."""
    heads: Annotated[int, Meta(ge=1, le=16)] = 1
    """K, the ensemble's Q heads over one trunk (1..16). At 1 without ``dueling`` the Q rows are
    the actor's logits; otherwise the learner trains a Q network of its own (the actor's
    architecture with K pointer heads, services/learner/dqn/pointer_q.py) and writes the heads'
    mean into the actor after every update, which is what snapshots, pool seats and evaluators
    play (docs/design.md). Each record stores one bootstrap mask bit per head. With
    ``behaviour = "thompson"`` each episode acts by one head drawn per (seat, episode)."""
    bootstrap_p: Annotated[float, Meta(gt=0.0, le=1.0)] = 1.0
    """Bernoulli p of each record's membership in each head's bootstrap sample, drawn once at
    insertion and stored with the record; 1 trains every head on every record."""
    dueling: bool = False
    """Split each head into a value and an advantage stream (Wang et al. 2016), combined as
    Q = V + A - mean of A over the row's LEGAL actions (illegal entries finfo.min). A snapshot
    keeps the advantage streams only: V and the legal mean are a constant per row, which the
    masked softmax and argmax every player uses ignore."""
    behaviour: Literal["epsilon_greedy", "thompson"] = "epsilon_greedy"
    """``epsilon_greedy``: a uniform legal action with probability epsilon, else the masked
    argmax of the mean Q row over the heads; ``thompson``: the same epsilon, else greedy by one
    head drawn per (seat, episode) from stream ``dqn/thompson/...`` (a pure function of the
    master seed, the battle, the seat and the episode's ordinal: the same after a resume).
    Needs ``heads`` >= 2 (refused at load otherwise). Each record carries the head it acted by
    (-1: the mean) and its epsilon."""
    epsilon_start: Fraction01 = 1.0
    """Epsilon at iteration 0 (a probability)."""
    epsilon_floor: Fraction01 = 0.05
    """Epsilon once the schedule has decayed (a probability); never above ``epsilon_start``."""
    epsilon_decay_iterations: NonNegInt = 50
    """Learner iterations over which epsilon falls linearly to the floor; 0 starts at the floor."""
    replay_capacity: PosInt = 50_000
    """Records the replay ring holds; the oldest is overwritten. A record is two packed rows
    (15,375 B each on the 145-card catalogue), so 50,000 records are ~1.5 GiB."""
    replay_memory_mb: PosFloat = 2048.0
    """The replay's memory budget in MiB: capacity x (2 packed rows + 43 B + heads) must fit,
    checked when the learner starts (services/learner/dqn/replay.py check_budget)."""
    per_alpha: Fraction01 = 0.6
    """Prioritization exponent: P(i) ~ p_i^alpha (0 is uniform sampling; Schaul et al. 2016)."""
    per_beta: Fraction01 = 0.4
    """Importance-weight exponent: w_i = (N P(i))^-beta / max w (1 corrects the bias fully)."""
    batch_size: PosInt = 256
    """Records per minibatch (one optimizer step each)."""
    updates_per_iteration: PosInt = 64
    """Optimizer steps per learner iteration."""
    learning_starts: NonNegInt = 2048
    """Records the replay must hold before the first optimizer step."""
    target_update_period: PosInt = 500
    """Optimizer steps between copies of the online network into the target network."""
    lr: PosFloat = 1e-4
    """Adam learning rate of the Q network, per optimizer step."""
    max_grad_norm: PosFloat = 10.0
    """Global L2 norm the Q network's gradient is clipped to before each step."""
    huber_delta: PosFloat = 1.0
    """Huber loss threshold on the TD error, in reward units."""

    def problems(self, in_use: bool) -> list[str]:
        """Thompson behaviour with one head (only when ``in_use``: ``learner.algorithm`` is
        ``dqn``) and an epsilon floor above its start (always)."""
        problems = []
        if in_use and self.behaviour == "thompson" and self.heads < 2:
            problems.append(
                "dqn.behaviour: \"thompson\" draws one of the ensemble's heads per episode; with dqn.heads 1 there is "
                "nothing to draw (it would be epsilon_greedy): set dqn.heads 2 or more, or dqn.behaviour \"epsilon_greedy\""
            )
        if self.epsilon_floor > self.epsilon_start:
            problems.append(f"dqn.epsilon_floor: {self.epsilon_floor} is above dqn.epsilon_start={self.epsilon_start}")
        return problems


class AlphaZeroConfig(_Cfg):
    """The AlphaZero learner (``learner.algorithm = "alphazero"``; docs/learning.md, "An
    AlphaZero learner"): what the rollouts search and how the target is formed. The update's
    optimisation (learning rates, epochs, batch size, grad-norm clip, ``vf_coef``) is the
    ``ppo`` section's. Every field is part of algo_digest when the algorithm is ``alphazero``,
    and moves nothing otherwise."""

    candidates: Annotated[int, Meta(ge=2, le=64)] = 8
    """Actions tried per searched (choice) decision, each simulated once: the top ``candidates``
    of Gumbel noise + the live actor's log prior, the no-op always among them
    (services/learner/alphazero/book.py, services/rollout/search.py)."""
    depth: Annotated[int, Meta(ge=1, le=240)] = 30
    """Decisions of playout after each candidate before its board is scored (30: 15 s of game
    time at the 500-ms decision, shared/search/spec.py DEFAULT_DEPTH)."""
    c_scale: PosFloat = 0.1
    """Gumbel MuZero's c_scale: the move is argmax of Gumbel + log prior + (50 + 1) c_scale q and
    the target softmax(log prior + (50 + 1) c_scale q), q the completed scores rescaled to
    [0, 1] (shared/search/targets.py); 0.1 moves a logit by at most 5.1 nats."""
    value_lambda: Annotated[float, Meta(ge=0.0, le=1.0)] = 1.0
    """lambda of the critic's target: 1 is the realized discounted return-to-go (bootstrapped only
    where the iteration cuts an episode or the env truncates it), below 1 TD(lambda)."""
    sim_opponent: Literal["battle", "random"] = "battle"
    """Who plays the other seat inside the search's simulations. ``battle``: as in the real
    battle: a scripted opponent itself (in the rollout), the learner's live actor in a mirror
    battle and the pool snapshot in a pool battle, both by the learner's central inference in
    a mid-step request per simulated decision (``SimActQuery``/``SimActions``, docs/protocol.md),
    every candidate's simulation side by side. ``random``: RoyaleGym's ``random`` for a network
    opponent (no request; a search against a passive opponent finds its exploits)."""
    leaf_value: Literal["board", "critic"] = "board"
    """How a simulated candidate is scored. ``board``: tower HP and crowns at the leaf
    (shared/search/lookahead.py ``board_value``), computed in the rollout. ``critic``: the
    n-step return, the simulated path's discounted rewards plus the discount times the live
    critic's V(leaf), valued by the learner's central inference in a mid-step request
    (``LeafQuery``/``LeafValues``, docs/protocol.md): the critic's knowledge reaches the leaves,
    at one more round trip per searched step."""
    playouts: Annotated[int, Meta(ge=1, le=64)] = 1
    """Playouts per candidate, each with its own seeds (playout j of every candidate shares j's
    streams), scored by their mean: the ``+search`` players' ``p=K`` (docs/search.md, "Targets
    worth distilling"; shared/search/halving.py). 1: one playout, as AlphaZero always searched.
    Any of ``playouts`` above 1, ``halving``, ``value_scale`` or ``keep`` switches the rollouts to
    the players' move rule (``shared.search.halving.evaluate``: the best mean, the prior's own pick
    kept unless beaten by more than ``keep``) in place of Gumbel + sigma(min-max q); needs
    ``leaf_value`` "board"."""
    halving: bool = False
    """Sequential halving over the candidates with the budget ``candidates`` x ``playouts`` (the
    players' ``sh=1``): the close candidates get the playouts. Needs ``leaf_value`` "board"."""
    continuation: str = "random"
    """Who plays the searching seat after its candidate in a simulation (the players' ``cont=``):
    RoyaleGym's ``random`` (the default), or a scripted bot of ``shared.search.spec.SIM_BOTS``
    (``defend``, ``first-affordable``, ...). The network itself (``self``) is not offered: the
    rollout is torch-free and would have to ask the learner for every simulated decision."""
    sim_opponents: list[str] = []
    """Scripted bots (names of ``shared.search.spec.SIM_BOTS``, distinct) that play the other seat
    in the simulations, playout j played by entry (seed + j) mod len (the players' ``opp=a/b``);
    empty: the battle's own opponent as ``sim_opponent`` says. When set, no network opponent is
    simulated and ``sim_opponent`` is not read."""
    value_scale: NonNegFloat = 0.0
    """Tower HP per unit of the fixed value scale (the players' ``vs=S``): each playout's board
    difference becomes tanh(diff / value_scale) before the mean, and the scores the rollouts report
    are on that scale (expert iteration then uses them as they are, not its own section's
    ``value_scale``). 0: raw board differences. Needs ``leaf_value`` "board"."""
    keep: NonNegFloat = 0.0
    """The margin (score units: tanh units under ``value_scale``) another candidate's mean must
    beat the prior's own pick (the first candidate, the top Gumbel key) by to be played (the
    players' ``keep=M``). Needs ``leaf_value`` "board"."""

    candidates_from: Literal["prior", "plans"] = "prior"
    """Where a searched decision's candidates come from. ``prior``: the top ``candidates`` of
    Gumbel noise + the live actor's log prior (the no-op always among them). ``plans``: the
    prior's own sample, the no-op, then each card's plan moves (``shared.search.plans``:
    ``defend``'s anchor and the furthest-forward cell down either lane), the rest random legal
    plays: the ``+search`` players' ``cand=plans``, whose clones beat ``defend`` on a fixed deck
    (docs/learning.md). Needs the players' move rule (``playouts``' docstring)."""
    own_pick: Literal["sample", "argmax"] = "sample"
    """The first candidate, the own pick the players' move rule plays unless another beats it by
    ``keep``: the live actor's sample (the top Gumbel key), or its argmax (the players'
    ``own=argmax``), so that where the search finds nothing better the target is the network's
    mode, not a draw of its spread (docs/learning.md, "Fine-tuned from generation 0"). The
    unsearched decisions of ``full_search_share`` still play the sample. Needs the players' move
    rule."""
    redeal: bool = False
    """Every playout starts from the battle with the enemy's cards the searching seat has not
    seen redealt (``shared.search.hidden``; the players' ``redeal=1``), so the targets do not
    choose by the enemy's hidden hand. Needs the players' move rule and an observation with
    ``enemy_cards_seen`` (RoyaleGym's ``SpatialObsBuilder`` has it)."""

    full_search_share: Annotated[float, Meta(gt=0.0, le=1.0)] = 1.0
    """Playout-cap randomisation (KataGo, Wu 2019, sec. 3.1; docs/expert-iteration.md): the share
    of the learner's choice decisions searched fully. A coin from
    ``search/full/iteration/{i}/cycle/{t}/slot/{s}`` picks each one: full search (its candidates
    in the Step, its target a policy label) with probability ``full_search_share``, else the
    prior's own sampled move with no simulation (a value-only row). 1: every choice decision
    searched, as before the field existed."""

    def stable(self) -> bool:
        """True when the rollouts play the players' move rule (``playouts``' docstring)."""
        return self.playouts != 1 or self.halving or self.value_scale > 0 or self.keep > 0

    def problems(self, in_use: bool) -> list[str]:
        """The search options' rules (``in_use``: the learner searches), each naming the fix."""
        from shared.search.spec import SIM_BOTS

        problems = []
        if self.continuation not in SIM_BOTS:
            problems.append(f"alphazero.continuation: {self.continuation!r} is not a simulation bot; choose one of "
                            f"{', '.join(SIM_BOTS)}")
        bad = [n for n in self.sim_opponents if n not in SIM_BOTS]
        if bad or len(set(self.sim_opponents)) != len(self.sim_opponents):
            problems.append(f"alphazero.sim_opponents: {self.sim_opponents!r} must be distinct names of "
                            f"{', '.join(SIM_BOTS)}")
        for name, on, value in (("candidates_from", self.candidates_from == "plans", '"plans"'),
                                ("redeal", self.redeal, "true"), ("own_pick", self.own_pick == "argmax", '"argmax"')):
            if in_use and on and not self.stable():
                problems.append(f"alphazero.{name}: {value} needs the players' move rule (the prior's own pick "
                                "played unless another candidate beats it by keep); set alphazero.keep (the "
                                "fixed-deck teachers used 0.1) or alphazero.playouts above 1")
        if in_use and self.leaf_value == "critic" and self.stable():
            set_ = [f for f, on in (("playouts", self.playouts != 1), ("halving", self.halving),
                                    ("value_scale", self.value_scale > 0), ("keep", self.keep > 0)) if on]
            problems.append(f"alphazero.leaf_value: \"critic\" values one leaf a candidate in one LeafQuery and "
                            f"cannot score the players' move rule yet ({', '.join('alphazero.' + f for f in set_)} "
                            "set); set alphazero.leaf_value \"board\", or leave playouts 1, halving false, "
                            "value_scale 0 and keep 0")
        return problems

    def identity_part(self) -> dict:
        """The section as algo_digest reads it: the search options left out at their defaults, so
        a run that does not use them keeps the digest it had before they existed."""
        data = msgspec.to_builtins(self)
        for name, default in (("playouts", 1), ("halving", False), ("continuation", "random"),
                              ("sim_opponents", []), ("value_scale", 0.0), ("keep", 0.0), ("full_search_share", 1.0),
                              ("candidates_from", "prior"), ("redeal", False), ("own_pick", "sample")):
            if data.get(name) == default:
                data.pop(name)
        return data


class RunConfigFields(_Cfg):
    """One run, completely: ``RunConfig`` is this with each learner algorithm's section added
    last (shared/algorithms.py's ``algorithm_sections``, in table order)."""

    format_version: int = FORMAT_VERSION
    """Version of this document's layout: a config of another version is refused at load
    (``check_consistency``). Leave it as ``royalefleet config`` writes it."""
    profile: str = "cpu"
    """The machine class the document starts from (``PROFILES``: cpu, laptop, workstation,
    many_core, tiny); the document's own fields go on top of it. An unknown name is refused. The
    name itself is only recorded: the numbers it brings are what the identity sees."""
    run_name: str = "default"
    """The run folder's name: everything a run writes lives in ``<runs_dir>/<run_name>/``, and a
    folder that holds a checkpoint is resumed. A usable folder name (no ``/``, ``\\`` or NUL;
    not ``.`` or ``..``); ``--run-name`` overrides it."""
    runs_dir: str = "runs"
    """The folder that holds run folders, relative to the directory the services start in;
    ``--runs-dir`` overrides it."""
    master_seed: NonNegInt = 20260921
    """The seed every random stream of the run descends from (shared/seeding.py: battle seeds,
    matchmaking, PFSP draws, the evaluation seed set, weight init). Another seed is another
    experiment."""
    env: EnvConfig = msgspec.field(default_factory=EnvConfig)
    obs: ObsConfig = msgspec.field(default_factory=ObsConfig)
    rollout: RolloutConfig = msgspec.field(default_factory=RolloutConfig)
    local: LocalConfig = msgspec.field(default_factory=LocalConfig)
    net: NetConfig = msgspec.field(default_factory=NetConfig)
    ppo: PPOConfig = msgspec.field(default_factory=PPOConfig)
    advantage: AdvantageConfig = msgspec.field(default_factory=AdvantageConfig)
    ladder: LadderConfig = msgspec.field(default_factory=LadderConfig)
    checkpoint: CheckpointConfig = msgspec.field(default_factory=CheckpointConfig)
    services: ServicesConfig = msgspec.field(default_factory=ServicesConfig)
    determinism: DeterminismConfig = msgspec.field(default_factory=DeterminismConfig)
    alarms: AlarmConfig = msgspec.field(default_factory=AlarmConfig)
    evaluation: EvaluationConfig = msgspec.field(default_factory=EvaluationConfig)
    timestep_limit: NonNegInt = 0
    """Stop the run cleanly at the first iteration boundary at or past this many learner
    timesteps (a total of the run, like ``--iterations``; ``--timesteps N`` overrides it);
    0 = no limit. NOT in the identity: where a run stops cannot change a number it wrote."""
    extensions: dict[str, Any] = {}
    """Extension sections by name (shared/extensions.py). Written as top-level keys of a config
    document; each must be provided by an installed package's ``royalefleet.extensions`` entry
    point, which validates it. In the identity, each with its provider's distribution and
    version (``RunIdentity.extensions``)."""
    learner: LearnerConfig = msgspec.field(default_factory=LearnerConfig)
    """Which learner trains (``LearnerConfig``)."""
    dqn: DqnConfig = msgspec.field(default_factory=DqnConfig)
    """The DQN learner's settings, read only when ``learner.algorithm = "dqn"``."""
    alphazero: AlphaZeroConfig = msgspec.field(default_factory=AlphaZeroConfig)
    """The AlphaZero learner's settings, read only when ``learner.algorithm = "alphazero"``
    (its search settings also under every algorithm whose declaration ``searches``)."""

    def problems(self, profiles: Collection[str]) -> list[str]:
        """Every cross-field rule the config breaks, all at once (SEED RL's validate_config):
        its own fields' (``profiles``: the known profile names), each section's, then the
        rules between sections."""
        problems = []
        if self.format_version != FORMAT_VERSION:
            problems.append(f"format_version: {self.format_version} is not {FORMAT_VERSION}, the one this build reads")
        if self.profile not in profiles:
            problems.append(f"profile: unknown profile {self.profile!r}; choose one of {', '.join(profiles)}")
        if not self.run_name or any(c in self.run_name for c in "/\\\0") or self.run_name in (".", ".."):
            problems.append(f"run_name: {self.run_name!r} is not a usable folder name")
        problems += self.rollout.problems()
        problems += self.ppo.problems()
        problems += self.dqn.problems(in_use=self.learner.algorithm == "dqn")
        problems += self.alphazero.problems(in_use=algorithm(self.learner.algorithm).searches)
        problems += self.advantage.problems()
        problems += self.env.problems()
        problems += self.ladder.problems()
        problems += self.evaluation.strength.problems()
        problems += self.net.problems()
        problems += self.services.problems()
        return problems + self._between_sections()

    def _between_sections(self) -> list[str]:
        """Overlapped collection against run-exactness and frame stacking, the DQN learner
        against overlap and frame stacking, and the strength games against the seed set."""
        problems = []
        overlap, frame_stack = self.rollout.overlap, self.obs.frame_stack
        if overlap and self.determinism.tier == "run_exact":
            problems.append(
                "rollout.overlap: overlapped collection is refused under determinism.tier \"run_exact\" (its rows "
                "would depend on how long the update took); set determinism.tier \"throughput\" or rollout.overlap false"
            )
        if overlap and frame_stack > 1:
            problems.append(
                f"rollout.overlap: overlapped collection does not support obs.frame_stack={frame_stack} yet "
                "(the next iteration's rows would be gathered while the update still reads the frame history of "
                "this one); set rollout.overlap false or obs.frame_stack 1"
            )
        if self.learner.algorithm == "dqn":
            if overlap:
                problems.append("rollout.overlap: the DQN learner does not overlap collection with its update; set it false")
            if frame_stack > 1:
                problems.append(f"obs.frame_stack: the DQN learner's Q rows read one frame; obs.frame_stack "
                                f"{frame_stack} needs its replay to carry the history: set obs.frame_stack 1")
        spec = algorithm(self.learner.algorithm)
        problems += spec.problems(self)  # type: ignore[arg-type]  # self is a RunConfig
        if spec.searches:
            if overlap:
                problems.append("rollout.overlap: the AlphaZero learner does not overlap collection with its update "
                                "(a searched round's target is formed with the actor that answers it); set it false")
            if frame_stack > 1:
                problems.append(f"obs.frame_stack: the rollouts' search simulates single frames; obs.frame_stack "
                                f"{frame_stack} is not searched: set obs.frame_stack 1")
        strength, seeds = self.evaluation.strength, self.ladder.pool.eval_seed_count
        gens = strength.generations
        problems += gens.problems(seeds if gens.active(self.learner.algorithm) else None)
        if strength.every_iterations and (strength.games_per_anchor + 1) // 2 > seeds:
            problems.append(
                f"evaluation.strength.games_per_anchor: {strength.games_per_anchor} paired battles need "
                f"{(strength.games_per_anchor + 1) // 2} evaluation seeds, but ladder.pool.eval_seed_count is {seeds}; "
                "lower the games or raise the seed count")
        return problems


def _with_algorithm_sections(base: type[RunConfigFields]) -> type[RunConfigFields]:
    """``base`` with one field per declared algorithm section (its name, its Struct, its
    defaults), appended in table order: a config document's key order stays that of the table."""
    return msgspec.defstruct(
        "RunConfig", [(spec.name, spec.section, msgspec.field(default_factory=spec.section))
                      for spec in algorithm_sections()],
        bases=(base,), module=__name__, kw_only=True, forbid_unknown_fields=True)


if TYPE_CHECKING:
    class RunConfig(RunConfigFields):
        """One run, completely (its algorithm sections: ``getattr(cfg, name)``, typed by the
        algorithm's declaration module)."""
else:
    RunConfig = _with_algorithm_sections(RunConfigFields)
    RunConfig.__doc__ = RunConfigFields.__doc__
