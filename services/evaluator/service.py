"""The evaluator worker: asks the ladder for evaluation jobs, plays them, reports the records.

Loop (docs/protocol.md, "Evaluation jobs"):

1. ``EvalJobRequest`` to the ladder -> ``EvalJob`` (play it) or ``NoJob`` (wait
   ``retry_after_s``, then ask again). A ladder that does not answer within
   ``services.request_timeout_s`` is asked again after ``evaluation.no_job_retry_s``.
2. The job's snapshots come from the checkpoint service (``LoadSnapshot``), verified there
   against their content id, and are kept in a small LRU cache (``evaluation.snapshot_cache``).
3. ``services.evaluator.games.play_job`` plays every game on the evaluation env; the job's first
   ``record_games`` games with a RoyaleGym ``ReplayRecorder`` (the rest with none).
4. ``EvalReport`` with the records (and the recorded traces) -> ``Ack`` once the ladder has fsynced them to the result
   log. A report that gets no Ack is sent again (a job is idempotent: the same job id gives the
   same records, and the ladder writes a job's records once).

Nothing waits forever; SIGTERM/SIGINT stop it between two games, and end any wait for the
ladder or the checkpoint service within ``transport.STOP_POLL_S`` (a job cut short is not
reported and the ladder hands it out again after its deadline). Exports
``royalefleet_evaluator_games_played_total`` and friends on /metrics.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import OrderedDict

import msgspec
from prometheus_client import CollectorRegistry, Counter, Gauge

from shared import transport
from shared.config import RunConfig
from shared.envs import build_env
from shared.writer_token import Stamped, ladder_token
from shared.evaluation import check_player, eval_env_config, eval_seed_set, split_greedy
from shared.messages import (
    Ack, Decoder, Error, EvalJob, EvalJobRequest, EvalReport, FromCheckpoint, FromLadder, GameTrace, LoadSnapshot,
    NoJob, NotFound, SnapshotLoaded, snapshot_of,
)

from services.evaluator.games import GameError, play_job
from services.evaluator.players import GreedyPlayer, ScriptedPlayer, SnapshotRefused, load_snapshot_player, run_facts
from services.evaluator.searched import SearchedPlayer, SearchRefused
from shared.search.spec import split_search

REPORT_ATTEMPTS = 3


class Stopped(Exception):
    """The evaluator was asked to stop in the middle of a job."""


class JobFailed(Exception):
    """A job that cannot be played here. ``reason`` is the metric label (``snapshot``: missing
    or refused; ``game``: a game that could not end; ``run``: a job of another run)."""

    def __init__(self, reason: str, text: str):
        self.reason = reason
        super().__init__(text)


class EvaluatorMetrics:
    """The evaluator's Prometheus metrics, in their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        p, r = "royalefleet_evaluator_", self.registry
        self.games_played = Counter(p + "games_played", "Evaluation games played to the end", registry=r)
        self.jobs_reported = Counter(p + "jobs_reported", "Evaluation jobs reported and acknowledged", registry=r)
        self.jobs_failed = Counter(p + "jobs_failed", "Evaluation jobs given up (reason in the log)", ["reason"],
                                   registry=r)
        for reason in ("snapshot", "game", "report", "run"):
            self.jobs_failed.labels(reason)
        self.snapshots_loaded = Counter(p + "snapshots_loaded", "Snapshots fetched from the checkpoint service",
                                        registry=r)
        self.busy = Gauge(p + "busy", "1 while a job is being played", registry=r)
        # a searching player's cost (docs/search.md): decisions searched, candidates simulated,
        # engine decisions stepped in simulations and wall seconds spent, summed over jobs
        self.search_decisions = Counter(p + "search_decisions", "Choice decisions a searching player searched",
                                        registry=r)
        self.search_simulations = Counter(p + "search_simulations", "Candidates played out by searches", registry=r)
        self.search_sim_steps = Counter(p + "search_sim_steps", "Engine decisions stepped inside searches", registry=r)
        self.search_seconds = Counter(p + "search_seconds", "Wall seconds spent searching", registry=r)

    def count_search(self, before: dict, players) -> None:
        """Add what each searching player of ``players`` spent since ``before`` (``search_totals``)."""
        after = search_totals(players)
        for pid, now in after.items():
            was = before.get(pid, (0, 0, 0, 0.0))
            self.search_decisions.inc(now[0] - was[0])
            self.search_simulations.inc(now[1] - was[1])
            self.search_sim_steps.inc(now[2] - was[2])
            self.search_seconds.inc(max(0.0, now[3] - was[3]))


def search_totals(players) -> dict:
    """player id -> (decisions, simulations, sim steps, seconds) of every searching player."""
    out = {}
    for pid, p in dict(players).items():
        st = getattr(p, "stats", None)
        if st is not None:
            out[pid] = (st.decisions, st.simulations, st.sim_steps, st.seconds)
    return out


