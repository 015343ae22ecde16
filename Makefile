# otel-valgen: the two commands a user needs are `make demo` and `make test` (see README).
#
# Python environments are made by uv, pinned below and installed from PyPI into build/tools:
#   .venv                    `make test`: exactly requirements/dev.lock; `make demo`: exactly
#                            requirements/demo.lock (each + this checkout)
#   build/lanes/newest       `make test-ranges`: the newest versions pyproject.toml's ranges allow today
#   build/lanes/lowest       `make test-ranges`: the lowest version of every direct dependency
#   build/tools/phoenix-venv `make phoenix` (part of `make test`): exactly requirements/phoenix.lock,
#                            Arize Phoenix's server for tests/e2e/test_phoenix_traces.py
BOOTSTRAP_PYTHON ?= python3
GO ?= go
UV_VERSION := 0.13.8
UV_DIR := build/tools/uv-$(UV_VERSION)
UV := $(UV_DIR)/bin/uv
VENV := .venv
PYTHON := $(VENV)/bin/python
LOCK := requirements/dev.lock
EXPORTER_LOCK := requirements/exporter.lock
DEMO_LOCK := requirements/demo.lock
PHOENIX_LOCK := requirements/phoenix.lock
PHOENIX_VENV := build/tools/phoenix-venv
LOCK_PLATFORM := --python-version 3.11 --python-platform x86_64-unknown-linux-gnu --generate-hashes
COLLECTOR_BIN := build/otelcol-valgen
PROCESSOR_DIR := collector/valgensamplerprocessor
CONNECTOR_DIR := collector/valgenspanconnector
K8S_TEST_DIR := deploy/kubernetes/manifest_test
# The library's own tests: what the range lanes run (the library and its runtime dependencies only).
LIBRARY_TESTS := tests/test_api.py tests/test_accounting.py tests/test_bad_input.py tests/test_conversations.py tests/test_k_rule.py \
	tests/test_launchers.py tests/test_lifecycle.py tests/test_presampling.py tests/test_sampling.py \
	tests/test_settings.py tests/test_testing_helpers.py tests/test_tokens.py

.PHONY: demo dist install install-dev lock test-ranges range-lane-newest range-lane-lowest collector docker chromium phoenix go-test go-lint lint typecheck test-py test deploy-check k8s-check

demo: install
	$(PYTHON) -m otel_valgen.cli demo

$(UV):
	$(BOOTSTRAP_PYTHON) -m pip install --quiet --disable-pip-version-check --target $(UV_DIR) uv==$(UV_VERSION)

$(PYTHON): | $(UV)
	$(UV) venv --quiet --python "$$($(BOOTSTRAP_PYTHON) -c 'import sys; print(sys.executable)')" $(VENV)

# The wheel to install into a training job's environment (docs/verl.md): pip install dist/*.whl
DIST ?= dist
dist: | $(UV)
	$(UV) build --quiet --wheel --out-dir $(DIST) .

# Exactly a lock, never resolved again: `pip sync` installs the packages the lock names and removes
# the others, so a release upstream changes nothing (tests/test_locks.py checks each lock is complete).
install: $(PYTHON)
	$(UV) pip sync --quiet --python $(PYTHON) --require-hashes $(DEMO_LOCK)
	$(UV) pip install --quiet --python $(PYTHON) --no-deps -e .

install-dev: $(PYTHON)
	$(UV) pip sync --quiet --python $(PYTHON) --require-hashes $(LOCK)
	$(UV) pip install --quiet --python $(PYTHON) --no-deps -e .

# Refreshes the locks to the newest versions pyproject.toml's ranges allow (commit them with it).
# The exporter image's and the demo's locks are constrained to the dev lock: they hold the versions
# the suite ran. Phoenix's lock is compiled from requirements/phoenix.in on its own (it cannot share
# the dev lock's graphql-core; phoenix.in says why). Adding a package without moving the others: the
# same commands without --upgrade.
lock: | $(UV)
	$(UV) pip compile --quiet --upgrade $(LOCK_PLATFORM) --extra dev -o $(LOCK) pyproject.toml
	$(UV) pip compile --quiet --upgrade $(LOCK_PLATFORM) --extra exporter --constraint $(LOCK) -o $(EXPORTER_LOCK) pyproject.toml
	$(UV) pip compile --quiet --upgrade $(LOCK_PLATFORM) --extra cli --extra ray --constraint $(LOCK) -o $(DEMO_LOCK) pyproject.toml
	$(UV) pip compile --quiet --upgrade $(LOCK_PLATFORM) -o $(PHOENIX_LOCK) requirements/phoenix.in

# The library's ranges at both ends, each in a venv of its own: the newest versions (index
# metadata refreshed, never a cached answer) and the lowest direct versions.
test-ranges: | $(UV)
	$(PHASE) range-lanes $(SUBMAKE) -j2 range-lane-newest range-lane-lowest

range-lane-newest: | $(UV)
	bash tools/range_lane.sh $(UV) newest --resolution highest --refresh -- $(LIBRARY_TESTS)

range-lane-lowest: | $(UV)
	bash tools/range_lane.sh $(UV) lowest --resolution lowest-direct -- $(LIBRARY_TESTS)

