"""Alerts without Prometheus: what ``royalefleet up`` (``make run``) posts to ``ALERT_WEBHOOK_URL``
when the learner fires an alarm, in Alertmanager's webhook JSON, so one receiver serves Compose
(Alertmanager posts) and a local run (this relay posts) alike.

The relay follows ``runs/<run>/alarms.jsonl`` (the learner appends one line per fired alarm per
iteration, ``services/learner/alarms.py alarm_record``) from where it stood when the stack
started, and posts an alarm when it starts firing (its count reaches its patience) and again
every ``REPEAT_S`` while it goes on firing, as Alertmanager's ``repeat_interval`` does. A
``halt`` alarm is posted ``critical`` before the stack stops (the learner writes the line before
its checkpoint). A POST that fails is said once in the launcher's output and dropped: the
alarm stays in the log and in ``alarms.jsonl``.

``royalefleet alerts test --direct`` posts ``test_alert()`` through ``post`` to the same URL.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
import time
import urllib.error
import urllib.request

from royalefleet.alert_names import ALERT_WEBHOOK_VAR, NOTIFY_RECEIVER, SEVERITY

POLL_S = 2.0
"""How often the relay reads ``alarms.jsonl`` for new lines, in seconds."""

REPEAT_S = 4 * 3600.0
"""A still-firing alarm is posted again after this long (Alertmanager's ``repeat_interval``)."""

TIMEOUT_S = 10.0
TEST_ALERT = "royalefleet_test_alert"


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def alert_of_record(record: dict, run: str) -> dict:
    """One alert of Alertmanager's webhook JSON from a line of ``alarms.jsonl``: labels
    ``alertname``/``alarm`` (the alarm), ``severity`` (``critical`` for a halt, ``warning``),
    ``service`` ``learner``, ``run``; annotations ``summary`` and ``description``."""
    name = record["alarm"]
    values = ", ".join(f"{k}={v:g}" for k, v in record.get("values", {}).items())
    return {
        "status": "firing",
        "labels": {"alertname": name, "alarm": name, "severity": SEVERITY.get(record.get("severity"), "warning"),
                   "service": "learner", "run": run},
        "annotations": {
            "summary": (f"{name} [{SEVERITY.get(record.get('severity'), 'warning')}]: held "
                        f"{record.get('consecutive')} iteration(s) in a row at iteration {record.get('iteration')} "
                        f"of run {run} ({values})"),
            "description": f"{record.get('meaning', '')}. Next: {record.get('what_to_do', '')}.",
        },
        "startsAt": _iso(record.get("time") or time.time()),
        "endsAt": "0001-01-01T00:00:00Z",
    }


def webhook_payload(alerts: list[dict]) -> dict:
    """Alertmanager's webhook body (version 4) around ``alerts``, receiver ``NOTIFY_RECEIVER``."""
    common = {k: v for k, v in alerts[0]["labels"].items()
              if all(a["labels"].get(k) == v for a in alerts)} if alerts else {}
    return {"version": "4", "receiver": NOTIFY_RECEIVER, "status": "firing", "alerts": alerts,
            "groupLabels": {k: common[k] for k in ("alertname",) if k in common}, "commonLabels": common,
            "commonAnnotations": {}, "externalURL": "", "groupKey": "royalefleet-up", "truncatedAlerts": 0}


def test_alert(source: str) -> dict:
    """The alert ``royalefleet alerts test`` sends: ``royalefleet_test_alert``, ``warning``, for
    five minutes (so Alertmanager resolves it by itself)."""
    now = time.time()
    return {"labels": {"alertname": TEST_ALERT, "severity": "warning", "service": "royalefleet-alerts-test"},
            "annotations": {"summary": f"a test alert from `royalefleet alerts test` ({source}): alerts reach you",
                            "description": "Nothing is wrong; this checks the path from royalefleet to your receiver."},
            "startsAt": _iso(now), "endsAt": _iso(now + 300)}


def post(url: str, body: dict | list) -> None:
    """POST ``body`` as JSON to ``url``; raises OSError (``urllib.error.URLError``, ``HTTPError``)
    naming the URL when it is not answered 2xx."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            resp.read()
    except urllib.error.HTTPError as exc:
        raise OSError(f"{url} answered HTTP {exc.code}: {exc.read()[:200].decode(errors='replace')}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise OSError(f"{url}: {getattr(exc, 'reason', exc)}") from exc


class AlarmRelay:
    """Follows ``alarms_path`` from its current end and posts what starts firing to ``url``."""

    def __init__(self, alarms_path: str, url: str, run: str, say=print, poster=post):
        self.path, self.url, self.run, self.say, self.poster = alarms_path, url, run, say, poster
        self.offset = os.path.getsize(alarms_path) if os.path.exists(alarms_path) else 0
        self.last_posted: dict[str, float] = {}
        self.failed = False
        self._stop = threading.Event()

    def due(self, record: dict, now: float) -> bool:
        """Post this line? Its alarm has just started firing (count == patience), or it fires
        still and was last posted ``REPEAT_S`` ago (or never, by this relay)."""
        last = self.last_posted.get(record["alarm"])
        if record.get("consecutive") == record.get("patience"):
            return True
        return last is None or now - last >= REPEAT_S

    def poll(self, now: float | None = None) -> int:
        """Read the complete lines added since the last poll and post the due ones, one POST for
        them all. Returns how many alerts were posted."""
        if not os.path.exists(self.path):
            return 0
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next poll
        self.offset += end
        now = time.time() if now is None else now
        alerts = []
        for line in data[:end].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "alarm" in record and self.due(record, now):
                self.last_posted[record["alarm"]] = now
                alerts.append(alert_of_record(record, self.run))
        if alerts:
            try:
                self.poster(self.url, webhook_payload(alerts))
                self.failed = False
            except OSError as exc:
                if not self.failed:
                    self.say(f"alerts: could not post {len(alerts)} alert(s) to {ALERT_WEBHOOK_VAR}: {exc}; they stay in "
                             f"{self.path} (test the receiver with `royalefleet alerts test --direct`)")
                self.failed = True
        return len(alerts)

    def start(self) -> threading.Thread:
        """Poll every ``POLL_S`` in a daemon thread until ``stop``."""
        def loop():
            while not self._stop.wait(POLL_S):
                self.poll()
        thread = threading.Thread(target=loop, name="alert-relay", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """Stop the thread after one last poll (a halt's line is posted before the stack ends)."""
        self._stop.set()
        self.poll()


def relay_for(run_dir: str, alarms_path: str, say=print, environ=os.environ) -> AlarmRelay | None:
    """The relay ``royalefleet up`` starts, or None (said once) when ``ALERT_WEBHOOK_URL`` is unset."""
    url = environ.get(ALERT_WEBHOOK_VAR, "").strip()
    if not url:
        say(f"alerts: {ALERT_WEBHOOK_VAR} is not set, so fired alarms go only to this log and {alarms_path}; set it "
            "to a URL that takes a POST to be told (docs/alarms.md, \"Where alerts show and how they reach you\")")
        return None
    if not url.startswith(("http://", "https://")):
        say(f"alerts: {ALERT_WEBHOOK_VAR}={url!r} is not an http:// or https:// URL; no alert is posted")
        return None
    say(f"alerts: fired alarms are posted to {ALERT_WEBHOOK_VAR} (check it with `royalefleet alerts test --direct`)")
    return AlarmRelay(alarms_path, url, os.path.basename(os.path.normpath(run_dir)), say=say)
