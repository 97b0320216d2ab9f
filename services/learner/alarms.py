"""The learner's alarm monitor: the table of shared/alarms.py evaluated on every metric row.

Per iteration (after the row is written to ``metrics.jsonl``, so a halting row is on disk):

    verdict = monitor.observe(row)            # every alarm evaluated before anything is raised
    if verdict.bundle_due:   # a halt, or a bundle alarm's first fired iteration in a row
        write_bundle(run_dir, iteration, monitor.recent_rows, verdict.fired, config_json)
    if verdict.halt_due:
        ... checkpoint the state the row describes, then stop (exit code 2)

Exports ``royalefleet_learner_alarm_holds{alarm,severity}`` (1 while the condition holds on the
last row, 0 otherwise, also when not evaluated) and ``royalefleet_learner_alarm_consecutive``
(iterations in a row it has held) and ``royalefleet_learner_alarm_patience`` (the patience
it fires at under this run's config, overrides included): Prometheus's rules fire on
``consecutive >= patience``, the learner's own verdict. Fired alarms are appended to ``runs/<run>/alarms.jsonl``,
one JSON object a line, flushed and fsynced like the metric rows. None of this needs Prometheus
or Grafana: the learner halts on its own.
"""

from __future__ import annotations

import collections
import json
import os
import shlex
import time
from typing import NamedTuple

import msgspec
from prometheus_client import CollectorRegistry, Gauge

from services.learner.metric_log import plain_row
from shared.alarms import ALARMS, BY_NAME, Alarm, AlarmResult, AlarmState, check_overrides, describe, effective, evaluate
from shared.config import AlarmConfig
from shared.run_dir import ALARMS as ALARMS_FILE
from shared.run_dir import BUNDLE_HALT, CONFIG, METRICS, RunDir

RECENT_ROWS = 50
"""Metric rows a bundle holds (the reference's 50)."""

LAST_VALUES = 5
"""Values of each key read that ``halt.json`` lists per fired alarm."""

REPEAT_EVERY = 10
"""A warning that keeps firing is printed on its first iteration and then on every 10th in a row
(``alarms.jsonl`` holds every one). A run from a clone fires ``tile_spam`` and ``capacity_ratio``
on every iteration by construction, and a line each an iteration buried the progress lines."""


class AlarmVerdict(NamedTuple):
    fired: list[AlarmResult]
    """Alarms that fired on this row (held for at least their patience), table order."""
    halt_due: bool
    """A fired alarm has severity ``halt``."""
    results: list[AlarmResult]
    """Every enabled alarm's result on this row."""

    @property
    def bundle_due(self) -> bool:
        """A diagnostic bundle is due: a halt, or a bundle-writing alarm on the first iteration of
        its firing streak (``consecutive == patience``). Once, not on every iteration it keeps
        holding: a fixed-deck policy held ``artefact_exploit`` for a whole run and wrote 85
        bundles (30 MB) in 89 iterations. It is written again after the alarm clears and fires anew."""
        return self.halt_due or any(r.bundle and r.consecutive == r.patience for r in self.fired)


def alarm_record(result: AlarmResult, iteration: int | None, table: dict[str, Alarm] = BY_NAME) -> dict:
    """One line of ``alarms.jsonl`` (``table``: the alarms by name, the extensions' included)."""
    alarm = table[result.name]
    return {
        "iteration": iteration, "time": time.time(), "alarm": result.name, "severity": result.severity,
        "values": result.values, "thresholds": list(result.thresholds), "condition": alarm.condition,
        "patience": result.patience, "consecutive": result.consecutive,
        "meaning": alarm.meaning, "what_to_do": alarm.what_to_do,
    }


