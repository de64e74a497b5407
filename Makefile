# rlinfra: run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider
SYSTEM_PACKAGES := openssh-server iproute2 rclone fuse3 curl
STAMP := $(VENV)/.installed
# checkov pins versions that conflict with the project's tools: it gets a venv of its own.
CHECKOV_VENV ?= .venv-checkov
CHECKOV := $(CHECKOV_VENV)/bin/checkov
export RLINFRA_CHECKOV := $(abspath $(CHECKOV))
# The GCS JSON API emulator the GCP bucket tests run against (a test tool, in a venv of its own).
GCS_EMULATOR_VENV ?= .venv-gcs-emulator
GCS_EMULATOR := $(GCS_EMULATOR_VENV)/bin/gcp-storage-emulator
export RLINFRA_GCS_EMULATOR := $(abspath $(GCS_EMULATOR))

.PHONY: help deps system-deps venv lock test-latest up down lint check bench-house bench-suite test test-unit test-terraform test-ansible test-verl test-e2e bench clean

help: ## Show the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-16s %s\n", $$1, $$2}'

system-deps: ## Install the Debian packages the local cloud needs (root)
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# The controller's environment is installed from hash-pinned locks (requirements/*.lock), so a
# fresh machine gets exactly what was tested; `make lock` refreshes them from pyproject.toml.
LOCK := requirements/controller.lock
VERL_LOCK := requirements/verl-config.lock
CHECKOV_LOCK := requirements/checkov.lock
GCS_EMULATOR_LOCK := requirements/gcs-emulator.lock
PIP := -m pip install --quiet --disable-pip-version-check

$(STAMP): pyproject.toml $(LOCK) $(VERL_LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python $(PIP) --require-hashes -r $(LOCK)
	$(BIN)/python $(PIP) --no-deps --no-build-isolation -e .
	# Verl's packaged config only (no torch, no GPU): tests compare rlinfra's key snapshot with it.
	$(BIN)/python $(PIP) --no-deps --require-hashes -r $(VERL_LOCK)
	touch $(STAMP)

$(CHECKOV): $(CHECKOV_LOCK)
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python $(PIP) --require-hashes -r $(CHECKOV_LOCK)
	touch $(CHECKOV)

$(GCS_EMULATOR): $(GCS_EMULATOR_LOCK)
	$(PYTHON) -m venv $(GCS_EMULATOR_VENV)
	$(GCS_EMULATOR_VENV)/bin/python $(PIP) --require-hashes -r $(GCS_EMULATOR_LOCK)
	touch $(GCS_EMULATOR)

venv: $(STAMP) $(CHECKOV) $(GCS_EMULATOR) ## Create .venv with rlinfra and the development tools (and the test tools' venvs)

deps: system-deps venv ## Everything: Debian packages and the virtual environment

up: deps ## Set up, bring up the built-in `local` profile (2 hosts here) and follow its job
	$(BIN)/rlinfra up --profile local --yes
	$(BIN)/rlinfra logs local --follow

down: venv ## Take the `local` cluster down (keeps its bucket)
	$(BIN)/rlinfra down local --yes

lint: venv ## ruff, mypy, the layer contract (lint-imports), terraform fmt (ansible-lint runs in test-ansible)
	$(BIN)/ruff check driver tests bench tools
	$(BIN)/ruff format --check driver tests bench tools
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	terraform fmt -check -recursive terraform

test-unit: venv ## Unit tests: profiles, plan, render (golden files), CLI errors
	$(PYTEST) tests/unit -q

test-terraform: deps ## Terraform modules: validate, fmt, real applies of the local modules and AWS (emulated)
	$(PYTEST) tests/terraform -q

test-ansible: deps ## Ansible roles: lint, real runs against namespaced hosts, idempotence
	$(PYTEST) tests/ansible -q

test-verl: deps ## Verl's own trainer on CPU, on a local Ray node
	$(PYTEST) tests/verl -q

test-e2e: deps ## End to end: rlinfra up/status/check/exec/down on local and existing (ssh) hosts
	$(PYTEST) tests/e2e -q

# The lane to run after each commit: lint, unit tests, terraform validate / terraform test,
# ansible-lint (no applies, no hosts, no checkov scans).
CHECK_TESTS := tests/unit tests/ansible/test_lint.py tests/terraform/test_aws_modules.py \
	tests/terraform/test_gcp_modules.py tests/terraform/test_gcp_roots.py
check: venv lint ## After each commit (under 5 minutes): lint, unit tests, terraform validate/test, ansible-lint
	$(PYTEST) $(CHECK_TESTS) -q -k "not checkov" --durations=10

# `make test` runs two lanes side by side (tools/test_lanes.py), one pytest process each. The
# first mostly waits on Terraform's provider and the emulators (unit, terraform), then runs the
# ssh cloud's end-to-end module; the second is CPU-bound from the start (Ansible's hosts, Verl,
# the local cloud's end-to-end modules). Measured split: bench/results/test_suite.md. Both must
# pass; the report lists the slowest tests of both.
LANE_1 ?= tests/unit,tests/terraform,tests/e2e/test_ssh_cloud.py
LANE_2 ?= tests/ansible,tests/verl,tests/e2e/test_local_cluster.py,tests/e2e/test_retrieval_cluster.py
test: deps lint ## Set up and run every test, in two lanes at once (the 25 slowest are listed at the end)
	$(BIN)/python tools/test_lanes.py --lane infra=$(LANE_1) --lane hosts=$(LANE_2)

bench: deps ## Benchmarks; figures go to bench/results/
	$(BIN)/python bench/run.py
	$(BIN)/python bench/retrieval.py
	$(BIN)/python bench/query_encoder.py
	$(BIN)/python bench/verl.py
	$(BIN)/python bench/ssh_up.py
	$(BIN)/python bench/recovery.py

bench-house: deps ## The driver's layout before and after BASE (cycles, largest modules, duplicates, --help, render): make bench-house BASE=REV
	$(BIN)/python bench/house.py --base $(BASE)

bench-suite: deps ## The suite's own wall time: `make check` and `make test`, timed (about 30 min)
	$(BIN)/python bench/test_suite.py run --label now

lock: venv ## Refresh the controller's locks (requirements/*.lock) from pyproject.toml; RLINFRA_LOCK_UPGRADE=1 moves every pin to its newest
	$(BIN)/python tools/lock_controller.py

test-latest: system-deps ## Unit tests on the newest versions pyproject.toml allows (drift, on purpose)
	rm -rf .venv-latest
	$(PYTHON) -m venv .venv-latest
	.venv-latest/bin/python $(PIP) -e '.[dev]'
	.venv-latest/bin/python $(PIP) --no-deps --require-hashes -r $(VERL_LOCK)
	.venv-latest/bin/python -m pip list --format=freeze | grep -iE '^(typer|click|pydantic|rich|ansible-core|ansible-runner)=='
	.venv-latest/bin/python -m pytest -p no:cacheprovider tests/unit -q \
	  --deselect tests/unit/test_controller_lock.py::test_the_installed_environment_is_the_locked_one

clean: ## Remove the virtual environment and caches
	rm -rf $(VENV) $(CHECKOV_VENV) $(GCS_EMULATOR_VENV) .venv-latest .pytest_cache .mypy_cache .ruff_cache
