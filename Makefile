# The two commands README promises, from a fresh clone:
#   make install builds .venv with the pinned dependencies and nothing else (no training).
#   make run     train on real RoyaleGym battles, every service local (Ctrl-C stops cleanly;
#                the next `make run` resumes). `make run ITERATIONS=2` stops at iteration 2 (a total).
#   make test    the whole test suite (what CI runs: .ci/run).
#   make test-fast   every test not marked slow (no stack, no real training run): minutes.
#   make gpu-check   the GPU check (skips with one line without CUDA).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.12 2>/dev/null || command -v python3 2>/dev/null)
VENV := .venv
ITERATIONS ?= 0
ARGS ?=
PYTEST_ARGS ?=

.PHONY: run test test-fast bench config gpu-check clean-venv

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

clean-venv:
	rm -rf $(VENV)
