# otel-valgen: the two commands a user needs are `make demo` and `make test` (see README).
PYTHON ?= python3
GO ?= go
COLLECTOR_BIN := build/otelcol-valgen
PROCESSOR_DIR := collector/valgensamplerprocessor

.PHONY: demo install install-dev collector deploy-tools go-test go-lint lint typecheck test-py test deploy-check

demo: install
	$(PYTHON) -m otel_valgen.cli demo

install:
	$(PYTHON) -m pip install --quiet -e ".[ray]"

install-dev:
	$(PYTHON) -m pip install --quiet -e ".[dev]"

collector:
	bash collector/build.sh
	bash collector/validate.sh

go-test:
	cd $(PROCESSOR_DIR) && $(GO) vet ./... && $(GO) test -count=1 ./...

go-lint:
	@unformatted="$$(gofmt -l $(PROCESSOR_DIR))"; if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

lint:
	ruff check .
	ruff format --check .

typecheck:
	mypy

test-py:
	$(PYTHON) -m pytest

# The LogQL checker and Loki v3.7.8 that tests/deploy run (build/tools; 3-6 min the first time).
deploy-tools:
	bash tools/deploy/install-tools.sh --loki

# Installs everything this project needs (Python packages, the collector and tool builds) and
# runs every check.
test: install-dev collector deploy-tools lint typecheck go-lint go-test test-py

# Deployment checks (tests/deploy): builds the LogQL checker and Loki v3.7.8 into build/tools
# (a first build takes 3-6 min on 2 cores, then seconds), then runs the tests (~45 s).
deploy-check: deploy-tools
	$(PYTHON) -m pytest tests/deploy
