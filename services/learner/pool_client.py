"""The learner's side of the ladder and the pool: plans, the result log, pool candidates and
seed snapshots, the ladder's status keys.

Collection needs no ladder: a plan request the ladder does not answer is drawn here by the same
pure function over the last plan's pool, and while it stays silent every request uses the short
``services.ladder_status_timeout_s``, so a dead ladder costs one request timeout, not one per
iteration.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import msgspec
import numpy as np

from services.learner.episode_courier import EpisodeCourier
from services.learner.ladder_status import LadderStatusPoller
from shared import transport
from shared.config import RunConfig
from shared.matchmaking import plan_assignments, role_counts
from shared.messages import (
    Ack, AdmitCandidate, Admitted, MeasureStrength, PlanReply, PlanRequest, SaveSnapshot, SnapshotSaved, snapshot_of,
)


class PoolClient:
    def __init__(self, cfg: RunConfig, ladder: transport.Client, ckpt: transport.Client, ckpt_token: str,
                 run_dir: str, unanswered_counter, say):
        self.cfg, self.ladder, self.ckpt, self.ckpt_token, self.say = cfg, ladder, ckpt, ckpt_token, say
        self.unanswered_counter = unanswered_counter
        self.status = LadderStatusPoller(ladder, cfg.run_name, cfg.services.ladder_status_timeout_s, say)
        self.courier = EpisodeCourier(ladder, cfg.run_name, run_dir, say)  # exactly once, held if unanswered
        self.silent = False
        """The ladder left the last plan request unanswered (``request_plan``)."""
        self.unoffered: list[tuple[str, int, int]] = []
        """Candidates stored but not offered because the ladder did not answer: (snapshot id, env
        steps, iteration), oldest first; offered again after each plan the ladder answers
        (``offer_unoffered``). A candidate is offered more than once safely: the pool answers
        ``duplicate`` for one it holds."""

    def _timeout(self) -> float | None:
        return self.cfg.services.ladder_status_timeout_s if self.silent else None

    def request_plan(self, req: PlanRequest, fleet) -> PlanReply:
        """The ladder's plan, or, when it does not answer, the same pure function
        (``shared.matchmaking.plan_assignments``) drawn here over the pool the last plan named
        (uniform over those snapshots; PFSP weights live in the ladder)."""
        try:
            reply, _ = self.ladder.request(req, timeout_s=self._timeout())
        except transport.ServiceTimeout as exc:
            pool = sorted({a.opponent for a in fleet.assignments.values()
                           if a.role == "pool" and snapshot_of(a.opponent) is not None})
            if not self.silent:
                self.say(f"learner: the ladder did not answer the plan request ({exc}); collecting with assignments "
                         f"drawn here over the last plan's pool ({len(pool)} snapshot(s)) until it answers; "
                         "finished episodes are held for it, never dropped")
            self.silent = True
            self.unanswered_counter.inc()
            lad = self.cfg.ladder
            assignments = plan_assignments(self.cfg.master_seed, req.n_battles, req.battles, req.next_ordinals,
                                           req.lookahead, tuple(lad.mix), tuple(lad.scripted_opponents),
                                           pool_members=pool)
            return PlanReply(request_id=req.request_id, assignments=assignments,
                             role_counts=role_counts(tuple(lad.mix), req.n_battles))
        if not isinstance(reply, PlanReply):
            raise RuntimeError(f"the ladder refused the plan request: {getattr(reply, 'reason', reply)}")
        if self.silent:
            self.say(f"learner: the ladder answers again (iteration {req.iteration})")
            self.silent = False
        self.offer_unoffered()
        return reply

    def offer_unoffered(self) -> None:
        """Offer again, oldest first, the candidates the ladder did not answer for; stops at the
        first that goes unanswered again (it stays, with those after it)."""
        while self.unoffered:
            snapshot_id, env_steps, iteration = self.unoffered[0]
            if not self.admit_candidate(snapshot_id, env_steps=env_steps, iteration=iteration, again=True):
                return
            self.unoffered.pop(0)

    def deliver_episodes(self, episodes: list, iteration: int) -> None:
        """Episodes to the result log (services/learner/episode_courier.py)."""
        self.courier.deliver(episodes, iteration, self._timeout())

    def snapshot_actor(self, actor, *, run_id: str, identity, iteration: int, env_steps: int,
                       timesteps: int = 0, candidate: bool = True, strength: bool = False) -> None:
        """A frozen copy of ``actor`` (fp16, no critic, no optimizer) into the snapshot store:
        offered to the pool as a ``candidate`` every ``ladder.pool.candidate_every_env_steps``,
        and/or measured against the scripted anchors (``strength``) every
        ``evaluation.strength.every_iterations`` (``strength_due``, below)."""
        from shared.nn.statefiles import module_to_bytes

        blob = module_to_bytes(copy.deepcopy(actor).half())
        spec = msgspec.json.encode({
            "run_id": run_id, "iteration": iteration, "env_steps": env_steps,
            "arch_digest": identity.arch_digest, "obs_digest": identity.obs_digest,
            "codec_table_digest": identity.codec_table_digest, "dtype": "float16"})
        try:
            reply, _ = self.ckpt.request(SaveSnapshot(request_id=self.ckpt.next_id(), run_name=self.cfg.run_name,
                                                      spec=spec, token=self.ckpt_token),
                                         {"actor": np.frombuffer(blob, np.uint8)})
        except transport.ServiceTimeout as exc:
            self.say(f"learner: snapshot not written: {exc}")
            return
        if isinstance(reply, SnapshotSaved):
            if candidate:
                self.say(f"learner: pool candidate snapshot {reply.snapshot_id} at {env_steps:,} env steps")
                self.admit_candidate(reply.snapshot_id, env_steps=env_steps, iteration=iteration)
            if strength:
                request_strength(self.ladder, self.cfg.run_name, reply.snapshot_id, iteration=iteration,
                                 env_steps=env_steps, timesteps=timesteps,
                                 timeout_s=self.cfg.services.ladder_status_timeout_s, say=self.say)
        else:
            self.say(f"learner: the checkpoint service refused the snapshot: {getattr(reply, 'reason', reply)}")

    def admit_candidate(self, snapshot_id: str, *, env_steps: int, iteration: int, again: bool = False) -> bool:
        """Offer a stored snapshot to the ladder's pool (AdmitCandidate) and say what it did.
        One the ladder does not answer is kept in ``unoffered`` (``again``: it is there
        already) and offered after the next plan the ladder answers. False: unanswered."""
        try:
            reply, _ = self.ladder.request(AdmitCandidate(
                request_id=self.ladder.next_id(), run_name=self.cfg.run_name, snapshot_id=snapshot_id,
                env_steps=env_steps, iteration=iteration), timeout_s=self._timeout())
        except transport.ServiceTimeout as exc:
            if not again:
                self.unoffered.append((snapshot_id, env_steps, iteration))
                self.say(f"learner: candidate snap:{snapshot_id} not offered to the pool yet: {exc}; offered again "
                         "once the ladder answers a plan")
            return False
        if isinstance(reply, Admitted):
            what = {"admitted_free": "admitted free as the run's first snapshot: it is the champion",
                    "pending": "pending: it waits for a gate",
                    "duplicate": "already known to the pool"}.get(reply.status, reply.status)
            self.say(f"learner: pool candidate snap:{snapshot_id} {what}")
        else:
            self.say(f"learner: the ladder refused candidate snap:{snapshot_id}: {getattr(reply, 'reason', reply)}")
        return True

    def admit_seed_snapshots(self, identity, spec, net) -> None:
        """``ladder.pool.seed_snapshots`` read, checked (sha256, spec digests, weights),
        stored and admitted as seeds before the first plan (services/learner/seeds.py). Raises
        SystemExit naming every problem: the run does not start without its seeds."""
        seeds = self.cfg.ladder.pool.seed_snapshots
        if not seeds:
            return
        from services.learner.seeds import SeedRefused, admit_seeds, read_seeds
        from shared.nn.snapshot import actor_builder

        expected = {"arch_digest": identity.arch_digest, "obs_digest": identity.obs_digest,
                    "codec_table_digest": identity.codec_table_digest}
        try:
            admit_seeds(read_seeds(seeds, expected, actor_builder(spec, net)), self.cfg.run_name,
                        self.ckpt, self.ladder, self.say, token=self.ckpt_token)
        except SeedRefused as exc:
            raise SystemExit(f"learner: refusing to start: {exc}")


# ----------------------------------------------------------------------------- the standing strength measurement
# (evaluation.strength): which iterations are measured, and the one request that hands a stored
# snapshot to the ladder (services/ladder/strength.py plans and plays it; the learner never waits).


def strength_due(every_iterations: int, iteration: int) -> bool:
    """True when ``iteration`` (>= 1) is measured: a multiple of ``every_iterations`` (0: never)."""
    return every_iterations > 0 and iteration > 0 and iteration % every_iterations == 0


def request_strength(client, run_name: str, snapshot_id: str, *, iteration: int, env_steps: int, timesteps: int,
                     timeout_s: float, say: Callable[[str], None]) -> None:
    """Send MeasureStrength for a stored snapshot over the learner's ladder ``client`` with a short
    deadline; say what came of it (a timeout or refusal is said, never raised: strength is
    reported, never needed)."""
    try:
        reply, _ = client.request(MeasureStrength(request_id=client.next_id(), run_name=run_name,
                                                  snapshot_id=snapshot_id, env_steps=env_steps, iteration=iteration,
                                                  timesteps=timesteps), timeout_s=timeout_s)
    except transport.ServiceTimeout as exc:
        say(f"learner: strength snapshot snap:{snapshot_id} not handed to the ladder: {exc}")
        return
    if isinstance(reply, Ack):
        say(f"learner: strength snapshot snap:{snapshot_id} of iteration {iteration}: the ladder planned "
            f"{reply.count} evaluation jobs")
    else:
        say(f"learner: the ladder refused strength snapshot snap:{snapshot_id}: {getattr(reply, 'reason', reply)}")
