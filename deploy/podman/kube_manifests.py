"""deploy/k8s/base as `podman kube play` (podman 4.3, Debian 12) takes it: what the kube play
integration test (deploy/podman/kube_it.py) plays, and the one place that says what it changes.

podman 4.3 plays Pod, Deployment, PersistentVolumeClaim and ConfigMap objects, and mounts
``configMap``, ``secret`` (a podman secret), ``persistentVolumeClaim`` (a named volume) and
``emptyDir`` volumes. Of the base's other kinds:

- **StatefulSet** (learner, ladder, checkpoint): not played. A StatefulSet of one becomes one Pod
  named as its Service (``learner``, ``ladder``, ``checkpoint``): on a podman network with DNS a
  pod's name resolves to its address, so the addresses every pod dials (``tcp://learner:5555``)
  reach it, as the Service's would (Kubernetes names the pod ``learner-0``). Its
  ``volumeClaimTemplates`` become PersistentVolumeClaims named as Kubernetes names them
  (``<template>-<name>-0``: ``runs-learner-0``, ``results-ladder-0``,
  ``checkpoints-checkpoint-0``), each a podman named volume, owned by the pod's ``fsGroup``
  (podman does not apply ``fsGroup``; the claim's ``volume.podman.io/uid``/``gid`` do).
- **Service**: not played (podman ignores it); see the StatefulSet's pod name above. The
  rollout and evaluator Services exist for scrapes only.
- **Secret**: not played by 4.3; the test makes each one a podman secret whose data is the
  Secret object (``podman_secret``), which is what a ``secret`` volume and ``secretKeyRef``
  read there, with its ``data`` values decoded: 4.3 writes a ``data`` value to its file as it
  stands (the key files would hold base64) and ignores ``stringData``.
- **Namespace**, **PodDisruptionBudget**: nothing to play on one host.
- **NetworkPolicy**: not played by 4.3 (tests/royalefleet/test_k8s.py checks the seams instead).

and in the pod templates:

- ``ports`` are removed: podman 4.3 publishes every ``containerPort`` on the host, on every
  interface, at the same number (a cluster publishes nothing); pods reach each other's ports on
  the podman network without them. A probe's named port becomes its number first, as the
  kubelet resolves it.
- a ``secret`` volume gets ``optional: false`` where it says nothing (Kubernetes' default):
  podman 4.3 dereferences the absent field and crashes (``VolumeFromSecret``, volume.go:165).
- a ``secret`` volume with ``items`` names a podman secret of its own holding only those items
  (``<secret>-<workload>``): podman 4.3 ignores ``items`` and would mount every key (a rollout
  would see the servers' secret key).
- the learner's ``/dev/shm`` emptyDir (``medium: Memory``) is removed: podman 4.3 makes an
  emptyDir a root-owned 0755 volume, where uid 10001 cannot make the semaphore TensorBoard's
  writer needs; every podman container has a /dev/shm tmpfs of its own (mode 1777, 64 MiB
  rather than the manifest's 1 GiB).
- every pod's ``/tmp`` emptyDir (``medium: Memory``) is removed for the same reason, and with it
  the container's ``readOnlyRootFilesystem`` (else torch finds no temporary directory at
  start): under podman the root filesystem stays writable; on Kubernetes it is read-only.
- ``terminationGracePeriodSeconds`` stays, but podman 4.3 does not apply it (a container's stop
  timeout is 10 s): the test deletes a pod with ``podman pod stop -t`` of it (``Workload.grace_s``).

Everything else (images, commands, environment, volume mounts, security context, resources,
probes: podman turns the liveness probe into a healthcheck, which nothing runs on a host without
systemd) goes through as the generator wrote it.
"""

from __future__ import annotations

import base64
import copy
import pathlib
from dataclasses import dataclass, field

import yaml

BASE = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "base"
NOT_PLAYED = {
    "Namespace": "one host: no namespaces",
    "Service": "a singleton's Service name is its pod's name instead, which podman's DNS resolves",
    "PodDisruptionBudget": "no evictions on one host",
    "NetworkPolicy": "podman 4.3 does not play it (its network lets every pod reach every port)",
}


