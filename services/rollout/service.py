"""The rollout service: owns battles, steps them on the learner's command.

Lifecycle (docs/protocol.md): connect a DEALER to the learner, say Hello (with a fresh
instance id and the engine build), wait for Welcome (env config, codec table) or Refused;
build the battles; then serve Plan / Step / Close / Rejoin until told to stop. While idle it
sends a Heartbeat every ``heartbeat_s``; after ``learner_silence_s`` without a word from the
learner it says Hello again, so a restarted learner takes it back in. Nothing here waits
forever, and SIGTERM/SIGINT exit within a second (sockets have a short linger). Its command line:
services/rollout/main.py.

This module must import without torch (the rollout image has none; a test checks).
"""

from __future__ import annotations

import os
import socket
import time
import traceback
import uuid

import zmq

from services.rollout import battle_state
from services.rollout.battles import AssignmentMissing, Shard
from services.rollout.mid_step import MidStepQueries, MidStepTimeout, StepLearner, Stopping
from services.rollout.metrics import IdleWindow, RolloutMetrics
from shared import components, transport
from shared.codec import WIRE_CODECS, WIRE_ZSTD, Codec, RowCompressor, compress_round
from shared.components import hello_user_code
from shared.config import RolloutConfig
from shared.envs import build_env, engine_build, make_scripted
from shared.log_guard import RefusalLog
from shared.messages import (
    BattleStates, Close, Decoder, Failure, GetStates, Heartbeat, Hello, Plan, ProtocolError, Refused, Rejoin, Round,
    SetState, StatesSet, Step, ToRollout, Welcome,
)


def battles_mismatch(battles: int, shards: int, run: RolloutConfig) -> str | None:
    """Why a rollout of ``battles`` in ``shards`` may not join a run whose config says ``run``
    (the Welcome's ``rollout``), or None. The run identity records ``rollout.battles`` and
    ``rollout.shards``: a rollout host started with other values (``FLEET_BATTLES`` and
    ``FLEET_SHARDS`` that are not the learner host's) would change the run's batch."""
    if (battles, shards) == (run.battles, run.shards):
        return None
    return (f"battles differ from the run's: this rollout runs {battles} battles in {shards} shards "
            f"(ROYALEFLEET_BATTLES, ROYALEFLEET_SHARDS; FLEET_BATTLES, FLEET_SHARDS under Compose), the learner's "
            f"config says rollout.battles={run.battles}, rollout.shards={run.shards}, which its run identity "
            f"records: start this host's rollouts with FLEET_BATTLES={run.battles} FLEET_SHARDS={run.shards} "
            f"(its replica count is its own: FLEET_HOST_ROLLOUTS)")


def welcome_refusal(msg: Welcome, engine, battles: int, shards: int) -> str | None:
    """Why this rollout (its ``engine`` build, ``battles`` in ``shards``) cannot take ``msg``, or None.
    First: code the Welcome's env config names that this rollout's own allow-list does not
    (shared.components.foreign_code): a Welcome never decides what a rollout imports, and
    nothing is imported or built before this check."""
    foreign = components.foreign_code(msg.env)
    if foreign:
        return (f"the learner's Welcome names code of modules {foreign}, which this rollout does not allow "
                f"(allowed here: {components.local_modules()}); nothing was imported. If that is your own "
                f"installed package, allow it on this host: {components.ALLOW_ENV}={','.join(foreign)} "
                "(FLEET_USER_PACKAGES under Compose)")
    if msg.engine != engine:
        return (f"engine build differs: this rollout runs {engine.describe()}, "
                f"the learner runs {msg.engine.describe()}; install the learner's royalegym/royalesim")
    if msg.wire_codec not in WIRE_CODECS:
        return f"the learner serves wire codec {msg.wire_codec}; this rollout speaks {list(WIRE_CODECS)}"
    return battles_mismatch(battles, shards, msg.rollout)


