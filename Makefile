# Tessera: every entry point a developer or CI needs. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export KUBECONFIG_LOCAL := $(CURDIR)/.tessera/kubeconfig
SCALE ?= default
MINUTES ?= 10
SEED ?= 1

.PHONY: help venv tools cluster-up cluster-down demo test test-unit lint fmt crds chart lock bench bench-fleet bench-table soak clean

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

# Runtime dependencies are installed at requirements.lock's pins (what the image ships), the
# development and benchmark tools at requirements-dev.lock's, so a new release upstream changes
# neither the tests, the linters nor the lock check. To move a pin: `.venv/bin/pip install -U
# NAME`, then `make lock`.
$(STAMP): pyproject.toml requirements.lock requirements-dev.lock
	@echo "==> creating $(VENV) and installing Tessera with its development tools"
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "Python 3.11+ is required")'
	@test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	@$(VENV)/bin/pip install --quiet --upgrade pip
	@$(VENV)/bin/pip install --quiet --constraint requirements.lock \
		--constraint requirements-dev.lock -e '.[dev,bench]'
	@touch $@

venv: $(STAMP) ## Create the virtualenv with Tessera and its dev tools

tools: ## Build the pinned control-plane binaries into ~/.cache/tessera (skips what is built)
	@hack/build-tools.sh

cluster-up: $(STAMP) tools ## Start the local control plane with the simulated fleet
	@$(PY) hack/cluster.py up

cluster-down: $(STAMP) ## Stop the local control plane and remove its state
	@$(PY) hack/cluster.py down

demo: $(STAMP) tools ## The main job: cluster, fleet, operator, sample workloads, a result table
	@$(PY) hack/demo.py

test: $(STAMP) tools ## Run every test (unit, integration, e2e); starts its own cluster
	@$(PY) -m pytest

test-unit: $(STAMP) ## Run the pure-core tests only (no cluster)
	@$(PY) -m pytest tests/unit

lint: $(STAMP) tools ## ruff, mypy --strict, import contracts, hadolint, helm lint
	@$(VENV)/bin/ruff check operator tests bench hack
	@$(VENV)/bin/ruff format --check operator tests bench hack
	@$(VENV)/bin/mypy
	@$(VENV)/bin/lint-imports
	@$(VENV)/bin/hadolint Dockerfile
	@helm="$$($(PY) -c 'import sys; sys.path.insert(0, "hack"); import cluster; print(cluster.binaries()["helm"])')"; \
		"$$helm" lint --strict charts/tessera

fmt: $(STAMP) ## Format and auto-fix
	@$(VENV)/bin/ruff format operator tests bench hack
	@$(VENV)/bin/ruff check --fix operator tests bench hack

crds: $(STAMP) ## Regenerate crds/, docs/api.md and the chart's generated parts from the models
	@$(PY) hack/gen_crds.py
	@$(PY) hack/sync_chart.py

chart: $(STAMP) tools ## Regenerate the chart's CRDs, RBAC and dashboard, and deploy/, from crds/ and the code
	@$(PY) hack/dashboard.py
	@$(PY) hack/sync_chart.py

lock: $(STAMP) ## Rewrite requirements.lock (the image's pins) and requirements-dev.lock from .venv
	@$(PY) hack/lock_requirements.py

bench: $(STAMP) tools ## Run the benchmarks (SCALE=large: the 5,000-node fleet); results in bench/results/
	@$(PY) bench/planning.py
	@$(PY) bench/cycles.py
	@$(PY) bench/quality.py --seeds 20 --sim-jobs 400 --sim-seeds 10
	@$(PY) bench/sharing.py
	@$(PY) bench/fleet_bench.py --scale $(SCALE) --repeats $(or $(REPEATS),5)
	@$(PY) hack/bench_table.py

bench-fleet: $(STAMP) tools ## Only the fleet-scale benchmark on a local control plane (SCALE=default|large; REPEATS, 5)
	@$(PY) bench/fleet_bench.py --scale $(SCALE) --repeats $(or $(REPEATS),5)

soak: $(STAMP) tools ## Churn the operator for MINUTES (10) with SEED (1), then time node-loss recovery; results in bench/results/soak.json
	@$(PY) hack/soak.py --minutes $(MINUTES) --seed $(SEED)

bench-table: $(STAMP) ## Rewrite the benchmark table (README.md, bench/README.md) from bench/results/
	@$(PY) hack/bench_table.py

clean: cluster-down ## Stop the cluster and remove the virtualenv (the binary cache stays)
	@rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
