# otel-valgen: the two commands a user needs are `make demo` and `make test` (see README).
PYTHON ?= python3
GO ?= go
COLLECTOR_BIN := build/otelcol-valgen
PROCESSOR_DIR := collector/valgensamplerprocessor

.PHONY: demo install install-dev collector docker go-test go-lint lint typecheck test-py test deploy-check

demo: install
	$(PYTHON) -m otel_valgen.tools demo

install:
	$(PYTHON) -m pip install --quiet -e ".[cli,ray]"

install-dev:
	$(PYTHON) -m pip install --quiet -e ".[dev]"

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

go-test:
	cd $(PROCESSOR_DIR) && $(GO) vet ./... && $(GO) test -count=1 ./...

go-lint:
	@unformatted="$$(gofmt -l $(PROCESSOR_DIR))"; if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

lint:
	ruff check .
	ruff format --check .

typecheck:
	mypy

# VALGEN_REQUIRE_ALL=1: a tool or binary this target's prerequisites install must be there; its
# absence fails the tests that need it instead of skipping them (tests/support/require.py).
test-py:
	VALGEN_REQUIRE_ALL=1 $(PYTHON) -m pytest

# Installs everything this project needs (Python packages, the collector build, Docker and
# its tools) and runs every check, the compose stack among them.
test: install-dev collector docker lint typecheck go-lint go-test test-py

# Deployment checks (tests/deploy) only. No Loki or Grafana is built: see docs/deployment.md,
# "What is verified about Loki and Grafana".
deploy-check:
	$(PYTHON) -m pytest tests/deploy
