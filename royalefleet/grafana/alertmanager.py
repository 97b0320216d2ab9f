"""Alertmanager's configuration (``alertmanager/alertmanager.yml``): every alert Prometheus
sends goes to one webhook, ``ALERT_WEBHOOK_URL``, grouped and repeated as Grafana's policy does.

Alertmanager expands no variables in its file, so the URL is written as the placeholder
``${ALERT_WEBHOOK_URL}`` and ``alertmanager/start.sh`` (the service's entrypoint) puts the
variable's value in its place, in a copy under the data folder, before it starts Alertmanager.
"""

from __future__ import annotations

from royalefleet.grafana.common import ALERT_WEBHOOK_VAR, NOTIFY_RECEIVER
from royalefleet.grafana.provisioning import NOTIFY_TIMING

PLACEHOLDER = "${" + ALERT_WEBHOOK_VAR + "}"
"""The text ``alertmanager/start.sh`` replaces with the webhook URL."""


def alertmanager_config() -> dict:
    """One route, one receiver: the webhook, resolved alerts included, every alert of a group in
    one POST (Alertmanager's webhook JSON: ``{"receiver", "status", "alerts": [...], ...}``)."""
    return {
        "route": {"receiver": NOTIFY_RECEIVER, "group_by": ["alertname"], **NOTIFY_TIMING},
        "receivers": [{"name": NOTIFY_RECEIVER,
                       "webhook_configs": [{"url": PLACEHOLDER, "send_resolved": True, "max_alerts": 0}]}],
    }
