"""The battles' exact states: gathered at every boundary, kept in the checkpoint, handed back on resume.

At the end of each iteration's collection every battle is idle at the point its last round
(cycle T) describes. The learner then asks each rollout for the state of its battles
(``GetStates``; services/rollout/battle_state.py says what a state holds) and reads the answers
(``BattleStates``) while it writes the row, after the update, so the rollouts save while the
learner trains. The states of the row's boundary go into the checkpoint as the component
``battle_states``:

* ``battle_states/states.msgpack``: msgpack map, battle id (str) -> the battle's state bytes;
* ``battle_states/index.json``: ``StateIndex``: the iteration, the engine build, and per battle
  its ordinal, the assignment of the episode in flight, the sha256 and size of its state.

On resume the index is read first. A state whose sha256 does not match its index entry, whose
engine build is not this run's, or that is filed under an id the index does not list is
refused, counted (``resume/battles_refused``) and its battle starts its episode afresh. The rest
wait, by global battle id, for the rollout that holds that id: before the first Plan a rollout
gets ``SetState`` for its battles with a recorded state and answers ``StatesSet`` (restored, or
refused by the rollout: engine hash or potentials that do not verify, another build). A recorded
battle no rollout holds (the fleet shrank) is counted (``resume/battles_unheld``), said in the log,
and kept: later checkpoints carry it and a rollout that takes that id later continues it.
"""

from __future__ import annotations

import hashlib
import time

import msgspec

from shared import transport
from shared.messages import Assignment, BattleStates, EngineBuild, GetStates, SetState, StatesSet

STATES_FILE = "battle_states/states.msgpack"
INDEX_FILE = "battle_states/index.json"
FILES = (STATES_FILE, INDEX_FILE)


class StateEntry(msgspec.Struct, forbid_unknown_fields=True):
    battle: int
    ordinal: int
    assignment: Assignment | None
    decisions: int
    """Decisions the episode in flight has played (0: it starts at the boundary)."""
    sha256: str
    bytes: int


class StateIndex(msgspec.Struct, forbid_unknown_fields=True):
    iteration: int
    engine: EngineBuild
    battles: list[StateEntry]
    missing: list[str] = []
    """Battles of the row's boundary without a state, each with the reason (their rollout did not
    answer, or could not save): on resume they start their episode afresh."""


class _HeadEnv(msgspec.Struct):
    episode_steps: int = 0


class _Head(msgspec.Struct):
    """The fields of a rollout's BattleState the learner needs (msgspec skips the rest), read
    without importing the rollout's module."""

    ordinal: int
    assignment: Assignment | None = None
    env: _HeadEnv = msgspec.field(default_factory=_HeadEnv)


def _head(blob: bytes) -> tuple[int, Assignment | None, int]:
    """(ordinal, assignment, decisions so far) of a state."""
    head = msgspec.msgpack.decode(blob, type=_Head)
    return head.ordinal, head.assignment, head.env.episode_steps


