# The two commands README promises, from a fresh clone:
#   make install builds .venv from requirements.lock (hash-pinned) and nothing else (no training).
#   make lock    regenerates requirements.lock and docker/requirements-*.txt from pyproject.toml.
#   make run     train on real RoyaleGym battles, every service local (Ctrl-C stops cleanly;
#                the next `make run` resumes). `make run ITERATIONS=2` stops at iteration 2 (a total).
#   make test    the whole test suite (what CI runs: .ci/run).
#   make test-fast   every test not marked slow (no stack, no real training run): minutes.
#   make gpu-check   the GPU check (skips with one line without CUDA).
#   make compose CLASS=laptop   Compose for a machine class: .env from deploy/env/CLASS.env (once),
#                then `docker compose up -d` (its GPU file and the monitoring profile come from .env).
#   make rollout-host NAME=box2 ADDRESS=10.0.0.7 [ROLLOUTS=8] [LEARNER=10.0.0.5] [LOCAL=1]
#                everything rollout host NAME needs, in NAME-rollout-host.tgz (deploy/rollout_host.py).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.12 2>/dev/null || command -v python3 2>/dev/null)
VENV := .venv
LOCK := requirements.lock
ITERATIONS ?= 0
ARGS ?=
PYTEST_ARGS ?=

.PHONY: run test test-fast bench config gpu-check clean-venv compose rollout-host
CLASS ?=
NAME ?=
ADDRESS ?=
ROLLOUTS ?= 1
LEARNER ?=
LOCAL ?=
RUN ?= default

# The venv installs requirements.lock (every package of the dev environment, pip included, each
# with its sha256: a download that differs from the locked file is refused), then the project
# itself without dependencies and without build isolation (setuptools comes from the lock too).
$(VENV)/.installed: pyproject.toml $(LOCK)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else "royalefleet needs Python >= 3.12 (RoyaleGym does); found " + sys.version.split()[0] + " at $(PYTHON). Install 3.12 (pyenv install 3.12) or run: make PYTHON=/path/to/python3.12 ...")'
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --require-hashes -r $(LOCK)
	$(VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

# make lock: regenerate requirements.lock and the images' docker/requirements-*.txt from
# pyproject.toml (after changing a pin there), for Linux x86_64 and CPython 3.12, with hashes.
# The images' files take their versions from requirements.lock (-c), so an image runs exactly
# what the tests ran. Needs uv (pip install uv==$(UV_VERSION) into any scratch venv; UV=path/to/uv).
UV ?= uv
UV_VERSION := 0.13.9
LOCK_ARGS = --quiet --generate-hashes --python-version 3.12 --python-platform x86_64-manylinux_2_28 \
	--index-url https://pypi.org/simple --custom-compile-command "make lock"

.PHONY: lock
lock:
	@command -v $(UV) >/dev/null || { echo "make lock needs uv $(UV_VERSION): python3 -m venv /tmp/uv && /tmp/uv/bin/pip install uv==$(UV_VERSION), then make lock UV=/tmp/uv/bin/uv" >&2; exit 2; }
	$(UV) pip compile $(LOCK_ARGS) --extra dev pyproject.toml requirements-lock.in -o $(LOCK)
	$(UV) pip compile $(LOCK_ARGS) -c $(LOCK) docker/requirements-build.in -o docker/requirements-build.txt
	$(UV) pip compile $(LOCK_ARGS) -c $(LOCK) docker/requirements-rollout.in -o docker/requirements-rollout.txt
	$(UV) pip compile $(LOCK_ARGS) -c $(LOCK) docker/requirements-learner.in -o docker/requirements-learner.txt

.PHONY: install
install: $(VENV)/.installed
	@echo "$(VENV) is ready: . $(VENV)/bin/activate for the royalefleet command"

run: $(VENV)/.installed
	$(VENV)/bin/royalefleet up --iterations $(ITERATIONS) $(ARGS)

test: $(VENV)/.installed
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

test-fast: $(VENV)/.installed
	$(VENV)/bin/python -m pytest -m "not slow" $(PYTEST_ARGS)

bench: $(VENV)/.installed
	$(VENV)/bin/royalefleet bench $(ARGS)

config: $(VENV)/.installed
	$(VENV)/bin/royalefleet config $(ARGS)

# The GPU check (deploy/gpu-check.sh) with this venv's torch; on the accelerator machine run the
# script itself under that machine's python3 (docs/throughput.md, "GPU check").
gpu-check: $(VENV)/.installed
	PYTHON=$(VENV)/bin/python bash deploy/gpu-check.sh

compose:
	@test -n "$(CLASS)" -a -f "deploy/env/$(CLASS).env" || { echo "make compose CLASS=NAME, NAME one of: $$(cd deploy/env && ls *.env | sed 's/\.env$$//' | tr '\n' ' ')" >&2; exit 2; }
	@if [ -f .env ]; then have=$$(sed -n 's/^FLEET_CLASS=//p' .env | tail -1); \
	  if [ "$$have" != "$(CLASS)" ]; then echo ".env is of class '$${have:-none}', not $(CLASS): every command of a stack must see the same settings (docs/compose.md); to switch class, move .env aside and run this again" >&2; exit 2; fi; \
	else cp "deploy/env/$(CLASS).env" .env && echo "wrote .env from deploy/env/$(CLASS).env (add ALERT_WEBHOOK_URL=<your receiver> to it: docs/alarms.md)"; fi
	@grep -q '^GRAFANA_ADMIN_PASSWORD=.' .env || { echo "GRAFANA_ADMIN_PASSWORD=$$(python3 -c 'import secrets; print(secrets.token_urlsafe(18))')" >> .env && echo "added a random GRAFANA_ADMIN_PASSWORD to .env (Grafana has no default password; user admin)"; }
	docker compose up -d

rollout-host:
	python3 deploy/rollout_host.py "$(NAME)" --address "$(ADDRESS)" --rollouts "$(ROLLOUTS)" $(if $(LEARNER),--learner "$(LEARNER)") $(if $(LOCAL),--local --run "$(RUN)" --python $(VENV)/bin/python)

clean-venv:
	rm -rf $(VENV)
