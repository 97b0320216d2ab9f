"""Collecting one iteration's rectangle from the rollouts, with central inference.

The learner talks to every rollout over one ROUTER socket. Each shard of each active rollout
goes through cycles 0..T: the learner receives the shard's round for cycle t, files it by
(cycle, slot), infers for the learner-held slots and sends Step(t); the rollout steps and
answers with cycle t + 1. The round for cycle T closes row T - 1 and is kept: it is the next
iteration's cycle 0, answered after the update with the new policy.

A shard whose next round is later than ``round_timeout_s`` loses its rollout for the rest of
the iteration: its cells stay invalid (never trained, never crossed by GAE), the loss is
counted, and everything else carries on. Hellos, heartbeats and failures are handled here too,
whenever they arrive.

A round's ``rows`` hold the learner's slots and the frozen snapshots' slots (GROUP_FROZEN), in
slot order. The learner's go into the rectangle and are trained on; a frozen slot's row is only
inferred, with the actor of the snapshot its (battle, ordinal) was assigned (``Fleet.assignment``,
services/learner/frozen.py), on the uniforms of ``act/frozen/iteration/{i}/cycle/{t}``, and is
never stored. Both sets of actions go back in the Step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import zmq

from services.learner.admission import HelloLimits
from services.learner.fleet import Fleet, Member, SlotMap
from services.learner.frozen import FrozenStats
from services.learner.provenance import ProvenanceTracker
from services.learner.rectangle import Rectangle
from shared import transport
from shared.components import user_code_refusal
from shared.codec import WIRE_CODECS, WIRE_RAW, WIRE_ZSTD, RowDecompressor, WireError, decompress_round
from shared.messages import (
    GROUP_LEARNER, Assignment, BattleStates, Failure, Heartbeat, Hello, LeafQuery, ProtocolError, Refused, Rejoin, Round,
    SimActQuery, StatesSet, Step, snapshot_of,
)
from shared.log_guard import RefusalLog, printable
from shared.nn.frame_stack import History
from shared.round_arrays import RoundArrays
from shared.seeding import stream

if TYPE_CHECKING:
    from services.learner.frame_history import FrameHistory
    from services.learner.round_hooks import RoundHooks


@dataclass
class CollectionStats:
    """What happened during one ``CollectionRun`` (its counts and times), read by the row.

    The collection's names, by role: ``collect_iteration`` does steps 1-2; the ``Collector``
    holds the rollouts' socket for the whole run; a ``CollectionRun`` is one iteration's rounds,
    counted in its ``CollectionStats``; ``Collected`` is what the training and the row get."""

    rounds: int = 0
    inference_seconds: float = 0.0
    wait_seconds: float = 0.0
    wire_bytes: int = 0
    rows_received: int = 0
    """Rows (learner, frozen and final) of the rounds that came over the wire this iteration;
    ``wire_bytes`` is their rounds' array bytes, as sent (compressed under codec 2)."""
    wire_encode_seconds: float = 0.0
    """Rollout CPU seconds spent compressing those rounds' rows (their Round.wire_encode_seconds)."""
    wire_decode_seconds: float = 0.0
    """Learner CPU seconds (its collecting thread's) spent expanding and checking them."""
    episodes: list = field(default_factory=list)
    lost: list = field(default_factory=list)
    refused: int = 0
    env_steps: int = 0
    illegal: int = 0
    codec_clipped: int = 0
    codec_rounded: int = 0
    frozen: FrozenStats = field(default_factory=FrozenStats)
    batch_rows: list = field(default_factory=list)
    """Learner rows of each actor forward of the collection (``infer_rounds``)."""


class Batching(NamedTuple):
    """How central inference groups rounds into forwards (``rollout.inference_max_batch_rows``,
    ``rollout.inference_max_wait_ms``)."""

    batched: bool = False
    """Answer every ready round in batched forwards; False (run_exact): one forward per round,
    the canonical composition."""
    max_rows: int = 1024
    max_wait_s: float = 0.0

    @classmethod
    def of(cls, tier: str, max_batch_rows: int, max_wait_ms: float) -> Batching:
        """Batched inference in the throughput tier; per round (canonical) under run_exact."""
        return cls(tier == "throughput", max_batch_rows, max_wait_ms / 1000.0)


