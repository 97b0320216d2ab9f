"""The ladder service: answers the learner's PlanRequest and ReportEpisodes over a ROUTER.

* PlanRequest -> PlanReply: ``shared.matchmaking.plan_assignments`` for the request's
  battles, with the role counts of an iteration of ``n_battles`` battles.
* ReportEpisodes -> Ack(count) once the records are fsynced to that run's result log; a report
  id the log holds already (a resend after a lost Ack) adds only what the log lacks (count 0).
* MeasureStrength -> Ack(jobs planned): a strength snapshot's games against the scripted
  anchors (services/ladder/strength.py), handed to evaluators when no gate job is waiting.
* Each champion of the chain (generation 0, then every promotion) is measured unsearched and
  searched when ``evaluation.strength.generations`` is active (services/ladder/generation_strength.py):
  its jobs alternate with the gate's and come before the standing measurement's.
* AdmitCandidate -> Admitted(status): a pool candidate filed in ``<run>/ladder/pool.json``
  (services/ladder/run_pool.py); LadderStatusRequest -> LadderStatus for the learner's row.
* Pool-role assignments draw from the resident set (PFSP, redrawn when the pool changes);
  scripted while the pool is empty.
* Writes (reports, admissions, strength snapshots, evaluation jobs and results) carry their
  role's token (``shared.writer_token``): one without it is refused (``unauthorized``) before
  anything is filed, so a rollout cannot report games or pick the champion.
* Anything refused -> Error(request_id, reason naming the bad value): a malformed message
  (ProtocolError, request_id -1), a bad request, a log that cannot be written. Counted in
  ``royalefleet_ladder_messages_refused_total{reason}``; never a crash.

The master seed, mix and scripted opponents come from the run config the service was started
with: the learner must be started with the same config (PlanRequest carries neither).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import zmq
from prometheus_client import CollectorRegistry, Counter, Gauge

from shared.config import RunConfig
from shared.matchmaking import (
    MAX_BATTLES, MAX_LOOKAHEAD, MAX_PLAN_ASSIGNMENTS, ROLES, is_pool_fallback, plan_assignments, role_counts,
)
from shared.messages import (
    PROTOCOL_REFUSALS, Ack, Decoder, Error, PlanReply, PlanRequest, ProtocolError, ReportEpisodes, ToLadder,
)
from shared.messages import AdmitCandidate, Admitted, LadderStatusRequest
from shared.messages import EvalJobRequest, EvalReport  # evaluator jobs (services/ladder/gate_runner.py)
from shared.messages import EvalJob, MeasureStrength, NoJob  # strength jobs (services/ladder/strength.py)
from shared.messages import MAX_REPORT_ID
from shared.log_guard import RefusalLog
from shared.serve_loop import RequestLoop
from shared.transport import bind_router, curve_server_keys, recv, send
from shared.writer_token import ladder_refusal, ladder_tokens

from services.ladder.gate_runner import GateRunner, ReportRefused
from services.ladder.pool import PoolCorrupt
from services.ladder.results import RecordRefused, ReportIds, ResultLog, check_records, check_run_name
from services.ladder.run_pool import PoolRefusal, PoolWriteError, RunPool
from services.ladder.strength import StrengthRunner
from services.ladder.generation_strength import GenerationStrengthRunner

MAX_ORDINAL = 2**31 - 1
"""Ordinals travel as int32 in a Round's ``ordinal`` array."""
POOL_SYNC_S = 1.0
"""How often the serve loop brings the pool gauges up to date (the gate runner changes the pool
and the evaluators the log between requests)."""


class BadRequest(ValueError):
    """A well-formed message asking for something the ladder will not do."""


