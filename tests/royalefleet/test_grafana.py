"""The monitoring files (the royalefleet/grafana/ package) are current, Grafana would accept them (uids,
datasource by uid, interpolation), every PromQL expression reads only metrics the services export
(counters through rate()/increase()/resets()), and promtool parses them and runs the alarms' unit
tests, whose series the Python evaluator reads the same way."""

import pathlib
import re
import shutil
import subprocess

import pytest
import yaml
from prometheus_client import CollectorRegistry

from royalefleet import grafana as gen
from services.checkpoint.service import Metrics as CheckpointMetrics
from services.evaluator.service import EvaluatorMetrics
from services.ladder.service import Metrics as LadderMetrics
from services.learner.alarms import AlarmMonitor
from services.learner.metrics import LearnerMetrics
from services.rollout.metrics import RolloutMetrics
from shared.alarms import ALARMS, AlarmState, evaluate
from shared.config import AlarmConfig
from shared.metric_schema import SCHEMA, prometheus_name
from shared.service_alerts import SERVICE_ALERTS
from tests.shared.test_alarms import PENDING_ROW_KEYS

ROOT = pathlib.Path(__file__).resolve().parents[2]
UID = re.compile(r"[A-Za-z0-9_-]{1,40}")
PROMTOOL = shutil.which("promtool") or ("/usr/bin/promtool" if pathlib.Path("/usr/bin/promtool").exists() else None)
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not installed (Debian: apt-get install -y --no-install-recommends prometheus)")

# Row keys the dashboards show that the learner's row does not carry yet (besides the alarms').
PENDING_DASHBOARD_KEYS: set[str] = set()
BOUNDED_LABELS = {"job", "reason", "severity", "alarm", "le", "role", "opponent", "member", "term"}


def all_exprs() -> list[tuple[str, str]]:
    """(where, PromQL) for every expression of the generated files."""
    out = [(f"dashboard {name}", e) for name, d in gen.dashboards().items() for e in gen.dashboard_exprs(d)]
    for group in gen.prometheus_rules()["groups"]:
        out += [(f"prometheus rule {r['alert']}", r["expr"]) for r in group["rules"]]
    return out


def exported_names() -> set[str]:
    """Sample names the services expose: each service's registry, the learner's row gauges
    (schema keys and the pending ones) and Prometheus's own ``up`` and ``ALERTS``."""
    registries = [LearnerMetrics(None).registry, RolloutMetrics(None).registry, LadderMetrics().registry,
                  EvaluatorMetrics().registry]
    reg = CollectorRegistry()
    CheckpointMetrics(reg)
    AlarmMonitor(AlarmConfig(), reg)
    registries.append(reg)
    names = {"up", "ALERTS"}
    for r in registries:
        for m in r.collect():
            suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
                        "summary": ("_sum", "_count", "_created")}.get(m.type, ("",))
            names |= {m.name + s for s in suffixes}
    names |= {prometheus_name(k)[0] for k in (*SCHEMA, *PENDING_ROW_KEYS)}
    names |= {gen.learner(k) for k in PENDING_DASHBOARD_KEYS}
    return names


def test_family_gauges_are_named_as_the_learner_exports_them():
    for key in SCHEMA:
        if "{" in key:
            member = key.split("{", 1)[0] + "m"
            assert gen.learner(key) == prometheus_name(member)[0]


KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}


