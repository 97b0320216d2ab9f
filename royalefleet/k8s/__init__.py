"""Kubernetes manifests generated from royalefleet's own sources (docs/kubernetes.md).

    royalefleet k8s            write deploy/k8s/ (also: python -m royalefleet.k8s)
    royalefleet k8s --check    exit 1 naming every file that is not what the generator makes

deploy/k8s/:

- ``base/``: a kustomization of the ``tiny`` profile (deploy/config/tiny.json): the learner,
  the ladder and the checkpoint service as StatefulSets of one, each with a PersistentVolumeClaim
  for its part of the run folder (Compose's ``runs``, ``results``, ``checkpoints`` volumes); the
  rollouts and the evaluators as Deployments; a Service per service (the three ZeroMQ endpoints,
  every /metrics port, the halt endpoint); PodDisruptionBudgets for the singletons; the
  Namespace; deploy/config/ as a ConfigMap. The CURVE keys and the halt token are Secrets the
  operator makes (``royalefleet keys --k8s-secrets``), never in an image or in this folder.
- ``overlays/{cpu,gpu,rollout-pool}/``: strategic-merge patches for a machine class
  (``overlays.OVERLAYS``).
- ``monitoring/``: ServiceMonitor, PrometheusRule (the alarm table), the dashboards and the
  datasource as ConfigMaps for Grafana's sidecars.

One module per job: ``common.py`` (names, images, ports, paths), ``sizing.py`` (requests,
limits and volume sizes from the profile), ``probes.py`` and ``alive.py`` (the learner's
liveness command, standard library only: it runs in the image), ``workloads.py``,
``services.py``, ``overlays.py`` (the machine classes and the patch they make), ``monitoring.py``,
``secrets.py`` (the Secrets from a keys folder), ``files.py`` (render, check, write).

This package's ``__init__`` imports nothing: ``python -m royalefleet.k8s.alive`` runs in the
images, which have no PyYAML.
"""