class Metrics:
    """The ladder's Prometheus metrics, in their own registry (one per service instance, so
    tests can run several in one process)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        p, r = "royalefleet_ladder_", self.registry
        self.episodes_recorded = Counter(p + "episodes_recorded", "Episode records appended to result logs", registry=r)
        self.plans_served = Counter(p + "plans_served", "PlanRequests answered with a PlanReply", registry=r)
        self.refused = Counter(
            p + "messages_refused", "Messages answered with Error, by short reason", ["reason"], registry=r
        )
        for reason in (*PROTOCOL_REFUSALS, "bad_request", "io", "pool", "unauthorized"):
            self.refused.labels(reason)
        self.replies_unsent = Counter(
            p + "replies_unsent", "Replies that could not be queued (peer gone or its queue full)", registry=r
        )
        self.torn_lines = Gauge(
            p + "result_log_torn_lines", "Lines of the run's result log set aside at start-up (torn or invalid)",
            registry=r,
        )
        self.role_battles = Gauge(p + "role_battles", "Battles of each role in the last plan", ["role"], registry=r)
        self.pool_fallback_battles = Gauge(
            p + "pool_fallback_battles", "Pool battles of the last plan playing a scripted opponent (empty pool)",
            registry=r,
        )
        self.pool_fallback_assignments = Counter(
            p + "pool_fallback_assignments", "Pool-role assignments served with a scripted opponent (empty pool)",
            registry=r,
        )
        # The pool, the gate and the fit (services/ladder/run_pool.py sync_metrics). The only
        # snapshot id label is champion_info's, one series at a time: per-member ratings are the
        # learner's row gauges.
        self.pool_size = Gauge(p + "pool_size", "Members of the PFSP sampler (the pool)", registry=r)
        self.pool_pending = Gauge(p + "pool_pending", "Candidates waiting for a gate", registry=r)
        self.champion_info = Gauge(
            p + "champion_info", "1 for the current champion (member=snap:<id>); only the current champion's "
            "series exists", ["member"], registry=r)
        self.champion_env_steps = Gauge(
            p + "champion_env_steps", "Env steps (decisions) at which the champion's snapshot was taken; NaN without one",
            registry=r)
        self.gates_run = Counter(p + "gates_run", "Gate decisions applied to the pool (promote, admit_cycle, discard)",
                                 registry=r)
        self.gates_passed = Counter(p + "gates_passed", "Gate decisions that promoted a new champion", registry=r)
        self.consecutive_gate_failures = Gauge(
            p + "consecutive_gate_failures", "Gate decisions since the last promotion", registry=r)
        self.champion_rating = Gauge(p + "champion_rating", "The champion's fitted rating, Elo (scripted:noop = 0); NaN "
                                     "before it is fitted", registry=r)
        self.champion_rating_se = Gauge(p + "champion_rating_se", "Standard error of the champion's rating, Elo",
                                        registry=r)
        self.transitivity_residual = Gauge(
            p + "transitivity_residual", "Share of well-played pairs more than 2 SE off the fit; NaN when no pair "
            "has enough games", registry=r)
        self.eval_games_recorded = Counter(
            p + "eval_games_recorded", "Evaluation games that reached the result log", registry=r)
        # The standing strength measurement (services/ladder/strength.py): NaN until measured.
        self.strength_score = Gauge(p + "strength_score", "The newest strength snapshot's score against each "
                                    "scripted anchor (a draw counts half)", ["anchor"], registry=r)
        self.strength_score_lo = Gauge(p + "strength_score_lo", "Wilson 95 % lower bound of strength_score",
                                       ["anchor"], registry=r)
        self.strength_score_hi = Gauge(p + "strength_score_hi", "Wilson 95 % upper bound of strength_score",
                                       ["anchor"], registry=r)
        self.strength_rating = Gauge(p + "strength_rating", "The newest strength snapshot's Bradley-Terry-Davidson "
                                     "rating, Elo (scripted:noop = 0); NaN before the first measurement", registry=r)
        self.strength_rating_se = Gauge(p + "strength_rating_se", "Standard error of strength_rating, Elo", registry=r)
        self.strength_iteration = Gauge(p + "strength_iteration", "Learner iteration of the newest measured strength "
                                        "snapshot; NaN before the first", registry=r)
        self.strength_pending = Gauge(p + "strength_pending", "Strength snapshots waiting for (or in) play", registry=r)
        self.sync_strength(None, 0)
        # Each generation's strength (services/ladder/generation_strength.py): a series per
        # generation and condition once measured, none before.
        self.generation_score = Gauge(p + "generation_strength_score", "A promoted generation's score in one "
                                      "condition (unsearched/<anchor>, searched/<anchor>, searched_sim_<bot>/...; a "
                                      "draw counts half)", ["generation", "condition"], registry=r)
        self.generation_score_lo = Gauge(p + "generation_strength_score_lo", "Wilson 95 % lower bound of "
                                         "generation_strength_score", ["generation", "condition"], registry=r)
        self.generation_score_hi = Gauge(p + "generation_strength_score_hi", "Wilson 95 % upper bound of "
                                         "generation_strength_score", ["generation", "condition"], registry=r)
        self.generation_games = Gauge(p + "generation_strength_games", "Games behind generation_strength_score",
                                      ["generation", "condition"], registry=r)
        self.generations_pending = Gauge(p + "generation_strength_pending", "Generations with strength games "
                                         "still to play", registry=r)
        self.seen_gates: tuple[int, int] | None = None
        self.seen_champion: str | None = None
        self.seen_eval_games: int | None = None

    def sync_generations(self, measured, pending: int) -> None:
        """Set the generation strength gauges from ``GenerationStrength`` measurements."""
        self.generations_pending.set(pending)
        for g in measured:
            for cond, score in g.score.items():
                labels = (str(g.generation), cond)
                self.generation_score.labels(*labels).set(score)
                self.generation_score_lo.labels(*labels).set(g.score_lo[cond])
                self.generation_score_hi.labels(*labels).set(g.score_hi[cond])
                self.generation_games.labels(*labels).set(g.games[cond])

    def sync_strength(self, summary, pending: int) -> None:
        """Set the strength gauges from a ``StrengthSummary`` (None: NaN, never 0)."""
        nan = float("nan")
        self.strength_pending.set(pending)
        for gauge, value in ((self.strength_rating, summary and summary.rating),
                             (self.strength_rating_se, summary and summary.rating_se),
                             (self.strength_iteration, summary and summary.iteration)):
            gauge.set(nan if value is None else value)
        if summary is not None:
            for anchor in summary.score:
                self.strength_score.labels(anchor).set(summary.score[anchor])
                self.strength_score_lo.labels(anchor).set(summary.score_lo[anchor])
                self.strength_score_hi.labels(anchor).set(summary.score_hi[anchor])


class LadderService(RequestLoop):
    """One ladder: a bound ROUTER and the run config; result logs are per run_name of a report.

    ``handle`` maps one decoded request to its reply (no sockets involved);
    ``serve`` is the poll loop. ``address`` is the bound endpoint (``tcp://127.0.0.1:*`` picks a
    free port; read the real one here).
    """

    def __init__(self, config: RunConfig, *, bind: str, runs_dir: str | Path, metrics: Metrics | None = None,
                 ctx: zmq.Context | None = None, say: Callable[[str], None] = print,
                 tokens: dict[str, str] | None = None):
        """``tokens``: role -> the token its writes must carry (``shared.writer_token``; ``""``
        or absent: not authenticated); None: from the environment (``ladder_tokens``)."""
        self.config = config
        self.tokens = ladder_tokens() if tokens is None else dict(tokens)
        self.runs_dir = Path(runs_dir)
        self.metrics = metrics or Metrics()
        self.say = say
        self.refusal_log = RefusalLog(say)
        """Every refusal, printed rate-limited per reason and escaped (the counter has them all)."""
        self.pool = RunPool(config, self.runs_dir, say=say)  # PoolCorrupt: refuse to start, bind nothing
        self._decoder = Decoder(ToLadder, max_array_bytes=0)
        max_bytes = config.services.max_message_mb << 20
        self.sock = bind_router(bind, max_bytes=max_bytes, ctx=ctx, curve=curve_server_keys())
        self.address = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._read_existing_log()
        self.pool.sync_metrics(self.metrics)
        self._synced = time.monotonic()
        self._pool_problem: str | None = None
        self.gates = GateRunner(config, self.runs_dir, say=say)  # the gate's jobs and decisions
        self.strength = StrengthRunner(config, self.runs_dir, next_job_id=self._allocate_job_id, say=say)
        self.generations = GenerationStrengthRunner(config, self.runs_dir, next_job_id=self._allocate_job_id,
                                                    records=lambda: self.strength.log.read().records, say=say)
        self.gates.next_job_id = max(self.gates.next_job_id, self.strength.max_job_id + 1,
                                     self.generations.max_job_id + 1)  # one id space
        self.metrics.sync_strength(self.strength.summary, len(self.strength.waiting()))
        self._gate_problem: str | None = None
        self._generation_problem: str | None = None
        self._generation_turn = False
        """The next job request offers a generation job before the gate's (``_next_job``)."""
        self.sync_generations()  # a promotion a crash left unplanned is planned now

    def _allocate_job_id(self) -> int:
        job_id = self.gates.next_job_id
        self.gates.next_job_id += 1
        return job_id

    # ----------------------------------------------------------------- start-up

    def _read_existing_log(self) -> None:
        """Read the configured run's log once: say what it holds, publish its torn lines."""
        log = ResultLog.for_run(self.runs_dir, self.config.run_name)
        found = log.read()
        self.metrics.torn_lines.set(found.n_set_aside)
        self.report_ids = ReportIds(found.lines)
        """The report ids the log holds: a resent report is written once (``_report``)."""
        held = f"holds {len(found.lines)} records" if log.path.exists() else "does not exist yet (0 records)"
        self.say(f"ladder: result log {log.path} {held}")
        for number, why in found.set_aside:
            self.say(f"ladder: set aside line {number} of {log.path}: {why}")

    # ----------------------------------------------------------------- requests

    def handle(self, body) -> PlanReply | Ack | Error:
        """The reply to one decoded ToLadder message. Never raises for a request's content."""
        refusal = ladder_refusal(body, self.tokens)  # a write without its role's token changes nothing
        if refusal is not None:
            return self._refuse(body, "unauthorized", refusal)
        try:
            if isinstance(body, PlanRequest):
                return self._plan(body)
            if isinstance(body, ReportEpisodes):
                return self._report(body)
            if isinstance(body, AdmitCandidate):
                reply = Admitted(request_id=body.request_id, snapshot_id=body.snapshot_id, status=self.pool.admit(body))
                self.pool.sync_metrics(self.metrics)
                return reply
            if isinstance(body, LadderStatusRequest):
                status = self.pool.status(body)
                status.gate_score_lower_bound = self.gates.last_lower_bound
                status.strength = self.strength.summary
                status.generations = list(self.generations.measured)
                status.generations_pending = self.generations.pending()
                return status
            if isinstance(body, MeasureStrength):
                reply = self.strength.submit(body)
                self.metrics.sync_strength(self.strength.summary, len(self.strength.waiting()))
                return reply
            if isinstance(body, EvalJobRequest):
                return self._next_job(body)
            if isinstance(body, EvalReport) and self.generations.owns(body.job_id):
                reply = self.generations.report(body, self.strength.log.append)
                self.metrics.sync_generations(self.generations.measured, self.generations.pending())
                return reply
            if isinstance(body, EvalReport):
                if self.strength.owns(body.job_id):
                    reply = self.strength.report(body)
                    self.metrics.sync_strength(self.strength.summary, len(self.strength.waiting()))
                    return reply
                return self.gates.report(body)
            raise BadRequest(f"the ladder does not serve {type(body).__name__}")
        except (BadRequest, PoolRefusal, ReportRefused) as exc:
            return self._refuse(body, "bad_request", str(exc))
        except (PoolCorrupt, PoolWriteError) as exc:
            return self._refuse(body, "pool", str(exc))
        except OSError as exc:
            return self._refuse(body, "io", f"result log not written: {exc}")

    def _next_job(self, req: EvalJobRequest) -> EvalJob | NoJob:
        """A gate's job first (it decides the pool), except that a waiting generation job takes
        every other turn a gate job would have (gates back to back would starve it: a `cpu` gate
        outlasts the candidate cadence); then the standing strength measurement's."""
        if self._generation_turn:
            self._generation_turn = False
            job = self.generations.request_job(req)
            if job is not None:
                return job
        gate = self.gates.request_job(req)
        if not isinstance(gate, NoJob):
            self._generation_turn = True
            return gate
        return self.generations.request_job(req) or self.strength.request_job(req) or gate

    def _refuse(self, body, reason: str, text: str) -> Error:
        """Count, log (rate-limited) and answer one refused request."""
        self.metrics.refused.labels(reason).inc()
        self.refusal_log(reason, f"ladder: refused {type(body).__name__} {body.request_id} ({reason}): {text}")
        return Error(request_id=body.request_id, reason=text)

    def _plan(self, req: PlanRequest) -> PlanReply:
        _check_plan(req)
        ladder, (pool, weights) = self.config.ladder, self._pool_members()
        try:
            counts = role_counts(ladder.mix, req.n_battles)
            assignments = plan_assignments(
                self.config.master_seed, req.n_battles, req.battles, req.next_ordinals, req.lookahead,
                ladder.mix, ladder.scripted_opponents, pool_members=pool, pool_weights=weights,
            )
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        for role, count in zip(ROLES, counts):
            self.metrics.role_battles.labels(role).set(count)
        self.metrics.pool_fallback_battles.set(0 if pool else counts[1])
        self.metrics.pool_fallback_assignments.inc(sum(map(is_pool_fallback, assignments)))
        self.metrics.plans_served.inc()
        return PlanReply(request_id=req.request_id, assignments=assignments, role_counts=counts)

    def _pool_members(self) -> tuple[tuple[str, ...], tuple[float, ...] | None]:
        """(resident snapshot ids, their PFSP weights) for pool battles; ((), None) while the
        pool is empty (pool battles then play scripted opponents)."""
        resident = self.pool.resident()
        if not resident.ids:
            return (), None
        return tuple(resident.ids), tuple(resident.weights)

    def _report(self, req: ReportEpisodes) -> Ack:
        problem = check_run_name(req.run_name)
        if problem:
            raise BadRequest(problem)
        if req.run_name != self.config.run_name:
            # A report names its run; only the run this ladder serves has a result log here, so
            # a stray or fuzzed report creates no folder.
            raise BadRequest(f"run_name {req.run_name!r}: this ladder serves run {self.config.run_name!r}")
        try:
            check_records(req.episodes)
        except RecordRefused as exc:
            raise BadRequest(f"episodes: {exc}") from None
        if len(req.report_id) > MAX_REPORT_ID:
            raise BadRequest(f"report_id of {len(req.report_id)} characters; at most {MAX_REPORT_ID}")
        new = self.report_ids.missing(req.report_id, req.episodes)
        if len(new) < len(req.episodes):
            self.say(f"ladder: report {req.report_id} sent again (its Ack was lost): {len(req.episodes) - len(new)} "
                     f"of its {len(req.episodes)} record(s) are in the result log already and are not written twice")
        written = ResultLog.for_run(self.runs_dir, req.run_name).append(new, req.report_id)
        self.report_ids.add(req.report_id, new)
        self.metrics.episodes_recorded.inc(written)
        return Ack(request_id=req.request_id, count=written)

    # ----------------------------------------------------------------- loop

    # serve(stop, poll_ms): shared.serve_loop.RequestLoop

    def tick(self) -> None:
        """Every ``POOL_SYNC_S``: refresh the pool gauges and let the gate runner work."""
        if time.monotonic() - self._synced >= POOL_SYNC_S:
            self.sync_pool_metrics()
            self.tick_gates()
            self.sync_generations()

    def sync_generations(self) -> None:
        """Plan the champion chain's generations not planned yet (nothing when the measurement
        is off); a pool or plan file that cannot be read or written is said once, not raised."""
        if not self.generations.active:
            return
        try:
            state = self.pool.state()
            steps = {cid: c.env_steps for cid, c in state.admitted.items()}
            self.generations.sync(list(state.champions), steps.get)
            self._generation_problem = None
        except (PoolCorrupt, OSError, ValueError) as exc:
            if str(exc) != self._generation_problem:
                self._generation_problem = str(exc)
                self.say(f"ladder: generation strength not planned: {exc}")
        self.metrics.sync_generations(self.generations.measured, self.generations.pending())

    def tick_gates(self) -> None:
        """Let the gate runner plan and decide; a failure is said once, not raised."""
        try:
            self.gates.tick()
            self._gate_problem = None
        except (PoolCorrupt, OSError, ValueError) as exc:
            if str(exc) != self._gate_problem:
                self._gate_problem = str(exc)
                self.say(f"ladder: gate runner: {exc}")

    def sync_pool_metrics(self) -> None:
        """Refresh the pool gauges; a pool that cannot be read is said, not raised (requests
        touching it are refused with the reason)."""
        self._synced = time.monotonic()
        try:
            self.pool.sync_metrics(self.metrics)
            self._pool_problem = None
        except (PoolCorrupt, OSError) as exc:
            if str(exc) != self._pool_problem:  # said once per distinct problem, not every second
                self._pool_problem = str(exc)
                self.say(f"ladder: pool metrics not updated: {exc}")

    def serve_one(self) -> None:
        """Receive one message (the caller has polled) and reply to it."""
        try:
            identity, body, _ = recv(self.sock, self._decoder, router=True)
        except ProtocolError as exc:
            self.metrics.refused.labels(exc.reason).inc()
            self.refusal_log(exc.reason, f"ladder: refused a message ({exc.reason}): {exc}")
            identity = getattr(exc, "identity", None)
            if identity:
                self._reply(identity, Error(request_id=-1, reason=f"{exc.reason}: {exc}"))
            return
        self._reply(identity, self.handle(body))

    def _reply(self, identity: bytes, reply) -> None:
        if not send(self.sock, reply, identity=identity):
            self.metrics.replies_unsent.inc()

    def close(self) -> None:
        self.sock.close(0)


