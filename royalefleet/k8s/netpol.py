"""NetworkPolicies: only the seams the protocol has (docs/protocol.md, docs/reliability.md
"Least privilege by role").

Every pod of the namespace is denied all ingress and egress (``default-deny``), then each
service gets back exactly what it uses:

    rollout    -> learner:zmq                    (Hello, rounds; nothing else)
    learner    -> ladder:zmq, checkpoint:zmq     (plans, reports, admissions; saves, loads)
    evaluator  -> ladder:zmq, checkpoint:zmq     (jobs and results; snapshot loads)
    anyone     -> each pod's metrics port, the learner's halt port (Prometheus and Grafana run
                  in another namespace; the halt endpoint needs its bearer token)
    every pod  -> DNS (port 53) to resolve the Service names

So a rollout cannot reach the ladder or the checkpoint service at all, whatever keys it holds.
Enforced only where the cluster's network plugin enforces NetworkPolicies (Calico, Cilium, ...).
"""

from __future__ import annotations

from royalefleet.k8s.common import HALT_PORT, METRICS_PORTS, PART_OF, ZMQ_PORTS, selector

SEAMS = {"rollout": ("learner",), "learner": ("ladder", "checkpoint"), "evaluator": ("ladder", "checkpoint")}
"""Client -> the servers it connects to (their ZeroMQ port). Nothing else crosses pods."""


def _policy(name: str, spec: dict) -> dict:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "labels": dict(PART_OF)}, "spec": spec}


def _dns() -> dict:
    return {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}


def default_deny() -> dict:
    return _policy("default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})


def ingress(server: str) -> dict:
    """Who may open connections to ``server``'s pods: its protocol clients on its ZeroMQ port,
    anyone on its metrics port (and the learner's halt port)."""
    rules = []
    clients = sorted(c for c, servers in SEAMS.items() if server in servers)
    if clients:
        rules.append({"from": [{"podSelector": {"matchLabels": selector(c)}} for c in clients],
                      "ports": [{"protocol": "TCP", "port": ZMQ_PORTS[server]}]})
    scrape = [{"protocol": "TCP", "port": METRICS_PORTS[server]}]
    if server == "learner":
        scrape.append({"protocol": "TCP", "port": HALT_PORT})
    rules.append({"from": [{"namespaceSelector": {}}], "ports": scrape})
    return _policy(f"{server}-ingress", {"podSelector": {"matchLabels": selector(server)},
                                         "policyTypes": ["Ingress"], "ingress": rules})


def egress(client: str) -> dict:
    """Where ``client``'s pods may connect: DNS and its servers' ZeroMQ ports."""
    rules = [_dns()]
    for server in SEAMS.get(client, ()):
        rules.append({"to": [{"podSelector": {"matchLabels": selector(server)}}],
                      "ports": [{"protocol": "TCP", "port": ZMQ_PORTS[server]}]})
    return _policy(f"{client}-egress", {"podSelector": {"matchLabels": selector(client)},
                                        "policyTypes": ["Egress"], "egress": rules})


def policies() -> list[dict]:
    """The namespace's NetworkPolicies: the default deny, one ingress and one egress per service."""
    names = list(METRICS_PORTS)
    return [default_deny(), *(ingress(n) for n in names), *(egress(n) for n in names)]