def metric_names(expr: str) -> set[str]:
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)
    names = set(re.findall(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()", expr))
    return names - KEYWORDS


# ----------------------------------------------------------------------------- generated and current


def test_generated_files_are_current():
    stale = gen.stale(ROOT)
    assert not stale, f"not current: {stale}; run `python -m royalefleet.grafana`"


def test_check_mode_reports_stale_files(tmp_path, capsys):
    assert gen.main(["--check", "--root", str(tmp_path)]) == 1
    assert gen.main(["--root", str(tmp_path)]) == 0
    assert gen.main(["--check", "--root", str(tmp_path)]) == 0
    (tmp_path / "prometheus/rules/alarms.yml").write_text("edited by hand\n")
    assert gen.main(["--check", "--root", str(tmp_path)]) == 1
    assert "prometheus/rules/alarms.yml" in capsys.readouterr().err


# ----------------------------------------------------------------------------- what Grafana checks


def test_every_uid_is_valid_and_unique():
    uids = [gen.DATASOURCE_UID, gen.dashboard_provider()["providers"][0]["folderUid"], *(d["uid"] for d in gen.dashboards().values()),
            *(rc["uid"] for cp in gen.contact_points()["contactPoints"] for rc in cp["receivers"])]
    for uid in uids:
        assert UID.fullmatch(uid), f"uid {uid!r}: at most 40 of [A-Za-z0-9_-]"
    assert len(set(uids)) == len(uids)


def test_every_query_names_the_datasource_by_uid():
    def walk(obj, where):
        if isinstance(obj, dict):
            if "datasource" in obj:
                ds = obj["datasource"]
                assert isinstance(ds, dict) and ds.get("uid") in (gen.DATASOURCE_UID, "__expr__"), (where, ds)
            for k, v in obj.items():
                walk(v, f"{where}.{k}")
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                walk(v, f"{where}[{i}]")

    for name, d in gen.dashboards().items():
        walk(d, name)
        assert all("datasource" in p for p in d["panels"] if p["type"] != "row")
    assert gen.datasource()["datasources"][0]["uid"] == gen.DATASOURCE_UID


def test_alert_rules_come_from_the_table_and_read_the_learners_verdict():
    """One Prometheus rule per alarm, in table order, on the learner's count against its
    patience (no ``for``: no iteration time assumed), critical/warning from the learner's
    severity, the table's words in the annotations; Grafana evaluates none of them."""
    (alarms_group, _) = gen.prometheus_rules()["groups"]
    *rules, extension = alarms_group["rules"]
    assert [r["alert"] for r in rules] == [a.name for a in ALARMS]
    # the learner extensions' alarms (not in the table): one rule, the same verdict
    assert extension["alert"] == "learner_extension_alarm" and "for" not in extension
    assert 'royalefleet_learner_alarm_consecutive{alarm!~"illegal_actions|ratio_invariant|' in extension["expr"]
    for rule, alarm in zip(rules, ALARMS):
        assert rule["expr"] == (
            'label_replace(label_replace(royalefleet_learner_alarm_consecutive{alarm="%s"} >= '
            'royalefleet_learner_alarm_patience{alarm="%s"}, "severity", "critical", "severity", "halt"), '
            '"severity", "warning", "severity", "warn")' % (alarm.name, alarm.name))
        assert "for" not in rule and rule["labels"] == {"service": "learner"}
        assert alarm.name in rule["annotations"]["summary"] and alarm.what_to_do in rule["annotations"]["description"]
        assert "ITERATION" not in str(rule) and " s nominal" not in str(rule)
    assert not (ROOT / "grafana/provisioning/alerting/alarms.yaml").exists()
    assert [p for p in gen.render() if "alerting" in p] == ["grafana/provisioning/alerting/contact-points.yaml"]
    assert not hasattr(gen, "ITERATION_SECONDS")


def test_the_learner_exports_the_count_and_the_patience_the_rules_read():
    """The two gauges the rules compare, with the run's overrides: a patience override moves the
    patience gauge, a severity override the label, a disabled alarm exports neither."""
    reg = CollectorRegistry()
    cfg = AlarmConfig(patience_overrides={"kl_high": 7}, severity_overrides={"tile_spam": "halt"},
                      disabled=["kl_dead"])
    monitor = AlarmMonitor(cfg, reg)
    assert reg.get_sample_value(gen.PATIENCE, {"alarm": "kl_high", "severity": "warn"}) == 7.0
    assert reg.get_sample_value(gen.PATIENCE, {"alarm": "clip_pinned", "severity": "halt"}) == 3.0
    assert reg.get_sample_value(gen.PATIENCE, {"alarm": "tile_spam", "severity": "halt"}) == 5.0
    assert reg.get_sample_value(gen.PATIENCE, {"alarm": "tile_spam", "severity": "warn"}) is None
    assert reg.get_sample_value(gen.PATIENCE, {"alarm": "kl_dead", "severity": "warn"}) is None
    for n in range(1, 4):
        monitor.observe({"ppo/kl": 0.5})
        assert reg.get_sample_value(gen.CONSECUTIVE, {"alarm": "kl_high", "severity": "warn"}) == n
    monitor.observe({"ppo/kl": 0.01})
    assert reg.get_sample_value(gen.CONSECUTIVE, {"alarm": "kl_high", "severity": "warn"}) == 0


def test_the_promtool_series_are_the_learners_counts():
    """alarms_test.yml's gauges are what the learner's evaluator counts on the scenario rows
    (the run's own config for ``config``), so promtool tests the rule on the learner's verdict."""
    tests = {t["name"]: t for t in gen.prometheus_tests()["tests"]}
    for alarm in ALARMS:
        runs, fire_at = gen.scenarios(alarm)
        series = {s["series"]: s["values"] for s in tests[alarm.name]["input_series"]}
        sev = {"halt": "warn", "warn": "halt"}[alarm.severity]
        config = (f'{gen.CONSECUTIVE}{{job="learner",instance="config",alarm="{alarm.name}",severity="{sev}"}}')
        held = [int(x) for x in series[config].split()]
        assert held == gen.counts(alarm, runs["fire"], gen.overridden(alarm))
        assert held[fire_at] == alarm.patience and held[fire_at + 1] == alarm.patience + 1
        patience = series[config.replace(gen.CONSECUTIVE, gen.PATIENCE)]
        assert patience == f"{alarm.patience + 1}x{len(held) - 1}"
        quiet = f'{gen.CONSECUTIVE}{{job="learner",instance="quiet",alarm="{alarm.name}",severity="{alarm.severity}"}}'
        assert set(series[quiet].split()) == {"0"}


def test_service_alerts_come_from_their_table():
    prom = gen.prometheus_rules()["groups"]
    assert [g["name"] for g in prom] == ["royalefleet-alarms", "royalefleet-services"]
    assert [(r["alert"], r["expr"], r["for"], r["labels"]) for r in prom[1]["rules"]] == [
        (a.name, a.expr, gen.duration(a.for_seconds), {"severity": "critical", "alarm": a.name})
        for a in SERVICE_ALERTS]
    assert [a.name for a in SERVICE_ALERTS] == ["service_down", "training_stalled", "fleet_below_size",
                                                "rollout_host_down"]
    assert SERVICE_ALERTS[3].expr == 'up{job="rollout-hosts"} == 0'
    assert "rollout-hosts" in [j["job_name"] for j in gen.prometheus_config()["scrape_configs"]]
    assert SERVICE_ALERTS[1].expr == "time() - royalefleet_learner_progress_timestamp_seconds > 1200"
    assert SERVICE_ALERTS[2].expr == ('(count(up{job="rollout"} == 1) or vector(0)) < '
                                      'max(royalefleet_learner_rollouts_expected)')
    tests = {t["name"] for t in gen.prometheus_tests()["tests"]}
    assert {a.name for a in SERVICE_ALERTS} <= tests


def test_the_learner_progress_gauge_starts_at_process_start_and_moves_with_each_row(monkeypatch):
    import services.learner.metrics as lm

    clock = [1000.0]
    monkeypatch.setattr(lm.time, "time", lambda: clock[0])
    m = LearnerMetrics(None)
    assert m.registry.get_sample_value("royalefleet_learner_progress_timestamp_seconds") == 1000.0
    clock[0] = 1061.5
    m.export({"run/iteration": 1})
    assert m.registry.get_sample_value("royalefleet_learner_progress_timestamp_seconds") == 1061.5


def test_the_learner_exports_the_fleet_size_it_expects():
    assert LearnerMetrics(None).registry.get_sample_value("royalefleet_learner_rollouts_expected") == 1.0
    m = LearnerMetrics(None, expected_rollouts=12)
    assert m.registry.get_sample_value("royalefleet_learner_rollouts_expected") == 12.0
    m.export({"run/iteration": 1})  # a row does not touch it
    assert m.registry.get_sample_value("royalefleet_learner_rollouts_expected") == 12.0


def test_grafana_sends_to_alertmanager_and_posts_nothing_itself():
    cp = gen.contact_points()
    points = {c["name"]: c["receivers"] for c in cp["contactPoints"]}
    assert set(points) == {gen.ALERTMANAGER_RECEIVER, gen.HALT_RECEIVER}
    (am,) = points[gen.ALERTMANAGER_RECEIVER]
    assert am["type"] == "prometheus-alertmanager" and am["settings"] == {"url": "$ALERTMANAGER_URL"}
    (receiver,) = points[gen.HALT_RECEIVER]
    assert receiver["type"] == "webhook"
    assert receiver["settings"]["url"] == "$LEARNER_HALT_URL"
    assert receiver["settings"]["authorization_credentials"] == "$LEARNER_HALT_TOKEN"
    # No contact point of Grafana's posts to the person's webhook: Alertmanager is the one path.
    assert "ALERT_WEBHOOK_URL" not in gen.to_yaml(cp) and "ALERT_WEBHOOK_URL" not in gen.ENV_VARS
    policy = cp["policies"][0]
    assert policy["receiver"] == gen.ALERTMANAGER_RECEIVER != "grafana-default-email"
    assert all(r["receiver"] in points for r in policy["routes"])
    # Only operator rules labelled action=halt reach the learner.
    assert policy["routes"][0]["object_matchers"] == [["action", "=", "halt"]]
    assert gen.datasource()["datasources"][0]["jsonData"]["manageAlerts"] is True


def test_only_the_named_environment_variables_are_interpolated():
    """Grafana expands $VAR in provisioning values (a literal dollar is $$) but takes alert
    annotations and query models raw: dollars elsewhere must be one of ENV_VARS."""
    env = re.compile(r"\$\$|\$\{?(" + "|".join(gen.ENV_VARS) + r")\}?")

    def walk(obj, raw=False):
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, raw or k in ("annotations", "model"))
        elif isinstance(obj, list):
            for v in obj:
                walk(v, raw)
        elif isinstance(obj, str):
            if raw:
                assert "${" not in obj, obj
            else:
                assert "$" not in env.sub("", obj), f"uninterpolated dollar in {obj!r}: write $$"

    for doc in (gen.datasource(), gen.dashboard_provider(), gen.contact_points()):
        walk(doc)
    used = set()
    for text in gen.render().values():
        used |= set(re.findall(r"\$\{?([A-Z_]+)\}?", text))
    assert used >= set(gen.ENV_VARS)


TRICKY = ("yes", "no", "on", "off", "y", "n", "null", "~", "true", "1m", "9100", "0x1f", "1e3", "a: b", "#x", "- x",
          "$VAR", "[x]", "{x}", "", " x", "x ", "it's", "it's \"x\"", "{{ $labels.instance }}", "*x", "&x", "!x", "%x",
          "@x", "`x`", "0+60x5", "1x3 stale", "a\nb", "=")


def test_yaml_writer_quotes_what_yaml_would_misread():
    """Every string comes back as itself (YAML 1.1: 'yes', '1e3', '0x1f' read as bool or number
    when plain), names stay plain, nothing is folded or anchored."""
    doc = {"strings": list(TRICKY), "by_key": {s or "empty": s for s in TRICKY}, "nested": [{"k": ["a", "="]}]}
    text = gen.to_yaml(doc)
    assert yaml.safe_load(text) == doc
    for s in ("yes", "no", "on", "null", "true", "9100", "a: b", "#x", "- x", "[x]", ""):
        assert f"{s}: {s}\n" not in text and f"empty: \n" not in text, s
    assert "\n  royalefleet-alarms: royalefleet-alarms\n" in gen.to_yaml({"m": {"royalefleet-alarms": "royalefleet-alarms"}})
    long = "word " * 60
    assert gen.to_yaml({"k": long}, header="") == f"k: '{long}'\n"
    assert "&id" not in gen.to_yaml({"a": doc["nested"][0], "b": doc["nested"][0]})


# ----------------------------------------------------------------------------- PromQL reads what is exported


def test_every_expression_reads_only_exported_metrics():
    exported = exported_names()
    for where, expr in all_exprs():
        unknown = metric_names(expr) - exported
        assert not unknown, f"{where}: {expr!r} reads {sorted(unknown)}, which no service exports"


def test_counters_are_read_through_rate_increase_or_resets():
    """A counter restarts at 0 with its container: never graph or compare its raw value."""
    for where, expr in all_exprs():
        for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*_(total|bucket)\b", expr):
            before = expr[:m.start()].rstrip()
            assert re.search(r"\b(rate|irate|increase|resets)\($", before), f"{where}: {expr!r}"


def test_aggregations_group_by_bounded_labels_only():
    for where, expr in all_exprs():
        for labels in re.findall(r"\bby\s*\(([^)]*)\)", expr):
            assert {x.strip() for x in labels.split(",")} <= BOUNDED_LABELS, f"{where}: {expr!r}"


def test_duration_histograms_reach_tens_of_seconds():
    reg = CollectorRegistry()
    CheckpointMetrics(reg)
    for m in reg.collect():
        if m.type == "histogram" and m.name.endswith("_seconds"):
            bounds = [float(s.labels["le"]) for s in m.samples if s.name.endswith("_bucket")]
            assert max(b for b in bounds if b != float("inf")) >= 30, m.name


# ----------------------------------------------------------------------------- PromQL and Python agree


@pytest.mark.parametrize("alarm", ALARMS, ids=lambda a: a.name)
def test_python_fires_on_the_promtool_series_where_the_rules_must(alarm):
    """The series of prometheus/tests/alarms_test.yml, read row by row by the Python evaluator,
    fire exactly where promtool expects the alert (fire) or never (quiet, reset)."""
    runs, fire_at = gen.scenarios(alarm)
    for name, rows in runs.items():
        state, fired = AlarmState(), []
        for row in rows:
            fired.append({r.name: r for r in evaluate(row, AlarmConfig(), state)}[alarm.name].fired)
        if name == "fire":
            assert fired.index(True) == fire_at and all(fired[fire_at:])
        else:
            assert not any(fired), name


# ----------------------------------------------------------------------------- promtool


def promtool(*args, cwd=ROOT) -> str:
    p = subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@needs_promtool
def test_promtool_accepts_the_config_and_rules():
    promtool("check", "config", "prometheus/prometheus.yml")
    promtool("check", "rules", "prometheus/rules/alarms.yml")


@needs_promtool
def test_promtool_rule_unit_tests_pass():
    out = promtool("test", "rules", "prometheus/tests/alarms_test.yml")
    assert "SUCCESS" in out


@needs_promtool
def test_every_dashboard_expression_parses(tmp_path):
    rules = [{"record": f"royalefleet:check:{i}", "expr": expr} for i, (_, expr) in enumerate(all_exprs())]
    path = tmp_path / "exprs.yml"
    path.write_text(gen.to_yaml({"groups": [{"name": "exprs", "rules": rules}]}))
    promtool("check", "rules", str(path))


def test_alertmanager_routes_every_alert_to_the_webhook():
    am = gen.alertmanager_config()
    assert am["route"]["receiver"] == gen.NOTIFY_RECEIVER and "routes" not in am["route"]
    (receiver,) = am["receivers"]
    assert receiver["name"] == gen.NOTIFY_RECEIVER
    assert receiver["webhook_configs"] == [{"url": "${ALERT_WEBHOOK_URL}", "send_resolved": True, "max_alerts": 0}]
    timing = ("group_wait", "group_interval", "repeat_interval")
    assert [am["route"][k] for k in timing] == ["30s", "5m", "4h"]
    assert "alertmanager/alertmanager.yml" in gen.render()


def test_the_start_script_puts_the_webhook_in_alertmanagers_file(tmp_path):
    """alertmanager/start.sh as compose.yaml runs it (with ``echo`` for Alertmanager): the URL,
    ampersands and all, in a 0600 copy that amtool accepts where installed; an empty or non-http
    URL refused by name."""
    import os
    import stat

    (tmp_path / "data").mkdir()
    url = "https://hooks.example/services/T0/B1?a=1&b=x"
    out = subprocess.run(["sh", str(ROOT / "alertmanager" / "start.sh"), str(tmp_path / "data"), "--flag"],
                         env=os.environ | {"ALERT_WEBHOOK_URL": url, "ALERTMANAGER": "echo"},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    written = tmp_path / "data" / "alertmanager.yml"
    assert out.stdout.split() == [f"--config.file={written}", f"--storage.path={tmp_path / 'data'}", "--flag"]
    doc = yaml.safe_load(written.read_text())
    assert doc["receivers"][0]["webhook_configs"][0]["url"] == url
    assert {k: v for k, v in doc.items() if k != "receivers"} == {
        k: v for k, v in gen.alertmanager_config().items() if k != "receivers"}
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    amtool = shutil.which("amtool")
    if amtool:
        assert subprocess.run([amtool, "check-config", str(written)], capture_output=True).returncode == 0
    for bad, says in (("", "ALERT_WEBHOOK_URL is empty"), ("ntfy.sh/topic", "is not an http:// or https:// URL")):
        out = subprocess.run(["sh", str(ROOT / "alertmanager" / "start.sh"), str(tmp_path / "data")],
                             env=os.environ | {"ALERT_WEBHOOK_URL": bad, "ALERTMANAGER": "echo"},
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 2 and says in out.stderr, out.stderr


def test_the_fleet_dashboard_opens_on_the_firing_alerts():
    dash = gen.fleet_dashboard()
    row, panel = dash["panels"][:2]
    assert row["type"] == "row" and row["title"] == "Alerts"
    assert panel["type"] == "table" and panel["title"] == "Firing and pending alerts"
    assert panel["gridPos"] == {"h": 8, "w": 24, "x": 0, "y": 1}
    (target,) = panel["targets"]
    assert target["expr"] == 'ALERTS{alertstate=~"firing|pending"}' and target["instant"] is True
    assert "Firing and pending alerts" in (ROOT / "docs" / "alarms.md").read_text()