collector:
	bash collector/build.sh
	bash collector/validate.sh

# A Docker engine (started, and installed from Debian's packages when missing), Compose v2 built
# from the Go module proxy, and local base images, for the compose stack tests (tests/deploy).
# Needs root the first time on a machine without Docker; see docs/deployment.md.
docker:
	bash tools/docker/engine.sh
	bash tools/docker/compose.sh
	bash tools/docker/base-images.sh

# Debian's Chromium (installed when missing; root the first time), for the test that opens MLflow's
# trace view in a headless browser (tests/e2e/test_mlflow_traces.py).
chromium:
	bash tools/chromium.sh

# Arize Phoenix's server in a venv of its own, for the test that sends a step's trace to it
# (tests/e2e/test_phoenix_traces.py): exactly $(PHOENIX_LOCK), installed as `install-dev` installs
# the dev lock (hash-checked, never resolved again). The venv keeps a copy of the lock it was
# synced to: when it is this lock, nothing is done.
phoenix: | $(UV)
	@if cmp -s $(PHOENIX_LOCK) $(PHOENIX_VENV)/synced.lock && [ -x $(PHOENIX_VENV)/bin/phoenix ]; then \
		echo "phoenix: $(PHOENIX_VENV) holds $(PHOENIX_LOCK)"; \
	else \
		set -e; \
		rm -f $(PHOENIX_VENV)/synced.lock; \
		[ -x $(PHOENIX_VENV)/bin/python ] || $(UV) venv --quiet --clear \
			--python "$$($(BOOTSTRAP_PYTHON) -c 'import sys; print(sys.executable)')" $(PHOENIX_VENV); \
		$(UV) pip sync --quiet --python $(PHOENIX_VENV)/bin/python --require-hashes $(PHOENIX_LOCK); \
		cp $(PHOENIX_LOCK) $(PHOENIX_VENV)/synced.lock; \
		echo "phoenix: $(PHOENIX_VENV) synced to $(PHOENIX_LOCK)"; \
	fi

go-test:
	cd $(PROCESSOR_DIR) && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd $(CONNECTOR_DIR) && $(GO) vet ./... && $(GO) test -count=1 ./...

go-lint:
	@unformatted="$$(gofmt -l $(PROCESSOR_DIR) $(CONNECTOR_DIR))"; if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install-dev
	$(VENV)/bin/mypy

# VALGEN_REQUIRE_ALL=1: a tool or binary this target's prerequisites install must be there; its
# absence fails the tests that need it instead of skipping them (tests/support/require.py).
# The venv's bin comes first on PATH, so that tools the tests start (torchrun, ray) are the lock's.
# Test files run in PYTEST_WORKERS processes (pytest-xdist): most tests wait on collectors, Ray,
# verl and tracker servers rather than compute. tests/conftest.py's scheduler hands out groups of
# files (SERIAL_GROUPS): each file's tests in one worker, the Ray files one after another in one
# worker, the verl files likewise; in the order the conftest sorts them (--no-loadscope-reorder).
# The 30 slowest tests are printed at the end of every run.
PYTEST_WORKERS ?= 3
test-py:
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" VALGEN_REQUIRE_ALL=1 $(PYTHON) -m pytest \
		-n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=30

# Installs everything this project needs (the locked Python packages, the collector build, Docker
# and its tools, Chromium, Phoenix) and runs every check, the compose stack among them. The set-up targets run side
# by side (downloads overlap compiles), then the static checks, then pytest; each phase prints
# its time (tools/phase.sh).
PHASE := bash tools/phase.sh
SUBMAKE := $(MAKE) --no-print-directory --output-sync=target
test:
	$(PHASE) set-up $(SUBMAKE) -j3 install-dev collector docker chromium phoenix
	$(PHASE) checks $(SUBMAKE) -j3 lint typecheck go-lint go-test k8s-check
	$(PHASE) pytest $(MAKE) --no-print-directory test-py

# Deployment checks (tests/deploy) only. No Loki or Grafana is built: see docs/deployment.md,
# "What is verified about Loki and Grafana".
deploy-check: install-dev
	$(PYTHON) -m pytest tests/deploy

# The Kubernetes manifests (deploy/kubernetes): every document decoded strictly into the API types,
# the objects checked against each other, rendered by kustomize (build/k8s-rendered.yaml) and
# decoded again, and the embedded collector configs (extracted to
# build/k8s-configs) validated by the built collector, skipped with a message when it is not built
# (`make collector`). Part of `make test`.
OTELCOL_VALGEN ?= $(CURDIR)/$(COLLECTOR_BIN)
k8s-check:
	@unformatted="$$(gofmt -l $(K8S_TEST_DIR))"; if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	cd $(K8S_TEST_DIR) && $(GO) vet ./... && \
		OTELCOL_VALGEN=$(OTELCOL_VALGEN) VALGEN_K8S_CONFIG_DIR=$(CURDIR)/build/k8s-configs \
		VALGEN_K8S_RENDERED=$(CURDIR)/build/k8s-rendered.yaml $(GO) test -count=1 -v ./...