class RolloutService:
    def __init__(self, learner: str, battles: int, shards: int, *, metrics: RolloutMetrics | None = None,
                 max_message_mb: int = 64, say=print):
        if battles % shards:
            raise ValueError(f"battles={battles} must be a multiple of shards={shards}")
        self.learner, self.n_battles, self.n_shards = learner, battles, shards
        self.say = say
        self.refusal_log = RefusalLog(say)  # escaped, at most one line per reason every 10 s
        self.metrics = metrics or RolloutMetrics(None)
        self.idle_window = IdleWindow(self.metrics)  # royalefleet_rollout_idle_frac
        self.held_since = time.monotonic()
        self.instance = uuid.uuid4().hex[:12]
        self.sock = transport.connect_dealer(learner, max_bytes=max_message_mb << 20,
                                             curve=transport.curve_client_keys())
        self.decoder = Decoder(ToRollout)
        self.stop_requested = False
        self.welcome: Welcome | None = None
        self.shards: list[Shard] = []
        self.engine = None
        self.user_code = hello_user_code()
        """Digests of the user packages ROYALEFLEET_USER_PACKAGES names, sent in every Hello."""
        self.compressor: RowCompressor | None = None
        """Set when the learner's Welcome names wire codec 2."""
        self.last_sent = self.last_heard = time.monotonic()
        self.mid_step = MidStepQueries(self.sock, self._send, self._recv, self.metrics, lambda: keepalive(self))
        """The searched step's queries to the learner (``LeafQuery``, ``SimActQuery``) and their backlog."""

    # ------------------------------------------------------------------ plumbing

    def _send(self, body, arrays=None) -> None:
        if transport.send(self.sock, body, arrays):
            self.last_sent = time.monotonic()
            self.metrics.messages_sent.inc()
        else:
            self.metrics.send_failures.inc()

    def _hello(self) -> None:
        if self.engine is None:
            # Building one env reads the engine's build; it is reused as the first battle.
            self._probe_env = build_env(self.welcome.env if self.welcome else _default_env())
            self.engine = engine_build(self._probe_env)
        self._send(Hello(instance=self.instance, host=socket.gethostname(), pid=os.getpid(),
                         battles=self.n_battles, shards=self.n_shards, engine=self.engine,
                         codecs=list(WIRE_CODECS), user_code=self.user_code))
        self.say(f"rollout {self.instance}: hello to {self.learner} ({self.n_battles} battles in {self.n_shards} shards)")

    def _recv(self):
        """The next message from the learner as (message, arrays), the learner heard; None for
        one that does not decode (counted by reason, said at most once in 10 s per reason)."""
        try:
            _, msg, arrays = transport.recv(self.sock, self.decoder)
        except ProtocolError as exc:
            self.metrics.refused.labels(exc.reason).inc()
            self.refusal_log(exc.reason, f"rollout {self.instance}: refused a message from the learner: {exc}")
            return None
        self.last_heard = time.monotonic()
        return msg, arrays

    def request_stop(self, *_):
        self.stop_requested = True

    # ------------------------------------------------------------------ handlers

    def _on_welcome(self, msg: Welcome) -> None:
        reason = welcome_refusal(msg, self.engine, self.n_battles, self.n_shards)
        if reason:
            self._send(Failure(instance=self.instance, kind="refused", message=reason))
            raise SystemExit(f"rollout {self.instance}: {reason}")
        first = self.welcome is None
        self.welcome = msg
        self.compressor = RowCompressor() if msg.wire_codec == WIRE_ZSTD else None
        if first or not self.shards:
            t0 = time.perf_counter()
            codec = Codec(msg.codec)
            per = self.n_battles // self.n_shards
            search = None
            if msg.search is not None:  # learner.algorithm alphazero: search the learner's choice decisions
                from services.rollout.search import ShardSearch

                search = ShardSearch(msg.search, msg.env, msg.master_seed,
                                     lambda o: make_scripted(o, msg.random_legal_noop_prob), codec,
                                     msg.random_legal_noop_prob)
            self.shards = [
                Shard(s, msg.env, per, codec, msg.master_seed, msg.random_legal_noop_prob,
                      msg.rollout.mask_only_scripted, search)
                for s in range(self.n_shards)
            ]
            self.say(f"rollout {self.instance}: welcomed; built {self.n_battles} battles in "
                     f"{time.perf_counter() - t0:.1f} s; row {codec.row_bytes} B; wire codec {msg.wire_codec}")
        # Only now can it answer a Plan within the round deadline: tell the learner.
        self._send(Heartbeat(instance=self.instance, state="ready"))

    def _on_plan(self, msg: Plan) -> None:
        per = self.n_battles // self.n_shards
        if not (0.0 < msg.gamma <= 1.0):
            raise ProtocolError("schema", f"plan gamma {msg.gamma!r} is not in (0, 1]")
        if len(msg.battles) != self.n_battles or len(msg.restart_ordinals) != self.n_battles:
            raise ProtocolError("schema", f"plan lists {len(msg.battles)} battles, this rollout runs {self.n_battles}")
        for shard in self.shards:
            lo = shard.index * per
            ids = msg.battles[lo : lo + per]
            current = {b.battle_id: b.ordinal for b in shard.battles}
            # A battle restarted at an ordinal keeps the assignments from that ordinal on, even
            # below where it stands here: a learner resumed from a checkpoint restarts this
            # rollout's battles at the checkpoint's ordinals, which it may have played past.
            floor = {b: r if r >= 0 else current.get(b, -1) for b, r in zip(ids, msg.restart_ordinals[lo : lo + per])}
            # No entry is in flight here: a battle pops its episode's entry when it begins it.
            shard.table.take(msg.assignments, live=set(ids), floor=floor)
            shard.set_gamma(msg.gamma)
            shard.start(ids, msg.restart_ordinals[lo : lo + per])
        if msg.fresh:
            for shard in self.shards:
                self._send_round(msg.iteration, 0, shard, shard.observe())

    def _on_get_states(self, msg: GetStates) -> None:
        """Every battle's exact state as it stands (idle at the boundary the last round described)."""
        t0 = time.perf_counter()
        ids, states, failed = [], [], []
        for shard in self.shards:
            for battle in shard.battles:
                if battle.battle_id < 0:
                    continue
                try:
                    states.append(battle_state.save(battle, self.engine))
                    ids.append(battle.battle_id)
                except (ValueError, RuntimeError) as exc:
                    failed.append(f"battle {battle.battle_id}: {exc}")
        self._send(BattleStates(instance=self.instance, iteration=msg.iteration, battles=ids, states=states,
                                failed=failed, seconds=time.perf_counter() - t0))

    def _on_set_state(self, msg: SetState) -> None:
        """Continue the listed battles from their recorded states; a refused state leaves its
        battle to start as the coming Plan says (its id unset, so the Plan restarts it)."""
        if len(msg.battles) != self.n_battles or len(msg.states) != self.n_battles:
            raise ProtocolError("schema", f"set_state lists {len(msg.battles)} battles and {len(msg.states)} states; "
                                          f"this rollout runs {self.n_battles}")
        per = self.n_battles // self.n_shards
        restored, refused, reasons = [], [], []
        noop_prob = self.welcome.random_legal_noop_prob
        for k, (bid, blob) in enumerate(zip(msg.battles, msg.states)):
            if not blob:
                continue
            battle = self.shards[k // per].battles[k % per]
            try:
                battle_state.restore(battle, bytes(blob), battle_id=bid, engine_build=self.engine,
                                     make_scripted=lambda o: make_scripted(o, noop_prob))
                restored.append(bid)
            except battle_state.StateRefused as exc:
                battle.battle_id = -1
                refused.append(bid)
                reasons.append(f"{exc.reason}: {exc}")
        if refused:
            self.say(f"rollout {self.instance}: refused the recorded state of {len(refused)} battle(s): {reasons[0]}")
        self._send(StatesSet(instance=self.instance, iteration=msg.iteration, restored=restored, refused=refused,
                             reasons=reasons))

    def _on_step(self, msg: Step, arrays) -> None:
        if not (0 <= msg.shard < len(self.shards)):
            raise ProtocolError("schema", f"step for shard {msg.shard}; this rollout has {len(self.shards)}")
        shard = self.shards[msg.shard]
        actions = arrays.get("actions")
        if actions is None or actions.shape != (shard.n_slots,):
            raise ProtocolError("arrays", f"step actions must be ({shard.n_slots},) int16")
        search = {n: arrays[n] for n in ("search_slots", "search_candidates", "search_keys") if n in arrays}
        if search:
            s = search.get("search_slots")
            c, k = search.get("search_candidates"), search.get("search_keys")
            if (len(search) != 3 or c.shape != k.shape or c.shape[0] != s.shape[0]
                    or (len(s) and (int(s.min()) < 0 or int(s.max()) >= shard.n_slots))):
                raise ProtocolError("arrays", "step search arrays must be search_slots (s,) int16 within the shard, "
                                              "search_candidates and search_keys (s, k)")
        # the learner answers the search's questions in the middle of the step (mid_step.py)
        learner = StepLearner(self.mid_step, self.instance, msg.iteration, msg.cycle, msg.shard,
                              self.welcome.rollout.round_timeout_s, lambda: self.stop_requested) if search else None
        result = shard.step(actions, search, learner)
        self._send_round(msg.iteration, msg.cycle + 1, shard, result)

    def _send_round(self, iteration: int, cycle: int, shard: Shard, result) -> None:
        arrays = result.arrays()
        encode_s = 0.0
        if self.compressor is not None:
            # CPU time of this thread: what compressing costs the rollout's core, not what a
            # busy machine's scheduler adds to it
            t0 = time.thread_time()
            arrays = compress_round(arrays, self.compressor)
            encode_s = time.thread_time() - t0
        body = Round(instance=self.instance, iteration=iteration, cycle=cycle, shard=shard.index,
                     episodes=result.episodes, env_seconds=result.env_seconds,
                     codec_clipped=result.codec_clipped, codec_rounded=result.codec_rounded,
                     wire_encode_seconds=encode_s, search_seconds=result.search_seconds,
                     search_steps=result.search_steps)
        self._send(body, arrays)
        m = self.metrics
        m.rounds.inc()
        m.env_seconds.inc(result.env_seconds)
        m.decisions.inc(len(shard.battles) if cycle > 0 else 0)
        m.episodes.inc(len(result.episodes))
        m.wire_bytes.inc(sum(a.nbytes for a in arrays.values()))
        m.wire_encode_seconds.inc(encode_s)
        m.rows.inc(int(result.rows.shape[0]))
        m.codec_clipped.inc(result.codec_clipped)
        m.codec_rounded.inc(result.codec_rounded)
        m.illegal_actions.inc(result.illegal_actions)
        m.search_seconds.inc(result.search_seconds)
        m.search_steps.inc(result.search_steps)
        if result.search_slots is not None:
            m.searched_decisions.inc(len(result.search_slots))

    # ------------------------------------------------------------------ main loop

    def _dispatch(self, msg, arrays) -> int | None:
        """Handle one message from the learner; an exit code when the rollout is done."""
        if isinstance(msg, Step):
            self._on_step(msg, arrays)
        elif isinstance(msg, Plan):
            self._on_plan(msg)
        elif isinstance(msg, GetStates):
            self._on_get_states(msg)
        elif isinstance(msg, SetState):
            self._on_set_state(msg)
        elif isinstance(msg, Welcome):
            self._on_welcome(msg)
        elif isinstance(msg, Rejoin):
            if msg.instance and msg.instance != self.instance:
                return None  # drawn by a heartbeat of an instance already replaced
            self.say(f"rollout {self.instance}: learner asks to rejoin ({msg.reason})")
            self.mid_step.backlog.clear()  # a Step set aside for the old instance: its questions go unanswered
            self.instance = uuid.uuid4().hex[:12]
            self._hello()
        elif isinstance(msg, Refused):
            self.say(f"rollout {self.instance}: refused by the learner: {msg.reason}")
            return 2
        elif isinstance(msg, Close):
            self.say(f"rollout {self.instance}: closed by the learner ({msg.reason})")
            return 0
        # a LeafValues or SimActions here answers a query given up on (MidStepTimeout): nothing waits for it
        return None

    def run(self) -> int:
        self._hello()
        hb = 2.0
        silence = 600.0
        while not self.stop_requested:
            if self.welcome is not None:
                hb, silence = self.welcome.rollout.heartbeat_s, self.welcome.rollout.learner_silence_s
            now = time.monotonic()
            if now - self.last_heard > silence:
                self.say(f"rollout {self.instance}: nothing from the learner for {silence:.0f} s; saying hello again")
                self.last_heard = now
                self._hello()
            elif now - self.last_sent > hb:
                self._send(Heartbeat(instance=self.instance, state="ready" if self.shards else "waiting"))
            if self.mid_step.backlog:  # what arrived while a step waited for the learner's answer, in order
                msg, arrays = self.mid_step.backlog.popleft()
            else:
                t_wait = time.monotonic()
                got = self.sock.poll(int(min(hb, 0.5) * 1000), zmq.POLLIN)
                if self.shards:  # holding battles: the time since the last wait is idle + work
                    t_now = time.monotonic()
                    self.idle_window.add(t_now - t_wait, t_now - self.held_since)
                    self.held_since = t_now
                else:
                    self.held_since = time.monotonic()
                received = self._recv() if got else None
                if received is None:
                    continue
                msg, arrays = received
            try:
                code = self._dispatch(msg, arrays)
            except Stopping as exc:
                if exc.args:  # a Close or Refused came instead of the leaf values: handled next
                    continue
                break
            except ProtocolError as exc:
                self.metrics.refused.labels(exc.reason).inc()
                self._send(Failure(instance=self.instance, kind="protocol", message=str(exc)))
                self.say(f"rollout {self.instance}: bad command from the learner: {exc}")
                continue
            except (AssignmentMissing, MidStepTimeout) as exc:
                self._send(Failure(instance=self.instance, kind="protocol", message=str(exc)))
                self.say(f"rollout {self.instance}: {exc}; asking to rejoin")
                self.mid_step.backlog.clear()
                self.instance = uuid.uuid4().hex[:12]
                self._hello()
                continue
            except Exception:
                text = traceback.format_exc()
                self._send(Failure(instance=self.instance, kind="exception", message=text))
                self.say(text)
                return 1
            if code is not None:
                return code
        self.say(f"rollout {self.instance}: stopping")
        return 0

    def close(self) -> None:
        self.sock.close(linger=transport.LINGER_MS)


def keepalive(service: RolloutService) -> None:
    """A ready Heartbeat when one is due (``rollout.heartbeat_s`` since the last message); a
    searched step's wait calls it, so a learner restarted since its question answers with a
    Rejoin, which ends the wait at once instead of after ``rollout.round_timeout_s``."""
    if service.welcome is not None and time.monotonic() - service.last_sent > service.welcome.rollout.heartbeat_s:
        service._send(Heartbeat(instance=service.instance, state="ready"))


def _default_env():
    from shared.config import EnvConfig

    return EnvConfig()
