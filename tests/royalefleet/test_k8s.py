"""The Kubernetes manifests (deploy/k8s/, ``royalefleet k8s``).

* The files are what the generator makes (a hand edit, or a file it does not make, fails).
* Every overlay is resolved here by a kustomize resolver of this file's own (resources,
  namespace, strategic-merge patches with the API's merge keys) and must give exactly the
  objects the generator renders for that machine class; every object of the base, of every
  resolved overlay and of monitoring/ validates against the Kubernetes API's JSON schema for its
  kind and version (kubernetes-validate's strict schemas: an unknown field is an error too).
* The PrometheusRule's groups are the rule file's and pass ``promtool check rules``.
* What the objects say, checked against the profiles and Compose's numbers worked out here.
"""

from __future__ import annotations

import base64
import http.server
import os
import shutil
import subprocess
import re
import threading
import time
from pathlib import Path

import pytest
import yaml

from royalefleet.k8s import alive, files, overlays
from royalefleet.k8s.secrets import key_secrets
from royalefleet.launcher import service_environments
from shared.config import load_config
from shared.transport import curve_server_keys

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
PROMTOOL = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
SCHEMA_VERSIONS = ("1.30.0", "1.36.0")
"""The oldest Kubernetes minor still commonly run and the newest kubernetes-validate ships."""


# ----------------------------------------------------------------------------- the resolver


MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name", "volumes": "name",
              "volumeMounts": "mountPath", "imagePullSecrets": "name"}
"""x-kubernetes-patch-merge-key of the lists a strategic-merge patch merges (the Kubernetes API);
``ports`` merges by ``containerPort`` in a container and by ``port`` in a Service; any other list
is replaced."""


def smp(base, patch, field: str = ""):
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = smp(base[k], v, k) if k in base else v
        return out
    if isinstance(base, list) and isinstance(patch, list):
        key = MERGE_KEYS.get(field)
        if field == "ports":
            key = "containerPort" if all("containerPort" in p for p in base) else "port"
        if key is None:
            return patch
        out = list(base)
        for item in patch:
            at = [i for i, b in enumerate(out) if b[key] == item[key]]
            if at:
                out[at[0]] = smp(out[at[0]], item)
            else:
                out.append(item)
        return out
    return patch


def load_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def resolve(folder: Path) -> list[dict]:
    """What ``kubectl kustomize folder`` gives, for the features deploy/k8s uses."""
    k = load_docs(folder / "kustomization.yaml")[0]
    assert set(k) <= {"apiVersion", "kind", "namespace", "resources", "patches"}, set(k)
    objs = []
    for res in k.get("resources", []):
        p = folder / res
        objs += resolve(p) if p.is_dir() else load_docs(p)
    for entry in k.get("patches", []):
        (patch,) = load_docs(folder / entry["path"])
        hits = [i for i, o in enumerate(objs) if (o["kind"], o["metadata"]["name"]) ==
                (patch["kind"], patch["metadata"]["name"])]
        assert len(hits) == 1, f"patch {entry['path']} matches {len(hits)} objects"
        objs[hits[0]] = smp(objs[hits[0]], patch)
    if "namespace" in k:
        for o in objs:
            if o["kind"] != "Namespace":
                o["metadata"] = {**o["metadata"], "namespace": k["namespace"]}
    return objs


def rendered(config_file: str, overlay=None) -> list[dict]:
    objs = [o for docs in files.app_objects(config_file, overlay).values() for o in docs]
    return [o if o["kind"] == "Namespace" else {**o, "metadata": {**o["metadata"], "namespace": "royalefleet"}}
            for o in objs]


