"""The overlays, one per machine class, and the strategic-merge patches that make them.

The base runs the ``tiny`` profile (deploy/config/tiny.json: seconds an iteration, the size the
``podman kube play`` test brings up) with no placement. Each overlay is a config file of
deploy/config/ and where its pods go; the generator renders the overlay's objects in full, and
its patches are the difference from the base (``patch``), so the overlay applied to the base
(kustomize, ``kubectl apply -k``) gives exactly those objects; tests/royalefleet/test_k8s.py
resolves every overlay with a resolver of its own and checks that.

Adding a machine class: a line in ``OVERLAYS`` (its config file must be in deploy/config/ and
its profile measured in ``sizing.py``), then ``royalefleet k8s``.
"""

from __future__ import annotations

from dataclasses import dataclass

from royalefleet.k8s import sizing
from shared.config import RunConfig

NODE_CLASS = "royalefleet.io/node-class"
"""The node label (and, on a dedicated pool, the taint key) an overlay places pods with:
``kubectl label node NODE royalefleet.io/node-class=gpu`` (docs/kubernetes.md)."""
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
"""GPU nodes are usually tainted ``nvidia.com/gpu:NoSchedule`` (GKE, AKS, the NVIDIA GPU
Operator's guides) so that only pods that ask for a GPU land there."""
POOL_TOLERATION = {"key": NODE_CLASS, "operator": "Equal", "value": "rollout", "effect": "NoSchedule"}


@dataclass(frozen=True)
class Overlay:
    name: str
    config_file: str
    """A file of deploy/config/: its profile gives the fleet size, the battles, the threads and
    the resources."""
    gpus: int = 0
    """``nvidia.com/gpu`` the learner asks for (and a GPU node it is placed on); 0: any node."""
    rollout_pool: bool = False
    """Rollouts and evaluators only on nodes labelled and tainted ``royalefleet.io/node-class=rollout``."""
    about: str = ""


BASE_CONFIG = "tiny.json"
OVERLAYS = (
    Overlay("cpu", "cpu.json", about="the cpu profile on any nodes: one rollout of 16 battles, a 2-thread learner"),
    Overlay("gpu", "laptop.json", gpus=1,
            about="the laptop profile: the learner on a GPU node (nvidia.com/gpu: 1), 3 rollouts of 32 battles "
                  "wherever they fit"),
    Overlay("rollout-pool", "workstation.json", gpus=1, rollout_pool=True,
            about="the workstation profile: the learner on a GPU node, 12 rollouts of 32 battles and the "
                  "evaluators on a node pool of their own (label and taint royalefleet.io/node-class=rollout)"),
)


def place(objects: dict[str, dict], overlay: Overlay, cfg: RunConfig) -> dict[str, dict]:
    """Add the overlay's placement to the workloads (``objects``: service name -> workload) of
    config ``cfg``, in place; a learner with a GPU gets its GPU's host memory figure."""
    if overlay.gpus:
        pod = objects["learner"]["spec"]["template"]["spec"]
        pod["nodeSelector"] = {NODE_CLASS: "gpu"}
        pod["tolerations"] = [dict(GPU_TOLERATION)]
        resources = sizing.learner_resources(cfg, gpu=True)
        resources["limits"][GPU_RESOURCE] = str(overlay.gpus)
        pod["containers"][0]["resources"] = resources
    if overlay.rollout_pool:
        for name in ("rollout", "evaluator"):
            pod = objects[name]["spec"]["template"]["spec"]
            pod["nodeSelector"] = {NODE_CLASS: "rollout"}
            pod["tolerations"] = [dict(POOL_TOLERATION)]
    return objects


MERGE_KEYS = ("name", "mountPath", "containerPort", "port")
"""The patchMergeKey of the lists the objects hold, in the order they are tried: containers,
env and volumes merge by ``name``, volumeMounts by ``mountPath``, a container's ports by
``containerPort``, a Service's by ``port`` (the Kubernetes API's ``x-kubernetes-patch-merge-key``).
A list of anything else (tolerations, command) is replaced whole."""


def merge_key(items: list) -> str | None:
    if not items or not all(isinstance(i, dict) for i in items):
        return None
    for key in MERGE_KEYS:
        if all(key in i for i in items):
            return key
    return None


def patch(base, target, where: str = ""):
    """The strategic-merge patch that turns ``base`` into ``target``; None when they are equal.
    Raises ValueError naming the path where ``target`` lacks something ``base`` has (an overlay
    only adds and changes; a deletion would need ``$patch: delete``)."""
    if base == target:
        return None
    if isinstance(base, dict) and isinstance(target, dict):
        missing = [k for k in base if k not in target]
        if missing:
            raise ValueError(f"{where or '<top>'}: the overlay drops {missing}; an overlay may only add or change")
        out = {}
        for k, v in target.items():
            if k not in base:
                out[k] = v
            else:
                d = patch(base[k], v, f"{where}/{k}")
                if d is not None:
                    out[k] = d
        return out
    if isinstance(base, list) and isinstance(target, list):
        key = merge_key(base + target)
        if key is None:
            return target
        old = {i[key]: i for i in base}
        if [i[key] for i in target][:len(base)] != [i[key] for i in base]:
            raise ValueError(f"{where}: the overlay reorders or drops list items merged by {key}")
        out = []
        for item in target:
            if item[key] not in old:
                out.append(item)
                continue
            d = patch(old[item[key]], item, f"{where}[{key}={item[key]}]")
            if d is not None:
                out.append({key: item[key], **d})
        return out
    return target
