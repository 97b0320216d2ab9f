"""Synthetic rollouts: rollout processes that replay recorded real rounds, for
``royalefleet bench --synthetic 1,2,4,8`` (the learner's serving capacity alone).

Two roles, both real ``RolloutService`` loops (Hello/Welcome, heartbeats, Rejoin, Close over
ZeroMQ with the wire codec), chosen by ``--record``/``--replay`` or their environment variable
(the launcher configures every service through its environment, ``royalefleet/launcher.py``);
the other settings are the rollout's (``Settings``, ``shared.service_settings``):

* ``ROYALEFLEET_SYNTHETIC_RECORD=<folder>``: a real rollout that also keeps every Round it sends,
  exactly as sent (the envelope and each array frame), and writes them on exit to
  ``<folder>/<instance>.rounds`` (msgpack, zstd-compressed; ``Recording``).
* ``ROYALEFLEET_SYNTHETIC_REPLAY=<file>``: a synthetic rollout. It builds no battle: its Hello
  names the recording's engine, battles, shards and wire codec; a fresh Plan is answered with
  each shard's first recorded round, and each Step with that shard's next recorded round. The
  actions in the Step are accepted (their shape checked) and ignored: the recording decides the
  next observation.

What a replayed round changes from the recorded one is exactly what the protocol says the
rollout takes from the learner or decides itself (docs/protocol.md, "A rollout's life"): the
``instance`` (fresh per process), ``iteration`` and ``cycle`` (the Step's, + 1), and each episode
record's ``battle`` (the Plan's battle id at the recorded battle's local position). Every array
frame (groups, ticks, ordinals, packed rows and masks, rewards, episode ends, final rows) and every
other field (episode outcomes, ``env_seconds``, codec counters) is the recorded one, byte for byte.

A recording matches a replay only when the learner's Welcome has the recording's env config,
codec table and wire codec (checked: refused naming both), and when the replay's ladder plan
gives every battle the same kind of seats as the recorded plan did: the bench records and replays
with ``ladder.mix = (1, 0, 0)`` (every battle a mirror, every seat the learner's), which any
battle id satisfies. A shard that runs past its recording starts it again at its second round
(counted in ``wraps``; its step half then closes a row the recording did not open).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import msgspec
import zstandard

from services.rollout.metrics import RolloutMetrics
from services.rollout.service import RolloutService
from services.rollout.main import Settings as RolloutSettings
from shared import service_settings
from shared.service_main import Say, StartRefused, run_service
from shared.service_settings import option
from shared.messages import (
    BattleStates, CodecTable, Decoder, EngineBuild, Failure, Heartbeat, Hello, Plan, ProtocolError, Round, SetState, StatesSet,
    Step, ToLearner, encode,
)
from shared.config import EnvConfig

RECORD_ENV = "ROYALEFLEET_SYNTHETIC_RECORD"
REPLAY_ENV = "ROYALEFLEET_SYNTHETIC_REPLAY"
FORMAT = 1


class Recording(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One real rollout's rounds as it sent them. ``shards[s]`` lists shard ``s``'s Round
    messages in the order sent (cycle 0 of the fresh Plan, then one per Step); each message is
    its frames (``[envelope, array frame, ...]``, bytes as they went on the wire)."""

    format: int = FORMAT
    engine: EngineBuild
    env: EnvConfig
    codec: CodecTable
    master_seed: int
    wire_codec: int
    battles: int
    battle_ids: list[int]
    """The recorded rollout's battle ids (its first Plan), in local order."""
    shards: list[list[list[bytes]]]

    def save(self, path: str) -> None:
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(zstandard.ZstdCompressor(level=3).compress(msgspec.msgpack.encode(self)))
        os.replace(tmp, path)

    @staticmethod
    def load(path: str) -> "Recording":
        """Raises ValueError naming the file when it is not a recording of this format."""
        try:
            with open(path, "rb") as f:
                raw = zstandard.ZstdDecompressor().decompress(f.read())
            rec = msgspec.msgpack.decode(raw, type=Recording)
        except (OSError, zstandard.ZstdError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ValueError(f"{path}: not a synthetic-rollout recording ({exc}); record one with "
                             f"`royalefleet bench --synthetic`") from None
        if rec.format != FORMAT:
            raise ValueError(f"{path}: recording format {rec.format}, this build reads {FORMAT}")
        if not rec.shards or any(len(s) < 2 for s in rec.shards):
            raise ValueError(f"{path}: a shard has fewer than 2 recorded rounds; record at least one iteration")
        return rec

    def rounds(self) -> int:
        return sum(len(s) for s in self.shards)


class RecordingRollout(RolloutService):
    """A real rollout that keeps every Round it sends, as sent (``Recording``)."""

    def __init__(self, *args, folder: str, **kw):
        super().__init__(*args, **kw)
        self.folder = folder
        self.sent: list[list[list[bytes]]] = [[] for _ in range(self.n_shards)]
        self.battle_ids: list[int] | None = None

    def _on_plan(self, msg: Plan) -> None:
        if self.battle_ids is None:
            self.battle_ids = list(msg.battles)
        super()._on_plan(msg)

    def _send(self, body, arrays=None) -> None:
        if isinstance(body, Round):
            self.sent[body.shard].append([bytes(f) for f in encode(body, arrays)])
        super()._send(body, arrays)

    def recording(self) -> Recording | None:
        if self.welcome is None or self.battle_ids is None or any(len(s) < 2 for s in self.sent):
            return None
        w = self.welcome
        return Recording(engine=self.engine, env=w.env, codec=w.codec, master_seed=w.master_seed,
                         wire_codec=w.wire_codec, battles=self.n_battles, battle_ids=self.battle_ids,
                         shards=self.sent)

    def close(self) -> None:
        """Write the recording (``save``), then close the socket."""
        self.save()
        super().close()

    def save(self) -> str | None:
        rec = self.recording()
        if rec is None:
            self.say(f"rollout {self.instance}: nothing recorded (no complete iteration)")
            return None
        path = os.path.join(self.folder, f"{self.instance}.rounds")
        rec.save(path)
        self.say(f"rollout {self.instance}: recorded {rec.rounds()} rounds to {path}")
        return path


class _ReplayShard:
    def __init__(self, index: int, messages: list[list[bytes]], decoder: Decoder):
        self.index = index
        self.rounds: list[tuple[Round, dict]] = [decoder.decode(frames) for frames in messages]
        self.n_slots = int(self.rounds[0][1]["group"].shape[0])
        self.next = 0
        self.wraps = 0
        self.battles = range(self.n_slots // 2)  # RolloutService counts len(shard.battles)

    def take(self) -> tuple[Round, dict]:
        if self.next >= len(self.rounds):
            self.next, self.wraps = 1, self.wraps + 1
        r = self.rounds[self.next]
        self.next += 1
        return r


class SyntheticRollout(RolloutService):
    """Replays a ``Recording`` over the real protocol, with no env (module docstring)."""

    def __init__(self, learner: str, recording: Recording, **kw):
        super().__init__(learner, recording.battles, len(recording.shards), **kw)
        self.recording = recording
        self.engine = recording.engine
        self.recorded_ids = recording.battle_ids
        self.planned_ids = list(recording.battle_ids)
        self.sent_frames: list | None = None
        """When a list, every Round's frames are appended as sent (tests)."""

    def _hello(self) -> None:
        self._send(Hello(instance=self.instance, host="synthetic", pid=os.getpid(), battles=self.n_battles,
                         shards=self.n_shards, engine=self.engine, codecs=[self.recording.wire_codec],
                         user_code=self.user_code))
        self.say(f"synthetic rollout {self.instance}: hello to {self.learner} ({self.n_battles} battles in "
                 f"{self.n_shards} shards, {self.recording.rounds()} recorded rounds)")

    def _on_welcome(self, msg) -> None:
        rec = self.recording
        for what, theirs, ours in (("env config", msg.env, rec.env), ("codec table", msg.codec, rec.codec),
                                   ("wire codec", msg.wire_codec, rec.wire_codec),
                                   ("engine build", msg.engine, rec.engine)):
            if theirs != ours:
                reason = (f"the learner's {what} is not the recording's ({theirs!r} != {ours!r}); record again "
                          f"with the learner's config")
                self._send(Failure(instance=self.instance, kind="refused", message=reason))
                raise SystemExit(f"synthetic rollout {self.instance}: {reason}")
        self.welcome = msg
        if not self.shards:
            decoder = Decoder(ToLearner)
            self.shards = [_ReplayShard(s, msgs, decoder) for s, msgs in enumerate(rec.shards)]
        self._send(Heartbeat(instance=self.instance, state="ready"))

    def _on_plan(self, msg: Plan) -> None:
        if len(msg.battles) != self.n_battles:
            raise ProtocolError("schema", f"plan lists {len(msg.battles)} battles, this rollout runs {self.n_battles}")
        self.planned_ids = list(msg.battles)
        if msg.fresh:
            for shard in self.shards:
                shard.next = 0
                self._replay(shard, msg.iteration, 0)

    def _on_step(self, msg: Step, arrays) -> None:
        if not (0 <= msg.shard < len(self.shards)):
            raise ProtocolError("schema", f"step for shard {msg.shard}; this rollout has {len(self.shards)}")
        shard = self.shards[msg.shard]
        actions = arrays.get("actions")
        if actions is None or actions.shape != (shard.n_slots,):
            raise ProtocolError("arrays", f"step actions must be ({shard.n_slots},) int16")
        self._replay(shard, msg.iteration, msg.cycle + 1)

    def replayed(self, shard: _ReplayShard, iteration: int, cycle: int) -> tuple[Round, dict]:
        """The shard's next recorded round with the protocol's fields rewritten (module docstring)."""
        body, arrays = shard.take()
        where = {b: k for k, b in enumerate(self.recorded_ids)}
        episodes = [msgspec.structs.replace(e, battle=self.planned_ids[where[e.battle]]) if e.battle in where else e
                    for e in body.episodes]
        return msgspec.structs.replace(body, instance=self.instance, iteration=iteration, cycle=cycle,
                                       episodes=episodes), arrays

    def _replay(self, shard: _ReplayShard, iteration: int, cycle: int) -> None:
        body, arrays = self.replayed(shard, iteration, cycle)
        if self.sent_frames is not None:
            self.sent_frames.append([bytes(f) for f in encode(body, arrays)])
        self._send(body, arrays)
        m = self.metrics
        m.rounds.inc()
        m.rows.inc(int(arrays["rows"].shape[0]) if "rows" in arrays else 0)

    def _on_get_states(self, msg) -> None:
        ids = [b for b in self.planned_ids if b >= 0]
        self._send(BattleStates(instance=self.instance, iteration=msg.iteration, battles=[], states=[],
                                failed=[f"battle {b}: a synthetic rollout holds no engine state" for b in ids]))

    def _on_set_state(self, msg: SetState) -> None:
        refused = [b for b, blob in zip(msg.battles, msg.states) if blob]
        self._send(StatesSet(instance=self.instance, iteration=msg.iteration, restored=[], refused=refused,
                             reasons=["load: a synthetic rollout holds no engine state"] * len(refused)))

    def wraps(self) -> int:
        return sum(s.wraps for s in self.shards)

    def close(self) -> None:
        """Say how often the replay ran past its recording, then close the socket."""
        if self.wraps():
            self.say(f"synthetic rollout {self.instance}: ran past its recording {self.wraps()} time(s)")
        super().close()


@dataclass(frozen=True)
class Settings(RolloutSettings):
    """A synthetic or recording rollout's settings: the rollout's (``services.rollout.main.
    Settings``) plus which role (``shared.service_settings``: flag, else variable, else default)."""

    record: str | None = option(None, env=RECORD_ENV,
                                help="a real rollout that also writes every Round it sends to "
                                "<folder>/<instance>.rounds on exit (the folder must exist)")
    replay: str | None = option(None, env=REPLAY_ENV,
                                help="a synthetic rollout replaying this recording (a .rounds file); its "
                                "battles and shards are the recording's, --battles/--shards are ignored")


PROG = "python -m royalefleet.synthetic"


def parse_settings(argv: list[str] | None = None, environ=None) -> Settings:
    """Settings from flags, else variables, else defaults; exits 2 naming the problem when
    neither or both of record and replay are given, or (recording) when battles are no
    multiple of shards."""
    a = service_settings.parse_settings(
        Settings, argv, environ, prog=PROG,
        description="A rollout for `royalefleet bench --synthetic`: records a real rollout's rounds "
        f"(--record / {RECORD_ENV}) or replays a recording over the real protocol with no env "
        f"(--replay / {REPLAY_ENV}). Every flag also reads an environment variable (shown).")
    problem = None
    if (a.record is None) == (a.replay is None):
        problem = (f"give exactly one of --record <folder> ({RECORD_ENV}) or --replay <file> ({REPLAY_ENV}); "
                   f"got {'both' if a.record is not None else 'neither'}")
    elif a.record is not None and a.battles % a.shards:
        problem = f"--battles {a.battles} must be a positive multiple of --shards {a.shards}"
    if problem:
        print(f"{PROG}: error: {problem}", file=sys.stderr)
        raise SystemExit(2)
    return a


def start(settings: Settings, say: Say) -> RolloutService:
    """A synthetic rollout replaying ``settings.replay``, or a recording one writing to
    ``settings.record``. Raises ``StartRefused`` for a recording that cannot be read."""
    metrics = RolloutMetrics(settings.metrics_port or None, settings.metrics_host)
    if settings.replay is None:
        return RecordingRollout(settings.learner, settings.battles, settings.shards, metrics=metrics,
                                max_message_mb=settings.max_message_mb, say=say, folder=settings.record)
    try:
        rec = Recording.load(settings.replay)
    except ValueError as exc:
        raise StartRefused(str(exc)) from None
    return SyntheticRollout(settings.learner, rec, metrics=metrics, max_message_mb=settings.max_message_mb, say=say)


def main(argv=None) -> int:
    """``python -m royalefleet.synthetic``: configured like ``python -m services.rollout`` (flags or
    its ``ROYALEFLEET_*`` variables), plus ``--record`` or ``--replay`` (``Settings``); run by
    ``shared.service_main`` as the rollout is."""
    return run_service("synthetic rollout", parse_settings(argv), start)

if __name__ == "__main__":
    sys.exit(main())
