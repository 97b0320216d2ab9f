"""Replaying a TRAINING episode of the result log exactly (``royalefleet replay``).

A training episode (roles mirror, pool, scripted) is re-simulated from its battle and ordinal
(engine seed ``env/battle/{b}/ordinal/{k}``, scripted stream ``scripted/battle/{b}/ordinal/{k}``,
as services/rollout/battles.py begins an episode), with the players its assignment seated:

* a learner seat plays with the actor of each iteration its decisions were taken in: the
  iteration's weights are those the checkpoint of the iteration before holds (the learner
  collects iteration i with the weights its update of i - 1 left, then checkpoints them as
  i - 1; iteration 1 plays the initial weights, rebuilt from stream ``torch/init``). The
  record's ``DecisionSpan.actor_digest`` must equal the sha256 of that checkpoint's
  ``actor/model.safetensors``: other weights are never stood in;
* a frozen pool seat plays its snapshot from the run's snapshot store, upcast to float32 as
  services/learner/frozen.py does;
* a scripted seat is the rollout's scripted player on its stream.

Each inferred decision is forwarded in a batch of the recorded size with the row at its
recorded index (the other rows are copies: a row's logits depend on the batch's size and its
place, not on the other rows; docs/watching.md), the action drawn on the same uniform of the
same named stream (``act/iteration/{i}/cycle/{t}`` or ``act/frozen/...``, element ``slot``).
Every decision's action is compared with the record's; the first that differs is reported.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from shared.algorithms import algorithm
from shared.run_dir import RunDir

COMPARED = ("outcome", "episode_steps", "episode_ticks", "own_crowns", "enemy_crowns", "cards_played")
SEATS = ("blue", "red")


class NotReplayable(Exception):
    """The episode cannot be replayed exactly; the text says which players/iterations and why."""


@dataclass
class Seat:
    name: str
    player: str
    record: object | None


def siblings(lines, rec) -> dict[str, object]:
    """seat -> the record of each seat of the same episode (same battle, ordinal, iteration, role)."""
    out = {}
    for line in lines:
        r = line.record
        if (r.battle, r.ordinal, r.iteration, r.role) == (rec.battle, rec.ordinal, rec.iteration, rec.role):
            out[r.seat] = r
    return out


def _purged_iterations(root: Path) -> set[int]:
    """Iterations whose metric rows a resume moved out (their weights are not kept)."""
    path = RunDir(root).purged
    out: set[int] = set()
    if not path.exists():
        return out
    for raw in path.read_bytes().splitlines():
        try:
            row = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            continue
        if isinstance(row, dict):
            it = row.get("run/iteration", row.get("iteration"))
            if isinstance(it, int):
                out.add(it)
    return out


class Weights:
    """The learner's actor of each iteration, found in the run's checkpoints by digest."""

    def __init__(self, cfg, root: Path, pf):
        from services.checkpoint.store import CheckpointStore

        self.cfg, self.root, self.pf = cfg, root, pf
        self.store = CheckpointStore(RunDir(root).checkpoints)
        try:
            self.have = {e.iteration for e in self.store.list_entries() if e.ok}
        except (OSError, ValueError):
            self.have = set()
        self.purged = _purged_iterations(root)
        self._cache: dict[int, tuple[str, bytes | None, object]] = {}

    def _source(self, iteration: int) -> tuple[str, bytes | None, object]:
        """(sha256[:16] of the actor file, the file's bytes, the checkpoint's identity or None)
        that played ``iteration``, or raises NotReplayable."""
        if iteration in self._cache:
            return self._cache[iteration]
        prev = iteration - 1
        if prev == 0:
            from shared.nn.model import ActorCritic
            from shared.nn.statefiles import module_to_bytes
            from shared.seeding import stream

            seed = int(stream(self.cfg.master_seed, "torch/init").integers(2**62))
            data = module_to_bytes(ActorCritic(self.pf.spec, self.cfg.net, seed=seed).actor)
            got = (hashlib.sha256(data).hexdigest()[:16], data, None)
        elif prev in self.have:
            from services.learner.checkpointing import CheckpointMeta

            manifest, files = self.store.read(prev)
            data = files["actor/model.safetensors"]
            meta = msgspec.json.decode(bytes(manifest.meta), type=CheckpointMeta)
            got = (hashlib.sha256(data).hexdigest()[:16], data, meta.identity)
        else:
            have = ", ".join(map(str, sorted(self.have))) or "none"
            raise NotReplayable(f"no checkpoint of iteration {prev} exists (checkpoints: {have}; "
                                f"checkpoint.every_iterations = {self.cfg.checkpoint.every_iterations}, keep = "
                                f"{self.cfg.checkpoint.keep})")
        self._cache[iteration] = got
        return got

    def check(self, iteration: int, digest: str) -> None:
        """Raises NotReplayable when the weights that played ``iteration`` (``digest``) are not
        the ones the run folder holds for it."""
        found, _, _ = self._source(iteration)
        if found != digest:
            why = (f"iteration {iteration} was rolled back by a resume (its metric row is in metrics.purged.jsonl) "
                   "and played again: the weights that played this record no longer exist anywhere"
                   if iteration in self.purged else "the weights that played this record are not kept")
            where = "the initial weights" if iteration == 1 else f"checkpoint {iteration - 1}"
            raise NotReplayable(f"{where} holds actor {found}, the record was played by actor {digest}: {why}")

    def policy(self, iteration: int, device):
        from shared.nn.model import ActorCritic
        from shared.nn.policy import Policy
        from shared.nn.statefiles import bytes_to_module

        _, data, _ = self._source(iteration)
        model = ActorCritic(self.pf.spec, self.cfg.net, seed=0).to(device)
        bytes_to_module(model.actor, data)
        return Policy(model, self.pf.codec, device)

    def identity(self):
        for it in sorted(self._cache):
            ident = self._cache[it][2]
            if ident is not None:
                return ident
        return None


def _seat_players(rec) -> dict[str, str]:
    other = "red" if rec.seat == "blue" else "blue"
    return {rec.seat: rec.player, other: rec.opponent}


def plan(cfg, lines, rec, root: Path, pf) -> tuple[dict[str, Seat], Weights]:
    """Check that every player of the episode can be reproduced; raises NotReplayable naming
    each one that cannot (the seat, the player, the iterations and why)."""
    from shared.messages import snapshot_of

    recs = siblings(lines, rec)
    players = _seat_players(rec)
    seats = {s: Seat(s, players[s], recs.get(s)) for s in SEATS}
    weights = Weights(cfg, root, pf)
    problems = []
    for s in SEATS:
        seat = seats[s]
        inferred = seat.player == "learner" or snapshot_of(seat.player) is not None
        if not inferred:
            continue
        if seat.record is None or seat.record.provenance is None:
            why = ("its record is not in the result log" if seat.record is None else
                   "its record carries no provenance (written by a learner that did not stamp it, or one that did not "
                   "see every decision of the episode)")
            problems.append(f"{s} ({seat.player}): {why}: where its decisions were taken is unknown")
            continue
        if seat.player == "learner" and algorithm(cfg.learner.algorithm).searches:
            problems.append(f"{s} (learner): its choice decisions played the rollouts' search (learner.algorithm "
                            f"{cfg.learner.algorithm}), which replay does not run again: it would re-sample the actor "
                            "instead")
            continue
        if seat.player == "learner":
            bad = []
            for span in seat.record.provenance.spans:
                try:
                    weights.check(span.iteration, span.actor_digest)
                except NotReplayable as exc:
                    bad.append(f"iteration {span.iteration} ({span.decisions} decisions): {exc}")
            if bad:
                problems.append(f"{s} (learner): the learner's weights of " + "; ".join(bad))
    if problems:
        spans = next((r.provenance.spans for r in recs.values() if r.provenance is not None), [])
        spanned = ", ".join(str(sp.iteration) for sp in spans) or "unknown"
        raise NotReplayable(f"cannot reproduce {'; '.join(problems)}. The episode spanned iteration(s) {spanned}; "
                            "replay does not stand other weights in")
    return seats, weights


class SeatPlayers:
    """Each seat's action at a decision, taken as the recorded player took it (module docstring):
    a scripted seat on the episode's scripted stream, an inferred seat (learner or frozen
    snapshot) by its policy's forward in a batch of the recorded size and place, drawn on the
    recorded stream's uniform. Raises NotReplayable when a seat's snapshot cannot be read."""

    def __init__(self, cfg, pf, seats: dict[str, Seat], weights: Weights, root: Path, device, rng):
        from shared.messages import snapshot_of
        from shared.nn.frame_stack import SeatHistory

        self.cfg, self.pf, self.seats, self.weights, self.device, self.rng = cfg, pf, seats, weights, device, rng
        self.actors: dict[str, object] = {}  # snapshot id -> its frozen Policy
        self.scripted: dict[int, object] = {}  # seat index -> its scripted player (None: always the no-op)
        self.choices: dict[int, dict[int, object]] = {}  # seat index -> decision -> its logged choice
        for i, s in enumerate(SEATS):
            seat = seats[s]
            sid = snapshot_of(seat.player)
            if seat.player == "learner" or sid is not None:
                self.choices[i] = {c.decision: c for c in seat.record.provenance.choices}
            if sid is not None and sid not in self.actors:
                self.actors[sid] = self._frozen(s, seat, sid, root)
            elif seat.player != "learner":
                from shared.envs import make_scripted

                self.scripted[i] = make_scripted(seat.player, cfg.ladder.random_legal_noop_prob)
        self.learner_policies: dict[int, object] = {}  # iteration -> the learner's Policy of it, built once
        # each seat's history from the episode's start (shared/nn/frame_stack.py)
        self.stacked = pf.spec.frame_stack > 1
        self.histories = ({i: SeatHistory(pf.spec.frame_stack, pf.codec.row_bytes) for i in (0, 1)}
                          if self.stacked else {})

    def _frozen(self, s: str, seat: Seat, sid: str, root: Path):
        from services.checkpoint.snapshots import SnapshotStore
        from shared.nn.policy import Policy
        from shared.nn.snapshot import ActorOnly, actor_builder, load_frozen_actor

        try:
            actor_bytes, _ = SnapshotStore(RunDir(root).snapshots).read(sid)
        except (OSError, ValueError) as exc:
            raise NotReplayable(f"cannot reproduce {s} ({seat.player}): its snapshot cannot be read: {exc}")
        actor = load_frozen_actor(sid, actor_bytes, actor_builder(self.pf.spec, self.cfg.net), self.device)
        return Policy(ActorOnly(actor), self.pf.codec, self.device)

    def act(self, i: int, o, j: int, it: int, cycle: int, position: int, tick: int, problems: list[str]) -> int | None:
        """Seat ``i``'s action at decision ``j`` (iteration ``it``, ``cycle``, the round's ``position``)
        on observation ``o``. A difference from the record is appended to ``problems``; None: the
        record forced the no-op where the replay has a choice, and the decision's other seats are
        not played (the action is unknown)."""
        from services.learner.rectangle import POPCOUNT
        from shared.nn.frame_stack import History

        s = SEATS[i]
        if i in self.scripted:
            bot = self.scripted[i]
            return 0 if bot is None else int(bot.act(o, o["action_mask"], self.rng))
        row, _, _ = self.pf.codec.pack_many([o])
        n_legal = int(POPCOUNT[row[:, self.pf.codec.omask:]].sum())
        # the history before this row, then this row pushed: as the rollout stacks it
        history = self.histories[i].history() if self.stacked else None
        if self.stacked:
            self.histories[i].push(row[0])
        logged = self.choices[i].get(j)
        if n_legal <= 1:
            if logged is not None:
                problems.append(f"decision {j} (iteration {it}, cycle {cycle}), {s} ({self.seats[s].player}): "
                                f"logged a choice of {logged.action}, the replay has only the no-op legal")
            return 0
        if logged is None:
            problems.append(f"decision {j} (iteration {it}, cycle {cycle}), {s} ({self.seats[s].player}): "
                            f"{n_legal} actions legal in the replay, the record has the no-op forced")
            return None
        u = self._uniform(i, it, cycle, position)
        policy = self._policy(s, it)
        batch = np.repeat(row, logged.batch, axis=0)
        copies = None if history is None else History(np.repeat(history.rows, logged.batch, axis=0),
                                                      np.repeat(history.valid, logged.batch, axis=0))
        acts, _ = policy.act(batch, np.full(logged.batch, n_legal), np.full(logged.batch, u), copies)
        a = int(acts[logged.index])
        if a != logged.action:
            problems.append(f"decision {j} (iteration {it}, cycle {cycle}, tick {tick}), "
                            f"{s} ({self.seats[s].player}): logged action {logged.action}, replayed {a}")
        return a

    def _uniform(self, i: int, it: int, cycle: int, position: int) -> float:
        """The uniform seat ``i``'s action was drawn on: element ``slot`` of the cycle's named stream."""
        from shared.seeding import stream

        slot = 2 * position + i
        frozen = self.seats[SEATS[i]].player != "learner"
        name = "act/frozen/iteration/{iteration}/cycle/{cycle}" if frozen else "act/iteration/{iteration}/cycle/{cycle}"
        return stream(self.cfg.master_seed, name, iteration=it, cycle=cycle).random(slot + 1, dtype=np.float64)[slot]

    def _policy(self, s: str, it: int):
        from shared.messages import snapshot_of

        if self.seats[s].player != "learner":
            return self.actors[snapshot_of(self.seats[s].player)]
        if it not in self.learner_policies:
            self.learner_policies[it] = self.weights.policy(it, self.device)
        return self.learner_policies[it]


def _check_device(weights: Weights, seats: dict[str, Seat], device_name: str) -> None:
    """Raises NotReplayable when a learner seat's checkpoint was written on another device kind or
    torch version than this replay's: the forward would round differently."""
    import torch

    from shared.identity import describe_device

    ident = weights.identity()
    if ident is not None and any(s.player == "learner" for s in seats.values()):
        here = describe_device(device_name)
        if ident.device_kind != here or ident.torch_version != str(torch.__version__):
            raise NotReplayable(f"the learner ran on {ident.device_kind} with torch {ident.torch_version}; this replay "
                                f"runs on {here} with torch {torch.__version__}: its forward rounds differently")