class Collector:
    """The learner's side of the rollouts' socket across iterations: registrations (Hellos),
    heartbeats, failures, battle states, and each iteration's rounds (``collect``, one
    ``CollectionRun``)."""

    def __init__(self, sock: zmq.Socket, decoder, fleet: Fleet, welcome_for, engine, say, refused_counter=None,
                 hello_limits: HelloLimits | None = None, *, wire_codec: int = WIRE_RAW,
                 decompressor: RowDecompressor | None = None, batching: Batching = Batching(),
                 frame_history: FrameHistory | None = None, user_code: dict[str, str] | None = None,
                 round_hooks: RoundHooks | None = None,
                 on_states: Callable[[Member, BattleStates | StatesSet], None] | None = None):
        """``wire_codec``: the codec served to rollouts that speak it (``services.wire_codec``);
        ``decompressor`` expands codec-2 rows (required when wire_codec is 2); ``batching``:
        how rounds share forwards; ``frame_history``: each cell's previous rows
        (``obs.frame_stack`` > 1); ``user_code``: the identity's (a Hello whose digests differ
        is refused); ``round_hooks``: the algorithm's part in the rounds; ``on_states``: where
        battle states go (services/learner/battle_states.py)."""
        if wire_codec not in WIRE_CODECS:
            raise ValueError(f"wire codec {wire_codec}; this build speaks {list(WIRE_CODECS)}")
        if wire_codec == WIRE_ZSTD and decompressor is None:
            raise ValueError("wire codec 2 needs a RowDecompressor")
        self.sock, self.decoder, self.fleet = sock, decoder, fleet
        self.welcome_for = welcome_for  # (wire codec) -> Welcome
        self.wire_codec, self.decompressor = wire_codec, decompressor
        self.engine = engine
        self.say = say
        self.refused_counter = refused_counter
        self.hello_limits = hello_limits
        """What a Hello may claim (services/learner/admission.py); None checks only the shape."""
        self.refusal_log = RefusalLog(say)
        self.user_code = user_code
        """The identity's ``user_code``; a Hello whose digests differ is refused (both named)."""
        self.stop_requested = False
        self.refused_count = 0
        self.on_states = on_states
        """(member, BattleStates | StatesSet) -> None: services/learner/battle_states.py."""
        self.provenance = ProvenanceTracker()
        """Stamps finished episodes with where their decisions were taken (royalefleet replay)."""
        self.frame_history = frame_history
        """obs.frame_stack > 1: services/learner/frame_history.py (each cell's previous rows)."""
        self.step_sent: dict[tuple[str, int], float] = {}
        """(instance, shard) -> monotonic time its last Step was sent (``rollout_idle_frac``)."""
        self.busy_seconds: dict[str, float] = {}
        """instance -> seconds its shards spent stepping (Step sent to the next round's arrival),
        summed over the run: one process steps its shards one after another."""
        self.round_hooks = round_hooks
        """The algorithm's part in the rounds (``round_hooks.RoundHooks``: AlphaZero's search
        arrays in each Step, its scores in the next round, the mid-step questions); None: none."""
        self.batching = batching

    # ------------------------------------------------------------------ messages

    def send(self, identity: bytes, body, arrays=None) -> bool:
        """Send ``body`` (and ``arrays``) to the rollout at ``identity``; False when it could not go."""
        return transport.send(self.sock, body, arrays, identity=identity)

    def poll(self, timeout_ms: int, on_round, on_mid_step=None) -> int:
        """Handle every message that arrives within ``timeout_ms`` (then drains without
        waiting). Rounds go to ``on_round(member, round, arrays)``, a searched step's queries
        (LeafQuery, SimActQuery) to ``on_mid_step(member, query, arrays)`` (refused as unexpected
        without one: only a collection answers them). Returns messages handled."""
        handled = 0
        wait = timeout_ms
        while self.sock.poll(wait, zmq.POLLIN):
            wait = 0
            handled += 1
            try:
                identity, msg, arrays = transport.recv(self.sock, self.decoder, router=True)
            except ProtocolError as exc:
                self._refused(exc.reason, f"refused a message: {exc}")
                continue
            if isinstance(msg, Hello):
                self._on_hello(identity, msg)
                continue
            member = self.fleet.get(msg.instance)
            if member is None or member.identity != identity or member.lost:
                if not isinstance(msg, Failure):
                    self.send(identity, Rejoin(reason="this learner does not know instance " + msg.instance,
                                                instance=msg.instance))
                continue
            member.last_seen = time.monotonic()
            if isinstance(msg, Round):
                on_round(member, msg, arrays)
            elif isinstance(msg, (LeafQuery, SimActQuery)):
                if on_mid_step is None:
                    self._refused("unexpected", f"{type(msg).__name__} {msg.iteration}/{msg.cycle} shard {msg.shard} "
                                                f"from {member.label()} outside a collection")
                else:
                    on_mid_step(member, msg, arrays)
            elif isinstance(msg, Failure):
                last = msg.message.strip().splitlines()[-1] if msg.message.strip() else ""
                self.say(f"rollout {printable(member.label())} failed ({msg.kind}): {printable(last)}")
                self.fleet.mark_lost(member)
            elif isinstance(msg, Heartbeat):
                member.ready = member.ready or msg.state == "ready"
            elif isinstance(msg, (BattleStates, StatesSet)) and self.on_states is not None:
                self.on_states(member, msg)
        return handled

    def _refused(self, reason: str, text: str) -> None:
        if self.refused_counter is not None:
            self.refused_counter.labels(reason).inc()
        self.refusal_log(reason, text)  # escaped, at most one line per reason every 10 s
        self.refused_count += 1

    def _on_hello(self, identity: bytes, msg: Hello) -> None:
        if msg.engine != self.engine:
            reason = (f"engine build differs: the rollout runs {msg.engine.describe()}, "
                      f"the learner runs {self.engine.describe()}; install the same royalegym/royalesim on both")
            self._refused("hello", f"refused rollout {msg.instance}@{msg.host}: {reason}")
            self.send(identity, Refused(reason=reason))
            return
        refusal = user_code_refusal(self.user_code, msg.user_code)
        if refusal:
            self._refused("hello", f"refused rollout {printable(msg.instance, 40)}@{printable(msg.host, 80)}: {refusal}")
            self.send(identity, Refused(reason=refusal))
            return
        fleet_battles = sum(m.battles for m in self.fleet.members.values() if not m.lost and m.instance != msg.instance)
        problem: str | None
        if self.hello_limits is not None:
            problem = self.hello_limits.refusal(msg, fleet_battles)
        elif msg.battles < 1 or msg.shards < 1 or msg.battles % msg.shards:
            problem = f"Hello.battles={msg.battles} must be a positive multiple of Hello.shards={msg.shards}"
        else:
            problem = None
        if problem:
            self._refused("hello", f"refused rollout {msg.instance}@{msg.host}: {problem}")
            self.send(identity, Refused(reason=problem))
            return
        codec = self.choose_codec(msg.codecs)
        if codec is None:
            reason = (f"no common wire codec: the rollout speaks {msg.codecs}, this learner {list(WIRE_CODECS)}; "
                      "install the learner's royalefleet on the rollout")
            self._refused("hello", f"refused rollout {printable(msg.instance, 40)}@{printable(msg.host, 80)}: {reason}")
            self.send(identity, Refused(reason=reason))
            return
        existing = self.fleet.get(msg.instance)
        if existing is not None and existing.identity == identity and not existing.lost:
            # a repeated Hello (learner was silent): re-welcome with the codec it already has
            self.send(identity, self.welcome_for(existing.wire_codec))
            return
        self.fleet.add(Member(msg.instance, identity, msg.battles, msg.shards, msg.host, msg.pid, wire_codec=codec))
        self.send(identity, self.welcome_for(codec))
        served = "" if codec == self.wire_codec else f" (it does not speak wire codec {self.wire_codec}: served codec {codec})"
        self.say(f"rollout {printable(msg.instance, 40)}@{printable(msg.host, 80)}:{msg.pid} registered: {msg.battles} battles in "
                 f"{msg.shards} shards, wire codec {codec}{served}; joins at the next iteration")

    def choose_codec(self, spoken: list[int]) -> int | None:
        """The wire codec for a rollout that speaks ``spoken``: the learner's own
        (``services.wire_codec``) if the rollout speaks it, else codec 1 (lossless either
        way, so a run may mix them), else None (refused)."""
        if self.wire_codec in spoken:
            return self.wire_codec
        return WIRE_RAW if WIRE_RAW in spoken else None

    # ------------------------------------------------------------------ one iteration

    def collect(self, iteration: int, members: list[Member], slot_map: SlotMap, rect: Rectangle, policy,
                master_seed: int, round_timeout_s: float, frozen=None) -> CollectionStats:
        """Fill ``rect``; returns what happened (``CollectionRun``). Rollouts that are not
        ``fresh`` have their cycle-0 round held from the previous iteration. ``frozen`` (a
        ``services.learner.frozen.FrozenActors``) plays the GROUP_FROZEN slots; without it they
        play the no-op, counted as ``no_actors``."""
        return CollectionRun(self, iteration, members, slot_map, rect, policy, master_seed, round_timeout_s,
                             frozen).run()

    def play_frozen(self, frozen, fstats: FrozenStats, battles: np.ndarray, ordinals: np.ndarray, rows: np.ndarray,
                     n_legal: np.ndarray, uniforms: np.ndarray, history=None) -> tuple[np.ndarray, list[str | None]]:
        """Actions (B,) of frozen seats: each by the snapshot of its battle's assignment at its
        ordinal; the no-op (counted by reason, its episode tainted) when that cannot play.
        Returns the actions and each seat's snapshot id (None: no assignment)."""
        t0 = time.perf_counter()
        ids = []
        for b, o in zip(battles, ordinals):
            a = self.fleet.assignment(int(b), int(o))
            ids.append(snapshot_of(a.opponent) if a is not None else None)
        if frozen is None:
            actions, reasons = np.zeros(len(rows), np.int64), ["no_actors"] * len(rows)
        else:
            extra = () if history is None else (history,)  # frame stacking only
            actions, reasons = frozen.play(ids, rows, n_legal, uniforms, *extra)
        for b, o, reason in zip(battles, ordinals, reasons):
            if reason is not None:
                fstats.noop(reason, int(b), int(o))
        fstats.rows += len(rows)
        fstats.seconds += time.perf_counter() - t0
        return actions, ids


