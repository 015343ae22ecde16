"""Fixtures for the end-to-end tests: the built collector and its destination stand-ins.

Every test here skips when ``build/otelcol-valgen`` is absent (build it with ``make collector``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e import harness
from tests.e2e.harness import Collector, StandIn
from tests.exporter.mlflow_server import MlflowServer
from tests.support.require import require_module, require_or_skip

StartCollector = Callable[[str, list[str], dict[str, str]], Collector]


@pytest.fixture(autouse=True)
def _require_collector() -> None:
    """Skip, saying why, when the collector has not been built (a failure under VALGEN_REQUIRE_ALL=1)."""
    require_or_skip(
        harness.COLLECTOR_BIN.is_file(),
        f"{harness.COLLECTOR_BIN.relative_to(harness.REPO)} is absent; build it with `make collector`",
    )


@pytest.fixture
def wandb_stand_in() -> Iterator[StandIn]:
    """The wandb exporter service stand-in (OTLP/gRPC) on a free loopback port."""
    with harness.wandb_stand_in() as stand_in:
        yield stand_in


@pytest.fixture
def loki_stand_in() -> Iterator[StandIn]:
    """The Loki stand-in on a free loopback port; its endpoint is the OTLP base URL (…/otlp)."""
    with harness.loki_stand_in() as stand_in:
        yield stand_in


@pytest.fixture
def start_collector(tmp_path: Path) -> Iterator[StartCollector]:
    """Start collectors from shipped configs; each is stopped (SIGTERM) at teardown."""
    started: list[Collector] = []

    def start(name: str, configs: list[str], env: dict[str, str]) -> Collector:
        collector = harness.start_collector(tmp_path, name, configs, env)
        started.append(collector)
        return collector

    yield start
    for collector in reversed(started):
        collector.stop()


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """A real MLflow tracking server, one for the session (starting one takes seconds)."""
    require_module("mlflow", "mlflow (its tracking server) is not installed; pip install -e '.[dev]'")
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def mlflow_run(mlflow_server: MlflowServer) -> str:
    """A new MLflow run: the training job's, named to the exporter by MLFLOW_RUN_ID."""
    import mlflow

    client = mlflow.MlflowClient(mlflow_server.uri)
    return str(client.create_run(client.get_experiment_by_name("Default").experiment_id).info.run_id)
