"""Recording a teacher's battles: the rollout's own battles (``services.rollout.battles.Shard``),
stepped by a worker process that plays the teacher on the recorded seats.

A recorded seat is held as a LEARNER seat of the Shard: it is never ``mask_only`` (the
rollout's scripted seats are, and their observation would be zeros), its observation is packed
by the Shard exactly as a rollout packs the learner's rows, and the action it plays is the
teacher's, passed in as the learner's would be. The opponent seat (when it is not the teacher
too: ``MIRROR``) is the Shard's own scripted seat, or, for a snapshot opponent (``snap:<id>``),
its frozen seat, whose row the Shard ships and whose action the recorder plays with that
snapshot, unsearched, from its stream ``demos/opponent/battle/{b}/seat/{seat}`` (a searching
teacher simulates it as itself: a generation's labels against its predecessor).

Episodes are the rollout's: battle ``b`` ordinal 0, env seed ``env/battle/{b}/ordinal/0``, the
opponent's stream ``scripted/battle/{b}/ordinal/0``; the teacher draws from its own stream
``demos/teacher/battle/{b}/seat/{seat}``. So a battle's rows are a pure function of (config,
teacher, opponent, seat, b), whichever worker plays it, and shard k (battles
``k * shard_battles ..``) is the same file however many workers recorded the set.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from shared.demos import DemoDigests, SHARD_TEMPLATE, discounted_returns, shard_bytes, teacher_action
from shared.messages import GROUP_LEARNER, SEATS, Assignment, snapshot_of
from shared.parent_death import die_with_parent, parent_gone

MIRROR = "mirror"
"""The opponent id that seats the teacher on both seats (both recorded)."""


RECORD_COUNTS = ("illegal", "remapped", "shard_illegal", "apprentice", "searched", "overruled", "unconfirmed")
"""What a recorder counts per battle and ``royalefleet demos record`` sums: teacher actions our mask
refuses, re-mapped indices, illegal actions the shard saw, decisions the apprentice played
(DAgger), and a searching teacher's searched decisions, those where the search overruled its base
player, and overrules its confirming playouts sent back (``confirm=C``)."""


@dataclass(frozen=True)
class PlannedBattle:
    battle: int
    teacher: str
    opponent: str
    """A scripted player id, a snapshot ``snap:<id>`` (played unsearched), or ``MIRROR``."""
    seat: int
    """The recorded seat (0 blue, 1 red); -1 both (a mirror)."""


@dataclass
class WorkerJob:
    """Everything a worker needs, picklable (it crosses to a spawned process)."""

    worker: int
    env_cfg: object  # shared.config.EnvConfig
    net_cfg: object  # shared.config.NetConfig (snapshot teachers)
    table: object  # shared.messages.CodecTable
    statics: np.ndarray
    spec: object  # shared.envs.ObsSpec
    master_seed: int
    noop_prob: float
    gamma: float
    digests: DemoDigests
    arch_digest: str
    snapshots: dict[str, tuple[bytes, bytes]]
    """``snap:<id>`` -> (actor.safetensors, spec.json) of each snapshot teacher, apprentice and opponent."""
    shards: list[list[PlannedBattle]]
    """The shards this worker writes, each a list of battles in battle order."""
    shard_indices: list[int]
    staging: str
    apprentice: str = ""
    """DAgger (``demos record --apprentice``): the player that plays a share of the recorded seats'
    decisions while the teacher labels every one; "" for none."""
    beta: float = 0.0
    """The apprentice's share at the set's first battle, decaying linearly to 0 at its last (or
    held, ``beta_decay`` "none")."""
    beta_decay: str = "linear"
    """``BETA_DECAYS``: "linear" (beta to 0 over the set) or "none" (beta in every battle)."""
    first_battle: int = 0
    battles: int = 1
    """The set's battles (``first_battle`` .. ``first_battle + battles - 1``): beta's decay."""
    parent_pid: int = 0
    """The recording command's pid: a worker that finds another parent (the command died before the
    worker asked to die with it) stops at once (``shared.parent_death``); 0: not checked."""


@dataclass
class SeatRows:
    """One recorded seat's rows of one episode, as they are gathered."""

    rows: list = field(default_factory=list)
    actions: list = field(default_factory=list)
    legal: list = field(default_factory=list)
    ids: list = field(default_factory=list)
    rewards: list = field(default_factory=list)
    searched: list = field(default_factory=list)
    """Per row, the teacher's search ((candidates head frame, means, visits, keep)) or None."""


def searches(player_id: str) -> bool:
    """True when ``player_id`` carries a search suffix (``<player>+search:N[:D]``)."""
    from shared.search.spec import split_search

    return split_search(player_id)[1] is not None