@dataclass
class Workload:
    """One workload of the base, as podman plays it."""

    name: str
    kind: str
    """The base's kind (StatefulSet or Deployment)."""
    docs: list[dict]
    """What `podman kube play` gets for it the first time: the ConfigMaps it mounts, its claims,
    its Pod or Deployment."""
    pod: str
    """The pod podman makes: the Service's name for a StatefulSet, ``<name>-pod-0`` for a
    Deployment (podman 4.3's name for a Deployment's first replica)."""
    claims: list[str] = field(default_factory=list)
    secrets: dict[str, tuple[str, list[str] | None]] = field(default_factory=dict)
    """podman secret -> (the Kubernetes Secret it stands for, the keys it holds or None for all)."""
    grace_s: int = 30
    """terminationGracePeriodSeconds: the ``-t`` of the `podman pod stop` that deletes its pod."""

    @property
    def container(self) -> str:
        """podman's name of the pod's (first) container: ``<pod>-<container>``."""
        body = next(d for d in self.docs if d["kind"] in ("Pod", "Deployment"))
        spec = body["spec"] if body["kind"] == "Pod" else body["spec"]["template"]["spec"]
        return f"{self.pod}-{spec['containers'][0]['name']}"

    def replay_docs(self) -> list[dict]:
        """What a second play of it gets: its claims already exist as volumes (podman 4.3 refuses
        a PersistentVolumeClaim whose volume exists: ``volume already exists``)."""
        return [d for d in self.docs if d["kind"] != "PersistentVolumeClaim"]


def load(base: pathlib.Path = BASE) -> list[dict]:
    """Every object of kustomization ``base``, in its ``resources`` order."""
    kust = yaml.safe_load((base / "kustomization.yaml").read_text())
    objs = []
    for rel in kust["resources"]:
        objs += [d for d in yaml.safe_load_all((base / rel).read_text()) if d]
    return objs


def _named_port(container: dict, port):
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    raise ValueError(f"container {container['name']}: a probe names port {port!r}, which it does not declare")


def _drop_shm(spec: dict, workload: str) -> set[str]:
    """Remove the memory-backed emptyDir volumes mounted at /dev/shm or /tmp, and their mounts;
    returns their names. 4.3 makes an emptyDir a root-owned 0755 volume, which uid 10001 cannot
    write: at /dev/shm every podman container has a tmpfs of its own instead (mode 1777, 64 MiB,
    where the learner's SemLock for TensorBoard's writer works); for /tmp the container's root
    filesystem stays writable (``readOnlyRootFilesystem`` off in the played copy only)."""
    mem = {v["name"] for v in spec.get("volumes", []) if v.get("emptyDir", {}).get("medium") == "Memory"}
    paths = {m["name"]: m["mountPath"] for c in spec.get("containers", []) for m in c.get("volumeMounts", [])
             if m["name"] in mem and m["mountPath"] in ("/dev/shm", "/tmp")}
    shm = set(paths)
    for c in spec.get("containers", []):
        c["volumeMounts"] = [m for m in c.get("volumeMounts", []) if m["name"] not in shm]
        if "/tmp" in paths.values() and c.get("securityContext", {}).get("readOnlyRootFilesystem"):
            c["securityContext"]["readOnlyRootFilesystem"] = False
    spec["volumes"] = [v for v in spec.get("volumes", []) if v["name"] not in shm]
    return shm


def pod_spec(spec: dict, workload: str) -> tuple[dict, dict[str, tuple[str, list[str] | None]]]:
    """(a copy of pod ``spec`` as podman 4.3 plays it, the podman secrets it names): no
    ``ports`` (probes' named ports resolved first), no /dev/shm volume, every secret volume
    ``optional`` explicitly, a secret volume with ``items`` renamed to a podman secret of those
    items only. Raises ValueError for an emptyDir elsewhere (none in the base)."""
    spec = copy.deepcopy(spec)
    secrets: dict[str, tuple[str, list[str] | None]] = {}
    for c in spec.get("containers", []):
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            http = c.get(kind, {}).get("httpGet")
            if http:
                http["port"] = _named_port(c, http["port"])
        c.pop("ports", None)
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                secrets[ref["name"]] = (ref["name"], None)
    shm = _drop_shm(spec, workload)
    for v in spec.get("volumes", []):
        if "emptyDir" in v and v["name"] not in shm:
            raise ValueError(f"{workload}: emptyDir volume {v['name']}: podman 4.3 makes it a root-owned 0755 "
                             "volume a non-root pod cannot write; the harness has a rule for /dev/shm only")
        src = v.get("secret")
        if src is None:
            continue
        src.setdefault("optional", False)
        source = src["secretName"]
        if src.get("items"):
            if any(i["path"] != i["key"] for i in src["items"]):
                raise ValueError(f"{workload}: secret volume {v['name']} maps a key to another path; "
                                 "the harness copies items under their own names only")
            src["secretName"] = f"{source}-{workload}"
            secrets[src["secretName"]] = (source, [i["key"] for i in src.pop("items")])
        else:
            secrets[source] = (source, None)
    return spec, secrets


def _claim(template: dict, sts: str, owner: int | None) -> dict:
    name = f"{template['metadata']['name']}-{sts}-0"
    meta = {"name": name, "labels": dict(template["metadata"].get("labels", {}))}
    if owner is not None:
        meta["annotations"] = {"volume.podman.io/uid": str(owner), "volume.podman.io/gid": str(owner)}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
            "spec": copy.deepcopy(template["spec"])}