class Evaluator:
    """One evaluator worker for the run ``cfg`` describes (env, master seed, network)."""

    def __init__(self, cfg: RunConfig, *, ladder: str, checkpoint: str, metrics: EvaluatorMetrics | None = None,
                 say=print, worker: str | None = None, viser: str = ""):
        """``viser``: RoyaleViser's stream address HOST:PORT to stream the games to ("": off,
        ``stream_to_viser``)."""
        self.cfg, self.say, self.viser = cfg, say, viser
        self.metrics = metrics or EvaluatorMetrics()
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}"
        max_bytes = cfg.services.max_message_mb << 20
        timeout = cfg.services.request_timeout_s
        curve = transport.curve_client_keys()
        self.stop = threading.Event()
        # Every request waits on ``stop`` too: SIGTERM ends a wait on a dead ladder at once.
        # Its job requests and reports carry the evaluator's ladder token (shared/writer_token.py).
        self.ladder = Stamped(transport.Client(ladder, Decoder(FromLadder), name="ladder", max_bytes=max_bytes,
                                               timeout_s=timeout, curve=curve, stop=self.stop),
                              ladder_token("evaluator"))
        self.ckpt = transport.Client(checkpoint, Decoder(FromCheckpoint), name="checkpoint service",
                                     max_bytes=max_bytes, timeout_s=timeout, curve=curve, stop=self.stop)
        self.seed_set = eval_seed_set(cfg.master_seed, cfg.ladder.pool.eval_seed_count)
        self._env = None
        self._facts = None
        self._cache: OrderedDict[tuple[str, str], object] = OrderedDict()
        self.replays: list[GameTrace] = []
        """The traces of the job just played that it asked to record (``EvalJob.record_games``)."""

    # ------------------------------------------------------------------ players

    def player(self, run_name: str, player_id: str):
        """A scripted anchor, or a snapshot fetched from the checkpoint service (cached).
        Raises JobFailed naming the player and why."""
        problem = check_player(player_id)
        if problem:
            raise JobFailed("snapshot", problem)
        key = (run_name, player_id)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        base_id, greedy = split_greedy(player_id)
        if greedy:
            try:
                return self._cached(key, GreedyPlayer(player_id, self.player(run_name, base_id)))
            except ValueError as exc:
                raise JobFailed("snapshot", str(exc)) from None
        base_id, search = split_search(player_id)
        if search is not None:
            try:
                searched = SearchedPlayer(player_id, self.player(run_name, base_id), search, eval_env_config(self.cfg.env))
            except SearchRefused as exc:
                raise JobFailed("snapshot", str(exc)) from None
            return self._cached(key, searched)
        if snapshot_of(player_id) is None:
            return ScriptedPlayer(player_id, self.cfg.ladder.random_legal_noop_prob)
        sid = snapshot_of(player_id)
        try:
            reply, arrays = self.ckpt.request(LoadSnapshot(request_id=self.ckpt.next_id(), run_name=run_name,
                                                           snapshot_id=sid))
        except transport.ServiceTimeout as exc:
            raise JobFailed("snapshot", f"snapshot {sid}: {exc}") from None
        if isinstance(reply, NotFound):
            raise JobFailed("snapshot", f"snapshot {sid}: {reply.reason}")
        if not isinstance(reply, SnapshotLoaded):
            raise JobFailed("snapshot", f"snapshot {sid}: the checkpoint service answered {getattr(reply, 'reason', reply)}")
        if self._facts is None:
            self.say("evaluator: deciding the run's codec table (preflight, a few seconds)")
            self._facts = run_facts(self.cfg)
        try:
            loaded = load_snapshot_player(player_id, arrays["actor"].tobytes(), reply.spec, self.cfg, self._facts)
        except (SnapshotRefused, ValueError) as exc:
            raise JobFailed("snapshot", str(exc)) from None
        self.metrics.snapshots_loaded.inc()
        return self._cached(key, loaded)

    def _cached(self, key: tuple[str, str], player):
        """``player`` kept under ``key``, the least recently used dropped past
        ``evaluation.snapshot_cache`` (a searching player holds its own simulation env)."""
        self._cache[key] = player
        while len(self._cache) > self.cfg.evaluation.snapshot_cache:
            self._cache.popitem(last=False)
        return player

    # ------------------------------------------------------------------ jobs

    def env(self):
        """The evaluation env every game is played on, built at the first call (and then handed
        its RoyaleViser publisher when the evaluator streams: ``stream_to_viser``)."""
        if self._env is None:
            self._env = build_env(eval_env_config(self.cfg.env))
            if self.viser:
                stream_to_viser(self._env, self.viser, self.cfg.run_name, self.say)
        return self._env

    def play(self, job: EvalJob):
        """The job's records. Raises JobFailed, or Stopped when asked to stop between games."""
        if job.run_name != self.cfg.run_name:
            raise JobFailed("run", f"job {job.job_id} is for run {job.run_name!r}, this evaluator was started with the "
                            f"config of run {self.cfg.run_name!r}; start one with that run's config")
        players = {p: self.player(job.run_name, p) for p in (job.a, job.b)}
        self.env()

        def on_game(done: int, total: int) -> None:
            self.metrics.games_played.inc()
            if self.stop.is_set() and done < total:
                raise Stopped()

        traces: list = []
        searched = search_totals(players)
        try:
            records = play_job(self._env, players, job=job.job_id, a=job.a, b=job.b, seeds=job.seeds,
                               seed_set=self.seed_set, master_seed=self.cfg.master_seed,
                               decision_ms=self.cfg.env.decision_ms, on_game=on_game,
                               record_games=job.record_games, traces=traces,
                               frame_every_tick=self.cfg.evaluation.replay_every_tick)
        except (GameError, ValueError) as exc:
            raise JobFailed("game", str(exc)) from None
        finally:
            self.metrics.count_search(searched, players)
        self.replays = [GameTrace(seed=s, side=side, trace=msgspec.msgpack.encode(t)) for s, side, t in traces]
        return records

    def report(self, job: EvalJob, records) -> bool:
        replays = self.replays
        for attempt in range(1, REPORT_ATTEMPTS + 1):
            body = EvalReport(request_id=self.ladder.next_id(), job_id=job.job_id, run_name=job.run_name,
                              worker=self.worker, records=records, replays=replays)
            try:
                reply, _ = self.ladder.request(body)
            except transport.ServiceTimeout as exc:
                self.say(f"evaluator: report of job {job.job_id} not acknowledged ({exc}); attempt {attempt}")
                continue
            if isinstance(reply, Ack):
                return True
            self.say(f"evaluator: the ladder refused the report of job {job.job_id}: {getattr(reply, 'reason', reply)}")
            return False
        return False

    def serve_one(self) -> float:
        """Ask for one job and play it (the evaluator is a client: its loop is ``run``, not
        ``shared.serve_loop``). Returns how long to wait before asking again."""
        retry = self.cfg.evaluation.no_job_retry_s
        try:
            reply, _ = self.ladder.request(EvalJobRequest(request_id=self.ladder.next_id(), worker=self.worker))
        except transport.ServiceTimeout as exc:
            self.say(f"evaluator: {exc}; asking again in {retry:.0f} s")
            return retry
        if isinstance(reply, NoJob):
            return max(0.0, reply.retry_after_s)
        if isinstance(reply, Error):
            self.say(f"evaluator: the ladder refused the job request: {reply.reason}")
            return retry
        if not isinstance(reply, EvalJob):
            self.say(f"evaluator: unexpected answer {type(reply).__name__} to a job request")
            return retry
        t0 = time.monotonic()
        self.metrics.busy.set(1)
        try:
            records = self.play(reply)
        except JobFailed as exc:
            self.metrics.jobs_failed.labels(exc.reason).inc()
            self.say(f"evaluator: job {reply.job_id} ({reply.a} vs {reply.b}) not played: {exc}")
            return retry
        finally:
            self.metrics.busy.set(0)
        if self.report(reply, records):
            self.metrics.jobs_reported.inc()
            self.say(f"evaluator: job {reply.job_id} {reply.a} vs {reply.b}, {len(records) // 2} games "
                     f"in {time.monotonic() - t0:.1f} s, reported")
        else:
            self.metrics.jobs_failed.labels("report").inc()
        return 0.0

    def request_stop(self, *_) -> None:
        """SIGTERM/SIGINT: stop after the game being played (its job is handed out again)."""
        self.stop.set()

    def run(self) -> int:
        """Serve until ``stop`` is set. Returns the exit code (0)."""
        self.say(f"evaluator {self.worker}: asking {self.ladder.address} for evaluation jobs")
        while not self.stop.is_set():
            try:
                wait = self.serve_one()
            except (Stopped, transport.RequestStopped):
                break
            if wait:
                self.stop.wait(wait)
        self.say(f"evaluator {self.worker}: stopped")
        return 0

    def close(self) -> None:
        self.ladder.close()
        self.ckpt.close()
        if self._env is not None and getattr(self._env, "viser", None) is not None:
            self._env.viser.close()  # the RoyaleViser port, free for the next evaluator


def stream_to_viser(env, address: str, run_name: str, say) -> bool:
    """Hand ``env`` a RoyaleGym ``ViserPublisher`` bound at ``address`` (HOST:PORT): every game
    played on it is then streamed to a RoyaleViser viewer (``python -m royaleviser --stream
    HOST:PORT``), a frame per engine tick while one says hello, nothing otherwise; the games are
    not paced and play exactly as unwatched (RoyaleGym steps a watched decision tick by tick,
    the same battle: tests/services/evaluator/test_viser.py). An address that cannot be bound
    (another evaluator holds it: one streams per port) is said and the evaluator plays on
    without it. Returns whether it streams."""
    from royalegym.viser import ViserPublisher

    from shared.viser import parse_address

    try:
        host, port = parse_address(address)
        env.viser = ViserPublisher(host, port, run=run_name)
    except (OSError, ValueError) as exc:
        say(f"evaluator: --viser {address}: {exc}; playing without streaming")
        return False
    say(f"evaluator: streaming its games to RoyaleViser at {host}:{env.viser.address[1]} (run {run_name!r}) while "
        f"a viewer watches: python -m royaleviser --stream {host}:{env.viser.address[1]}")
    return True