class BattleStateBook:
    """What the learner knows of its battles' exact states (see the module docstring)."""

    def __init__(self, engine: EngineBuild, say=print):
        self.engine, self.say = engine, say
        self.iteration = -1
        self.current: dict[int, bytes] = {}
        """Battle id -> state at the boundary of the last finished iteration (what capture saves)."""
        self.missing: list[str] = []
        self.recorded: dict[int, tuple[bytes, StateEntry]] = {}
        """From the resumed checkpoint, not yet handed to a rollout: id -> (state, its index entry)."""
        self._asked: dict[str, int] = {}
        self._answers: dict[str, BattleStates] = {}
        self._set_answers: dict[str, StatesSet] = {}
        self.resume_counts: dict[str, int] = {}
        """``resume/`` keys for the next row (the first after a resume), then cleared."""
        self.gather_seconds = 0.0
        self.rollout_seconds = 0.0

    # ------------------------------------------------------------------ messages

    def on_message(self, member, msg) -> None:
        """A BattleStates or StatesSet from ``member`` (routed here by the collector)."""
        if isinstance(msg, BattleStates):
            if self._asked.get(member.instance) == msg.iteration:
                self._answers[member.instance] = msg
        elif isinstance(msg, StatesSet):
            self._set_answers[member.instance] = msg

    # ------------------------------------------------------------------ every boundary

    def request(self, sock, members, iteration: int) -> None:
        """Ask every live member for its battles' states (they are idle at the boundary now)."""
        self._asked, self._answers = {}, {}
        for m in members:
            if not m.lost:
                transport.send(sock, GetStates(iteration=iteration), identity=m.identity)
                self._asked[m.instance] = iteration

    def gather(self, collector, members, iteration: int, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for the answers to ``request``; the boundary's states
        become ``current``. A member that does not answer leaves its battles without a state
        (listed in ``missing``: they would start afresh on a resume from this checkpoint)."""
        t0 = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        live = [m for m in members if m.instance in self._asked]
        while any(m.instance not in self._answers and not m.lost for m in live) and time.monotonic() < deadline:
            collector.poll(20, lambda *a: None)
        self.gather_seconds = time.perf_counter() - t0
        self.iteration, self.current, self.missing, self.rollout_seconds = iteration, {}, [], 0.0
        for m in members:
            answer = self._answers.get(m.instance)
            if answer is None:
                self.missing.extend(f"battle {b}: rollout {m.label()} did not send its state" for b in m.battle_ids)
                continue
            self.rollout_seconds = max(self.rollout_seconds, answer.seconds)
            self.missing.extend(answer.failed)
            for b, blob in zip(answer.battles, answer.states):
                if b in m.battle_ids:
                    self.current[int(b)] = bytes(blob)
        if self.missing:
            self.say(f"learner: {len(self.missing)} battle(s) without a state at iteration {iteration} "
                     f"(they would start afresh on a resume from it): {self.missing[0]}")

    # ------------------------------------------------------------------ the checkpoint component

    def files(self) -> dict[str, bytes]:
        """The two files of the component: the boundary's states and the recorded ones no rollout
        holds yet (kept until one does)."""
        states = {b: blob for b, (blob, _) in self.recorded.items()} | self.current
        entries = []
        for b in sorted(states):
            blob = states[b]
            if b in self.recorded and b not in self.current:
                entries.append(self.recorded[b][1])
            else:
                entries.append(StateEntry(b, *_head(blob), hashlib.sha256(blob).hexdigest(), len(blob)))
        index = StateIndex(iteration=self.iteration, engine=self.engine, battles=entries, missing=self.missing)
        return {STATES_FILE: msgspec.msgpack.encode({str(b): states[b] for b in sorted(states)}),
                INDEX_FILE: msgspec.json.encode(index)}

    def load(self, files: dict[str, bytes]) -> None:
        """Take a checkpoint's states as ``recorded``, refusing (counting) each that does not verify."""
        self.recorded, refused = {}, []
        try:
            index = msgspec.json.decode(files[INDEX_FILE], type=StateIndex)
            states = msgspec.msgpack.decode(files[STATES_FILE], type=dict[str, bytes])
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self.say(f"learner: the checkpoint's battle states are unreadable ({exc}); every battle starts afresh")
            try:  # count the battles the index lists, when it is the readable one
                lost = len(msgspec.json.decode(files[INDEX_FILE], type=StateIndex).battles)
            except (msgspec.DecodeError, msgspec.ValidationError):
                lost = 0
            self.resume_counts = {"resume/battles_refused": lost, "resume/battles_restored": 0}
            return
        listed = {e.battle: e for e in index.battles}
        for key, blob in states.items():
            entry = listed.get(int(key)) if key.lstrip("-").isdigit() else None
            if entry is None:
                refused.append(f"battle {key!r}: not in the index (a battle id this checkpoint does not have)")
            elif index.engine != self.engine:
                refused.append(f"battle {key}: saved by engine {index.engine.describe()}, this run has "
                               f"{self.engine.describe()}")
            elif hashlib.sha256(blob).hexdigest() != entry.sha256 or len(blob) != entry.bytes:
                refused.append(f"battle {key}: its state does not hash to the index's sha256 {entry.sha256[:12]}")
            else:
                self.recorded[entry.battle] = (blob, entry)
        self.iteration = index.iteration
        self.resume_counts = {"resume/battles_refused": len(refused), "resume/battles_restored": 0,
                              "resume/battles_missing": len(index.missing)}
        for line in refused:
            self.say(f"learner: refused a recorded battle state, the battle starts afresh: {line}")
        self.say(f"learner: {len(self.recorded)} battle state(s) recorded at iteration {index.iteration} to hand back"
                 + (f"; {len(index.missing)} battle(s) had none and start afresh" if index.missing else ""))

    # ------------------------------------------------------------------ on resume

    def hand_out(self, sock, collector, members, fleet, iteration: int, timeout_s: float) -> set[int]:
        """Send each fresh member SetState for its battles with a recorded state, wait (bounded)
        for the answers, and return the battle ids now continuing their recorded episodes. Their
        ordinals and in-flight assignments go into ``fleet``; refusals are counted."""
        if not self.recorded:
            return set()
        asked: dict[str, list[int]] = {}
        self._set_answers = {}
        for m in members:
            mine = [b for b in m.battle_ids if b in self.recorded]
            if not m.fresh or not mine:
                continue
            states = [self.recorded[b][0] if b in self.recorded else b"" for b in m.battle_ids]
            transport.send(sock, SetState(iteration=iteration, battles=list(m.battle_ids), states=states),
                           identity=m.identity)
            asked[m.instance] = mine
        deadline = time.monotonic() + timeout_s
        while any(i not in self._set_answers and not fleet.members[i].lost for i in asked) and time.monotonic() < deadline:
            collector.poll(20, lambda *a: None)
        restored: set[int] = set()
        refused = 0
        for inst, mine in asked.items():
            answer = self._set_answers.get(inst)
            ok = set(answer.restored) & set(mine) if answer is not None else set()
            for b in mine:
                _, entry = self.recorded.pop(b)
                if b in ok:
                    restored.add(b)
                    fleet.ordinal[b] = entry.ordinal
                    if entry.assignment is not None:
                        fleet.assignments[(b, entry.ordinal)] = entry.assignment
                else:
                    refused += 1
            for b, reason in zip(answer.refused if answer else [], answer.reasons if answer else []):
                self.say(f"learner: rollout refused the recorded state of battle {b}, it starts afresh: {reason}")
            if answer is None:
                self.say(f"learner: rollout {inst} did not answer SetState in {timeout_s:.0f} s; its "
                         f"{len(mine)} battle(s) start afresh")
        counts = self.resume_counts or {"resume/battles_refused": 0, "resume/battles_restored": 0}
        counts["resume/battles_restored"] = counts.get("resume/battles_restored", 0) + len(restored)
        counts["resume/battles_refused"] = counts.get("resume/battles_refused", 0) + refused
        held = {b for m in members for b in m.battle_ids}
        unheld = sorted(set(self.recorded) - held)
        counts["resume/battles_unheld"] = len(unheld)
        if unheld:
            self.say(f"learner: {len(unheld)} recorded battle(s) no rollout holds now ({unheld[:8]}"
                     f"{' ...' if len(unheld) > 8 else ''}): kept in the checkpoint for a rollout that takes "
                     "those ids later")
        self.resume_counts = counts
        self.say(f"learner: {len(restored)} battle(s) continue their recorded episodes"
                 + (f"; {refused} refused, starting afresh" if refused else ""))
        return restored

    def row_keys(self) -> dict:
        """This iteration's keys: the component's size, and once after a resume the resume/ counts."""
        out = {"checkpoint/battle_states": len(self.current),
               "checkpoint/battle_states_bytes": sum(len(b) for b in self.current.values()),
               "time/battle_states_wait": self.gather_seconds,
               "time/battle_states_save": self.rollout_seconds}
        out.update(self.resume_counts)
        self.resume_counts = {}
        return out