UNIFORMS = {"learner": "act/iteration/{iteration}/cycle/{cycle}",
            "frozen": "act/frozen/iteration/{iteration}/cycle/{cycle}"}
"""The random streams (shared/seeding.py) a cycle's actions are sampled from, by seats."""


class Arrival(NamedTuple):
    """A round as it came off the socket, not yet filed."""

    member: Member
    body: Round
    arrays: dict
    """The message's arrays, as sent (compressed under wire codec 2)."""


class HeldRound(NamedTuple):
    """A shard's cycle-T round, kept in ``Member.held[shard]``: the next iteration's cycle 0."""

    body: Round
    arrays: RoundArrays


class FiledRound(NamedTuple):
    """A round filed into the rectangle at ``cycle`` (< T), waiting for its answer."""

    member: Member
    body: Round
    arrays: RoundArrays
    cycle: int
    slots: np.ndarray
    """(n,) the shard's global slots, in the round's slot order."""
    group: np.ndarray
    """(n,) each slot's group (``GROUP_LEARNER``, ``GROUP_FROZEN``, or negative: none)."""
    learner: np.ndarray
    """The learner-held global slots (``Rectangle.store_obs``)."""
    frozen_slots: np.ndarray
    """The frozen seats' global slots."""
    frozen_rows: np.ndarray
    """(len(frozen_slots), row_bytes) uint8: their rows, inferred and never stored."""