def _decision_times(seats: dict[str, Seat]) -> list[tuple[int, int, int]]:
    """decision -> (iteration, cycle, position), from the first inferred seat's provenance spans."""
    spans = next(s.record.provenance.spans for s in seats.values()
                 if s.record is not None and s.record.provenance is not None)
    decision_at = []
    for sp in spans:
        decision_at += [(sp.iteration, sp.first_cycle + j, sp.position) for j in range(sp.decisions)]
    return decision_at


def _compare_records(seats: dict[str, Seat], rec, info, truncated, cards, returns) -> list[str]:
    """Each logged seat's COMPARED fields against the replayed episode's record, one line per seat that differs."""
    from shared.envs import episode_record

    problems = []
    for i, s in enumerate(SEATS):
        logged = seats[s].record
        if logged is None:
            continue
        got = episode_record(info[s], truncated=truncated[i], battle=rec.battle, ordinal=rec.ordinal, seat=s,
                             role=rec.role, player=seats[s].player, opponent=seats[SEATS[1 - i]].player,
                             cards_played=cards[i], undiscounted_return=returns[i])
        diffs = [f"{f} {getattr(logged, f)} logged, {getattr(got, f)} replayed" for f in COMPARED
                 if getattr(logged, f) != getattr(got, f)]
        if diffs:
            problems.append(f"{s} ({seats[s].player}): " + "; ".join(diffs))
    return problems


