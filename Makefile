# The two commands README promises, from a fresh clone:
#   make install builds .venv with the pinned dependencies and nothing else (no training).
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

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else "royalefleet needs Python >= 3.12 (RoyaleGym does); found " + sys.version.split()[0] + " at $(PYTHON). Install 3.12 (pyenv install 3.12) or run: make PYTHON=/path/to/python3.12 ...")'
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[dev]'
	@touch $@

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
