# rlinfra: run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider
SYSTEM_PACKAGES := openssh-server iproute2 rclone fuse3 curl
STAMP := $(VENV)/.installed
# The Verl release whose config rlinfra checks overrides against (rlinfra.workloads.verl_config).
VERL_PIN := verl==0.6.0
# checkov pins versions that conflict with the project's tools: it gets a venv of its own.
CHECKOV_VENV ?= .venv-checkov
CHECKOV := $(CHECKOV_VENV)/bin/checkov
export RLINFRA_CHECKOV := $(abspath $(CHECKOV))

.PHONY: help deps system-deps venv up down lint test test-unit test-terraform test-ansible test-e2e bench clean

help: ## Show the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-16s %s\n", $$1, $$2}'

system-deps: ## Install the Debian packages the local cloud needs (root)
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	# Verl's packaged config only (no torch, no GPU): tests compare rlinfra's key snapshot with it.
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps '$(VERL_PIN)'
	touch $(STAMP)

$(CHECKOV):
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check 'checkov==3.3.30'

venv: $(STAMP) $(CHECKOV) ## Create .venv with rlinfra and the development tools (and checkov's venv)

deps: system-deps venv ## Everything: Debian packages and the virtual environment

up: deps ## Set up, bring up the built-in `local` profile (2 hosts here) and follow its job
	$(BIN)/rlinfra up --profile local --yes
	$(BIN)/rlinfra logs local --follow

down: venv ## Take the `local` cluster down (keeps its bucket)
	$(BIN)/rlinfra down local --yes

lint: venv ## ruff, mypy, terraform fmt, yamllint
	$(BIN)/ruff check driver tests bench
	$(BIN)/ruff format --check driver tests bench
	$(BIN)/mypy
	terraform fmt -check -recursive terraform

test-unit: venv ## Unit tests: profiles, plan, render (golden files), CLI errors
	$(PYTEST) tests/unit -q

test-terraform: deps ## Terraform modules: validate, fmt, real applies of the local modules
	$(PYTEST) tests/terraform -q

test-ansible: deps ## Ansible roles: lint, real runs against namespaced hosts, idempotence
	$(PYTEST) tests/ansible -q

test-e2e: deps ## End to end: rlinfra up/status/check/exec/down on 2 local hosts
	$(PYTEST) tests/e2e -q

test: deps lint ## Set up and run every test
	$(PYTEST) tests -q

bench: deps ## Benchmarks; figures go to bench/results/
	$(BIN)/python bench/run.py
	$(BIN)/python bench/retrieval.py

clean: ## Remove the virtual environment and caches
	rm -rf $(VENV) $(CHECKOV_VENV) .pytest_cache .mypy_cache .ruff_cache
