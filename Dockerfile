# royalefleet images. One file, four targets (compose.yaml builds them; docs/compose.md):
#
#   rollout     the rollout service: numpy, msgspec, zstandard, pyzmq, prometheus-client, royalegym[sim].
#               No torch (the build fails if torch is importable).
#   learner     the learner, the ladder and the checkpoint service: the rollout's dependencies
#               plus torch and safetensors.
#   prometheus  Prometheus and Alertmanager from the base image's Debian packages, for sites that
#               reach no container registry (the usual prom/prometheus image works as well);
#               compose.yaml's alertmanager service runs this image with another entrypoint.
#   wheel       (internal) the project built once as a wheel.
#
#   docker build --target rollout -t localhost/royalefleet-rollout .
#   docker build --target learner -t localhost/royalefleet-learner .
#
# USER_CODE: a folder of the build context holding the user's own packages (a reward, an
# observation builder, ...), copied to /opt/royalefleet-user, which is on PYTHONPATH
# (docs/compose.md "Your own code in the images").
# BASE_IMAGE: any Debian-family image with python3 >= 3.12 and its venv module. An air-gapped
# site builds from its own: deploy/podman/make-base-image.sh makes one with debootstrap (Debian
# trixie, Python 3.13) and `podman import`. PYPI_INDEX_URL / PYPI_EXTRA_INDEX_URL: a package
# index to use instead of PyPI.
# Every dependency is pinned with its sha256 (docker/requirements-*.txt, written by `make lock` from
# requirements.lock, which pyproject.toml's pins produce) and installed with --require-hashes: a
# package index or mirror that serves other bytes fails the build. The project's own wheel goes in
# with --no-deps. To pin the base image too: --build-arg BASE_IMAGE=python:3.12-slim-bookworm@sha256:...
# No `# syntax=` line and no RUN --mount: the classic builder (podman, DOCKER_BUILDKIT=0) builds it.

ARG BASE_IMAGE=docker.io/library/python:3.12-slim-bookworm

# ----------------------------------------------------------------------------- base
FROM ${BASE_IMAGE} AS base
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
# The non-root user every service runs as (uid 10001; `royalefleet keys --bundle` writes key
# files owned by it). /data/runs, /keys and /keys-roles/<role> (where compose.yaml's keys service
# mounts each role's keys volume) exist and belong to it, so the named volumes mounted there start
# out writable.
RUN python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else "royalefleet needs Python >= 3.12; BASE_IMAGE has " + sys.version)' \
 && python3 -m venv /opt/venv \
 && groupadd --system --gid 10001 royalefleet \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/royalefleet --create-home \
        --shell /usr/sbin/nologin royalefleet \
 && mkdir -p /data/runs /keys /keys-roles/learner /keys-roles/ladder /keys-roles/checkpoint /keys-roles/rollout \
        /keys-roles/evaluator \
 && chown -R royalefleet:royalefleet /data/runs /keys /keys-roles
WORKDIR /home/royalefleet

# ----------------------------------------------------------------------------- wheel
FROM base AS wheel
ARG PYPI_INDEX_URL=
ARG PYPI_EXTRA_INDEX_URL=
COPY docker/requirements-build.txt /tmp/requirements/
RUN pip install ${PYPI_INDEX_URL:+--index-url "$PYPI_INDEX_URL"} ${PYPI_EXTRA_INDEX_URL:+--extra-index-url "$PYPI_EXTRA_INDEX_URL"} \
        --require-hashes -r /tmp/requirements/requirements-build.txt
WORKDIR /src
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
COPY royalefleet ./royalefleet
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels .

# ----------------------------------------------------------------------------- rollout
FROM base AS rollout
ARG PYPI_INDEX_URL=
ARG PYPI_EXTRA_INDEX_URL=
COPY docker/requirements-rollout.txt /tmp/requirements/
RUN pip install ${PYPI_INDEX_URL:+--index-url "$PYPI_INDEX_URL"} ${PYPI_EXTRA_INDEX_URL:+--extra-index-url "$PYPI_EXTRA_INDEX_URL"} \
        --require-hashes -r /tmp/requirements/requirements-rollout.txt \
 && rm -rf /tmp/requirements
COPY --from=wheel /wheels /tmp/wheels
# --no-deps: the project's metadata lists torch, which this image must not have.
RUN pip install --no-deps /tmp/wheels/*.whl \
 && rm -rf /tmp/wheels \
 && python -c 'import importlib.util, sys; sys.exit("torch is installed in the rollout image" if importlib.util.find_spec("torch") else 0)' \
 && python -m services.rollout --help > /dev/null \
 && python -m royalefleet.cmd_keys --help > /dev/null
# The user's own packages (docs/extending.md): the folder USER_CODE names in the build context
# (deploy/user, empty but for its README, unless the build says otherwise), copied in last so an
# edit rebuilds only this layer, and on every service's PYTHONPATH.
ARG USER_CODE=deploy/user
COPY ${USER_CODE} /opt/royalefleet-user
ENV PYTHONPATH=/opt/royalefleet-user
USER royalefleet
CMD ["python", "-m", "services.rollout"]

# ----------------------------------------------------------------------------- prometheus
FROM ${BASE_IMAGE} AS prometheus
# policy-rc.d keeps the package's postinst from starting a daemon inside the build.
RUN printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus prometheus-alertmanager wget \
 && rm -rf /var/lib/apt/lists/* /usr/sbin/policy-rc.d \
 && mkdir -p /prometheus /alertmanager \
 && chown prometheus:prometheus /prometheus /alertmanager
USER prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]

# ----------------------------------------------------------------------------- learner
# Last, so a plain `docker build .` gives the learner image.
FROM base AS learner
ARG PYPI_INDEX_URL=
ARG PYPI_EXTRA_INDEX_URL=
COPY docker/requirements-learner.txt /tmp/requirements/
RUN pip install ${PYPI_INDEX_URL:+--index-url "$PYPI_INDEX_URL"} ${PYPI_EXTRA_INDEX_URL:+--extra-index-url "$PYPI_EXTRA_INDEX_URL"} \
        --require-hashes -r /tmp/requirements/requirements-learner.txt \
 && rm -rf /tmp/requirements
COPY --from=wheel /wheels /tmp/wheels
RUN pip install --no-deps /tmp/wheels/*.whl \
 && rm -rf /tmp/wheels \
 && pip check \
 && python -m services.learner --help > /dev/null \
 && python -m services.ladder --help > /dev/null \
 && python -m services.checkpoint --help > /dev/null
# The Compose configs (compose.yaml mounts ./deploy/config over this copy, so edits need no rebuild).
COPY deploy/config /etc/royalefleet
# The user's own packages (docs/extending.md): the folder USER_CODE names in the build context
# (deploy/user, empty but for its README, unless the build says otherwise), copied in last so an
# edit rebuilds only this layer, and on every service's PYTHONPATH.
ARG USER_CODE=deploy/user
COPY ${USER_CODE} /opt/royalefleet-user
ENV PYTHONPATH=/opt/royalefleet-user
USER royalefleet
CMD ["python", "-m", "services.learner"]
