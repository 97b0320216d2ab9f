"""The learner's Prometheus metrics: the metric row as gauges, plus service counters.

Gauges are created on first sight of a row key, named by ``shared.metric_schema.prometheus_name``
(base units as in the schema, family keys as one gauge with a label). A key absent from a row
would leave its gauge at the previous value, which would lie: a family label absent from this
row is removed, and a plain gauge is set to NaN.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from shared.codec import WIRE_REFUSALS
from shared.messages import PROTOCOL_REFUSALS
from shared.metric_schema import SCHEMA, prometheus_name, schema_key
from shared.service_alerts import EXPECTED_ROLLOUTS_METRIC, PROGRESS_METRIC


class LearnerMetrics:
    def __init__(self, port: int | None, host: str = "127.0.0.1", expected_rollouts: int = 1):
        self.registry = r = CollectorRegistry()
        self.refused = Counter("royalefleet_learner_messages_refused", "Messages refused by the learner (hello: a Hello whose engine or sizes it cannot serve)",
                               ["reason"], registry=r)
        for reason in (*PROTOCOL_REFUSALS, "unexpected", "out_of_order", "hello", *WIRE_REFUSALS):
            self.refused.labels(reason)
        self.checkpoint_failures = Counter("royalefleet_learner_checkpoint_failures",
                                           "Checkpoints that could not be written after retries", registry=r)
        self.rollouts_forgotten = Counter(
            "royalefleet_learner_rollouts_forgotten",
            "Rollouts forgotten at a boundary because they never said ready within the join wait after Hello",
            registry=r)
        self.ladder_unanswered_plans = Counter(
            "royalefleet_learner_ladder_unanswered_plans",
            "Plan requests the ladder did not answer in time; the iteration collected with assignments drawn by "
            "the learner", registry=r)
        self.untrained_rows = Counter(
            "royalefleet_learner_untrained_rows",
            "Learner rows collected that no update will train: inferred by an overlapped collection, or in an "
            "update a stop abandoned (a stop, a halt or the run's last iteration ended the run first)", registry=r)
        self.halt_requests = Counter("royalefleet_learner_halt_requests", "Requests to the halt endpoint, by outcome",
                                     ["outcome"], registry=r)
        self.iterations = Counter("royalefleet_learner_iterations", "Iterations finished by this process", registry=r)
        # What the training_stalled alert reads (shared/service_alerts.py): it moves at every row,
        # and starts at the process's start, so a learner stuck before its first row is seen too.
        self.progress = Gauge(PROGRESS_METRIC, "Unix time of this process's last metric row, or of its start "
                              "before the first [s]", registry=r)
        self.progress.set(time.time())
        # What the fleet_below_size alert compares the scraped rollouts with (shared/service_alerts.py).
        self.rollouts_expected = Gauge(EXPECTED_ROLLOUTS_METRIC, "Rollouts this learner was started to expect "
                                       "(--min-rollouts: FLEET_ROLLOUTS under Compose)", registry=r)
        self.rollouts_expected.set(expected_rollouts)
        self._gauges: dict[str, Gauge] = {}
        self._present: set[tuple[str, tuple]] = set()
        from shared.transport import register_plaintext_gauge

        register_plaintext_gauge(r)  # royalefleet_insecure_plaintext (issue 38)
        if port:
            start_http_server(port, addr=host, registry=r)

    def _gauge(self, name: str, labels: dict, key: str) -> Gauge:
        g = self._gauges.get(name)
        if g is None:
            unit, doc = SCHEMA[schema_key(key) or key]
            g = Gauge(name, f"{doc} [{unit}]", list(labels), registry=self.registry)
            self._gauges[name] = g
        return g

    def export(self, row: dict) -> None:
        present = set()
        for key, value in row.items():
            if schema_key(key) is None or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            name, labels = prometheus_name(key)
            g = self._gauge(name, labels, key)
            (g.labels(**labels) if labels else g).set(float(value))
            present.add((name, tuple(labels.values())))
        for name, values in self._present - present:
            g = self._gauges[name]
            if values:
                try:
                    g.remove(*values)
                except KeyError:
                    pass
            else:
                # A key absent from this row is not measured: NaN, never the last value (every
                # PromQL comparison with NaN is false, so no alert holds on a stale number).
                g.set(float("nan"))
        self._present = present
        self.iterations.inc()
        self.progress.set(time.time())