def statefulset_pod(sts: dict) -> tuple[dict, list[dict]]:
    """(the Pod standing for a StatefulSet of one, named as its Service; its PersistentVolumeClaims).
    Raises ValueError for more than one replica."""
    name = sts["metadata"]["name"]
    if sts["spec"].get("replicas", 1) != 1:
        raise ValueError(f"StatefulSet {name} has replicas {sts['spec']['replicas']}; the harness plays ones of 1")
    spec = copy.deepcopy(sts["spec"]["template"]["spec"])
    owner = spec.get("securityContext", {}).get("fsGroup")
    templates = sts["spec"].get("volumeClaimTemplates", [])
    claims = [_claim(t, name, owner) for t in templates]
    for t, c in zip(templates, claims):
        spec.setdefault("volumes", []).append(
            {"name": t["metadata"]["name"], "persistentVolumeClaim": {"claimName": c["metadata"]["name"]}})
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": sts["spec"].get("serviceName") or name,
                        "labels": dict(sts["spec"]["template"]["metadata"]["labels"])},
           "spec": spec}
    return pod, claims


def _workload(o: dict, maps: dict[str, dict]) -> Workload:
    kind, name = o["kind"], o["metadata"]["name"]
    if kind == "StatefulSet":
        pod, claims = statefulset_pod(o)
        pod["spec"], secrets = pod_spec(pod["spec"], name)
        body, spec, pod_name = claims + [pod], pod["spec"], pod["metadata"]["name"]
    elif kind == "Deployment":
        if o["spec"].get("replicas", 1) != 1:
            raise ValueError(f"Deployment {name} has replicas {o['spec']['replicas']}: the harness plays 1 "
                             "(podman 4.3 makes <name>-pod-0, -1, ... with no controller behind them)")
        dep, claims = copy.deepcopy(o), []
        dep["spec"]["template"]["spec"], secrets = pod_spec(o["spec"]["template"]["spec"], name)
        body, spec, pod_name = [dep], dep["spec"]["template"]["spec"], f"{name}-pod-0"
    else:
        raise ValueError(f"{kind}/{name}: no rule for this kind in deploy/podman/kube_manifests.py")
    used = sorted({v["configMap"]["name"] for v in spec.get("volumes", []) if "configMap" in v})
    return Workload(name=name, kind=kind, docs=[copy.deepcopy(maps[m]) for m in used] + body, pod=pod_name,
                    claims=[c["metadata"]["name"] for c in claims], secrets=secrets,
                    grace_s=int(spec.get("terminationGracePeriodSeconds", 30)))


def translate(objs: list[dict]) -> tuple[list[Workload], list[str]]:
    """(the workloads in the base's order, one line per object not played and why).

    Raises ValueError naming an object of a kind it has no rule for (a new kind in the
    generator needs a decision here)."""
    maps = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
    out, dropped = [], []
    for o in objs:
        if o["kind"] in NOT_PLAYED:
            dropped.append(f"{o['kind']}/{o['metadata']['name']}: {NOT_PLAYED[o['kind']]}")
        elif o["kind"] != "ConfigMap":  # played with each workload that mounts it
            out.append(_workload(o, maps))
    return out, dropped


def one_file(workloads: list[Workload]) -> list[dict]:
    """Every workload's documents as one stream, each ConfigMap once (its first use)."""
    seen, docs = set(), []
    for w in workloads:
        for d in w.docs:
            key = (d["kind"], d["metadata"]["name"])
            if key not in seen:
                seen.add(key)
                docs.append(d)
    return docs


def to_yaml(docs: list[dict]) -> str:
    """One multi-document YAML stream."""
    return "---\n".join(yaml.safe_dump(d, sort_keys=False, width=1 << 30) for d in docs)


def podman_secret(secret: dict, keys: list[str] | None, name: str) -> str:
    """The data of podman secret ``name`` standing for Kubernetes Secret ``secret`` (a dict) under
    kube play, which reads a secret volume's files from the Secret object the podman secret holds:
    the object, renamed, with only ``keys`` (all when None), each ``data`` value decoded from
    base64: podman 4.3 writes a ``data`` value to its file as it stands, and ignores ``stringData``.
    Raises KeyError naming a missing key, ValueError naming a value that is not UTF-8 text."""
    data = secret.get("data", {})
    if keys is not None:
        missing = [k for k in keys if k not in data]
        if missing:
            raise KeyError(f"Secret {secret['metadata']['name']} has no key {missing[0]!r} (has {sorted(data)})")
        data = {k: data[k] for k in keys}
    text = {}
    for k, v in data.items():
        try:
            text[k] = base64.b64decode(v, validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"Secret {secret['metadata']['name']} key {k!r} is not base64 of UTF-8 text ({exc}); "
                             "podman 4.3 can only be given text") from None
    out = {k: v for k, v in secret.items() if k not in ("data", "stringData", "metadata")}
    return yaml.safe_dump({**out, "metadata": {"name": name}, "data": text}, sort_keys=False)
