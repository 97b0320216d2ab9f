"""What the kube play integration test (deploy/podman/kube_it.py, unrun here: it needs podman and
root) plays: deploy/k8s/base translated for podman 4.3 by deploy/podman/kube_manifests.py, and
the checks it makes of the rows."""

from __future__ import annotations

import base64
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml

from shared.config import ServicesConfig

_HERE = Path(__file__).resolve().parents[2] / "deploy" / "podman"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, _HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, mod)
    spec.loader.exec_module(mod)
    return mod


km = _load("kube_manifests")
_load("compose_it")
kube_it = _load("kube_it")


@pytest.fixture(scope="module")
def played():
    return km.translate(km.load())


def _body(w):
    return next(d for d in w.docs if d["kind"] in ("Pod", "Deployment"))


def _spec(w):
    b = _body(w)
    return b["spec"] if b["kind"] == "Pod" else b["spec"]["template"]["spec"]


def test_statefulsets_become_pods_named_as_their_services_with_their_claims(played):
    workloads, _ = played
    got = [(w.name, w.kind, w.pod, w.container, w.claims) for w in workloads]
    assert got == [
        ("checkpoint", "StatefulSet", "checkpoint", "checkpoint-checkpoint", ["checkpoints-checkpoint-0"]),
        ("ladder", "StatefulSet", "ladder", "ladder-ladder", ["results-ladder-0"]),
        ("learner", "StatefulSet", "learner", "learner-learner", ["runs-learner-0"]),
        ("rollout", "Deployment", "rollout-pod-0", "rollout-pod-0-rollout", []),
        ("evaluator", "Deployment", "evaluator-pod-0", "evaluator-pod-0-evaluator", []),
    ]
    learner = workloads[2]
    claim = next(d for d in learner.docs if d["kind"] == "PersistentVolumeClaim")
    # the pod's fsGroup (the images' uid) owns the volume: podman does not apply fsGroup
    assert claim["metadata"]["annotations"] == {"volume.podman.io/uid": "10001", "volume.podman.io/gid": "10001"}
    mounts = {v["name"]: v for v in _spec(learner)["volumes"]}
    assert mounts["runs"] == {"name": "runs", "persistentVolumeClaim": {"claimName": "runs-learner-0"}}
    # the /dev/shm and /tmp emptyDirs are gone (podman's own tmpfs stands in for /dev/shm; the root
    # filesystem stays writable for /tmp); the other mounts stay
    assert _spec(learner)["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is False
    assert sorted(mounts) == ["config", "curve", "curve-clients", "runs"]
    assert [m["mountPath"] for m in _spec(learner)["containers"][0]["volumeMounts"]] == [
        "/data/runs", "/keys", "/keys-clients", "/etc/royalefleet"]
    assert [d["kind"] for d in learner.replay_docs()] == ["ConfigMap", "Pod"]  # the claim exists by then
    assert learner.grace_s == 180 and workloads[3].grace_s == 30


def test_only_kinds_podman_4_3_plays_are_played_and_the_rest_are_named(played):
    workloads, dropped = played
    kinds = {d["kind"] for d in km.one_file(workloads)}
    assert kinds == {"ConfigMap", "PersistentVolumeClaim", "Pod", "Deployment"}
    assert sorted(line.split(":")[0] for line in dropped) == sorted(
        ["Namespace/royalefleet"] + [f"Service/{n}" for n in ("checkpoint", "ladder", "learner", "rollout", "evaluator")]
        + [f"PodDisruptionBudget/{n}" for n in ("checkpoint", "ladder", "learner")]
        + ["NetworkPolicy/default-deny"]
        + [f"NetworkPolicy/{n}-{way}" for n in ("learner", "ladder", "checkpoint", "rollout", "evaluator")
           for way in ("ingress", "egress")])
    one = km.one_file(workloads)
    assert [d["metadata"]["name"] for d in one if d["kind"] == "ConfigMap"] == ["royalefleet-config"]  # once
    assert len(list(yaml.safe_load_all(km.to_yaml(one)))) == len(one) == 1 + 3 + 3 + 2


def test_no_port_is_published_and_probes_name_numbers(played):
    workloads, _ = played
    ports = ServicesConfig()
    for w in workloads:
        for c in _spec(w)["containers"]:
            assert "ports" not in c, w.name
    learner_c = _spec(workloads[2])["containers"][0]
    assert learner_c["startupProbe"]["httpGet"]["port"] == ports.learner_metrics_port
    rollout_c = _spec(workloads[3])["containers"][0]
    assert rollout_c["livenessProbe"]["httpGet"]["port"] == ports.rollout_metrics_port


def test_secret_volumes_are_explicit_and_each_role_gets_its_own_secret(played):
    workloads, _ = played
    for w in workloads:
        for v in _spec(w)["volumes"]:
            if "secret" in v:
                assert v["secret"]["optional"] is False and "items" not in v["secret"], (w.name, v)
    rollout = workloads[3]
    assert rollout.secrets == {"royalefleet-curve-rollout": ("royalefleet-curve-rollout", None)}
    assert workloads[2].secrets == {"royalefleet-halt": ("royalefleet-halt", None),
                                    "royalefleet-curve-learner": ("royalefleet-curve-learner", None),
                                    "royalefleet-curve-clients-learner": ("royalefleet-curve-clients-learner", None)}
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": "royalefleet-curve", "namespace": "x"},
              "data": {"server.key": base64.b64encode(b"s").decode(), "server.key_secret": "c2VjcmV0",
                       "client.key": "Yw==", "client.key_secret": "Y3M="}}
    got = yaml.safe_load(km.podman_secret(secret, ["server.key", "client.key"], "royalefleet-curve-rollout"))
    assert got == {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": "royalefleet-curve-rollout"},
                   "data": {"server.key": "s", "client.key": "c"}}  # decoded; never the servers' secret
    with pytest.raises(KeyError, match="has no key 'nope'"):
        km.podman_secret(secret, ["nope"], "x")
    with pytest.raises(ValueError, match="key 'bin' is not base64 of UTF-8 text"):
        km.podman_secret({**secret, "data": {"bin": base64.b64encode(bytes([0xff, 0xfe])).decode()}}, None, "x")


