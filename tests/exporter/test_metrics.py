"""The exporter service's /metrics, /healthz and /readyz (``--metrics-address``), scraped for real.

The counts come from the running service: a TensorBoard backend writing into a temporary
folder, a tracker's stand-in that is down then up (held, spooled and requeued steps), and
(the metrics' own test) the ``exporter`` command as a process writing to a real MLflow tracking
server that is stopped and started again while the endpoint is scraped.
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

from otel_valgen import contract
from otel_valgen.cli.exporter_commands import exporter_command
from otel_valgen.exporter.backends import BackendUnavailable
from otel_valgen.exporter.backends.tensorboard import TensorBoardBackend, TensorBoardConfig
from otel_valgen.exporter.ledger import Ledger
from otel_valgen.exporter.metrics import MetricsServer, readiness, registry_for
from otel_valgen.exporter.server import ExporterServer, ListenError
from otel_valgen.exporter.service import ExporterService, ServiceConfig
from otel_valgen.exporter.steps import ClosedStep
from otel_valgen.otlp_json import to_otlp_json
from tests.support.otlp_values import any_value
from tests.support.ports import free_port
from tests.support.process import ServerProcess, launch
from tests.support.require import require_module

from .conftest import _attrs, generation, post_protobuf, request, rollout_request, step_request, summary, wait_for

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


class Tracker:
    """A tracker's stand-in: refuses every step while ``down`` (BackendUnavailable), else keeps it."""

    name = "tracker"

    def __init__(self, *, down: bool) -> None:
        self.down = down
        self.ledger = Ledger(None)
        self.steps: list[ClosedStep] = []

    def write(self, step: ClosedStep) -> int | None:
        """Keep the step, or raise BackendUnavailable while down."""
        if self.down:
            raise BackendUnavailable("the tracker is down")
        self.steps.append(step)
        return len(step.generations)

    def close(self, *, teardown: bool = False) -> None:
        """Nothing to close."""


def sampler_part(sampler: str, ids: list[int]) -> dict[str, object]:
    """Sampler ``sampler``'s part of run metrics-parts step 1: generations ``ids`` ranked, its summary."""
    closing = summary("metrics-parts", 1, len(ids), seen=len(ids), closed_reason="wait")
    closing.attributes.extend(_attrs({contract.SAMPLER: sampler, contract.SAMPLE_COUNT: 4}))
    figure = {"source": "trainer@", "announced": True, "ended": False, "received": len(ids), "kept": len(ids)}
    closing.attributes.add(key=contract.SOURCE_FIGURES, value=any_value([figure]))
    ranked = [generation("metrics-parts", 1, i, rank=rank) for rank, i in enumerate(ids, start=1)]
    return to_otlp_json(request(*ranked, closing))


def test_merged_parts_and_set_aside_records_are_counted_by_reason(tensorboard: ExporterService) -> None:
    """Two samplers' parts of a step: flagged merged (no part unmerged, no split); late and duplicate records apart."""
    tensorboard.accept(sampler_part("s1", [0, 2]))
    tensorboard.accept(sampler_part("s2", [1, 3]))
    late = [generation("metrics-late", 1, i, late=True) for i in range(1, 3)]
    tensorboard.accept(to_otlp_json(request(generation("metrics-late", 1, 0), *late, summary("metrics-late", 1, 1))))
    twice = [generation("metrics-twice", 1, i) for i in (0, 1, 1)]
    tensorboard.accept(to_otlp_json(request(*twice, summary("metrics-twice", 1, 2))))
    samples = parse(generate_latest(registry_for(tensorboard)).decode())
    assert value(samples, "steps_flagged_total", reason="merged") == 1
    assert value(samples, "steps_flagged_total", reason="part_unmerged") == 0
    assert value(samples, "steps_flagged_total", reason="split") == 0
    assert value(samples, "steps_received_total", kind="validation") == 4
    assert value(samples, "records_dropped_total", reason="late") == 2
    assert value(samples, "records_dropped_total", reason="duplicate") == 1
    assert value(samples, "records_dropped_total", reason="rejected") == 0


def test_a_tracker_down_holds_spools_and_requeues_its_step(tmp_path: Path) -> None:
    """Down: the step is held, its age grows, the backend is down and nothing is ready; spooled, then requeued."""
    down = ExporterService(ServiceConfig(state_dir=str(tmp_path), retry_after_s=0.2), [Tracker(down=True)])
    down.start()
    down.accept(to_otlp_json(step_request("metrics-down", 1, 2)))
    wait_for(lambda: down.stats()["backends"]["tracker"]["failing"])
    time.sleep(0.1)
    samples = parse(generate_latest(registry_for(down)).decode())
    assert value(samples, "backend_up", backend="tracker") == 0
    assert value(samples, "backend_outages_total", backend="tracker") == 1
    assert value(samples, "steps_held", backend="tracker") == 1
    assert value(samples, "oldest_held_step_age_seconds", backend="tracker") > 0
    assert readiness(down) == "no backend can take data now: tracker"
    down.stop(0.5)
    samples = parse(generate_latest(registry_for(down)).decode())
    assert value(samples, "steps_spooled_total", backend="tracker") == 1
    assert value(samples, "steps_requeued_total", backend="tracker") == 0

    tracker = Tracker(down=False)
    up = ExporterService(ServiceConfig(state_dir=str(tmp_path), retry_after_s=0.2), [tracker])
    up.start()
    wait_for(up.idle)
    up.stop()
    samples = parse(generate_latest(registry_for(up)).decode())
    assert [step.step for step in tracker.steps] == [1]
    assert value(samples, "steps_requeued_total", backend="tracker") == 1
    assert value(samples, "steps_spooled_total", backend="tracker") == 0
    assert value(samples, "steps_held", backend="tracker") == 0
    assert value(samples, "backend_up", backend="tracker") == 1
    assert value(samples, "steps_total", backend="tracker", kind="validation", outcome="written") == 1
    assert readiness(up) == "shutting down"


def test_an_mlflow_outage_shows_on_the_metrics_endpoint_as_a_held_step_and_its_age(tmp_path: Path) -> None:
    """Scraped during an MLflow outage, /metrics shows the held step, its growing age, the backend down.

    The exporter command runs as a process with MLflow its only backend, so /readyz says 503
    (no backend can take data) until MLflow is back; then the step is written and nothing is held.
    """
    require_module("mlflow", "mlflow (its tracking server) is not installed; pip install -e '.[dev]'")
    from .mlflow_server import MlflowServer

    mlflow = MlflowServer(tmp_path / "mlflow")
    mlflow.start()
    port, metrics_port = free_port(), free_port()
    args = [sys.executable, "-c", "from otel_valgen.cli.exporter_commands import exporter_command as c; c()"]
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
