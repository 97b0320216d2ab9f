"""The rollout's Prometheus metrics (prometheus-client, served on ``/metrics``).

Counters only: a counter that resets when a container restarts is read with rate() or
increase() in Prometheus, never by differencing raw values.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

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
        self.search_seconds = Counter(PREFIX + "search_seconds", "Seconds the search spent on learner choice "
                                      "decisions (learner.algorithm alphazero)", registry=r)
        self.search_steps = Counter(PREFIX + "search_sim_steps", "Engine decisions stepped in search simulations "
                                    "(beside the battles' own decisions)", registry=r)
        self.searched_decisions = Counter(PREFIX + "searched_decisions", "Learner choice decisions searched", registry=r)
        self.mid_step_questions = Counter(PREFIX + "mid_step_questions", "Questions asked of the learner in the "
                                          "middle of a searched step (LeafQuery, SimActQuery)", registry=r)
        self.mid_step_timeouts = Counter(PREFIX + "mid_step_timeouts", "Mid-step questions the learner did not answer "
                                         "within rollout.round_timeout_s (the rollout then rejoins)", registry=r)
        self.mid_step_rejoins = Counter(PREFIX + "mid_step_rejoins", "Mid-step questions given up because the learner "
                                        "said it does not know this rollout (it restarted since; Rejoin)", registry=r)
        self.mid_step_waiting = Gauge(PREFIX + "mid_step_waiting", "1 while a searched step waits for the learner's "
                                      "answer to a mid-step question, else 0", registry=r)
        self.idle_seconds = Counter(PREFIX + "idle_seconds", "Seconds spent waiting for the learner while holding "
                                    "battles (no Step or Plan to act on)", registry=r)
        self.held_seconds = Counter(PREFIX + "held_seconds", "Wall seconds spent holding battles (idle or stepping)",
                                    registry=r)
        self.idle_frac = Gauge(PREFIX + "idle_frac", "Share of the last IDLE_WINDOW_S of holding battles spent waiting "
                               "for the learner (services/rollout/metrics.py IdleWindow)", registry=r)
        from shared.transport import register_plaintext_gauge

        register_plaintext_gauge(r)  # royalefleet_insecure_plaintext (issue 38)
        if port:
            start_http_server(port, addr=host, registry=r)


IDLE_WINDOW_S = 10.0
"""The window of ``royalefleet_rollout_idle_frac``: long enough to span several rounds, short
enough to show an update's pause (without ``rollout.overlap``) as a rise."""


class IdleWindow:
    """Feeds the idle counters and the windowed gauge: ``add(idle_s, held_s)`` after each wait."""

    def __init__(self, metrics: RolloutMetrics, window_s: float = IDLE_WINDOW_S):
        self.metrics, self.window_s = metrics, window_s
        self.idle = self.held = 0.0

    def add(self, idle_s: float, held_s: float) -> None:
        self.metrics.idle_seconds.inc(idle_s)
        self.metrics.held_seconds.inc(held_s)
        self.idle += idle_s
        self.held += held_s
        if self.held >= self.window_s:
            self.metrics.idle_frac.set(self.idle / self.held)
            self.idle = self.held = 0.0
