"""Every message the services exchange: msgspec structs in tagged unions.

Wire format (after ZeroMQ's routing frames), in the spirit of Jupyter's wire protocol::

    frame 0   msgpack Envelope {protocol, body: <tagged struct>, arrays: [[name, dtype, shape], ...]}
    frame 1.. one raw buffer per entry of ``arrays``, in order

Bulk data (packed observation rows, per-slot scalars, checkpoint files) never goes through the
serializer: the header says how to read each buffer. ``decode`` refuses, with a
``ProtocolError`` whose ``reason`` is a short metric label and whose text names what was wrong:
an undecodable header, an unknown tag or field, a wrong protocol version, a frame count or size
that does not match the header, an array dtype or shape the message kind does not allow. No
input can make it raise anything else.

Seams and their messages:

    rollout  -> learner     Hello, Round, Heartbeat, Failure
    learner  -> rollout     Welcome, Refused, Plan, Step, Close, Rejoin
    learner  -> ladder      PlanRequest, ReportEpisodes           (replies PlanReply, Ack, Error)
    learner  -> ladder      AdmitCandidate, LadderStatusRequest, MeasureStrength
                                                          (replies Admitted, LadderStatus, Ack, Error)
    evaluator -> ladder     EvalJobRequest, EvalReport            (replies EvalJob, NoJob, Ack, Error)
    evaluator -> checkpoint LoadSnapshot                          (replies SnapshotLoaded, NotFound, Error)
    learner  -> checkpoint  SaveCheckpoint, LoadLatest            (replies Saved, Loaded, NotFound, Error)
"""

from __future__ import annotations

import math
from typing import Literal, Union

import msgspec
import numpy as np
from msgspec import Struct

from shared.config import EnvConfig, RolloutConfig
from shared.search.spec import RolloutSearch

PROTOCOL_VERSION = 1

# Roles of a seat, as carried per slot in a Round's ``group`` array.
GROUP_LEARNER = 0
"""The live policy plays this seat: the learner infers for it and trains on its rows."""
GROUP_SCRIPTED = -2
"""A scripted opponent plays this seat inside the rollout; no row crosses the wire."""
GROUP_FROZEN = 1
"""A frozen snapshot (player id ``snap:<snapshot_id>``) plays this seat. Its observation row
crosses the wire like a learner row; the learner infers for it with that snapshot's actor
(which snapshot: the learner's assignment for the slot's (battle, ordinal)) and never trains
on it (the reference's ``discard_opponent_rows``, royalelearn-facts 4)."""
SNAPSHOT_PREFIX = "snap:"
"""The player-id prefix of a pool member: ``snap:<snapshot_id>``, the checkpoint service's
content id (``services/checkpoint/snapshots.py``)."""


def snapshot_of(player: str) -> str | None:
    """The snapshot id of player id ``snap:<id>``; None for any other player (``learner``,
    ``scripted:...``)."""
    return player[len(SNAPSHOT_PREFIX):] if player.startswith(SNAPSHOT_PREFIX) else None


SEATS = ("blue", "red")


class _Msg(Struct, forbid_unknown_fields=True, kw_only=True, tag_field="type"):
    pass


