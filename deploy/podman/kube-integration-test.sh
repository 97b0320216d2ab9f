#!/usr/bin/env bash
# The kube play integration test (deploy/podman/kube_it.py has the phases): deploy/k8s/base
# (the tiny profile) brought up with `podman kube play`, trained, a rollout pod and the learner
# pod deleted and played again, then torn down with nothing left behind. Root only. .ci/run
# runs it after the Compose test.
#
#   deploy/podman/kube-integration-test.sh                 # cold: 14-15 minutes here, 75 s of it the play
#   KEEP_IMAGES=1 deploy/podman/kube-integration-test.sh   # keep the images (and the base image) for a rerun
#
# It needs the repository's venv (PyYAML reads the manifests; `royalefleet keys` makes the keys):
# `make test` builds it; without one it is built here the same way.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x .venv/bin/python ] || make .venv/.installed
exec .venv/bin/python -u deploy/podman/kube_it.py "$@"