def test_a_kind_without_a_rule_is_refused_by_name():
    with pytest.raises(ValueError, match="DaemonSet/agent: no rule"):
        km.translate([{"kind": "DaemonSet", "metadata": {"name": "agent"}}])
    spec = {"containers": [{"name": "c", "volumeMounts": [{"name": "scratch", "mountPath": "/tmp/x"}]}],
            "volumes": [{"name": "scratch", "emptyDir": {}}]}
    with pytest.raises(ValueError, match="w: emptyDir volume scratch"):
        km.pod_spec(spec, "w")


def test_the_learner_checkpoints_every_5_through_a_config_file_added_to_the_map(played):
    workloads, _ = km.translate(km.load())
    assert kube_it.with_checkpoint_every(workloads, 5) == "tiny.json"
    for w in workloads:
        for c in _spec(w)["containers"]:
            env = {e["name"]: e.get("value") for e in c["env"]}
            if "ROYALEFLEET_CONFIG" in env:
                assert env["ROYALEFLEET_CONFIG"] == "/etc/royalefleet/kube-it.json", w.name
    cm = next(d for d in workloads[2].docs if d["kind"] == "ConfigMap")
    assert json.loads(cm["data"]["kube-it.json"]) == {"profile": "tiny", "services": {"host": "0.0.0.0"},
                                                       "checkpoint": {"every_iterations": 5}}
    assert json.loads(cm["data"]["tiny.json"]) == {"profile": "tiny", "services": {"host": "0.0.0.0"}}


def test_rows_are_one_run_when_iterations_run_1_to_n_once_with_one_run_id():
    row = lambda i, rid="a": {"run/iteration": i, "run/run_id": rid}  # noqa: E731
    assert kube_it.contiguous([row(1), row(2), row(3)], "a") == []
    assert kube_it.contiguous([row(1), row(2), row(2), row(3)], "a") == ["iterations [1, 2, 2, 3] are not 1..4 each once"]
    assert kube_it.contiguous([row(1), row(3)], "a") == ["iterations [1, 3] are not 1..2 each once"]
    assert kube_it.contiguous([row(1), row(2, "b")], "a") == ["rows of run ids ['b'] besides a"]
