"""The rollout's Prometheus metrics (prometheus-client, served on ``/metrics``).

Counters only: a counter that resets when a container restarts is read with rate() or
increase() in Prometheus, never by differencing raw values.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, start_http_server

from shared.messages import PROTOCOL_REFUSALS

PREFIX = "royalefleet_rollout_"


class RolloutMetrics:
    def __init__(self, port: int | None, host: str = "127.0.0.1"):
        self.registry = r = CollectorRegistry()
        self.rounds = Counter(PREFIX + "rounds", "Rounds sent to the learner", registry=r)
        self.decisions = Counter(PREFIX + "decisions", "Battle decisions stepped (env steps)", registry=r)
        self.rows = Counter(PREFIX + "rows", "Packed observation rows sent", registry=r)
        self.episodes = Counter(PREFIX + "episodes", "Seat-episodes finished", registry=r)
        self.env_seconds = Counter(PREFIX + "env_seconds", "Seconds spent stepping battles", registry=r)
        self.wire_bytes = Counter(PREFIX + "wire_bytes", "Array bytes sent in rounds (compressed under wire codec 2)", registry=r)
        self.wire_encode_seconds = Counter(PREFIX + "wire_encode_seconds", "CPU seconds spent compressing rows (wire codec 2)", registry=r)
        self.messages_sent = Counter(PREFIX + "messages_sent", "Messages queued to the learner", registry=r)
        self.send_failures = Counter(PREFIX + "send_failures", "Messages that could not be queued", registry=r)
        self.refused = Counter(PREFIX + "messages_refused", "Messages from the learner refused",
                               ["reason"], registry=r)
        for reason in PROTOCOL_REFUSALS:
            self.refused.labels(reason)
        self.codec_clipped = Counter(PREFIX + "obs_codec_clipped", "Observation values clipped to fit the codec", registry=r)
        self.codec_rounded = Counter(PREFIX + "obs_codec_rounded", "Observation values rounded to fit the codec", registry=r)
        self.illegal_actions = Counter(PREFIX + "illegal_actions", "Actions sent by the learner (learner and frozen seats) the mask did not allow", registry=r)
        if port:
            start_http_server(port, addr=host, registry=r)