class CollectionRun:
    """One iteration's rounds: each shard of each member goes through cycles 0..T (module
    docstring). ``run`` steps the fleet until every live shard has sent its cycle-T round
    (or a stop): each pass polls the socket (``receive``), files what arrived
    (``file_round``), answers the filed rounds (``answer``, which infers and sends each its
    ``Step``) and loses the shards past their deadline (``check_deadlines``)."""

    def __init__(self, collector: Collector, iteration: int, members: list[Member], slot_map: SlotMap,
                 rect: Rectangle, policy, master_seed: int, round_timeout_s: float, frozen=None):
        self.collector, self.iteration, self.slot_map, self.rect = collector, iteration, slot_map, rect
        self.policy, self.master_seed, self.round_timeout_s, self.frozen = policy, master_seed, round_timeout_s, frozen
        self.stats = CollectionStats()
        hooks = collector.round_hooks
        view = RunView(self)
        self.on_mid_step = None if hooks is None else (lambda m, body, arrays: hooks.on_query(view, m, body, arrays))
        """``Collector.poll``'s ``on_mid_step``: the algorithm's answers, through a ``RunView``."""
        self.frame_history = collector.frame_history
        self.by_instance = {m.instance: m for m in members}
        self.expected: dict[tuple[str, int], int] = {}
        """(instance, shard) -> the cycle of its next round (T + 1: done)."""
        self.deadline: dict[tuple[str, int], float] = {}
        """(instance, shard) -> monotonic time its next round is due by."""
        self.pending: list[Arrival] = []
        """Rounds received since the last filing."""
        self.ready: list[FiledRound] = []
        """Rounds filed since the last answer."""
        self._uniforms: dict[tuple[str, int], np.ndarray] = {}
        self.held: list[tuple[Member, HeldRound]] = []
        """Members' held cycle-T rounds of the previous iteration: this iteration's cycle 0."""
        now = time.monotonic()
        for m in members:
            for s in range(m.shards):
                self.expected[(m.instance, s)] = 0
                self.deadline[(m.instance, s)] = now + round_timeout_s
                if not m.fresh:
                    self.held.append((m, m.held[s]))
            m.held = {}

    def uniforms(self, seats: str, cycle: int) -> np.ndarray:
        """(R,) float64 uniforms of ``cycle`` for the learner's slots (``seats`` "learner") or
        the frozen seats' ("frozen"), indexed by slot (``UNIFORMS``); drawn once a cycle."""
        if (seats, cycle) not in self._uniforms:
            self._uniforms[(seats, cycle)] = stream(self.master_seed, UNIFORMS[seats], iteration=self.iteration,
                                                    cycle=cycle).random(self.rect.R, dtype=np.float64)
        return self._uniforms[(seats, cycle)]

    # ------------------------------------------------------------------ the loop

    def run(self) -> CollectionStats:
        """Collect the iteration (class docstring); returns its ``CollectionStats``."""
        c, fh = self.collector, self.frame_history
        c.provenance.begin(self.iteration, self.policy.model.actor)
        if fh is not None:
            fh.begin(self.rect, self.slot_map.battle_ids)
        c.refused_count = 0
        # A held cycle-T round is this iteration's cycle 0: the battles did not move since.
        for m, h in self.held:
            self.file_round(Arrival(m, Round(instance=h.body.instance, iteration=self.iteration, cycle=0,
                                             shard=h.body.shard), h.arrays.observation_half().arrays()),
                            self.iteration, from_wire=False)
        self.answer_ready()
        while any(self.expected[k] <= self.rect.T for k in self.expected if not self.by_instance[k[0]].lost):
            if c.stop_requested:
                break
            self.step_fleet()
        if fh is not None:
            fh.end()
        self.stats.refused = c.refused_count
        # Canonical order, never arrival order: the row's means are float sums, and the result
        # log is a record; both must not depend on which rollout answered first.
        self.stats.episodes.sort(key=lambda e: (e.battle, e.ordinal, e.seat))
        return self.stats

    def step_fleet(self) -> None:
        """One pass: wait (50 ms, and under batching up to ``max_wait_s`` for more shards) for
        rounds, file them, answer them, lose the shards past their deadline."""
        c = self.collector
        t0 = time.perf_counter()
        c.poll(50, self.receive, self.on_mid_step)
        if self.pending and c.batching.batched and c.batching.max_wait_s > 0:
            # SEED RL's batching: wait (boundedly) for more shards to join the forward.
            until = time.perf_counter() + c.batching.max_wait_s
            while self.outstanding() and time.perf_counter() < until:
                c.poll(max(0, int(1000 * (until - time.perf_counter()))), self.receive, self.on_mid_step)
        self.stats.wait_seconds += time.perf_counter() - t0
        for arrival in self.pending:
            if not arrival.member.lost:
                self.file_round(arrival, arrival.body.iteration)
        self.pending.clear()
        self.answer_ready()
        self.check_deadlines()

    def receive(self, member: Member, body: Round, arrays: dict) -> None:
        """``Collector.poll``'s ``on_round``: keep the round for filing; the time since its
        shard's Step counts as the rollout's busy time."""
        if member.instance not in self.by_instance:
            return  # registered during this iteration: its rounds come after its Plan
        c = self.collector
        sent = c.step_sent.pop((member.instance, body.shard), None)
        if sent is not None:  # the shard stepped from our Step to this round: the rollout was busy
            c.busy_seconds[member.instance] = c.busy_seconds.get(member.instance, 0.0) + time.monotonic() - sent
        self.pending.append(Arrival(member, body, arrays))

    def outstanding(self) -> int:
        """Live shards whose next round (cycle <= T) is neither filed nor waiting."""
        waiting = {(a.member.instance, a.body.shard) for a in self.pending}
        return sum(1 for k, c in self.expected.items()
                   if c <= self.rect.T and not self.by_instance[k[0]].lost and k not in waiting)

    def check_deadlines(self) -> None:
        """A shard whose next round is past ``round_timeout_s`` loses its member for the rest
        of the iteration (``stats.lost``)."""
        now = time.monotonic()
        for key, c in self.expected.items():
            m = self.by_instance[key[0]]
            if c <= self.rect.T and not m.lost and now > self.deadline[key]:
                self.collector.say(f"rollout {m.label()} missed the round deadline ({self.round_timeout_s:.0f} s) at "
                                   f"cycle {c} of shard {key[1]}; its slots are invalid for the rest of iteration "
                                   f"{self.iteration}")
                self.collector.fleet.mark_lost(m)
            if m.lost and m.instance not in self.stats.lost:
                self.stats.lost.append(m.instance)

    # ------------------------------------------------------------------ file a round

    def file_round(self, arrival: Arrival, label_iteration: int, from_wire: bool = True) -> FiledRound | None:
        """Store ``arrival``'s rows into the rectangle (and the step its cycle closes); refuse
        one out of order, unexpected or malformed (None). A round below cycle T joins
        ``ready``; the cycle-T round is held in ``Member.held`` for the next iteration."""
        c, rect, stats, fh = self.collector, self.rect, self.stats, self.frame_history
        member, body, arrays = arrival
        key = (member.instance, body.shard)
        if key not in self.expected or self.expected[key] > rect.T:
            c._refused("unexpected", f"unexpected round {body.iteration}/{body.cycle} shard {body.shard} "
                                     f"from {member.label()}")
            return None
        cycle = self.expected[key]
        if body.cycle != cycle or label_iteration != self.iteration:
            c._refused("out_of_order", f"round {body.iteration}/{body.cycle} from {member.label()} shard {body.shard}; "
                                       f"expected {self.iteration}/{cycle}")
            return None
        slots = self.slot_map.slots[key]
        sent_bytes = sum(a.nbytes for a in arrays.values())
        try:
            group = arrays["group"]
            if group.shape != slots.shape:
                raise ValueError(f"group has {group.shape[0]} slots, the shard has {len(slots)}")
            if from_wire:  # a held round was expanded when it arrived
                t0 = time.thread_time()  # CPU time, as the rollout's encode time
                arrays = decompress_round(arrays, c.decompressor if member.wire_codec == WIRE_ZSTD else None)
                stats.wire_decode_seconds += time.thread_time() - t0
            ra = RoundArrays.of(arrays, step=cycle > 0)
            learner, frozen_slots, frozen_rows = rect.store_obs(cycle, slots, group, ra.tick, ra.rows)
            if fh is not None:
                fh.file(cycle, slots, group, ra.ordinal, frozen_slots, frozen_rows)
            if cycle > 0:
                self._store_step(cycle, slots, ra)
        except WireError as exc:
            c._refused(exc.reason, f"refused the rows of a round from {member.label()} "
                                   f"(wire codec {member.wire_codec}): {exc}")
            return None
        except (KeyError, ValueError) as exc:
            c._refused("arrays", f"malformed round from {member.label()}: {exc}")
            return None
        positions = slots[::2] // 2
        for b, o in zip(self.slot_map.battle_ids[positions], ra.ordinal[::2]):
            c.fleet.ordinal[int(b)] = int(o)
        c.provenance.stamp(body.episodes)
        for ep in body.episodes:
            ep.iteration = self.iteration
        stats.episodes.extend(body.episodes)
        stats.codec_clipped += body.codec_clipped
        stats.codec_rounded += body.codec_rounded
        stats.rounds += 1
        if from_wire:
            stats.wire_bytes += sent_bytes
            stats.rows_received += len(learner) + len(frozen_slots) + len(ra.final_rows)
            stats.wire_encode_seconds += body.wire_encode_seconds
            if c.round_hooks is not None:
                c.round_hooks.round_arrived(body)
        self.expected[key] = cycle + 1
        self.deadline[key] = time.monotonic() + self.round_timeout_s
        if cycle == rect.T:
            member.held[body.shard] = HeldRound(body, ra)
            return None
        filed = FiledRound(member, body, ra, cycle, slots, group, learner, frozen_slots, frozen_rows)
        self.ready.append(filed)
        return filed

    def _store_step(self, cycle: int, slots: np.ndarray, ra: RoundArrays) -> None:
        """The step of cycle - 1 that this round closes: rewards, ends, deploy statuses, final
        rows. Raises ValueError for final slots outside the shard."""
        rect, fs = self.rect, ra.final_slots
        if ra.deploy_status is None:  # RoundArrays.of(step=True) raised KeyError before this
            raise ValueError("a round past cycle 0 without its step half")
        if len(fs) and (int(fs.min()) < 0 or int(fs.max()) >= len(slots)):
            raise ValueError("final_slots out of range")
        rect.store_step(cycle - 1, slots, ra.reward, ra.terminated, ra.truncated, ra.deploy_status, fs, ra.final_rows)
        hooks = self.collector.round_hooks
        if hooks is not None and ra.search_slots is not None and len(ra.search_slots):
            ss = ra.search_slots.astype(np.int64)
            if int(ss.min()) < 0 or int(ss.max()) >= len(slots):
                raise ValueError("search_slots out of range")
            # the search of the step this round closes: the moves played and the rows' targets
            for g, move, log_prior in hooks.step_closed(cycle - 1, slots[ss], ra.search_candidates, ra.search_q,
                                                        ra.search_moves):
                rect.actions[cycle - 1, g], rect.log_probs[cycle - 1, g] = move, log_prior
        self.stats.env_steps += len(slots) // 2
        learner_acted = (ra.deploy_status > 0) & (rect.group[cycle - 1, slots] == GROUP_LEARNER)
        self.stats.illegal += int(np.count_nonzero(learner_acted))

    # ------------------------------------------------------------------ answer it

    def answer_ready(self) -> None:
        """Answer every round filed since the last answer."""
        self.answer(self.ready)
        self.ready = []

    def answer(self, rounds: list[FiledRound]) -> None:
        """Infer the filed rounds' learner rows (one forward per round under run_exact, one per
        batch of ready rounds otherwise: ``infer_rounds``), then each round's frozen seats, and
        send each round its own Step."""
        if not rounds:
            return
        rect, fh, stats = self.rect, self.frame_history, self.stats
        t0 = time.perf_counter()
        by_episode = getattr(self.policy, "acts_by_episode", False)  # DQN's Thompson behaviour
        requests = [InferRequest(rect.rows[r.cycle, r.learner], rect.n_legal[r.cycle, r.learner],
                                 self.uniforms("learner", r.cycle)[r.learner],
                                 None if fh is None else fh.at(r.cycle, r.learner),
                                 episode_keys(r.cycle, r.learner, r.group, r.arrays.ordinal, self.slot_map)
                                 if by_episode else None)
                    for r in rounds]
        places: list = []
        b = self.collector.batching
        answers = infer_rounds(self.policy, requests, b.max_rows if b.batched else 0, stats.batch_rows, places)
        stats.inference_seconds += time.perf_counter() - t0
        for r, (actions, log_probs), place in zip(rounds, answers, places):
            self.send_step(r, actions, log_probs, place)

    def send_step(self, r: FiledRound, actions: np.ndarray, log_probs: np.ndarray, place) -> None:
        """Record the learner's ``actions`` (and ``log_probs``) of round ``r``, play its frozen
        seats, stamp the decisions' provenance and send the shard its Step."""
        rect, fh, c, cycle, learner = self.rect, self.frame_history, self.collector, r.cycle, r.learner
        search: dict[str, np.ndarray] = {}
        if c.round_hooks is not None:  # alphazero: the choice rows' candidates for the rollout's search
            search = c.round_hooks.step_arrays(self.policy, self.iteration, cycle, r.member, r.body.shard, learner,
                                               np.flatnonzero(r.group == GROUP_LEARNER), rect.rows[cycle, learner],
                                               rect.n_legal[cycle, learner], actions)
        rect.actions[cycle, learner] = actions
        rect.log_probs[cycle, learner] = log_probs
        rect.acted[cycle, learner] = True
        rect.policy_lag[cycle, learner] = getattr(self.policy, "last_lag", 0)  # overlap.BehaviourPolicy says
        out = np.zeros(len(r.slots), np.int16)
        out[r.group == GROUP_LEARNER] = actions
        inferred: list[tuple] = [(learner, rect.n_legal[cycle, learner], actions, None, place)]
        if len(r.frozen_slots):
            local = np.flatnonzero((r.group >= 0) & (r.group != GROUP_LEARNER))
            frozen_legal = rect.legal_counts(r.frozen_rows)
            out[local], snapshot_ids = c.play_frozen(
                self.frozen, self.stats.frozen, self.slot_map.battle_ids[r.frozen_slots // 2], r.arrays.ordinal[local],
                r.frozen_rows, frozen_legal, self.uniforms("frozen", cycle)[r.frozen_slots],
                None if fh is None else fh.at(cycle, r.frozen_slots))
            inferred.append((r.frozen_slots, frozen_legal, out[local], snapshot_ids))
        c.provenance.observe(cycle, self.slot_map.battle_ids, r.slots, r.arrays.ordinal, r.member.fresh and cycle == 0,
                             inferred)
        if not c.send(r.member.identity, Step(iteration=self.iteration, cycle=cycle, shard=r.body.shard),
                       {"actions": out, **search}):
            c.say(f"could not send a step to {r.member.label()}")
        else:
            c.step_sent[(r.member.instance, r.body.shard)] = time.monotonic()


class InferRequest(NamedTuple):
    """One round's learner rows for central inference (``infer_rounds``)."""

    rows: np.ndarray
    """(n, row_bytes) uint8 packed rows."""
    n_legal: np.ndarray
    """(n,) legal actions of each."""
    uniforms: np.ndarray
    """(n,) float64 in [0, 1): each row's sampling draw."""
    history: History | None = None
    """Under frame stacking, ``shared.nn.frame_stack.History`` of the n rows; else None."""
    episodes: np.ndarray | None = None
    """(n, 5) int64 ``services.learner.dqn.behaviour.EPISODE_KEYS`` rows, for a policy that
    ``acts_by_episode`` (DQN's Thompson behaviour); else None."""


def infer_rounds(policy, requests: list[InferRequest], max_batch_rows: int, batch_sizes: list | None = None,
                 places: list | None = None) -> list:
    """Actions and log-probs for each ``InferRequest``, in request order: [(actions (n,) int64,
    log_probs (n,) float32)]. A request's ``history`` travels with its rows into a batched
    forward, as ``policy.act``'s ``history`` keyword; its ``episodes``, when not None, are
    passed as the ``episodes`` keyword and concatenated like the rows in a batched forward.

    ``max_batch_rows`` 0: one ``policy.act`` per request (the canonical composition: a
    request's answer depends on its rows alone, bit for bit). Otherwise consecutive requests are
    concatenated into forwards of at most ``max_batch_rows`` rows (a request larger than that
    is one forward of its own); each row's action is still drawn from its own uniform, so only
    fp32 rounding of the logits can depend on the composition (docs/protocol.md gives the
    tolerance). ``batch_sizes`` gets the rows of each forward; ``places`` gets, per request,
    None (its own forward) or (offset, total): where its choice rows sat among the forward's
    choice rows (``Policy.act`` forwards only those), for the replay stamp (provenance.py)."""
    if places is None:
        places = []
    requests = [InferRequest(*r) for r in requests]  # a plain tuple names its fields by position

    def act(r: InferRequest) -> tuple:
        kw = {} if r.episodes is None else {"episodes": r.episodes}  # only a policy that acts by episode
        return policy.act(r.rows, r.n_legal, r.uniforms, history=r.history, **kw)

    out: list = []
    if not max_batch_rows:
        out = [act(r) for r in requests]
        if batch_sizes is not None:
            batch_sizes.extend(len(r.rows) for r in requests)
        places.extend([None] * len(requests))
        return out
    group: list[InferRequest] = []
    rows_in = 0

    def flush():
        if not group:
            return
        if len(group) == 1:
            places.append(None)
            out.append(act(group[0]))
        else:
            choice = [int(np.count_nonzero(g.n_legal > 1)) for g in group]
            offsets = np.cumsum([0] + choice[:-1])
            places.extend((int(o), sum(choice)) for o in offsets)
            joined = InferRequest(
                *(np.concatenate([g[i] for g in group]) for i in range(3)),
                history=None if group[0].history is None else History(
                    np.concatenate([g.history.rows for g in group]), np.concatenate([g.history.valid for g in group])),
                episodes=None if group[0].episodes is None else np.concatenate([g.episodes for g in group]))
            actions, log_probs = act(joined)
            cuts = np.cumsum([len(g.rows) for g in group])[:-1]
            out.extend(zip(np.split(actions, cuts), np.split(log_probs, cuts)))
        if batch_sizes is not None:
            batch_sizes.append(sum(len(g.rows) for g in group))
        group.clear()

    for r in requests:
        if group and rows_in + len(r.rows) > max_batch_rows:
            flush()
            rows_in = 0
        group.append(r)
        rows_in += len(r.rows)
    flush()
    return out


def episode_keys(cycle: int, learner: np.ndarray, group: np.ndarray, ordinal: np.ndarray, slot_map: SlotMap) -> np.ndarray:
    """(n, 5) int64 ``EPISODE_KEYS`` rows (cycle, slot, battle id, seat, ordinal) of one round's
    learner slots ``learner`` (global slots, in the round's slot order), from the round's
    ``group`` and per-slot ``ordinal`` (the episode each slot is now in)."""
    local = np.flatnonzero(group == GROUP_LEARNER)
    learner = np.asarray(learner, np.int64)
    return np.stack([np.full(len(learner), cycle, np.int64), learner, slot_map.battle_ids[learner // 2].astype(np.int64),
                     learner % 2, np.asarray(ordinal, np.int64)[local]], axis=1)



class RunView:
    """A running collection as its algorithm's mid-step answers see it
    (``round_hooks.CollectionView``): the shard's awaited step, its deadline, the refusal count,
    the socket, the pool's assignments and frozen actors, nothing else."""

    def __init__(self, run: CollectionRun):
        self._run = run
        self.iteration = run.iteration
        self.row_bytes = run.rect.row_bytes

    @property
    def policy(self):
        return self._run.policy

    def holds(self, member: Member) -> bool:
        return member.instance in self._run.by_instance

    def awaited_cycle(self, member: Member, shard: int) -> int | None:
        nxt = self._run.expected.get((member.instance, shard))
        return None if nxt is None or not 0 < nxt <= self._run.rect.T else nxt - 1

    def at_work(self, member: Member, shard: int) -> None:
        self._run.deadline[(member.instance, shard)] = time.monotonic() + self._run.round_timeout_s

    def refuse(self, reason: str, text: str) -> None:
        self._run.collector._refused(reason, text)

    def send(self, member: Member, body, arrays: dict) -> bool:
        c = self._run.collector
        if c.send(member.identity, body, arrays):
            return True
        c.say(f"could not send {type(body).__name__} to {member.label()}")
        return False

    def legal_counts(self, rows: np.ndarray) -> np.ndarray:
        return self._run.rect.legal_counts(rows)

    def assignment(self, battle: int, ordinal: int) -> Assignment | None:
        return self._run.collector.fleet.assignment(battle, ordinal)

    def play_frozen(self, battle: int, ordinal: int, rows: np.ndarray, n_legal: np.ndarray,
                    uniforms: np.ndarray) -> np.ndarray:
        n = len(rows)
        actions, _ = self._run.collector.play_frozen(self._run.frozen, FrozenStats(), np.full(n, battle),
                                                     np.full(n, ordinal), rows, n_legal, uniforms)
        return actions

    def count_inference(self, seconds: float) -> None:
        self._run.stats.inference_seconds += seconds
