"""Service alerts: what Prometheus and Grafana watch that no metric row can say, because the
process that would write the row is gone or stuck. The alarms (``shared/alarms.py``) are
evaluated by the learner on its own rows; these are evaluated only by the monitoring
stack, from scrapes. ``python -m royalefleet.grafana`` turns this table into rules of both
(a ``royalefleet-services`` group beside the alarms), their promtool unit tests and a section
of docs/alarms.md.
"""

from __future__ import annotations

from dataclasses import dataclass

DOWN_SECONDS = 120
"""A core service that misses scrapes this long is down (8 scrapes at the 15 s interval: a
restart by Compose takes seconds, a resume well under a minute)."""

STALL_SECONDS = 1200
"""No metric row for this long while the learner answers scrapes: training stopped. A quiet `cpu`
profile iteration takes 36.5 s (docs/throughput.md), a searched one (AlphaZero, expert
iteration) several times that; a run whose iterations take longer than ~10 minutes should raise
this and regenerate."""

PROGRESS_METRIC = "royalefleet_learner_progress_timestamp_seconds"
"""Unix time of the learner process's last metric row, or of its start before its first
(``services.learner.metrics.LearnerMetrics``)."""

EXPECTED_ROLLOUTS_METRIC = "royalefleet_learner_rollouts_expected"
"""The rollouts the learner was started to expect (``--min-rollouts``: ``FLEET_ROLLOUTS``
under Compose, ``local.rollouts`` under ``royalefleet up``)."""

FLEET_SHORT_SECONDS = 300
"""Fewer rollouts answer scrapes than the learner expects for this long: the fleet is below its
size. Compose restarts a rollout in seconds and Prometheus finds a new one by DNS within its
15 s refresh; a replica that is gone for good leaves DNS and its ``up`` series simply ends, so
only a count against the expected size sees it (the learner trains on with fewer battles and
no other rule fires)."""

ROLLOUT_HOSTS_JOB = "rollout-hosts"
"""The scrape job of rollouts on other hosts (``prometheus/targets/*.json``, written by
``royalefleet keys --metrics``; royalefleet/grafana/prometheus.py)."""

HOST_DOWN_SECONDS = 300
"""A rollout on another host that misses scrapes this long is down: its host, its link or its
Compose stack (a restart by Compose takes seconds)."""


@dataclass(frozen=True)
class ServiceAlert:
    name: str
    expr: str
    """PromQL; a series is returned only while the condition holds."""
    for_seconds: int
    summary: str
    """One line; Prometheus templating (``{{ $labels.job }}``, ``{{ $labels.instance }}``)."""
    meaning: str
    what_to_do: str
    severity: str = "critical"


SERVICE_ALERTS: tuple[ServiceAlert, ...] = (
    ServiceAlert(
        name="service_down",
        expr='up{job=~"learner|ladder|checkpoint"} == 0',
        for_seconds=DOWN_SECONDS,
        summary="{{ $labels.job }} on {{ $labels.instance }} has answered no scrape for 2 minutes",
        meaning="a core service (learner, ladder or checkpoint) is not running or not reachable; without any "
                "one of them training stops",
        what_to_do="under Compose, `docker compose ps` and `docker compose logs <service>`; a learner that exited 3 "
                   "was halted (runs/<run>/halted.json says why, docs/compose.md \"Resuming across an identity "
                   "drift, after a halt, and over corrupt checkpoints\"); otherwise `docker compose up -d <service>` resumes from the newest "
                   "checkpoint. Under `make run` the launcher restarts a dead service itself and gives up (stops the "
                   "stack, exit 1) only when one dies quickly five times in a row; runs/<run>/logs/<service>.log "
                   "says why; start it again to resume",
    ),
    ServiceAlert(
        name="training_stalled",
        expr=f"time() - {PROGRESS_METRIC} > {STALL_SECONDS}",
        for_seconds=60,
        summary="the learner on {{ $labels.instance }} has written no metric row for "
                f"{STALL_SECONDS // 60} minutes while it runs",
        meaning="the learner is up but no iteration has ended: usually no rollout is connected (the learner "
                "waits for one), or every round times out",
        what_to_do="look at the learner's last lines (`waiting for N more rollout(s)`, lost rollouts) and the "
                   "Fleet dashboard's rollout targets; start or scale rollouts (`docker compose up -d --scale "
                   "rollout=N`; under `make run` the launcher restarts a dead rollout itself, so read "
                   "runs/<run>/logs/rollout-<k>.log), or check a remote rollout host's link to the learner",
    ),
    ServiceAlert(
        name="fleet_below_size",
        expr=f'(count(up{{job="rollout"}} == 1) or vector(0)) < max({EXPECTED_ROLLOUTS_METRIC})',
        for_seconds=FLEET_SHORT_SECONDS,
        summary="only {{ $value }} rollout(s) have answered scrapes for 5 minutes, fewer than the learner expects",
        meaning="rollout replicas are gone (crashed out of their restarts, a host lost, scaled down) and the "
                "learner trains on with fewer battles an iteration: its rectangle shrinks, collection per "
                "iteration takes longer, and nothing else fires until it stalls",
        what_to_do="`docker compose ps rollout` and `docker compose logs rollout`; bring the fleet back with "
                   "`docker compose up -d --scale rollout=N` (N = FLEET_ROLLOUTS, which the learner exports as "
                   f"{EXPECTED_ROLLOUTS_METRIC}). This counts the learner host's own rollouts; rollouts on other "
                   "hosts have rollout_host_down. A fleet meant to be smaller: set FLEET_ROLLOUTS to its size and "
                   "recreate the learner",
    ),
    ServiceAlert(
        name="rollout_host_down",
        expr=f'up{{job="{ROLLOUT_HOSTS_JOB}"}} == 0',
        for_seconds=HOST_DOWN_SECONDS,
        summary="a rollout of host {{ $labels.host }} on {{ $labels.instance }} has answered no scrape for 5 minutes",
        meaning="a rollout on another host (compose.rollout.yaml, scraped through prometheus/targets/) is gone: "
                "the host, its link or its stack is down, and the learner trains on with fewer battles",
        what_to_do="on that host, `docker compose -f compose.rollout.yaml ps` and `... logs rollout` (a rollout "
                   "the learner refused exits 2 and says why: a key not admitted, battles that differ from the "
                   "run's); check the host can reach the learner's port and this Prometheus its metrics ports "
                   "(FLEET_METRICS_PUBLISH there). A host taken out on purpose: delete its file in "
                   "prometheus/targets/",
    ),
)