def dagger_beta(job: WorkerJob, battle: int) -> float:
    """The apprentice's share of decisions in ``battle``: ``job.beta`` at the set's first battle,
    decaying linearly to 0 at its last, or ``job.beta`` in every battle with ``beta_decay`` "none"
    (0 without an apprentice)."""
    if not job.apprentice:
        return 0.0
    if job.beta_decay == "none":
        return job.beta
    return job.beta * (1.0 - (battle - job.first_battle) / max(job.battles - 1, 1))


def make_teacher(player_id: str, job: WorkerJob):
    """The teacher's player (``act(obs, rng) -> int``, RoyaleGym's parser index): the evaluator's
    ScriptedPlayer or SnapshotPlayer (services/evaluator/players.py), so a teacher is exactly
    the player ``royalefleet eval`` plays; with a search suffix its ``SearchedPlayer``
    (services/evaluator/searched.py) on the recording env's config, bound to each battle."""
    from services.evaluator.players import RunFacts, ScriptedPlayer, load_snapshot_player
    from shared.codec import Codec
    from shared.search.spec import split_search

    base_id, spec = split_search(player_id)
    if spec is not None:
        from services.evaluator.searched import SearchedPlayer

        return SearchedPlayer(player_id, make_teacher(base_id, job), spec, job.env_cfg, job.noop_prob)
    if snapshot_of(player_id) is None:
        return ScriptedPlayer(player_id, job.noop_prob)
    actor, spec = job.snapshots[player_id]
    facts = RunFacts(spec=job.spec, codec=Codec(job.table, job.statics), arch_digest=job.arch_digest,
                     obs_digest=job.digests.obs_digest, codec_table_digest=job.digests.codec_table_digest)

    class _Cfg:  # load_snapshot_player reads cfg.net alone
        net = job.net_cfg

    return load_snapshot_player(player_id, actor, spec, _Cfg, facts)