class EngineBuild(Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Which engine a process runs: digests published by ``ClashParallelEnv.config()``.
    ``binary_sha256`` is the compiled extension's hash; the data digests alone cannot tell
    two builds of different Rust code apart (royalelearn-facts, lesson 11)."""

    engine_class: str
    calibration_digest: str
    build_digest: str
    binary_sha256: str
    cards_digest: str
    royalegym_version: str

    def describe(self) -> str:
        return (
            f"{self.engine_class} build {self.build_digest} binary {self.binary_sha256} "
            f"cards {self.cards_digest} (royalegym {self.royalegym_version})"
        )


class PlaneCodec(Struct, array_like=True, forbid_unknown_fields=True, frozen=True):
    """Storage of one spatial plane: ``uint8``/``uint16`` hold round(value * scale) exactly,
    ``float16`` holds the value to half precision, ``static`` is not stored per row."""

    name: str
    storage: Literal["uint8", "uint16", "float16", "static"]
    scale: float


class CodecTable(Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """How one observation row is packed (see ``shared.codec``). Decided by the learner at
    start-up from the declared observation space and a sample of real observations, and sent
    to every rollout in Welcome."""

    version: int
    planes: tuple[PlaneCodec, ...]
    height: int
    width: int
    vector_size: int
    n_actions: int
    hand_slots: int
    id_planes: int = 0
    """Card-id planes stored per row as bytes (``ObsSpec.id_planes``); encoded only when not 0,
    so a table without them keeps its digest."""


class Assignment(Struct, array_like=True, forbid_unknown_fields=True, frozen=True):
    """What one episode of one battle is: drawn by the ladder from
    ``match/battle/{battle}/ordinal/{ordinal}``, so a pure function of those and the master seed.

    ``learner_seat`` is 0 (blue) or 1 (red) for a scripted battle and -1 (both) for a mirror."""

    battle: int
    ordinal: int
    role: Literal["mirror", "pool", "scripted"]
    opponent: str
    learner_seat: int


class DecisionSpan(Struct, array_like=True, frozen=True):
    """A run of consecutive decisions of one episode inside one iteration (learner-stamped,
    ``services/learner/provenance.py``): decisions ``first_cycle .. first_cycle + decisions - 1``
    of ``iteration``'s rectangle, the battle at column ``position`` of that iteration's slot
    order (seat ``s`` is slot ``2 * position + s``), the learner's actor weights of that
    iteration being ``actor_digest`` (sha256[:16] of ``actor/model.safetensors`` as a
    checkpoint stores them)."""

    iteration: int
    first_cycle: int
    decisions: int
    position: int
    actor_digest: str


class InferredChoice(Struct, array_like=True, frozen=True):
    """One decision of a centrally inferred seat (the learner or a frozen snapshot) with more
    than the no-op legal: decision ``decision`` of the episode (0-based) was row ``index`` of
    a forward batch of ``batch`` rows and played ``action``. Forced decisions (the no-op only)
    are not listed: their action is 0 and no forward ran. A CPU forward rounds a row
    differently with its batch size and place in the batch (never with the other rows'
    contents; docs/watching.md), so an exact replay needs both."""

    decision: int
    batch: int
    index: int
    action: int


class EpisodeProvenance(Struct, kw_only=True):
    """Where an episode's decisions were taken (learner-stamped): what ``royalefleet replay``
    needs to play its learner and frozen seats again exactly. ``choices`` are this record's
    seat's, empty for a scripted seat."""

    spans: list[DecisionSpan]
    choices: list[InferredChoice] = []


class EpisodeRecord(Struct, forbid_unknown_fields=True, kw_only=True):
    """One seat's finished episode. The terminal scalars are copied from the environment's
    final info (RoyaleGym computes them; a second implementation would be a second answer)."""

    battle: int
    ordinal: int
    seat: Literal["blue", "red"]
    role: str
    player: str
    """``learner`` or the scripted opponent's id (``scripted:noop``, ...)."""
    opponent: str
    outcome: int
    """+1 win, 0 draw or truncated, -1 loss, from this seat's side."""
    truncated: bool
    episode_steps: int
    episode_ticks: int
    own_crowns: int
    enemy_crowns: int
    own_tower_hp_frac: float
    enemy_tower_hp_frac: float
    elixir_leak_steps: int
    elixir_count_exact: bool
    cards_played: int
    undiscounted_return: float
    iteration: int = -1
    """Set by the learner: the iteration in which the episode finished."""
    reward_terms: dict[str, float] = {}
    """Signed episode sum of each reward term (weighted), from the final info."""
    reward_terms_abs: dict[str, float] = {}
    """Episode sum of |F_t| of each reward term (weighted): how loud each term was."""
    deck: list[str] = []
    """The card names dealt to this seat at the episode's reset (shared/envs.py dealt_deck);
    empty in logs written before it existed."""
    provenance: EpisodeProvenance | None = None
    """Set by the learner for a training episode whose every decision it saw (None in logs
    written before it existed, and for evaluation games): see ``EpisodeProvenance``."""


# ----------------------------------------------------------------- rollout -> learner


class Hello(_Msg, tag="hello"):
    """A rollout introduces itself. ``instance`` is fresh on every process start (SEED RL's
    run_id), so a restarted rollout is a new member, never the old one's continuation."""

    instance: str
    host: str
    pid: int
    battles: int
    shards: int
    engine: EngineBuild
    codecs: list[int] = msgspec.field(default_factory=lambda: [1])
    """The wire codecs this rollout speaks (shared/codec.py ``WIRE_CODECS``). A rollout built
    before codec 2 sends no such field and speaks codec 1 only."""
    user_code: dict[str, str] = {}
    """{user package: sha256 of its source} for the packages ``ROYALEFLEET_USER_PACKAGES``
    names (shared/components.py ``hello_user_code``); the learner refuses a rollout whose digests
    differ from its identity's ``user_code``, naming both."""


class Round(_Msg, tag="round"):
    """One shard's answer after one decision, labelled (iteration, cycle).

    Two timesteps travel in one round, and which is which is the classic off-by-one:

    * the round's OWN cycle ``t``: arrays ``group`` (int8, per slot: who holds the seat from
      here on), ``tick`` (int32), ``ordinal`` (int32: the episode each slot is now in), and
      ``rows`` (uint8 (n_held, row_bytes): the packed observation of every slot whose
      ``group`` is >= 0, i.e. GROUP_LEARNER and GROUP_FROZEN slots, in slot order; the learner
      splits them by group: learner rows go into the rectangle, frozen rows are inferred by
      their snapshot and never stored for training; GROUP_SCRIPTED slots send no row);
    * the step that ARRIVED here, which began at cycle ``t - 1``: ``reward`` (float32),
      ``terminated`` / ``truncated`` (uint8 0/1), ``deploy_status`` (int8: -1 no command,
      0 accepted, >0 an engine refusal, i.e. a mask bug), plus ``final_slots`` (int16) and
      ``final_rows`` (uint8 (k, row_bytes)): the last observation of every learner slot whose
      episode was truncated by that step, for the bootstrap V(final_obs). Learner slots only:
      a frozen seat's truncation sends no final row (nothing bootstraps from it).

    The round at cycle 0 has no step behind it and carries zeros in the second half. Slots are
    the shard's battles in order, blue then red: local slot ``2 * i + seat``.

    Under wire codec 2 (negotiated in Hello / Welcome) ``rows`` and ``final_rows`` travel as
    ``rows_zstd`` and ``final_rows_zstd`` (uint8 (k,): one zstd frame each, shared/codec.py);
    the learner expands them back to the same bytes before filing the round.
    """

    instance: str
    iteration: int
    cycle: int
    shard: int
    episodes: list[EpisodeRecord] = []
    env_seconds: float = 0.0
    """Wall time the rollout spent stepping this shard for this round."""
    codec_clipped: int = 0
    """Observation values of this round's rows clipped to fit their storage (healthy: 0)."""
    codec_rounded: int = 0
    """Observation values of this round's rows stored rounded (healthy: 0)."""
    wire_encode_seconds: float = 0.0
    """CPU seconds (the sending thread's) the rollout spent compressing this round's rows
    (wire codec 2; 0 under codec 1)."""
    search_seconds: float = 0.0
    """Wall seconds the rollout's search spent on this round (``Welcome.search``; 0 without)."""
    search_steps: int = 0
    """Engine decisions the search stepped in simulations for this round (counted in the
    rollout's throughput beside the battles' own decisions)."""


class LeafQuery(_Msg, tag="leaf_query"):
    """Under ``alphazero.leaf_value = "critic"``, in the middle of the Step (iteration, cycle,
    shard): the search's leaves, to be valued before the rollout chooses its moves. Arrays:
    ``leaf_rows`` (uint8 (n, row_bytes): the searching seat's packed observation at each leaf,
    searched slots in the Step's order, each slot's candidates in the Step's order),
    ``leaf_return`` (float64 (n,): the discounted sum of the searching seat's rewards along the
    simulated path, candidate included) and ``leaf_discount`` (float64 (n,): gamma to the power
    of the decisions simulated, 0 where the simulated battle ended with a winner or a draw).
    The learner answers ``LeafValues``; the round of the step follows it."""

    instance: str
    iteration: int
    cycle: int
    shard: int


class SimActQuery(_Msg, tag="sim_act_query"):
    """Under ``alphazero.sim_opponent = "battle"``, in the middle of the Step (iteration, cycle,
    shard): the moves of a network opponent inside the search's simulations, one decision of
    every candidate's simulation at a time. ``player`` is the seat's holder in the real battle
    (``learner`` in a mirror battle, ``snap:<id>`` for a pool snapshot), ``battle``/``ordinal``
    the real battle's global id and episode (the learner checks the snapshot against that
    episode's assignment), ``seq`` numbers the queries of one step from 0. Arrays
    ``sim_rows`` (uint8 (n, row_bytes): the opponent seat's observations) and ``sim_uniforms``
    (float64 (n,) in [0, 1): the sampling draws, from each simulation's own stream). The learner
    answers ``SimActions``."""

    instance: str
    iteration: int
    cycle: int
    shard: int
    seq: int
    player: str
    battle: int
    ordinal: int


class Heartbeat(_Msg, tag="heartbeat"):
    instance: str
    state: str


class Failure(_Msg, tag="failure"):
    """A rollout that cannot go on says why before it exits."""

    instance: str
    kind: Literal["exception", "protocol", "refused"]
    message: str


# ----------------------------------------------------------------- learner -> rollout


class Welcome(_Msg, tag="welcome", omit_defaults=True):
    """The learner accepts a Hello: what every battle is and how rows are packed.

    ``omit_defaults``: a Welcome serving wire codec 1 is encoded without ``wire_codec``, so a
    rollout built before codec 2 (whose Welcome has no such field and refuses unknown ones)
    still reads it."""

    env: EnvConfig
    master_seed: int
    codec: CodecTable
    engine: EngineBuild
    random_legal_noop_prob: float
    rollout: RolloutConfig
    """Heartbeat and silence timings and the mask-only option; the battle and shard counts
    are the rollout's own (its machine's) and are not taken from here."""
    wire_codec: int = 1
    """How this rollout sends its rows (shared/codec.py): 1 raw ``rows`` / ``final_rows``, 2 one
    zstd frame each (``rows_zstd`` / ``final_rows_zstd``). One of the Hello's ``codecs``."""
    search: RolloutSearch | None = None
    """What to search at the learner seats' choice decisions (``learner.algorithm =
    "alphazero"``; services/rollout/search.py); None: no search. A Step then names each searched
    slot's candidates (``search_slots``, ``search_candidates``, ``search_keys``) and the round
    after it carries the search (``search_slots``, ``search_candidates``, ``search_q``,
    ``search_moves``: ``shared.round_arrays.SEARCH``)."""


class Refused(_Msg, tag="refused"):
    """The learner will not take this rollout; ``reason`` says why and what to do."""

    reason: str


class Plan(_Msg, tag="plan"):
    """The rollout's part of an iteration. ``battles`` are the global battle ids it runs, in
    its local order. ``restart_ordinals[i] >= 0`` resets battle i at that episode ordinal;
    -1 continues the episode in flight. ``assignments`` extends every battle's table of
    upcoming episodes (see Assignment). A rollout with a restarted or new battle answers with
    a cycle-0 round per shard; otherwise its last round (cycle T of the previous iteration)
    already is this iteration's cycle 0."""

    iteration: int
    battles: list[int]
    restart_ordinals: list[int]
    assignments: list[Assignment]
    fresh: bool
    """Answer with a cycle-0 round per shard now (a new rollout, or restarted battles)."""
    gamma: float
    """The iteration's discount, evaluated once by the learner's schedule: every potential
    reward term uses it (gamma * Phi(s') - Phi(s)), so the reward and GAE share one number."""


class Step(_Msg, tag="step"):
    """Advance one shard by one decision. Array ``actions`` (int16, per local slot): the
    learner's action for GROUP_LEARNER slots and the frozen snapshot's for GROUP_FROZEN slots
    (both inferred by the learner); ignored for scripted ones. Under ``Welcome.search``, arrays
    ``search_slots`` (int16 (s,) local slots), ``search_candidates`` (int16 (s, k), -1 pads) and
    ``search_keys`` (float32 (s, k): each candidate's Gumbel + log prior) ask the rollout to
    search those slots first and play the search's move there instead of ``actions``."""

    iteration: int
    cycle: int
    shard: int


class LeafValues(_Msg, tag="leaf_values"):
    """The answer to a ``LeafQuery`` of (iteration, cycle, shard): array ``leaf_q`` (float32
    (n,)) each leaf's n-step return ``leaf_return / s + leaf_discount * V(leaf)``, V the live
    critic and s the learner's reward scale (services/learner/returns.py), in the query's order."""

    iteration: int
    cycle: int
    shard: int


class SimActions(_Msg, tag="sim_actions"):
    """The answer to a ``SimActQuery`` of (iteration, cycle, shard, seq): array ``sim_actions``
    (int16 (n,)) the player's actions sampled by inverse CDF at the query's uniforms (the no-op
    where only it is legal, or where the snapshot cannot play)."""

    iteration: int
    cycle: int
    shard: int
    seq: int


class Close(_Msg, tag="close"):
    reason: str


class Rejoin(_Msg, tag="rejoin"):
    """The learner does not know this instance (it restarted): say Hello again. ``instance`` is
    the one it does not know; a rollout that has since said Hello under a new instance ignores
    the Rejoins its old heartbeats still draw, instead of saying Hello once for each."""

    reason: str
    instance: str = ""


class GetStates(_Msg, tag="get_states"):
    """Send the exact state of every battle now (``BattleStates``). Sent after the last round of
    an iteration (cycle T) was filed and before the next Plan, so every battle is idle at the
    point that round describes (services/rollout/battle_state.py)."""

    iteration: int


class SetState(_Msg, tag="set_state"):
    """Continue battles from recorded states (a resume). Sent before the Plan that names the same
    ``battles`` (the rollout's global battle ids in its local order); ``states[i]`` is the
    recorded ``BattleState`` msgpack of ``battles[i]``, or empty for a battle that starts as the
    Plan says. Answered by ``StatesSet``."""

    iteration: int
    battles: list[int]
    states: list[bytes]


# ----------------------------------------------------------------- rollout -> learner: states


class BattleStates(_Msg, tag="battle_states"):
    """The answer to GetStates: ``states[i]`` is the ``BattleState`` msgpack of battle
    ``battles[i]``; ``failed`` names battles whose state could not be saved, with the reason."""

    instance: str
    iteration: int
    battles: list[int]
    states: list[bytes]
    failed: list[str] = []
    seconds: float = 0.0
    """Wall time the rollout spent saving."""


class StatesSet(_Msg, tag="states_set"):
    """The answer to SetState: the battles now continuing their recorded episodes, and those
    whose state was refused (``reasons[i]`` for ``refused[i]``: format, engine, battle, hash,
    potentials or load, then the text); a refused battle starts as the Plan says."""

    instance: str
    iteration: int
    restored: list[int]
    refused: list[int] = []
    reasons: list[str] = []


# ----------------------------------------------------------------- learner <-> ladder


class PlanRequest(_Msg, tag="plan_request"):
    """Assignments for ordinals ``next_ordinals[i] .. next_ordinals[i] + lookahead - 1`` of
    every battle ``battles[i]``, in an iteration of ``n_battles`` battles in all."""

    request_id: int
    iteration: int
    n_battles: int
    battles: list[int]
    next_ordinals: list[int]
    lookahead: int


class PlanReply(_Msg, tag="plan_reply"):
    request_id: int
    assignments: list[Assignment]
    role_counts: tuple[int, int, int]


class ReportEpisodes(_Msg, tag="report_episodes"):
    request_id: int
    run_name: str
    episodes: list[EpisodeRecord]
    report_id: str = ""
    """The batch's own id, the same on every send of it (the learner's held batches keep it in
    episodes.held.jsonl): the ladder writes a record of one report id once, so a report it wrote
    but never acked before a crash is not written again when the learner resends it. "": none
    (every send is written). At most ``MAX_REPORT_ID`` characters."""
    token: str = ""
    """The sender's ladder role token (``shared.writer_token.LADDER_WRITES``); a ladder started with one
    refuses the request without it (``unauthorized``)."""


MAX_REPORT_ID = 64


class Ack(_Msg, tag="ack"):
    request_id: int
    count: int = 0


class Error(_Msg, tag="error"):
    """A request refused; ``reason`` names what was wrong."""

    request_id: int
    reason: str


# ----------------------------------------------------------------- admission and ladder status


class AdmitCandidate(_Msg, tag="admit_candidate"):
    """A pool candidate: the learner stored snapshot ``snapshot_id`` (the checkpoint service's
    content id, 16 hex) at ``env_steps`` decisions, iteration ``iteration``. The ladder files it
    as pool member ``snap:<snapshot_id>`` (services/ladder/pool.py ``PoolState.submit``).

    ``seed``: one of the config's ``ladder.pool.seed_snapshots``, sent by the learner at a fresh
    start (env_steps and iteration 0): admitted straight into the pool, never evicted, never
    champion by admission. False (the default, so older senders still decode) for the run's own
    candidates."""

    request_id: int
    run_name: str
    snapshot_id: str
    env_steps: int
    iteration: int
    seed: bool = False
    token: str = ""
    """The sender's ladder role token (``shared.writer_token.LADDER_WRITES``); a ladder started with one
    refuses the request without it (``unauthorized``)."""


class Admitted(_Msg, tag="admitted"):
    """What the pool did with a candidate: ``admitted_free`` (the run's first: it is the champion
    now), ``pending`` (it waits for a gate) or ``duplicate`` (already known; nothing changed, so
    a retried request is harmless), or ``admitted_seed`` (a seed snapshot: a member now, never
    evicted, not champion)."""

    request_id: int
    snapshot_id: str
    status: Literal["admitted_free", "pending", "duplicate", "admitted_seed"]


class MeasureStrength(_Msg, tag="measure_strength"):
    """The learner stored its actor of iteration ``iteration`` as snapshot ``snapshot_id`` (16
    hex) for the standing strength measurement (``evaluation.strength``): the ladder plans its
    games against each scripted anchor (services/ladder/strength.py) and answers Ack(count =
    jobs planned; 0 for a snapshot it measures already). The learner does not wait for the games."""

    request_id: int
    run_name: str
    snapshot_id: str
    env_steps: int
    iteration: int
    timesteps: int = 0
    token: str = ""
    """The sender's ladder role token (``shared.writer_token.LADDER_WRITES``); a ladder started with one
    refuses the request without it (``unauthorized``)."""


class StrengthSummary(Struct, forbid_unknown_fields=True, kw_only=True):
    """The newest measured strength snapshot (services/ladder/strength.py): ``score`` against
    each anchor (a draw counts half) over ``games`` games each, its Wilson 95 % interval
    ``score_lo`` .. ``score_hi``, and the Bradley-Terry-Davidson rating in Elo
    (``scripted:noop`` pinned at 0) with its standard error."""

    snapshot: str
    iteration: int
    env_steps: int
    games: dict[str, int]
    score: dict[str, float]
    score_lo: dict[str, float]
    score_hi: dict[str, float]
    rating: float
    rating_se: float
    measured: int
    """Strength snapshots measured so far in the run."""
    pending: int
    """Strength snapshots waiting for (or in) play."""


class GenerationStrength(Struct, forbid_unknown_fields=True, kw_only=True):
    """One promoted generation's strength (services/ladder/generation_strength.py): generation
    ``generation`` (its index in the ladder's champion chain: 0 the run's first snapshot) is
    the champion ``champion`` (``snap:<id>``). Per condition (``unsearched/<anchor>``,
    ``searched/<anchor>``, ``searched_sim_<bot>/<anchor>``, ``searched_sim_<bot>/previous``):
    the score (a draw counts half) over ``games`` games and its Wilson 95 % interval
    ``score_lo`` .. ``score_hi``; a condition is present only when all its games are played."""

    generation: int
    champion: str
    env_steps: int | None = None
    games: dict[str, int] = {}
    score: dict[str, float] = {}
    score_lo: dict[str, float] = {}
    score_hi: dict[str, float] = {}


class LadderStatusRequest(_Msg, tag="ladder_status_request"):
    request_id: int
    run_name: str


class LadderStatus(_Msg, tag="ladder_status"):
    """The pool, the gate counters and the current fit, for the learner's metric row
    (``ladder/...`` keys). A number that does not exist is None (absent from the row), never 0:
    no champion yet, no evaluation game fitted, no pair with enough games for the residual.

    Ratings are Elo (``scripted:noop`` pinned at 0) from the fit of the result log's eval
    games; ``ratings`` / ``rating_se`` hold the sampled pool members the fit holds, at most
    ``ladder.pool.pool_working_size`` of them. ``pfsp_effective`` is None while the pool is
    empty, else whether every PFSP prediction of the resident set came from the fit."""

    request_id: int
    pool_size: int
    pending: int = 0
    archive_size: int = 0
    champion: str | None = None
    champion_env_steps: int | None = None
    gates_run: int = 0
    gates_passed: int = 0
    consecutive_gate_failures: int = 0
    champion_rating: float | None = None
    champion_rating_se: float | None = None
    transitivity_residual: float | None = None
    pfsp_effective: bool | None = None
    resident: list[str] = []
    ratings: dict[str, float] = {}
    rating_se: dict[str, float] = {}
    gate_score_lower_bound: float | None = None
    """the Wilson 95 % lower bound of the last gate's score against its champion
    (condition 1; services/ladder/gate_runner.py); None before the first gate."""
    strength: StrengthSummary | None = None
    """The newest strength measurement; None until a strength snapshot's games are all played."""
    generations: list[GenerationStrength] = []
    """Each promoted generation measured so far (at least one condition played), oldest first;
    empty when ``evaluation.strength.generations`` is off."""
    generations_pending: int = 0
    """Generations with games still to play."""


# ----------------------------------------------------------------- learner <-> checkpoint


class SaveCheckpoint(_Msg, tag="save_checkpoint"):
    """Write a checkpoint atomically. Array ``files[i]`` (uint8) holds the bytes of
    ``names[i]`` (a relative path such as ``actor/model.safetensors``). ``manifest`` is
    msgspec JSON bytes describing the state (iteration, counters, config) that the
    checkpoint service embeds in its manifest verbatim."""

    request_id: int
    run_name: str
    iteration: int
    names: list[str]
    meta: bytes
    token: str = ""
    """The run's checkpoint writer token (``shared.writer_token``); a service started with one
    refuses a save without it (``unauthorized``), writing and pruning nothing."""


class Saved(_Msg, tag="saved"):
    request_id: int
    path: str
    bytes_written: int


class LoadLatest(_Msg, tag="load_latest"):
    request_id: int
    run_name: str


class Loaded(_Msg, tag="loaded"):
    """The newest checkpoint that verifies; arrays named as in ``names``."""

    request_id: int
    path: str
    iteration: int
    names: list[str]
    meta: bytes
    skipped: list[str] = []
    """Newer checkpoints that did not verify, newest first, each ``checkpoint <folder>: <file>:
    <problem>``: why this one and not the newest (the learner says so)."""


class NotFound(_Msg, tag="not_found"):
    request_id: int
    reason: str
    skipped: list[str] = []
    """For ``LoadLatest``: the run's checkpoints, none of which verifies, newest first, each
    ``checkpoint <folder>: <file>: <problem>``. Empty when the run has no checkpoint at all:
    only then may a learner start fresh on its own."""


class SaveSnapshot(_Msg, tag="save_snapshot"):
    """Store a frozen actor for the pool: array ``actor`` (uint8) is ``actor.safetensors``
    (fp16 weights); ``spec`` is JSON bytes (digests, env step, iteration, run id)."""

    request_id: int
    run_name: str
    spec: bytes
    token: str = ""
    """As ``SaveCheckpoint.token``."""


class SnapshotSaved(_Msg, tag="snapshot_saved"):
    request_id: int
    snapshot_id: str
    path: str
    created: bool


class LoadSnapshot(_Msg, tag="load_snapshot"):
    request_id: int
    run_name: str
    snapshot_id: str


class SnapshotLoaded(_Msg, tag="snapshot_loaded"):
    """Array ``actor`` (uint8): the verified ``actor.safetensors``."""

    request_id: int
    snapshot_id: str
    spec: bytes


# ----------------------------------------------------------------- evaluator <-> ladder
# Evaluation jobs (the gate's games, a free-admitted champion's anchor games), played by
# ``python -m services.evaluator`` and handed out by ``services.ladder.gate_runner``.


class EvalJobRequest(_Msg, tag="eval_job_request"):
    """An evaluator asks the ladder for work. ``worker`` names it in the ladder's log
    (``host:pid``); the reply is EvalJob or NoJob."""

    request_id: int
    worker: str
    token: str = ""
    """The sender's ladder role token (``shared.writer_token.LADDER_WRITES``); a ladder started with one
    refuses the request without it (``unauthorized``)."""


class EvalJob(_Msg, tag="eval_job"):
    """Play ``a`` against ``b`` on every evaluation seed index in ``seeds``, each twice:
    ``a`` blue (ordinal 0), then ``a`` red (ordinal 1). Players are ``snap:<snapshot_id>``
    (a frozen snapshot of run ``run_name``) or a scripted anchor (``scripted:noop``,
    ``scripted:random_legal``). ``job_id`` is the records' ``iteration`` and names the
    action streams, so the same job gives the same games wherever it is played. Report
    within ``deadline_s`` seconds or the job is handed to another evaluator."""

    request_id: int
    job_id: int
    run_name: str
    a: str
    b: str
    seeds: list[int]
    deadline_s: float
    record_games: int = 0
    """Record the job's first ``record_games`` games (in play order: seed by seed, ``a`` blue
    then ``a`` red) as RoyaleGym traces and send them with the report (``EvalReport.replays``);
    the ladder keeps them in the run's ``replays/`` folder (shared/replays.py). 0: none."""


class GameTrace(Struct, forbid_unknown_fields=True, kw_only=True):
    """One recorded evaluation game: ``royalegym.replay.Trace`` encoded as msgpack."""

    seed: int
    """Seed index (the records' ``battle``)."""
    side: int
    """0: player ``a`` blue; 1: ``a`` red (the records' ``ordinal``)."""
    trace: bytes


class NoJob(_Msg, tag="no_job"):
    """Nothing to play now: ask again after ``retry_after_s`` seconds."""

    request_id: int
    retry_after_s: float
    reason: str = ""


class EvalReport(_Msg, tag="eval_report"):
    """A finished job: two EpisodeRecords (blue seat, red seat) per game, ``role="eval"``.
    The ladder answers Ack(count) once they are fsynced to the run's result log (a report of a
    job already reported is acknowledged with count 0 and not written again)."""

    request_id: int
    job_id: int
    run_name: str
    worker: str
    records: list[EpisodeRecord]
    replays: list[GameTrace] = []
    """The traces of the games the job asked to record (``EvalJob.record_games``)."""
    token: str = ""
    """The sender's ladder role token (``shared.writer_token.LADDER_WRITES``); a ladder started with one
    refuses the request without it (``unauthorized``)."""


ToLearner = Union[Hello, Round, LeafQuery, SimActQuery, Heartbeat, Failure, BattleStates, StatesSet]
ToRollout = Union[Welcome, Refused, Plan, Step, LeafValues, SimActions, Close, Rejoin, GetStates, SetState]
ToLadder = Union[PlanRequest, ReportEpisodes, AdmitCandidate, LadderStatusRequest, EvalJobRequest, EvalReport,
                 MeasureStrength]
FromLadder = Union[PlanReply, Ack, Error, Admitted, LadderStatus, EvalJob, NoJob]
ToCheckpoint = Union[SaveCheckpoint, LoadLatest, SaveSnapshot, LoadSnapshot]
FromCheckpoint = Union[Saved, Loaded, NotFound, Error, SnapshotSaved, SnapshotLoaded]

# Which arrays each kind carries: name -> (dtype, ndim). Anything else is refused.
ARRAYS: dict[type, dict[str, tuple[str, int]]] = {
    Round: {
        "group": ("int8", 1), "tick": ("int32", 1), "ordinal": ("int32", 1), "rows": ("uint8", 2),
        "reward": ("float32", 1), "terminated": ("uint8", 1), "truncated": ("uint8", 1),
        "deploy_status": ("int8", 1), "final_slots": ("int16", 1), "final_rows": ("uint8", 2),
        # wire codec 2 (shared/codec.py): one zstd frame in place of rows / final_rows
        "rows_zstd": ("uint8", 1), "final_rows_zstd": ("uint8", 1),
        # the rollout's search (Welcome.search; shared/round_arrays.py SEARCH)
        "search_slots": ("int16", 1), "search_candidates": ("int16", 2), "search_q": ("float32", 2),
        "search_moves": ("int16", 1),
    },
    Step: {"actions": ("int16", 1),
           # the learner's candidates for the rollout's search (Welcome.search; services/rollout/search.py)
           "search_slots": ("int16", 1), "search_candidates": ("int16", 2), "search_keys": ("float32", 2)},
    # the search's leaves and their values (alphazero.leaf_value "critic"; services/rollout/search.py)
    LeafQuery: {"leaf_rows": ("uint8", 2), "leaf_return": ("float64", 1), "leaf_discount": ("float64", 1)},
    LeafValues: {"leaf_q": ("float32", 1)},
    SimActQuery: {"sim_rows": ("uint8", 2), "sim_uniforms": ("float64", 1)},
    SimActions: {"sim_actions": ("int16", 1)},
    SaveCheckpoint: {"*": ("uint8", 1)},
    Loaded: {"*": ("uint8", 1)},
    SaveSnapshot: {"actor": ("uint8", 1)},
    SnapshotLoaded: {"actor": ("uint8", 1)},
}


class ArrayMeta(Struct, array_like=True, forbid_unknown_fields=True):
    name: str
    dtype: str
    shape: list[int]


class _Envelope(Struct, forbid_unknown_fields=True):
    protocol: int
    body: msgspec.Raw
    arrays: list[ArrayMeta] = []


class _VersionOnly(Struct):
    protocol: int | None = None
    """None when the header has no ``protocol`` at all: undecodable, not a version mismatch."""


PROTOCOL_REFUSALS = ("undecodable", "version", "unknown_kind", "schema", "frames", "arrays", "nesting", "oversized")
"""Every reason ``Decoder`` and ``shared.transport.recv`` refuse a message for: services export
each one at 0 from the start, so a dashboard's rate() has a series before the first refusal."""

MAX_FRAMES = 257
"""Most frames one message may have after the routing frame: the header and up to 256 arrays
(the largest real message, a SaveCheckpoint, carries a handful of files)."""


class ProtocolError(Exception):
    """A message refused. ``reason`` is a short label for the refusal counter
    (``undecodable``, ``version``, ``unknown_kind``, ``schema``, ``frames``, ``arrays``,
    ``nesting``: msgpack nested deeper than the decoder recurses, ``oversized``: the message's
    frames together exceed the size limit); the text says what exactly was wrong."""

    def __init__(self, reason: str, text: str):
        self.reason = reason
        super().__init__(text)


_encoder = msgspec.msgpack.Encoder()
_envelope_decoder = msgspec.msgpack.Decoder(_Envelope)
_version_decoder = msgspec.msgpack.Decoder(_VersionOnly)


def encode(body: Struct, arrays: dict[str, np.ndarray] | None = None) -> list:
    """Frames for one message: the envelope, then each array's buffer (C-contiguous, not
    copied: the caller must not write to an array after handing it here)."""
    metas, buffers = [], []
    for name, arr in (arrays or {}).items():
        arr = np.ascontiguousarray(arr)
        if not arr.dtype.isnative:
            # The header names the dtype (">i2" and "<i2" are both "int16") and the decoder
            # reads native order: a byte-swapped array is converted, never sent as it is.
            arr = arr.astype(arr.dtype.newbyteorder("="))
        metas.append(ArrayMeta(name, arr.dtype.name, list(arr.shape)))
        buffers.append(memoryview(arr).cast("B") if arr.size else b"")
    envelope = _encoder.encode(
        {"protocol": PROTOCOL_VERSION, "body": msgspec.Raw(_encoder.encode(body)), "arrays": metas}
    )
    return [envelope, *buffers]


class Decoder:
    """Decodes one seam's messages (a union such as ``ToLearner``)."""

    def __init__(self, union, max_array_bytes: int = 1 << 30):
        self._body = msgspec.msgpack.Decoder(union)
        self._max = max_array_bytes

    def decode(self, frames: list) -> tuple[Struct, dict[str, np.ndarray]]:
        """(body, arrays) or ProtocolError. Arrays are read-only views of the frames."""
        try:
            return self._decode(frames)
        except RecursionError:
            # msgspec guards its recursion with Python's limit: a header of a few KB of nested
            # one-element arrays (``\x91`` repeated) reaches it. No message kind nests deeper
            # than a handful of levels, so this is malformed input, never a bug to propagate.
            raise ProtocolError(
                "nesting", f"msgpack nested deeper than the decoder allows ({len(frames[0])}-byte header)"
            ) from None

    def _decode(self, frames: list) -> tuple[Struct, dict[str, np.ndarray]]:
        if not frames:
            raise ProtocolError("frames", "empty message")
        if len(frames) > MAX_FRAMES:
            raise ProtocolError("frames", f"{len(frames)} frames; a message has at most {MAX_FRAMES}")
        head = bytes(frames[0])
        try:
            env = _envelope_decoder.decode(head)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            try:
                version = _version_decoder.decode(head).protocol
            except (msgspec.DecodeError, msgspec.ValidationError):
                version = None
            if version is not None and version != PROTOCOL_VERSION:
                raise ProtocolError(
                    "version", f"protocol version {version}; this build speaks {PROTOCOL_VERSION}"
                ) from None
            raise ProtocolError("undecodable", f"undecodable envelope: {exc}") from None
        if env.protocol != PROTOCOL_VERSION:
            raise ProtocolError(
                "version", f"protocol version {env.protocol}; this build speaks {PROTOCOL_VERSION}"
            )
        try:
            body = self._body.decode(env.body)
        except msgspec.ValidationError as exc:
            text = str(exc)
            reason = "unknown_kind" if "Invalid value" in text and "`$.type`" in text else "schema"
            raise ProtocolError(reason, f"refused message: {text}") from None
        except msgspec.DecodeError as exc:
            raise ProtocolError("undecodable", f"undecodable body: {exc}") from None
        if len(frames) != 1 + len(env.arrays):
            raise ProtocolError(
                "frames", f"{type(body).__name__}: header lists {len(env.arrays)} arrays, got {len(frames) - 1} frames"
            )
        allowed = ARRAYS.get(type(body), {})
        arrays: dict[str, np.ndarray] = {}
        for meta, frame in zip(env.arrays, frames[1:]):
            rule = allowed.get(meta.name, allowed.get("*"))
            if rule is None:
                raise ProtocolError("arrays", f"{type(body).__name__} carries no array named {meta.name!r}")
            dtype, ndim = rule
            if meta.dtype != dtype or len(meta.shape) != ndim or any(d < 0 for d in meta.shape):
                raise ProtocolError(
                    "arrays",
                    f"{type(body).__name__}.{meta.name}: expected {ndim}-d {dtype}, header says {meta.dtype} {meta.shape}",
                )
            # Read-only whatever the frame: a zmq.Frame's buffer is writable, bytes' is not.
            buf = memoryview(frame.buffer if hasattr(frame, "buffer") else frame).toreadonly()
            # Python ints: a header's dimensions are up to 64-bit, and their product must not
            # wrap around (np.prod in int64 does) into a size that matches an empty frame.
            expected = math.prod(meta.shape) * np.dtype(dtype).itemsize
            if expected > self._max or buf.nbytes != expected or any(d > self._max for d in meta.shape):
                raise ProtocolError(
                    "arrays", f"{type(body).__name__}.{meta.name}: {buf.nbytes} bytes for shape {meta.shape} of {dtype}"
                )
            if meta.name in arrays:
                raise ProtocolError("arrays", f"{type(body).__name__}: array {meta.name!r} given twice")
            arrays[meta.name] = np.frombuffer(buf, dtype=dtype).reshape(meta.shape)
        return body, arrays
