"""Services (the three ZeroMQ endpoints and every /metrics port), the PodDisruptionBudgets of
the singletons, the Namespace, and the ConfigMap of deploy/config/."""

from __future__ import annotations

from royalefleet.k8s.common import CONFIG_MAP, HALT_PORT, METRICS_PORTS, NAMESPACE, PART_OF, ROOT, ZMQ_PORTS, meta, selector

SINGLETONS = ("learner", "ladder", "checkpoint")
SCALED = ("rollout", "evaluator")


def service(name: str) -> dict:
    """A singleton's Service is a ClusterIP: one address that outlives its pod, so a peer's
    ZeroMQ socket reconnects to the replacement. A scaled service's is headless (no address of
    its own): it exists so that the ServiceMonitor scrapes each replica on its /metrics port
    under the job name Compose's Prometheus uses (the Service's name)."""
    ports = []
    if name in ZMQ_PORTS:
        ports.append({"name": "zmq", "port": ZMQ_PORTS[name], "targetPort": "zmq", "protocol": "TCP"})
    ports.append({"name": "metrics", "port": METRICS_PORTS[name], "targetPort": "metrics", "protocol": "TCP"})
    if name == "learner":
        ports.append({"name": "halt", "port": HALT_PORT, "targetPort": "halt", "protocol": "TCP"})
    spec = {"selector": selector(name), "ports": ports}
    if name in SCALED:
        spec["clusterIP"] = "None"
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta(name), "spec": spec}


def disruption_budget(name: str) -> dict:
    """No voluntary eviction of a singleton (a drain, the cluster autoscaler): it waits for an
    operator who deletes the pod, and so decides when the learner checkpoints and moves."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(name),
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": selector(name)}}}


def namespace() -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": dict(PART_OF)}}


def config_map() -> dict:
    """Every file of deploy/config/, mounted at /etc/royalefleet (what compose.yaml mounts there)."""
    files = sorted((ROOT / "deploy" / "config").glob("*.json"))
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP, "labels": dict(PART_OF)},
            "data": {p.name: p.read_text() for p in files}}