class AlarmMonitor:
    """Evaluates the alarm table once per iteration and exports its state as gauges.

    ``registry`` is the learner's CollectorRegistry (``LearnerMetrics.registry``); ``run_dir``
    is where ``alarms.jsonl`` goes (None: not written). Unknown alarm names in the config's
    overrides are refused here, at start-up, with a ValueError listing the known names."""

    def __init__(self, cfg: AlarmConfig, registry: CollectorRegistry | None = None, *,
                 run_dir: str | None = None, say=print, extra: tuple[Alarm, ...] = ()):
        check_overrides(cfg)
        self.cfg, self.say, self.run_dir = cfg, say, run_dir
        self.extra = tuple(extra)  # the learner extensions' alarms, after the table's
        self.by_name = {**BY_NAME, **{a.name: a for a in self.extra}}
        self.state = AlarmState()
        self.recent_rows: collections.deque[dict] = collections.deque(maxlen=RECENT_ROWS)
        self.muted: set[str] = set()  # alarms muted on the last row (Alarm.muted), said when it changes
        self.firing: dict[str, int] = {}  # alarms fired on the last row -> iterations in a row (REPEAT_EVERY)
        registry = registry if registry is not None else CollectorRegistry()
        self.holds = Gauge("royalefleet_learner_alarm_holds",
                           "1 while the alarm's condition holds on the last metric row, else 0", ["alarm", "severity"],
                           registry=registry)
        self.consecutive = Gauge("royalefleet_learner_alarm_consecutive",
                                 "Consecutive iterations the alarm's condition has held (fires at its patience)",
                                 ["alarm", "severity"], registry=registry)
        self.patience = Gauge("royalefleet_learner_alarm_patience",
                              "Consecutive iterations the alarm fires at, under this run's config",
                              ["alarm", "severity"], registry=registry)
        # Every enabled alarm is exported from the start (at 0), so a dashboard lists them all.
        if cfg.enabled:
            for alarm in ALARMS + self.extra:
                if alarm.name not in cfg.disabled:
                    severity, patience = effective(alarm, cfg)
                    self.holds.labels(alarm.name, severity).set(0)
                    self.consecutive.labels(alarm.name, severity).set(0)
                    self.patience.labels(alarm.name, severity).set(patience)

    @property
    def alarms_path(self) -> str | None:
        return str(RunDir(self.run_dir).alarms) if self.run_dir else None

    def observe(self, row: dict) -> AlarmVerdict:
        """Evaluate the whole table on ``row``, update the gauges, log and append every fired
        alarm to ``alarms.jsonl``, and say whether a halt is due. Never raises for an alarm."""
        self.recent_rows.append(row)
        results = evaluate(row, self.cfg, self.state, self.extra)
        for r in results:
            self.holds.labels(r.name, r.severity).set(1 if r.holds else 0)
            self.consecutive.labels(r.name, r.severity).set(r.consecutive)
        self._say_mutes(results)
        fired = [r for r in results if r.fired]
        iteration = row.get("run/iteration")
        self._say_fired(fired)
        if fired and self.alarms_path:
            with open(self.alarms_path, "ab") as fh:
                for r in fired:
                    fh.write(msgspec.json.encode(alarm_record(r, iteration, self.by_name)) + b"\n")
                fh.flush()
                os.fsync(fh.fileno())
        return AlarmVerdict(fired, any(r.severity == "halt" for r in fired), results)

    def _say_fired(self, fired: list[AlarmResult]) -> None:
        """Print each fired alarm: a halt always, a warning on its first iteration in a row and
        then every ``REPEAT_EVERY``-th, with the count; once, when it stops firing. The count is
        the evaluation's own: iterations held past the patience (``consecutive - patience + 1``)."""
        now = {r.name: r.consecutive - r.patience + 1 for r in fired}
        for name in sorted(self.firing.keys() - now.keys()):
            self.say(f"alarm {name} cleared after {self.firing[name]} iteration(s) in a row")
        self.firing = now
        for r in fired:
            n = now[r.name]
            if r.severity == "warn" and n % REPEAT_EVERY != 1:
                continue
            shown = ", ".join(f"{k}={v:g}" for k, v in r.values.items())
            again = f" [{n} iterations in a row; printed every {REPEAT_EVERY}th, all in alarms.jsonl]" if n > 1 else ""
            self.say(f"alarm [{r.severity}] {r.name}: {shown} ({describe(self.by_name[r.name], self.cfg)}) "
                     f"-- {self.by_name[r.name].meaning}{again}")

    def _say_mutes(self, results: list[AlarmResult]) -> None:
        """Say once when an alarm starts being muted (with its reason) and when it stops."""
        now = {r.name: r.muted for r in results if r.muted}
        for name in sorted(now.keys() - self.muted):
            self.say(f"alarm {name} muted: {now[name]}")
        for name in sorted(self.muted - now.keys()):
            self.say(f"alarm {name} evaluated again: its mute no longer holds")
        self.muted = set(now)


def resume_command(run_dir: str, config_path: str) -> str:
    """The command that resumes the run from its latest checkpoint with the bundle's config."""
    run_dir = os.path.normpath(run_dir)
    return shlex.join(["royalefleet", "up", "--config", config_path,
                       "--runs-dir", os.path.dirname(run_dir) or ".", "--run-name", os.path.basename(run_dir)])


def write_bundle(run_dir: str, iteration: int, rows, fired: list[AlarmResult], config_json: bytes | str,
                 *, checkpoint_path: str | None = None, table: dict[str, Alarm] = BY_NAME) -> str:
    """Write the diagnostic bundle ``<run_dir>/bundles/<iteration>/`` and return its path:

    - ``metrics.jsonl``: the last 50 metric rows (``rows``, oldest first);
    - ``alarms.jsonl``: the run's alarm rows so far (the run's file, or ``fired`` if it has none);
    - ``config.json``: the resolved config (``config_json``, as written by ``dump_config``);
    - ``halt.json``: the alarms that fired (name, severity, condition, thresholds, patience, the
      last five values of each key read), the checkpoint path when known, and the resume command.
    """
    bundle = str(RunDir(run_dir).bundle(iteration))
    os.makedirs(bundle, exist_ok=True)
    # Plain numbers only: a numpy scalar would raise TypeError here, in the middle of a halt.
    rows = [plain_row(r) for r in list(rows)[-RECENT_ROWS:]]

    def write(name: str, data: bytes) -> None:
        tmp = os.path.join(bundle, name + ".tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, os.path.join(bundle, name))

    write(METRICS, b"".join(msgspec.json.encode(r) + b"\n" for r in rows))
    run_alarms = RunDir(run_dir).alarms
    if os.path.exists(run_alarms):
        with open(run_alarms, "rb") as fh:
            write(ALARMS_FILE, fh.read())
    else:
        write(ALARMS_FILE, b"".join(msgspec.json.encode(alarm_record(r, iteration, table)) + b"\n" for r in fired))
    write(CONFIG, config_json.encode() if isinstance(config_json, str) else bytes(config_json))
    config_path = os.path.join(bundle, CONFIG)
    halt = {
        "iteration": iteration,
        "halted": any(r.severity == "halt" for r in fired),
        "alarms": [
            {
                "alarm": r.name, "severity": r.severity, "condition": describe(table[r.name], t=r.thresholds),
                "thresholds": list(r.thresholds), "patience": r.patience, "consecutive": r.consecutive,
                "last_values": {k: [row[k] for row in rows if k in row][-LAST_VALUES:] for k in table[r.name].keys},
                "meaning": table[r.name].meaning, "what_to_do": table[r.name].what_to_do,
            }
            for r in fired
        ],
        "checkpoint": checkpoint_path,
        "resume": resume_command(run_dir, config_path),
    }
    write(BUNDLE_HALT, json.dumps(halt, indent=2).encode() + b"\n")
    return bundle