def run_worker(job: WorkerJob, queue) -> None:
    """A worker process's body: record its shards, putting ``("ready", worker)`` once its battle
    is built, ``("battle", BattleEntry, counts)``
    after each battle, ``("shard", index, ShardEntry)`` after each shard file and ``("done",
    worker)`` at the end on ``queue``; ``("error", worker, text)`` if anything raises. Ignores
    SIGINT: the parent stops it (royalefleet/cmd_demos.py). Gets SIGTERM when the parent dies, however
    it dies, so no worker records on as an orphan."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    if parent_gone(job.parent_pid):
        return
    try:
        recorder = Recorder(job)
        queue.put(("ready", job.worker))
        for index, battles in zip(job.shard_indices, job.shards):
            arrays, entries = [], []
            for planned in battles:
                seat_arrays, entry, counts = recorder.play(planned)
                arrays.extend(seat_arrays)
                entries.append(entry)
                queue.put(("battle", entry, counts))
            queue.put(("shard", index, recorder.write_shard(index, arrays, entries)))
        queue.put(("done", job.worker))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which stops the set
        import traceback

        queue.put(("error", job.worker, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


class Recorder:
    """One rollout Shard of one battle, replayed for each planned battle."""

    def __init__(self, job: WorkerJob):
        from services.rollout.battles import Shard
        from shared.codec import Codec

        self.job = job
        self.codec = Codec(job.table)
        searched = any(searches(b.teacher) for shard in job.shards for b in shard)
        # a searching teacher saves the battle (env.snapshot()), which needs every seat's observation
        self.shard = Shard(job.worker, job.env_cfg, 1, self.codec, job.master_seed, job.noop_prob,
                           mask_only_scripted=not searched)
        self.shard.set_gamma(job.gamma)
        self.teachers: dict[str, object] = {}
        spec = job.spec
        self.grid = dict(height=spec.height, width=spec.width, n_grid=spec.n_grid_actions)

    def _teacher(self, player_id: str):
        if player_id not in self.teachers:
            self.teachers[player_id] = make_teacher(player_id, self.job)
        return self.teachers[player_id]

    def play(self, planned: PlannedBattle):
        """Play one battle to its end; (per recorded seat: that seat's arrays, the BattleEntry,
        counts {illegal, remapped, shard_illegal})."""
        from shared.demos import BattleEntry
        from shared.seeding import derive_int, stream, stream_path

        job, shard, bid = self.job, self.shard, planned.battle
        opponent = planned.teacher if planned.opponent == MIRROR else planned.opponent
        frozen = planned.seat >= 0 and snapshot_of(opponent) is not None
        role = "mirror" if planned.seat < 0 else "pool" if frozen else "scripted"
        a = Assignment(battle=bid, ordinal=0, role=role, opponent=opponent, learner_seat=planned.seat)
        # the Shard begins ordinal 1 itself when ordinal 0 ends; it is never stepped
        shard.table[(bid, 0)] = a
        shard.table[(bid, 1)] = Assignment(battle=bid, ordinal=1, role=a.role, opponent=opponent,
                                           learner_seat=planned.seat)
        shard.start([bid], [0])
        battle = shard.battles[0]
        seats = [s for s in (0, 1) if battle.groups[s] == GROUP_LEARNER]
        masked = set(getattr(battle.env, "_mask_only", ()) or ())
        for s in seats:
            if SEATS[s] in masked:
                raise RuntimeError(f"battle {bid}: recorded seat {SEATS[s]} is mask_only; its observation is zeros")
        teacher = self._teacher(planned.teacher)
        # a snapshot opponent's frozen seat: the Shard ships its row, the recorder plays it (not recorded)
        other, other_seat, other_rng = None, -1, None
        if frozen:
            other, other_seat = self._teacher(opponent), 1 - planned.seat
            other_rng = stream(job.master_seed, "demos/opponent/battle/{battle}/seat/{seat}", battle=bid,
                               seat=other_seat)
        players = self._seated(teacher, battle.env, seats, planned, other)
        rngs = {s: stream(job.master_seed, "demos/teacher/battle/{battle}/seat/{seat}", battle=bid, seat=s)
                for s in seats}
        beta = dagger_beta(job, bid)
        apprentice = self._teacher(job.apprentice) if job.apprentice else None
        a_rngs = {s: stream(job.master_seed, "demos/apprentice/battle/{battle}/seat/{seat}", battle=bid, seat=s)
                  for s in seats}
        coins = {s: stream(job.master_seed, "demos/dagger/battle/{battle}/seat/{seat}", battle=bid, seat=s)
                 for s in seats}
        parser = battle.env.action_parser
        per_seat = {s: SeatRows() for s in seats}
        counts = dict.fromkeys(RECORD_COUNTS, 0)
        result = shard.observe()
        outcome = {s: 0 for s in seats}
        while True:
            held = [slot for slot in range(2) if result.group[slot] >= 0]
            actions = np.zeros(2, np.int64)
            for s in seats:
                obs = battle.obs[SEATS[s]]
                searcher = getattr(players[s], "player", None)  # a SearchedSeat's SearchedPlayer
                if searcher is not None:
                    searcher.last = None  # a decision it does not search (one legal action) sets none
                    unconfirmed = searcher.stats.unconfirmed
                raw = int(players[s].act(obs, rngs[s]))
                if searcher is not None and searcher.last is not None:
                    counts["searched"] += 1
                    counts["overruled"] += int(searcher.last.index != 0)
                    counts["unconfirmed"] += searcher.stats.unconfirmed - unconfirmed
                head = teacher_action(raw, parser, **self.grid)
                per_seat[s].searched.append(self._search_of(searcher, parser))
                counts["remapped"] += int(head != raw)
                mask = obs["action_mask"]
                legal = bool(0 <= head < mask.shape[0] and mask[head])
                counts["illegal"] += int(not legal)
                rec = per_seat[s]
                rec.rows.append(result.rows[held.index(s)])
                rec.actions.append(head)
                rec.legal.append(legal)
                rec.ids.append(np.flatnonzero(mask).astype(np.int16))
                actions[s] = raw  # what the env is sent: the teacher's own index, or under DAgger
                if apprentice is not None:  # the apprentice's at a share beta (both drawn at every decision)
                    own = int(apprentice.act(obs, a_rngs[s]))
                    if coins[s].random() < beta:
                        actions[s] = own
                        counts["apprentice"] += 1
            if other is not None:  # a frozen seat is held until the episode ends
                actions[other_seat] = int(other.act(battle.obs[SEATS[other_seat]], other_rng))
            result = shard.step(actions)
            counts["shard_illegal"] += result.illegal_actions
            for s in seats:
                per_seat[s].rewards.append(float(result.reward[s]))
            if result.episodes:
                for ep in result.episodes:
                    s = SEATS.index(ep.seat)
                    if s in outcome:
                        outcome[s] = int(ep.outcome)
                break
        seed = derive_int(job.master_seed, stream_path("env/battle/{battle}/ordinal/{ordinal}", battle=bid, ordinal=0))
        entry = BattleEntry(battle=bid, env_seed=seed, teacher=planned.teacher, opponent=planned.opponent,
                            recorded_seats=seats, outcome=[outcome[s] for s in seats],
                            decisions=len(per_seat[seats[0]].actions))
        return [self._seat_arrays(bid, s, per_seat[s], outcome[s]) for s in seats], entry, counts

    def _search_of(self, searcher, parser):
        """The search that chose this decision's action, as recorded (``SEARCH_ARRAYS``), or None."""
        if searcher is None or searcher.last is None:
            return None
        last = searcher.last
        cands = [teacher_action(int(c), parser, **self.grid) for c in searcher.last_candidates]
        return (np.asarray(cands, np.int16), np.asarray(last.means, np.float32),
                np.asarray(last.visits, np.int16), float(searcher.spec.keep))

    def _seated(self, teacher, env, seats: list[int], planned: PlannedBattle, snapshot_opponent=None) -> dict:
        """The teacher as it plays each recorded seat of this battle: itself, or a searching
        teacher bound to the battle's env against the seat's opponent (the other seat's player:
        the planned scripted opponent, ``snapshot_opponent`` (the frozen seat's player), or the
        teacher itself in a mirror)."""
        if not hasattr(teacher, "bind"):
            return {s: teacher for s in seats}
        from services.evaluator.players import ScriptedPlayer

        if snapshot_opponent is not None:
            other = snapshot_opponent
        elif planned.opponent == MIRROR:
            other = teacher
        else:
            other = ScriptedPlayer(planned.opponent, self.job.noop_prob)
        return {s: teacher.bind(env, SEATS[s], other) for s in seats}

    def _seat_arrays(self, bid: int, seat: int, rec: SeatRows, outcome: int) -> dict[str, np.ndarray]:
        n = len(rec.actions)
        lengths = np.array([len(x) for x in rec.ids], np.int64)
        offsets = np.zeros(n + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        out = {
            "observations": np.stack(rec.rows).astype(np.uint8, copy=False),
            "actions": np.asarray(rec.actions, np.int64),
            "action_legal": np.asarray(rec.legal, bool),
            "legal_ids": np.concatenate(rec.ids).astype(np.int16),
            "legal_offsets": offsets,
            "returns": discounted_returns(np.asarray(rec.rewards, np.float64), self.job.gamma),
            "outcomes": np.full(n, outcome, np.int8),
            "battles": np.full(n, bid, np.int64),
            "seats": np.full(n, seat, np.int8),
            "decisions": np.arange(n, dtype=np.int32),
            "forced": lengths == 1,
        }
        if any(x is not None for x in rec.searched):
            out |= search_arrays(rec.searched)
        return out

    def write_shard(self, index: int, parts: list[dict[str, np.ndarray]], entries):
        """Shard ``index`` of the set, from its battles' arrays, written durably into the staging
        folder; its ShardEntry (file name, sha256, counts)."""
        import hashlib

        from shared.demos import ShardEntry, concat_shards
        from shared.durable import write_file

        arrays = concat_shards(parts)
        data = shard_bytes(arrays, self.job.digests)
        name = SHARD_TEMPLATE.format(index)
        write_file(Path(self.job.staging) / name, data)
        return ShardEntry(file=name, sha256=hashlib.sha256(data).hexdigest(), rows=len(arrays["actions"]),
                          choice_rows=int((~arrays["forced"]).sum()), battles=[e.battle for e in entries])


def search_arrays(searched: list) -> dict[str, np.ndarray]:
    """``shared.demos.SEARCH_ARRAYS`` of rows whose searches are ``searched`` (per row
    (candidates, means, visits, keep), or None for a row not searched)."""
    from shared.demos import no_search

    n = len(searched)
    out = no_search(n)
    rows = [x for x in searched if x is not None]
    counts = np.array([0 if x is None else len(x[0]) for x in searched], np.int64)
    np.cumsum(counts, out=out["search_offsets"][1:])
    if rows:
        out["search_actions"] = np.concatenate([x[0] for x in rows]).astype(np.int16)
        out["search_means"] = np.concatenate([x[1] for x in rows]).astype(np.float32)
        out["search_visits"] = np.concatenate([x[2] for x in rows]).astype(np.int16)
    out["search_keep"] = np.array([0.0 if x is None else x[3] for x in searched], np.float32)
    return out


def plan_battles(n: int, teachers: list[str], opponents: list[str], first: int = 0) -> list[PlannedBattle]:
    """Battles ``first`` .. ``first + n - 1``: battle b is played by teacher ``teachers[b % T]`` against
    ``opponents[(b // T) % O]``, recorded on seat ``(b // (T O)) % 2`` (blue, then red), or on
    both seats against ``MIRROR``. Every (teacher, opponent) pair gets its share, on both seats."""
    t, o = len(teachers), len(opponents)
    out = []
    for b in range(first, first + n):
        opp = opponents[(b // t) % o]
        seat = -1 if opp == MIRROR else (b // (t * o)) % 2
        out.append(PlannedBattle(battle=b, teacher=teachers[b % t], opponent=opp, seat=seat))
    return out
