"""The five services as workloads: the learner, the ladder and the checkpoint service as
StatefulSets of one (each with its own volume: the same split of the run folder as Compose's
``runs``, ``results`` and ``checkpoints`` volumes), the rollouts and the evaluators as
Deployments. Every container runs ``python -m services.<name>`` with the environment
``launcher.service_environments`` gives it for the same config (as ``royalefleet up`` and
compose.yaml do), its peers addressed by Service name."""

from __future__ import annotations

from royalefleet.k8s import probes, sizing
from royalefleet.k8s.common import (CLIENTS_DIR, CONFIG_DIR, CONFIG_MAP, HALT_PORT,
                                    HALT_SECRET, HALT_SECRET_KEY, IMAGE_UID, KEYS_DIR, LEARNER_GRACE_S, LEARNER_IMAGE,
                                    METRICS_PORTS, OTHERS_GRACE_S, ROLLOUT_IMAGE, RUNS_DIR, ZMQ_PORTS, labels, meta,
                                    selector, tcp, clients_secret, curve_secret)
from royalefleet.launcher import module_of, service_environments
from shared.config import RunConfig
from shared.run_dir import CHECKPOINTS
from shared.transport import CLIENTS_DIR_ENV, CURVE_DIR_ENV

CONNECTS = {"learner": {"ROYALEFLEET_LADDER": tcp("ladder"), "ROYALEFLEET_CHECKPOINT": tcp("checkpoint")},
            "rollout": {"ROYALEFLEET_LEARNER": tcp("learner")},
            "evaluator": {"ROYALEFLEET_LADDER": tcp("ladder"), "ROYALEFLEET_CHECKPOINT": tcp("checkpoint")}}
"""The addresses a service connects to: Service names, never pod IPs (a replaced pod's new IP
is behind the same name; ZeroMQ reconnects to it by itself)."""

SERVERS = ("learner", "ladder", "checkpoint")
"""Services that bind a CURVE ROUTER: they mount the allow-list and the servers' secret key."""

VOLUME_OF = {"learner": "runs", "ladder": "results", "checkpoint": CHECKPOINTS}
"""Each singleton's volume, as in compose.yaml (docs/compose.md "Where the run is"); the checkpoint
service's is named after the run folder's ``checkpoints/`` it holds (``shared.run_dir``)."""

TMP_MI = 256
"""Every pod's /tmp (a memory emptyDir: the root filesystem is read-only), MiB."""
LEARNER_SHM_GI = 1
"""/dev/shm of the learner (compose.yaml's ``shm_size: 1gb``)."""


def environment(cfg: RunConfig, config_file: str, name: str) -> list[dict]:
    """Service ``name``'s environment: ``service_environments`` for ``config_file`` (a file of
    deploy/config/, mounted at /etc/royalefleet), connections by Service name, the CURVE keys."""
    envs = service_environments(cfg, f"{CONFIG_DIR}/{config_file}", RUNS_DIR)
    env = dict(envs[{"rollout": "rollout-0", "evaluator": "evaluator-0"}.get(name, name)])
    env.update(CONNECTS.get(name, {}))
    env[CURVE_DIR_ENV] = KEYS_DIR
    if name in SERVERS:
        env[CLIENTS_DIR_ENV] = CLIENTS_DIR
    out = [{"name": k, "value": v} for k, v in env.items()]
    if name == "learner":
        # The halt endpoint runs only with a token: from a Secret the operator makes (optional).
        out.append({"name": "ROYALEFLEET_HALT_TOKEN", "valueFrom": {
            "secretKeyRef": {"name": HALT_SECRET, "key": HALT_SECRET_KEY, "optional": True}}})
    return out


def ports(name: str) -> list[dict]:
    out = []
    if name in ZMQ_PORTS:
        out.append({"name": "zmq", "containerPort": ZMQ_PORTS[name], "protocol": "TCP"})
    out.append({"name": "metrics", "containerPort": METRICS_PORTS[name], "protocol": "TCP"})
    if name == "learner":
        out.append({"name": "halt", "containerPort": HALT_PORT, "protocol": "TCP"})
    return out