def _check_plan(req: PlanRequest) -> None:
    """Raise BadRequest naming the first thing wrong with a PlanRequest's shape."""
    if not 1 <= req.n_battles <= MAX_BATTLES:
        raise BadRequest(f"n_battles {req.n_battles}: must be 1..{MAX_BATTLES}")
    if not 1 <= req.lookahead <= MAX_LOOKAHEAD:
        raise BadRequest(f"lookahead {req.lookahead}: must be 1..{MAX_LOOKAHEAD}")
    if len(req.battles) != len(req.next_ordinals):
        raise BadRequest(f"{len(req.battles)} battles but {len(req.next_ordinals)} next_ordinals; one each")
    if len(req.battles) * req.lookahead > MAX_PLAN_ASSIGNMENTS:
        raise BadRequest(
            f"{len(req.battles)} battles x lookahead {req.lookahead} = {len(req.battles) * req.lookahead} "
            f"assignments; at most {MAX_PLAN_ASSIGNMENTS} per request"
        )
    if len(set(req.battles)) != len(req.battles):
        raise BadRequest(f"battles {req.battles}: a battle is listed twice")
    if len(req.battles) != req.n_battles:
        raise BadRequest(f"{len(req.battles)} battles listed for an iteration of {req.n_battles}; list every battle")
    for battle, first in zip(req.battles, req.next_ordinals):
        if battle < 0:
            raise BadRequest(f"battle {battle}: ids are >= 0")
        if first < 0:
            raise BadRequest(f"next_ordinals: battle {battle} has ordinal {first}; ordinals start at 0")
        if first + req.lookahead - 1 > MAX_ORDINAL:
            raise BadRequest(f"next_ordinals: battle {battle} ordinal {first} + lookahead passes int32")
