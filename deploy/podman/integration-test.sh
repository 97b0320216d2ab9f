#!/usr/bin/env bash
# The Compose integration test (deploy/podman/compose_it.py has the phases): compose.yaml built,
# brought up, trained and broken on purpose under podman with Docker Compose v2, then torn
# down with nothing left behind. Root only. .ci/run runs it after `make test`.
#
#   deploy/podman/integration-test.sh                 # cold: 10-12 minutes, half of it the learner image
#   KEEP_IMAGES=1 deploy/podman/integration-test.sh   # keep the images (and the base image) for a rerun
set -euo pipefail
cd "$(dirname "$0")/../.."
exec python3 -u deploy/podman/compose_it.py "$@"