def key_volumes(name: str) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts) of the CURVE keys: the role's own Secret (royalefleet/key_roles.py: a
    rollout or evaluator gets the server's public key and its own keypair, never the servers'
    secret, from which the writer token is derived) and, for a server, its own allow-list."""
    volumes = [{"name": "curve", "secret": {"secretName": curve_secret(name), "defaultMode": 0o440}}]
    mounts = [{"name": "curve", "mountPath": KEYS_DIR, "readOnly": True}]
    if name in SERVERS:
        volumes.append({"name": "curve-clients", "secret": {"secretName": clients_secret(name), "defaultMode": 0o440}})
        mounts.append({"name": "curve-clients", "mountPath": CLIENTS_DIR, "readOnly": True})
    return volumes, mounts


def container(cfg: RunConfig, config_file: str, name: str, resources: dict, mounts: list[dict]) -> dict:
    return {
        "name": name,
        "image": ROLLOUT_IMAGE if name == "rollout" else LEARNER_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", module_of(name)],
        "env": environment(cfg, config_file, name),
        "ports": ports(name),
        "resources": resources,
        "volumeMounts": mounts,
        **probes.probes(name),
        # Writes go to the volumes only (/data/runs, /dev/shm); the image itself stays as built.
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "readOnlyRootFilesystem": True},
    }


def pod_template(cfg: RunConfig, config_file: str, name: str, resources: dict, *, grace: int,
                 volumes: list[dict] = (), mounts: list[dict] = ()) -> dict:
    key_vols, key_mounts = key_volumes(name)
    volumes, mounts = list(volumes) + key_vols, list(mounts) + key_mounts
    if name != "rollout":
        volumes.append({"name": "config", "configMap": {"name": CONFIG_MAP}})
        mounts.append({"name": "config", "mountPath": CONFIG_DIR, "readOnly": True})
    # The root filesystem is read-only: /tmp is a small memory volume (torch asks for a temporary
    # directory at start and fails without one).
    volumes.append({"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": f"{TMP_MI}Mi"}})
    mounts.append({"name": "tmp", "mountPath": "/tmp"})
    spec = {
        "securityContext": {"runAsNonRoot": True, "runAsUser": IMAGE_UID, "runAsGroup": IMAGE_UID,
                            "fsGroup": IMAGE_UID, "seccompProfile": {"type": "RuntimeDefault"}},
        "enableServiceLinks": False,
        # No pod talks to the Kubernetes API: no service-account token to steal.
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": grace,
        "containers": [container(cfg, config_file, name, resources, mounts)],
        "volumes": volumes,
    }
    return {"metadata": {"labels": labels(name)}, "spec": spec}


def stateful_set(cfg: RunConfig, config_file: str, name: str, resources: dict, volume_gi: int) -> dict:
    """One replica with a ReadWriteOnce claim for its part of the run folder at /data/runs."""
    volume = VOLUME_OF[name]
    volumes, mounts = [], [{"name": volume, "mountPath": RUNS_DIR}]
    if name == "learner":
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{LEARNER_SHM_GI}Gi"}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    grace = LEARNER_GRACE_S if name == "learner" else OTHERS_GRACE_S
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta(name),
        "spec": {
            "serviceName": name,
            "replicas": 1,
            # A singleton: never two learners on one run folder, even during a rollout.
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": selector(name)},
            "template": pod_template(cfg, config_file, name, resources, grace=grace, volumes=volumes, mounts=mounts),
            "volumeClaimTemplates": [{
                "metadata": {"name": volume, "labels": labels(name)},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": f"{volume_gi}Gi"}}},
            }],
            # Deleting the StatefulSet keeps the run (as `docker compose down` keeps the volumes).
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
        },
    }


def deployment(cfg: RunConfig, config_file: str, name: str, replicas: int, resources: dict) -> dict:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(name),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector(name)},
            # A new rollout joins at the next iteration boundary and a removed one's rows are
            # counted lost: replace them a few at a time, never all at once.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": pod_template(cfg, config_file, name, resources, grace=OTHERS_GRACE_S),
        },
    }


def workloads(cfg: RunConfig, config_file: str) -> dict[str, dict]:
    """Service name -> its workload object, for the config ``config_file`` (loaded as ``cfg``)."""
    return {
        "learner": stateful_set(cfg, config_file, "learner", sizing.learner_resources(cfg), sizing.RUNS_GI),
        "ladder": stateful_set(cfg, config_file, "ladder", sizing.small_resources(cfg), sizing.RESULTS_GI),
        "checkpoint": stateful_set(cfg, config_file, "checkpoint", sizing.small_resources(cfg),
                                   sizing.checkpoints_gi(cfg)),
        "rollout": deployment(cfg, config_file, "rollout", cfg.local.rollouts, sizing.rollout_resources(cfg)),
        "evaluator": deployment(cfg, config_file, "evaluator", cfg.local.evaluators, sizing.evaluator_resources(cfg)),
    }