def replay(cfg, lines, rec, root: Path, recorder, device_name: str = "cpu") -> list[str]:
    """Play the episode of ``rec`` again (module docstring) with ``recorder`` attached. Returns
    the differences (empty: verified), the first diverging decision first. Raises NotReplayable."""
    import torch

    from shared.envs import build_env, seat_deal
    from shared.preflight import run_preflight
    from shared.seeding import derive_int, stream, stream_path

    pf = run_preflight(cfg.env, cfg.master_seed, frame_stack=cfg.obs.frame_stack)
    seats, weights = plan(cfg, lines, rec, root, pf)
    torch.set_num_threads(cfg.determinism.torch_threads)  # a row's rounding depends on it (measured)
    device = torch.device(device_name)
    _check_device(weights, seats, device_name)
    decision_at = _decision_times(seats)
    b, k = rec.battle, rec.ordinal
    rng = stream(cfg.master_seed, "scripted/battle/{battle}/ordinal/{ordinal}", battle=b, ordinal=k)
    players = SeatPlayers(cfg, pf, seats, weights, root, device, rng)
    seed = derive_int(cfg.master_seed, stream_path("env/battle/{battle}/ordinal/{ordinal}", battle=b, ordinal=k))
    mask_only = [SEATS[i] for i in players.scripted] if cfg.rollout.mask_only_scripted else []
    env = build_env(cfg.env)
    if cfg.env.seat_decks is not None:  # the deal the rollout made: the learner's deck where it sat
        held = [i for i, name in enumerate(SEATS) if seats[name].player == "learner"]
        env.state_mutator.inner = seat_deal(cfg.env, held[0] if len(held) == 1 else -1)
    env.recorder = recorder
    problems: list[str] = []
    try:
        obs, _ = env.reset(seed=seed, options={"mask_only": mask_only} if mask_only else None)
        returns, cards, info, truncated, j, tick = [0.0, 0.0], [0, 0], None, [False, False], 0, 0
        while True:
            if j >= len(decision_at):
                problems.append(f"decision {j}: the record's episode ended after {len(decision_at)} decisions, the "
                                "replay goes on")
                break
            it, cycle, position = decision_at[j]
            chosen = {}
            for i, s in enumerate(SEATS):
                a = players.act(i, obs[s], j, it, cycle, position, tick, problems)
                if a is None:
                    break
                chosen[s] = a
            if problems:
                break
            obs, rew, term, trunc, info = env.step(chosen)
            for i, s in enumerate(SEATS):
                returns[i] += float(rew[s])
                # a button press (env.ability_buttons) is not a card, as the rollout counts
                if chosen[s] != 0 and int(info[s].get("deploy_status", -1)) == 0 and chosen[s] < pf.spec.n_grid_actions:
                    cards[i] += 1
            j += 1
            tick = int(info["blue"].get("tick", tick))
            if term["blue"] or trunc["blue"]:
                truncated = [bool(trunc[s]) and not bool(term[s]) for s in SEATS]
                break
    finally:
        env.recorder = None
        env.close()
    if problems:
        return problems
    if j != len(decision_at):
        return [f"decision {j}: the replay ended after {j} decisions, the record has {len(decision_at)}"]
    return _compare_records(seats, rec, info, truncated, cards, returns)
