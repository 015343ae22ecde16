"""The exporter service's /metrics, /healthz and /readyz (``--metrics-address``), scraped for real.

The counts come from the running service: a TensorBoard backend writing into a temporary
folder, and (issue 24's test) the ``exporter`` command as a process writing to a real MLflow
tracking server that is stopped and started again while the endpoint is scraped.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from otel_valgen.exporter.backends.tensorboard import TensorBoardBackend, TensorBoardConfig
from otel_valgen.exporter.ledger import Ledger
from otel_valgen.exporter.metrics import MetricsServer, registry_for
from otel_valgen.exporter.server import ExporterServer, ListenError
from otel_valgen.exporter.service import ExporterService, ServiceConfig
from otel_valgen.otlp_json import to_otlp_json
from otel_valgen.tools.exporter_commands import exporter_command
from tests.support.ports import free_port
from tests.support.process import ServerProcess, launch
from tests.support.require import require_module

from .conftest import post_protobuf, rollout_request, step_request, wait_for

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of a scrape, by name (``..._total`` for counters) and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; KeyError when it is not there."""
    return samples[(f"valgen_exporter_{name}", frozenset(labels.items()))]


def get(url: str) -> tuple[int, str]:
    """GET ``url``: status and body, error statuses included; (0, '') while nothing listens."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()
    except OSError:
        return 0, ""


def tensorboard_service(tmp_path: Path) -> ExporterService:
    """A started service writing to TensorBoard under ``tmp_path`` (no state folder), held steps limited to 8."""
    backend = TensorBoardBackend(TensorBoardConfig(root=str(tmp_path / "boards")), Ledger(None))
    service = ExporterService(ServiceConfig(retry_after_s=1.0, max_pending_steps=8), [backend])
    service.start()
    return service


@pytest.fixture
def tensorboard(tmp_path: Path) -> Iterator[ExporterService]:
    """A started service writing to TensorBoard under ``tmp_path``, stopped after the test."""
    service = tensorboard_service(tmp_path)
    yield service
    service.stop()


def test_the_registry_counts_what_each_backend_wrote_per_kind(tensorboard: ExporterService) -> None:
    """A validation step of 3 and a rollout step of 4 rows: counted per backend and kind, nothing held."""
    tensorboard.accept(to_otlp_json(step_request("metrics-unit", 1, 3)))
    tensorboard.accept(to_otlp_json(rollout_request("metrics-unit", 1)))
    wait_for(tensorboard.idle, 30)
    samples = parse(generate_latest(registry_for(tensorboard)).decode())
    for kind, rows in (("validation", 3), ("rollout", 4)):
        assert value(samples, "steps_received_total", kind=kind) == 1
        assert value(samples, "steps_total", backend="tensorboard", kind=kind, outcome="written") == 1
        assert value(samples, "steps_total", backend="tensorboard", kind=kind, outcome="unchanged") == 0
        assert value(samples, "steps_total", backend="tensorboard", kind=kind, outcome="failed") == 0
        assert value(samples, "rows_written_total", backend="tensorboard", kind=kind) == rows
    assert value(samples, "requests_total", outcome="accepted") == 2
    assert value(samples, "requests_total", outcome="refused") == 0
    assert value(samples, "records_total", event="generation") == 7
    assert value(samples, "records_total", event="summary") == 2
    assert value(samples, "records_dropped_total", reason="duplicate") == 0
    assert value(samples, "steps_held", backend="tensorboard") == 0
    assert value(samples, "steps_held_limit") == 8
    assert value(samples, "oldest_held_step_age_seconds", backend="tensorboard") == 0
    assert value(samples, "backend_up", backend="tensorboard") == 1
    assert value(samples, "backend_outages_total", backend="tensorboard") == 0
    assert value(samples, "steps_spooled_total", backend="tensorboard") == 0
    # the same request again: the ledger has it, so it is unchanged, not written twice
    tensorboard.accept(to_otlp_json(step_request("metrics-unit", 1, 3)))
    wait_for(tensorboard.idle, 30)
    samples = parse(generate_latest(registry_for(tensorboard)).decode())
    assert value(samples, "steps_total", backend="tensorboard", kind="validation", outcome="unchanged") == 1
    assert value(samples, "steps_total", backend="tensorboard", kind="validation", outcome="written") == 1


def test_the_endpoints_over_http_and_malformed_requests_counted(tensorboard: ExporterService) -> None:
    """/metrics in the text format, /healthz, /readyz (503 once stopping), 404 elsewhere; a bad body is counted."""
    otlp = ExporterServer(tensorboard, http="127.0.0.1:0", grpc_address=None)
    metrics = MetricsServer(tensorboard, f"127.0.0.1:{free_port()}")
    otlp.start()
    metrics.start()
    base = f"http://127.0.0.1:{metrics.port}"
    try:
        assert not post_protobuf(int(otlp.http_port or 0), b"\xff not protobuf")
        assert post_protobuf(int(otlp.http_port or 0), step_request("metrics-http", 2, 2).SerializeToString())
        wait_for(tensorboard.idle, 30)
        status, text = get(f"{base}/metrics")
        assert status == 200
        samples = parse(text)
        assert value(samples, "requests_total", outcome="malformed") == 1
        assert value(samples, "requests_total", outcome="accepted") == 1
        assert value(samples, "steps_total", backend="tensorboard", kind="validation", outcome="written") == 1
        assert get(f"{base}/healthz") == (200, "ok\n")
        assert get(f"{base}/readyz") == (200, "ready\n")
        assert get(f"{base}/nothing")[0] == 404
        otlp.stop(1.0)
        tensorboard.stop()
        assert get(f"{base}/readyz") == (503, "not ready: shutting down\n")
        assert get(f"{base}/healthz")[0] == 200
    finally:
        metrics.stop()
        otlp.stop(1.0)


def test_an_address_in_use_is_a_listen_error_and_the_command_exits_1(tmp_path: Path) -> None:
    """Binding a taken port raises ListenError; the command names the option to change and exits 1."""
    service = tensorboard_service(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(ListenError, match=f"metrics cannot listen on {address}") as caught:
            MetricsServer(service, address).start()
        assert caught.value.protocol == "metrics"
        service.stop()
        args = ["--http", f"127.0.0.1:{free_port()}", "--grpc", "", "--metrics-address", address]
        args += ["--backend", "tensorboard", "--tensorboard-dir", str(tmp_path / "boards"), "--state-dir", ""]
        result = CliRunner().invoke(exporter_command, args)
    assert result.exit_code == 1, result.output
    assert f"metrics cannot listen on {address}" in result.output
    assert "--metrics-address a free HOST:PORT" in result.output


def test_a_bad_metrics_address_is_a_usage_error() -> None:
    """--metrics-address takes HOST:PORT, like --http and --grpc."""
    result = CliRunner().invoke(exporter_command, ["--metrics-address", "nowhere"])
    assert result.exit_code == 2
    assert "expected HOST:PORT" in result.output


def test_an_mlflow_outage_shows_on_the_metrics_endpoint_as_a_held_step_and_its_age(tmp_path: Path) -> None:
    """Issue 24: scraped during an MLflow outage, /metrics shows the held step, its growing age, the backend down.

    The exporter command runs as a process with MLflow its only backend, so /readyz says 503
    (no backend can take data) until MLflow is back; then the step is written and nothing is held.
    """
    require_module("mlflow", "mlflow (its tracking server) is not installed; pip install -e '.[dev]'")
    from .mlflow_server import MlflowServer

    mlflow = MlflowServer(tmp_path / "mlflow")
    mlflow.start()
    port, metrics_port = free_port(), free_port()
    args = [sys.executable, "-c", "from otel_valgen.tools.exporter_commands import exporter_command as c; c()"]
    args += ["--http", f"127.0.0.1:{port}", "--grpc", "", "--metrics-address", f"127.0.0.1:{metrics_port}"]
    args += ["--backend", "mlflow", "--mlflow-tracking-uri", mlflow.uri, "--state-dir", str(tmp_path / "state")]
    args += ["--retry-after", "1"]
    env = os.environ | {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}
    process = launch("exporter", args, env, tmp_path, "exporter.log")
    exporter = ServerProcess("exporter", process, tmp_path / "exporter.log")
    base = f"http://127.0.0.1:{metrics_port}"

    def scrape() -> Samples:
        status, text = get(f"{base}/metrics")
        assert status == 200, text
        return parse(text)

    def mlflow_steps(outcome: str = "written") -> float:
        return value(scrape(), "steps_total", backend="mlflow", kind="validation", outcome=outcome)

    try:
        exporter.wait_ready(lambda: get(f"{base}/readyz")[0] == 200, 60)
        assert post_protobuf(port, step_request("metrics-outage", 1, 2).SerializeToString())
        exporter.wait_ready(lambda: mlflow_steps() == 1, 120)
        mlflow.stop()  # the outage
        assert post_protobuf(port, step_request("metrics-outage", 2, 2).SerializeToString())
        exporter.wait_ready(lambda: value(scrape(), "backend_up", backend="mlflow") == 0, 120)
        first = scrape()
        assert value(first, "steps_held", backend="mlflow") == 1
        assert value(first, "backend_outages_total", backend="mlflow") == 1
        assert value(first, "steps_received_total", kind="validation") == 2
        assert value(first, "steps_total", backend="mlflow", kind="validation", outcome="written") == 1
        age = value(first, "oldest_held_step_age_seconds", backend="mlflow")
        assert age > 0
        time.sleep(1.0)
        later = scrape()
        assert value(later, "steps_held", backend="mlflow") == 1
        assert value(later, "oldest_held_step_age_seconds", backend="mlflow") >= age + 0.9
        status, reason = get(f"{base}/readyz")
        assert (status, reason) == (503, "not ready: no backend can take data now: mlflow\n")
        mlflow.start()  # back, on the same port
        exporter.wait_ready(lambda: mlflow_steps() == 2, 120)
        after = scrape()
        assert value(after, "steps_held", backend="mlflow") == 0
        assert value(after, "oldest_held_step_age_seconds", backend="mlflow") == 0
        assert value(after, "backend_up", backend="mlflow") == 1
        assert value(after, "backend_outages_total", backend="mlflow") == 1
        assert value(after, "steps_total", backend="mlflow", kind="validation", outcome="failed") == 0
        assert get(f"{base}/readyz")[0] == 200
        assert exporter.stop(60) == 0, exporter.log_tail()
    finally:
        exporter.stop(10)
        mlflow.stop()
    assert "exporter stopped" in exporter.log_tail()