def by_name(objs, kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def container(obj: dict) -> dict:
    (c,) = obj["spec"]["template"]["spec"]["containers"]
    return c


def env(obj: dict) -> dict:
    return {e["name"]: e.get("value") for e in container(obj)["env"]}


OVERLAY_NAMES = [o.name for o in overlays.OVERLAYS]


@pytest.fixture(scope="module")
def resolved() -> dict[str, list[dict]]:
    out = {"base": resolve(K8S / "base"), "monitoring": resolve(K8S / "monitoring")}
    for name in OVERLAY_NAMES:
        out[name] = resolve(K8S / "overlays" / name)
    return out


# ----------------------------------------------------------------------------- generated and current


def test_generated_files_are_current():
    stale = files.stale(ROOT)
    assert not stale, f"not current: {stale}; run `royalefleet k8s`"


def test_check_fails_on_a_hand_edit_and_on_a_file_it_does_not_make(tmp_path, capsys):
    assert files.main(["--check", "--root", str(tmp_path)]) == 1
    assert files.main(["--root", str(tmp_path)]) == 0
    assert files.main(["--check", "--root", str(tmp_path)]) == 0
    learner = tmp_path / "deploy/k8s/base/learner.yaml"
    learner.write_text(learner.read_text().replace("terminationGracePeriodSeconds: 180",
                                                   "terminationGracePeriodSeconds: 30"))
    extra = tmp_path / "deploy/k8s/overlays/cpu/extra.yaml"
    extra.write_text("kind: ConfigMap\n")
    capsys.readouterr()
    assert files.main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "not current: deploy/k8s/base/learner.yaml" in err and "not current: deploy/k8s/overlays/cpu/extra.yaml" in err
    assert files.main(["--root", str(tmp_path)]) == 0 and not extra.exists()
    assert files.main(["--check", "--root", str(tmp_path)]) == 0


# ----------------------------------------------------------------------------- overlays resolve to the machine class


@pytest.mark.parametrize("overlay", overlays.OVERLAYS, ids=lambda o: o.name)
def test_each_overlay_resolves_to_its_machine_class(resolved, overlay):
    assert resolved[overlay.name] == rendered(overlay.config_file, overlay)


def test_base_resolves_to_the_tiny_profile(resolved):
    assert resolved["base"] == rendered("tiny.json")


# Worked out from shared/config.py's profiles (README's profile table): fleet size, battles,
# learner threads, and where the learner goes.
MACHINE_CLASSES = {
    "base": dict(rollouts=1, battles=4, threads=1, gpu=None, pool=False),
    "cpu": dict(rollouts=1, battles=16, threads=2, gpu=None, pool=False),
    "gpu": dict(rollouts=3, battles=32, threads=4, gpu="1", pool=False),
    "rollout-pool": dict(rollouts=12, battles=32, threads=4, gpu="1", pool=True),
}


@pytest.mark.parametrize("name", MACHINE_CLASSES)
def test_fleet_size_battles_threads_and_placement(resolved, name):
    want = MACHINE_CLASSES[name]
    deps, sets = by_name(resolved[name], "Deployment"), by_name(resolved[name], "StatefulSet")
    rollout, learner = deps["rollout"], sets["learner"]
    assert rollout["spec"]["replicas"] == want["rollouts"]
    assert env(rollout)["ROYALEFLEET_BATTLES"] == str(want["battles"])
    assert env(learner)["ROYALEFLEET_MIN_ROLLOUTS"] == str(want["rollouts"])
    assert env(learner)["OMP_NUM_THREADS"] == str(want["threads"])
    res = container(learner)["resources"]
    assert res["requests"]["cpu"] == str(want["threads"])
    assert res["limits"].get("nvidia.com/gpu") == want["gpu"]
    pod = learner["spec"]["template"]["spec"]
    assert pod.get("nodeSelector") == ({"royalefleet.io/node-class": "gpu"} if want["gpu"] else None)
    for scaled in ("rollout", "evaluator"):
        sel = deps[scaled]["spec"]["template"]["spec"].get("nodeSelector")
        assert sel == ({"royalefleet.io/node-class": "rollout"} if want["pool"] else None)
    assert sum(o["kind"] == "StatefulSet" for o in resolved[name]) == 3
    assert all(s["spec"]["replicas"] == 1 for s in sets.values())


# ----------------------------------------------------------------------------- schemas


def schema_errors(objs: list[dict]) -> list[str]:
    import kubernetes_validate as kv

    errors = []
    for version in SCHEMA_VERSIONS:
        for o in objs:
            if o["apiVersion"].startswith("monitoring.coreos.com/"):
                continue  # a CRD: no schema in kubernetes-validate; the rule groups go through promtool below
            try:
                kv.validate(o, version, strict=True)
            except kv.ValidationError as exc:
                errors.append(f"{version} {o['kind']}/{o['metadata']['name']}: {exc}")
    return errors


@pytest.mark.parametrize("name", ["base", "monitoring", *OVERLAY_NAMES])
def test_every_object_validates_against_the_kubernetes_schema(resolved, name):
    pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate==1.37.0 (the dev extra)")
    kinds = {o["kind"] for o in resolved[name]}
    if name != "monitoring":
        assert {"StatefulSet", "Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "Namespace"} <= kinds
    assert schema_errors(resolved[name]) == []


def test_the_schema_check_finds_a_wrong_object():
    pytest.importorskip("kubernetes_validate")
    learner = by_name(rendered("tiny.json"), "StatefulSet")["learner"]
    bad = {**learner, "spec": {**learner["spec"], "replicas": "one", "serviceNmae": "learner"}}
    (err,) = schema_errors([bad])[:1]
    assert "StatefulSet/learner" in err


def test_prometheus_rule_has_the_rule_files_groups(resolved):
    (rule,) = [o for o in resolved["monitoring"] if o["kind"] == "PrometheusRule"]
    assert rule["spec"] == yaml.safe_load((ROOT / "prometheus/rules/alarms.yml").read_text())


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian: apt-get install prometheus)")
def test_promtool_accepts_the_prometheus_rule_groups(resolved, tmp_path):
    (rule,) = [o for o in resolved["monitoring"] if o["kind"] == "PrometheusRule"]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    p = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS" in p.stdout


def test_dashboards_are_configmaps_for_the_sidecar(resolved):
    maps = [o for o in resolved["monitoring"] if o["kind"] == "ConfigMap" and "grafana_dashboard" in o["metadata"]["labels"]]
    names = sorted(p.stem for p in (ROOT / "grafana/dashboards").glob("*.json"))
    assert sorted(m["metadata"]["name"].removeprefix("royalefleet-dashboard-") for m in maps) == names
    for m in maps:
        assert m["metadata"]["labels"]["grafana_dashboard"] == "1"
        (text,) = m["data"].values()
        name = m["metadata"]["name"].removeprefix("royalefleet-dashboard-")
        assert text == (ROOT / f"grafana/dashboards/{name}.json").read_text()
        assert len(text.encode()) < 1 << 20  # a ConfigMap holds at most 1 MiB


def test_service_monitor_scrapes_every_metrics_port_as_the_compose_job_names(resolved):
    (sm,) = [o for o in resolved["monitoring"] if o["kind"] == "ServiceMonitor"]
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    services = by_name(resolved["base"], "Service")
    assert sorted(services) == ["checkpoint", "evaluator", "ladder", "learner", "rollout"]
    for name, svc in services.items():
        assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
        ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
        assert ports["metrics"] == {"learner": 9100, "ladder": 9101, "checkpoint": 9102, "rollout": 9110,
                                    "evaluator": 9200}[name]
    zmq = {n: {p["name"]: p["port"] for p in s["spec"]["ports"]}.get("zmq") for n, s in services.items()}
    assert zmq == {"learner": 5555, "ladder": 5556, "checkpoint": 5557, "rollout": None, "evaluator": None}


# ----------------------------------------------------------------------------- what the objects say


def test_environment_is_the_launchers_with_service_names(resolved):
    """One code path: each container's environment is what ``royalefleet up`` gives the same
    config, addresses aside (0.0.0.0 to bind, Service names to connect), plus the keys."""
    cfg = load_config(ROOT / "deploy/config/cpu.json")
    want = service_environments(cfg, "/etc/royalefleet/cpu.json", "/data/runs")
    objs = {**by_name(resolved["cpu"], "StatefulSet"), **by_name(resolved["cpu"], "Deployment")}
    for name, key in (("learner", "learner"), ("ladder", "ladder"), ("checkpoint", "checkpoint"),
                      ("rollout", "rollout-0"), ("evaluator", "evaluator-0")):
        got = env(objs[name])
        for var, value in want[key].items():
            if var in ("ROYALEFLEET_LADDER", "ROYALEFLEET_CHECKPOINT", "ROYALEFLEET_LEARNER"):
                service = var.removeprefix("ROYALEFLEET_").lower()
                assert got[var] == f"tcp://{service}:{value.rsplit(':', 1)[1]}", (name, var)
            else:
                assert got[var] == value, (name, var)
        assert got["ROYALEFLEET_CURVE_DIR"] == "/keys"
    assert env(objs["learner"])["ROYALEFLEET_LADDER"] == "tcp://ladder:5556"


def test_singletons_keep_their_part_of_the_run_and_the_learner_its_grace(resolved):
    sets = by_name(resolved["base"], "StatefulSet")
    claims = {n: [c["metadata"]["name"] for c in s["spec"]["volumeClaimTemplates"]] for n, s in sets.items()}
    assert claims == {"learner": ["runs"], "ladder": ["results"], "checkpoint": ["checkpoints"]}
    for n, s in sets.items():
        mounts = {m["mountPath"]: m["name"] for m in container(s)["volumeMounts"]}
        assert mounts["/data/runs"] == claims[n][0]
    # compose.yaml's stop_grace_period and royalefleet up's wait: the learner's checkpoint on SIGTERM.
    assert sets["learner"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 180
    pdbs = by_name(resolved["base"], "PodDisruptionBudget")
    assert sorted(pdbs) == ["checkpoint", "ladder", "learner"]
    assert all(p["spec"]["maxUnavailable"] == 0 for p in pdbs.values())


def test_pods_run_as_the_images_user_and_rollouts_never_hold_the_server_secret(resolved):
    for o in resolved["rollout-pool"]:
        if o["kind"] not in ("StatefulSet", "Deployment"):
            continue
        name = o["metadata"]["name"]
        pod = o["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
        assert pod["automountServiceAccountToken"] is False
        assert container(o)["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                                   "readOnlyRootFilesystem": True}
        # each role mounts its own Secret (royalefleet/key_roles.py), a server its own allow-list too
        secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
        want = {"curve": f"royalefleet-curve-{name}"}
        if name in ("learner", "ladder", "checkpoint"):
            want["curve-clients"] = f"royalefleet-curve-clients-{name}"
        assert secrets == want
        assert all("items" not in v["secret"] for v in pod["volumes"] if "secret" in v)
    text = "".join(p.read_text() for p in K8S.rglob("*.yaml"))
    assert "key_secret:" not in text and "kind: Secret" not in text  # the keys are never in the manifests


def test_learner_probes(resolved):
    c = container(by_name(resolved["base"], "StatefulSet")["learner"])
    assert c["readinessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    assert c["livenessProbe"]["exec"]["command"][:3] == ["python", "-m", "royalefleet.k8s.alive"]
    # compose.yaml's start_period of the learner: 300 s.
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] == 300


# ----------------------------------------------------------------------------- the liveness command


class _Metrics(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(type(self).body)

    def log_message(self, *a):
        pass


@pytest.fixture
def metrics_server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_alive_passes_a_recent_row_and_fails_a_wedged_learner(metrics_server, capsys):
    port = str(metrics_server.server_address[1])
    now = time.time()
    _Metrics.body = (f"# HELP x\nroyalefleet_learner_progress_timestamp_seconds {now - 30:.3f}\n").encode()
    assert alive.main(["--port", port, "--max-age", "1200"]) == 0
    _Metrics.body = (f"royalefleet_learner_progress_timestamp_seconds {now - 1300:.3f}\n").encode()
    assert alive.main(["--port", port, "--max-age", "1200"]) == 1
    # the age is read on this clock after the body was written: 1300 s, or a second more on a busy machine
    assert re.search(r"learner wedged: no metric row for 130[0-9] s \(more than 1200 s\)", capsys.readouterr().err)
    _Metrics.body = b"other_metric 1\n"
    assert alive.main(["--port", port]) == 1
    assert "royalefleet_learner_progress_timestamp_seconds is not in" in capsys.readouterr().err


def test_alive_fails_when_nothing_answers(capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert alive.main(["--port", str(port), "--timeout", "2"]) == 1
    assert "learner not alive" in capsys.readouterr().err


# ----------------------------------------------------------------------------- keys as Secrets


def test_key_secrets_hold_the_keys_folder(tmp_path):
    from royalefleet.cmd_keys import ensure_keys

    folder = tmp_path / "keys"
    ensure_keys(str(folder), ["box2"])
    doc = key_secrets(str(folder))
    secrets = {i["metadata"]["name"]: i["data"] for i in doc["items"]}
    assert sorted(secrets["royalefleet-curve-learner"]) == ["client.key", "client.key_secret", "server.key",
                                                            "server.key_secret"]
    for client in ("rollout", "evaluator"):  # never the servers' secret
        assert "server.key_secret" not in secrets[f"royalefleet-curve-{client}"]
    assert sorted(secrets["royalefleet-curve-rollout"]) == ["client.key", "client.key_secret", "server.key"]
    assert sorted(secrets["royalefleet-curve-evaluator"]) == ["client.key", "client.key_secret",
                                                              "ladder-evaluator.token", "server.key"]
    assert sorted(secrets["royalefleet-curve-ladder"]) == ["server.key", "server.key_secret"]
    assert sorted(secrets["royalefleet-curve-clients-learner"]) == ["box2.key", "local.key"]
    assert sorted(secrets["royalefleet-curve-clients-ladder"]) == ["evaluator.key", "learner.key"]
    assert sorted(secrets["royalefleet-curve-clients-checkpoint"]) == ["evaluator.key", "learner.key"]
    clients = secrets["royalefleet-curve-clients-learner"]
    assert base64.b64decode(clients["box2.key"]) == (folder / "hosts/box2/client.key").read_bytes()
    assert base64.b64decode(secrets["royalefleet-curve-checkpoint"]["server.key_secret"]) == (
        folder / "server.key_secret").read_bytes()
    pytest.importorskip("kubernetes_validate")
    assert schema_errors(doc["items"]) == []


def test_keys_command_writes_the_secrets_alone_on_stdout(tmp_path):
    import json
    import sys

    p = subprocess.run([sys.executable, "-m", "royalefleet.cmd_keys", "--dir", str(tmp_path / "k"), "--k8s-secrets"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert [i["kind"] for i in json.loads(p.stdout)["items"]] == ["Secret"] * 8
    assert "the learner admits" in p.stderr


def test_allow_list_folder_can_be_named_apart():
    environ = {"ROYALEFLEET_CURVE_DIR": "/keys"}
    assert curve_server_keys(environ).allowed_clients_dir == os.path.join("/keys", "clients")
    environ["ROYALEFLEET_CURVE_CLIENTS_DIR"] = "/keys-clients"
    assert curve_server_keys(environ).allowed_clients_dir == "/keys-clients"


def test_memory_from_the_doctors_figures(resolved):
    """Worked out by hand from royalefleet doctor's figures (sizing.py): need x 1.25, rounded up
    to 128 MiB; the limit twice that."""
    cpu = {**by_name(resolved["cpu"], "StatefulSet"), **by_name(resolved["cpu"], "Deployment")}
    # cpu learner: 816 + 254 + 120 = 1190 MiB -> 1487.5 -> 1536
    assert container(cpu["learner"])["resources"]["requests"]["memory"] == "1536Mi"
    assert container(cpu["learner"])["resources"]["limits"]["memory"] == "3072Mi"
    # a rollout of 16 battles: 103 + 6.5 x 15 = 200.5 MiB -> 250.6 -> 256
    assert container(cpu["rollout"])["resources"]["requests"]["memory"] == "256Mi"
    # workstation learner on a GPU: 855 + 3844 (the minibatch is device memory) -> 5873.75 -> 5888
    pool = by_name(resolved["rollout-pool"], "StatefulSet")
    assert container(pool["learner"])["resources"]["requests"]["memory"] == "5888Mi"


KUBECTL = shutil.which("kubectl")


def unordered(obj, field: str = ""):
    """``obj`` with every list merged by key sorted by that key: kustomize puts a patch's items
    first, this file's resolver keeps the base's order; the API gives neither order a meaning
    here (no env value refers to another)."""
    if isinstance(obj, dict):
        return {k: unordered(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        items = [unordered(i) for i in obj]
        key = MERGE_KEYS.get(field) or ("containerPort" if field == "ports" and items and "containerPort" in items[0]
                                        else "port" if field == "ports" else None)
        return sorted(items, key=lambda i: str(i[key])) if key else items
    return obj


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed (its built-in kustomize checks the resolver)")
@pytest.mark.parametrize("name", ["base", "monitoring", *(f"overlays/{n}" for n in OVERLAY_NAMES)])
def test_kubectl_kustomize_agrees_with_the_resolver(name):
    """Where kubectl is installed, its kustomize builds each folder to the objects this file's
    resolver gives (the resolver is what every schema check above runs on)."""
    out = subprocess.run([KUBECTL, "kustomize", str(K8S / name)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    real = {(o["kind"], o["metadata"]["name"]): unordered(o) for o in yaml.safe_load_all(out.stdout) if o}
    mine = {(o["kind"], o["metadata"]["name"]): unordered(o) for o in resolve(K8S / name)}
    assert real == mine


def test_alive_imports_neither_yaml_nor_torch():
    """The probe runs in the images every 30 s: no PyYAML there, and torch would cost seconds."""
    import sys

    code = ("import sys; sys.modules['yaml'] = None; import royalefleet.k8s.alive; "
            "assert 'torch' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr


# ----------------------------------------------------------------------------- the Secrets as a pod sees them


def kubelet_secret_volume(folder: Path, secret: dict, version: str) -> None:
    """Lay ``secret`` out as the kubelet mounts a Secret volume: the files in a timestamped
    folder, ``..data`` a symlink to it, and each key a symlink through ``..data``; a later
    version swaps ``..data`` atomically (how an applied Secret reaches a running pod)."""
    folder.mkdir(exist_ok=True)
    stamp = folder / f"..{version}"
    stamp.mkdir()
    for key, value in secret["data"].items():
        (stamp / key).write_bytes(base64.b64decode(value))
    tmp = folder / "..data_tmp"
    tmp.symlink_to(stamp.name)
    os.replace(tmp, folder / "..data")
    for key in secret["data"]:
        if not (folder / key).is_symlink():
            (folder / key).symlink_to(f"..data/{key}")


def test_a_server_admits_clients_from_the_mounted_allow_list_and_a_host_added_later(tmp_path):
    """The learner's view of the two Secrets (royalefleet keys --k8s-secrets): the allow-list at
    its own path through ROYALEFLEET_CURVE_CLIENTS_DIR admits the local client, and a host
    added later (a new version of the Secret, swapped in by the kubelet) is admitted without a
    restart while a stranger still gets nothing."""
    import zmq
    import zmq.auth

    from royalefleet.cmd_keys import ensure_keys
    from shared import transport

    folder = tmp_path / "keys"
    ensure_keys(str(folder))

    def secret(name):
        return next(i for i in key_secrets(str(folder))["items"] if i["metadata"]["name"] == name)

    curve, clients = secret("royalefleet-curve-learner"), secret("royalefleet-curve-clients-learner")
    kubelet_secret_volume(tmp_path / "pod-keys", curve, "v1")
    kubelet_secret_volume(tmp_path / "pod-clients", clients, "v1")
    environ = {"ROYALEFLEET_CURVE_DIR": str(tmp_path / "pod-keys"),
               "ROYALEFLEET_CURVE_CLIENTS_DIR": str(tmp_path / "pod-clients")}
    ctx = zmq.Context()
    socks = []
    try:
        server = transport.bind_router("tcp://127.0.0.1:*", ctx=ctx, curve=transport.curve_server_keys(environ))
        socks.append(server)
        address = server.getsockopt_string(zmq.LAST_ENDPOINT)

        def ask(client_secret: Path, payload: bytes, wait_ms: int = 5000) -> bool:
            sock = transport.connect_dealer(address, ctx=ctx, curve=transport.CurveClient(
                str(client_secret), str(tmp_path / "pod-keys" / "server.key")))
            socks.append(sock)
            sock.send(payload)
            if not server.poll(wait_ms, zmq.POLLIN):
                return False
            return server.recv_multipart()[1] == payload

        assert ask(folder / "roles" / "rollout" / "client.key_secret", b"local")
        assert not ask(tmp_path / "pod-keys" / "client.key_secret", b"the learner's own client key", wait_ms=1500)
        ensure_keys(str(folder), ["box3"])  # royalefleet keys --host box3 --k8s-secrets | kubectl apply -f -
        assert not ask(folder / "hosts/box3/client.key_secret", b"too early", wait_ms=1500)
        kubelet_secret_volume(tmp_path / "pod-clients", secret("royalefleet-curve-clients-learner"), "v2")
        assert ask(folder / "hosts/box3/client.key_secret", b"box3")
        zmq.auth.create_certificates(str(tmp_path), "stranger")
        assert not ask(tmp_path / "stranger.key_secret", b"stranger", wait_ms=1500)
    finally:
        transport.stop_curve(ctx)
        for s in socks:
            s.close(0)
        for t in threading.enumerate():  # each refusal watcher closes its monitor once its socket is gone
            if t.name == "curve-refusal-watch":
                t.join(5)
        # destroy, not term: a watcher still inside join's 5 s on a loaded machine holds its
        # monitor socket open, and term() then waits for it forever (a 600 s pytest timeout, seen once)
        ctx.destroy(linger=0)


def test_network_policies_allow_only_the_protocols_seams(resolved):
    """Default deny both ways; each ZeroMQ port takes exactly its protocol clients; a client may
    connect only to its servers' ZeroMQ ports (and DNS)."""
    pols = by_name(resolved["base"], "NetworkPolicy")
    deny = pols["default-deny"]["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    zmq_port = {"learner": 5555, "ladder": 5556, "checkpoint": 5557}
    seams = {"rollout": {"learner"}, "learner": {"ladder", "checkpoint"}, "evaluator": {"ladder", "checkpoint"}}
    for server, port in zmq_port.items():
        rules = pols[f"{server}-ingress"]["spec"]["ingress"]
        zmq_rules = [r for r in rules if {"protocol": "TCP", "port": port} in r["ports"]]
        (rule,) = zmq_rules
        allowed = {f["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for f in rule["from"]}
        assert allowed == {c for c, servers in seams.items() if server in servers}, server
        assert all("namespaceSelector" not in f for f in rule["from"])
    for client in ("rollout", "learner", "evaluator", "ladder", "checkpoint"):
        rules = pols[f"{client}-egress"]["spec"]["egress"]
        reach = {(r["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"], r["ports"][0]["port"])
                 for r in rules if "to" in r}
        assert reach == {(s, zmq_port[s]) for s in seams.get(client, ())}, client
        assert [r for r in rules if "to" not in r] == [{"ports": [{"protocol": "UDP", "port": 53},
                                                                  {"protocol": "TCP", "port": 53}]}]
    # a rollout's pod selector is not in the ladder's or the checkpoint service's ingress at all
    for server in ("ladder", "checkpoint"):
        assert "rollout" not in str(pols[f"{server}-ingress"]["spec"])
