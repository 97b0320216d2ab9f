"""Generate the monitoring files from the alarm table (shared/alarms.py) and the metric schema.

    python -m royalefleet.grafana            write every file below
    python -m royalefleet.grafana --check    exit 1 (and name them) if any file is not current

Files (paths from the repository root):

- ``grafana/provisioning/datasources/prometheus.yaml``: the Prometheus datasource, fixed uid
  ``royalefleet-prometheus`` (every dashboard panel and alert query names it by uid), url
  ``$PROMETHEUS_URL``;
- ``grafana/provisioning/dashboards/royalefleet.yaml``: the file provider for ``grafana/dashboards``;
- ``grafana/dashboards/{training,ladder,fleet}.json``;
- ``grafana/provisioning/alerting/contact-points.yaml``: Alertmanager (``$ALERTMANAGER_URL``,
  the policy's root, for rules an operator adds in Grafana), the learner-halt webhook and the
  route that sends only rules labelled ``action=halt`` to it;
- ``prometheus/prometheus.yml`` (scrape jobs, rule files, the Alertmanager),
  ``prometheus/rules/alarms.yml`` (one alerting rule per alarm: the learner's own verdict,
  ``royalefleet_learner_alarm_consecutive >= royalefleet_learner_alarm_patience``) and
  ``prometheus/tests/alarms_test.yml`` (``promtool test rules``: for every alarm the learner's
  counts for a series that fires after its patience, one that stays quiet, one that resets, one
  under a run's own patience and severity);
- ``alertmanager/alertmanager.yml``: every alert Prometheus (and Grafana) sends, to
  ``ALERT_WEBHOOK_URL``: the one path to a person.

The rule file also holds the service alerts (``shared/service_alerts.py``: a core service
down, training stalled, the fleet below its size), in a group of their own, with promtool tests
of their own. Grafana evaluates no generated rule: it shows Prometheus's (the fleet
dashboard's first panel reads Prometheus's ``ALERTS`` series).

Interpolation: Grafana expands ``$VAR``/``${VAR}`` in provisioning values (os.ExpandEnv: no
``${VAR:-default}``, an unset variable is empty; ``$$`` is a literal dollar) but not in alert
annotations or query models, which it takes raw; so the ``{{ $labels.x }}`` templates below are
written as they are, and every other value holds no ``$`` but the three variables named here.
Prometheus does not interpolate its configuration at all.

Patience is counted in iterations by the learner, under the run's own config; the rules read
its count and its patience (``alert_text.alarm_expr``) and assume no iteration time.

The package, one module per kind of file (paths under ``royalefleet/grafana/``):

- ``common.py``: the datasource uid, folder, environment variables, ``SEVERITY``,
  the YAML header, ``learner(key)`` (a metric-row key's gauge), ``duration``;
- ``emit.py``: ``to_yaml`` (PyYAML) and ``to_json``;
- ``provisioning.py``: the datasource, the dashboard provider, contact points and policy;
- ``panels.py``: ``ts`` (a panel) and ``dashboard`` (rows laid out on the grid);
- ``dashboards/{training,ladder,fleet}.py``: one function a row, ``ROWS`` in order, ``build()``;
  ``dashboards/__init__.py`` lists them (``DASHBOARDS``);
- ``alert_text.py``: an alarm rule's expression, labels, summary and description;
- ``prometheus.py``: the Prometheus config and rules;
- ``alertmanager.py``: Alertmanager's route and receiver;
- ``promtool_tests.py``: the promtool scenarios; ``alarms_doc.py``: docs/alarms.md;
- ``files.py``: ``render`` (path -> content of every file), ``stale``, ``write``, ``main``.

Adding a panel: one more ``ts(title, [(promql, legend), ...], unit=..., description=...)`` in
the list its row's function returns (``learner("group/key")`` names a metric-row key's gauge;
a service's own metric is written as PromQL; ``tests/royalefleet/test_grafana.py`` refuses a name no service
exports and a counter read without ``rate``/``increase``/``resets``). Adding a row: a function
returning its panels in the dashboard's module and a ``(title, function)`` line in its ``ROWS``
(at the end, so panel ids before it stay). Then run ``python -m royalefleet.grafana``.
"""

from __future__ import annotations

from royalefleet.grafana.alarms_doc import alarms_doc
from royalefleet.grafana.alert_text import (CONSECUTIVE, PATIENCE, alarm_description, alarm_expr, alarm_labels,
                                            alarm_summary, rule_uid)
from royalefleet.grafana.alertmanager import PLACEHOLDER, alertmanager_config
from royalefleet.grafana.common import (ALERT_WEBHOOK_UNSET, ALERT_WEBHOOK_VAR, ALERTMANAGER_RECEIVER,
                                        ALERTMANAGER_VAR, DATASOURCE, DATASOURCE_UID, DEFAULT_RECEIVER, ENV_VARS,
                                        FOLDER, HALT_RECEIVER, HEADER, NOTIFY_RECEIVER, ROOT, SEVERITY, duration,
                                        learner, num)
from royalefleet.grafana.dashboards import DASHBOARDS, dashboards, fleet, ladder, training
from royalefleet.grafana.emit import to_json, to_yaml
from royalefleet.grafana.files import main, render, stale, write
from royalefleet.grafana.panels import alert_list, dashboard, dashboard_exprs, ts
from royalefleet.grafana.prometheus import (ALERTMANAGER_TARGET, ROLLOUT_HOSTS_FILES, ROLLOUT_HOSTS_JOB, SCALED_TARGETS,
                                            SCRAPE_TARGETS, prometheus_config, prometheus_rule, prometheus_rules,
                                            prometheus_service_rule)
from royalefleet.grafana.promtool_tests import (HEALTHY, TOLERANT, counts, firing_values, overridden, prometheus_tests,
                                               scenarios)
from royalefleet.grafana.provisioning import NOTIFY_TIMING, contact_points, dashboard_provider, datasource

from shared.alarms import BY_NAME as ALARMS_BY_NAME

ALARM_PANEL = training.ALARM_PANEL
training_dashboard, ladder_dashboard, fleet_dashboard = training.build, ladder.build, fleet.build
