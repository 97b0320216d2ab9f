"""The names every alert path shares, standard library only, so ``python -m royalefleet.cmd_alerts``
runs in the images too (no PyYAML there; royalefleet/grafana/ needs it).

- ``ALERT_WEBHOOK_VAR``: the one setting that routes alerts to a person, a URL that takes a
  POST (Slack or Discord incoming webhook, ntfy topic, any HTTP endpoint). Alertmanager's
  receiver ``NOTIFY_RECEIVER`` posts there under Compose, ``royalefleet up``'s alert relay under
  ``make run`` (royalefleet/alert_relay.py); Grafana sends its own rules' alerts through
  Alertmanager (docs/alarms.md, "Where alerts show and how they reach you").
- ``ALERTMANAGER_VAR``: Alertmanager's address, for Grafana's contact point and
  ``royalefleet alerts test``.
- ``SEVERITY``: the learner's severity (``shared.alarms.Severity``) -> the alert's ``severity``
  label, as Prometheus users name them: ``critical`` halts the run, ``warning`` is told and logged.
"""

ALERT_WEBHOOK_VAR = "ALERT_WEBHOOK_URL"
ALERTMANAGER_VAR = "ALERTMANAGER_URL"
NOTIFY_RECEIVER = "royalefleet-notify"
SEVERITY = {"halt": "critical", "warn": "warning"}
