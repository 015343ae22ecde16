"""The MLflow backend against a real tracking server (``mlflow server``), read back with MLflow's client."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest

from otel_valgen._identity import tracker_resource
from otel_valgen.exporter.backends import create_backends
from otel_valgen.exporter.backends.mlflow import MlflowConfig
from otel_valgen.exporter.backends.tensorboard import TensorBoardConfig
from otel_valgen.exporter.service import ExporterService, ServiceConfig, Unavailable
from otel_valgen.exporter.tables import ROLLOUT_COLUMNS
from otel_valgen.otlp_json import to_otlp_json
from tests.support.require import require_module

from .conftest import (
    PROMPT_MESSAGES,
    ROLLOUT_KEY,
    TURNS,
    both_kinds,
    conversation_step,
    generation,
    request,
    rollout_rows,
    summary,
    wait_for,
    written,
)
from .mlflow_server import MlflowServer
from .tensorboard_files import read_texts

KEY = "val/generations"
mlflow = require_module("mlflow", "mlflow (its tracking server) is not installed; pip install -e '.[dev]'")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """One tracking server for the module (starting one takes seconds)."""
    running = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    running.start()
    yield running
    running.stop()


def step_for(run: str, step: int, k: int, resource: dict[str, Any], **kwargs: Any) -> Any:
    """A closed step (k generations and the summary) under ``resource``."""
    logs = [generation(run, step, i, **kwargs) for i in range(k)]
    return request(*logs, summary(run, step, k, seen=10), resource={"service.name": "trainer"} | resource)


def service_for(server: MlflowServer, tmp_path: Path, names: list[str], **config: Any) -> ExporterService:
    """A started service writing to ``names`` (MLflow on ``server``)."""
    configs = {
        "mlflow": MlflowConfig(tracking_uri=server.uri),
        "tensorboard": TensorBoardConfig(root=str(tmp_path / "boards")),
    }
    service = ExporterService(ServiceConfig(retry_after_s=1.0, **config), create_backends(names, None, configs))
    service.start()
    return service


def trainer_run(server: MlflowServer, name: str) -> tuple[str, dict[str, str]]:
    """Start a run as verl's MLflow logger does; return its id and the resource configure() would send."""
    mlflow.set_tracking_uri(server.uri)
    mlflow.set_experiment("verl-project")
    run = mlflow.start_run(run_name=name)
    try:
        resource = tracker_resource("generated")
    finally:
        mlflow.end_run()
    return run.info.run_id, resource


def test_steps_land_in_the_jobs_run_as_tables_artifacts_and_metrics(server: MlflowServer, tmp_path: Path) -> None:
    """K rows per step in the trainer's own run: verl's val_step{n}.json with every column, metrics at the step."""
    run_id, resource = trainer_run(server, "exp-1")
    assert resource["mlflow.run_id"] == run_id
    service = service_for(server, tmp_path, ["mlflow"])
    for step in (1, 2):
        service.accept(to_otlp_json(step_for("valgen-1", step, 3, resource)))
    wait_for(lambda: written(service, "mlflow") == 2, 60)
    service.stop()
    client = mlflow.MlflowClient(server.uri)
    rows = json.loads(Path(client.download_artifacts(run_id, "val_step2.json", str(tmp_path / "2"))).read_text())
    assert [row["sample_id"] for row in rows] == ["s000", "s001", "s002"]
    assert [row["output"] for row in rows] == ["a0@2", "a1@2", "a2@2"]
    assert {(row["step"], row["data_source"]) for row in rows} == {(2, "gsm8k")}
    verl_file = Path(client.download_artifacts(run_id, "val_step1.json", str(tmp_path)))
    items = json.loads(verl_file.read_text())
    assert [(item["input"], item["output"], item["score"]) for item in items] == [
        ("q0", "a0@1", 0.5),
        ("q1", "a1@1", 0.5),
        ("q2", "a2@1", 0.5),
    ]
    kept = client.get_metric_history(run_id, f"{KEY}/kept")
    assert sorted((m.step, m.value) for m in kept) == [(1, 3.0), (2, 3.0)]


def test_records_without_a_run_go_to_one_tagged_run(server: MlflowServer, tmp_path: Path) -> None:
    """Without mlflow.run_id, steps go to a run tagged valgen.run_id in the otel-valgen experiment, made once."""
    service = service_for(server, tmp_path, ["mlflow"])
    for step in (5, 6):
        service.accept(to_otlp_json(step_for("no-run", step, 2, {})))
    wait_for(lambda: written(service, "mlflow") == 2, 60)
    service.stop()
    client = mlflow.MlflowClient(server.uri)
    experiment = client.get_experiment_by_name("otel-valgen")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`valgen.run_id` = 'no-run'")
    assert len(runs) == 1
    names = {item.path for item in client.list_artifacts(runs[0].info.run_id)}
    assert {"val_step5.json", "val_step6.json"} <= names


def test_an_mlflow_outage_holds_its_steps_without_blocking_tensorboard(server: MlflowServer, tmp_path: Path) -> None:
    """MLflow down: requests are still taken and TensorBoard goes on; past the hold limit, 503.

    Back up, MLflow gets what it missed, once each.
    """
    run_id, resource = trainer_run(server, "exp-outage")
    resource = resource | {"tensorboard.log_dir": "job"}
    service = service_for(server, tmp_path, ["mlflow", "tensorboard"], max_pending_steps=3)

    def send(step: int) -> None:
        service.accept(to_otlp_json(step_for("out", step, 2, resource)))

    try:
        send(1)
        wait_for(lambda: written(service, "mlflow") == 1 and written(service, "tensorboard") == 1, 60)
        server.stop()
        send(2)
        wait_for(lambda: service.stats()["backends"]["mlflow"]["failing"], 120)
        send(3)  # one backend failing does not refuse requests
        send(4)
        wait_for(lambda: written(service, "tensorboard") == 4, 30)
        with pytest.raises(Unavailable, match="mlflow"):
            send(5)  # MLflow holds 3 steps: the collector keeps the rest
        server.start()
        wait_for(lambda: written(service, "mlflow") == 4, 120)
        send(5)  # the collector's retry
        send(3)  # and a duplicate
        wait_for(service.idle, 60)
    finally:
        service.stop()
    stats = service.stats()["backends"]
    assert (stats["mlflow"]["written_steps"], stats["tensorboard"]["written_steps"]) == (5, 5)
    assert stats["mlflow"]["outages"] == 1
    assert stats["tensorboard"]["outages"] == 0
    assert sorted(read_texts(tmp_path / "boards" / "job", KEY)) == [1, 2, 3, 4, 5]
    kept = mlflow.MlflowClient(server.uri).get_metric_history(run_id, f"{KEY}/kept")
    assert sorted(m.step for m in kept) == [1, 2, 3, 4, 5]


def test_a_retried_request_of_an_attempt_already_written_writes_nothing(server: MlflowServer, tmp_path: Path) -> None:
    """A step of attempt L1.1 sent again is recorded under L1.1 and not logged twice: one kept metric at the step."""
    run_id, resource = trainer_run(server, "exp-attempt")
    logs = [generation("valgen-att", 8, i, attempt="L1.1") for i in range(2)]
    closing = summary("valgen-att", 8, 2, seen=10, attempt="L1.1", attempt_start=5_000)
    item = request(*logs, closing, resource={"service.name": "trainer"} | resource)
    service = service_for(server, tmp_path, ["mlflow"])
    service.accept(to_otlp_json(item))
    wait_for(lambda: written(service, "mlflow") == 1, 60)
    service.accept(to_otlp_json(item))  # the collector retries a request whose answer it did not get
    wait_for(service.idle, 60)
    service.stop()
    stats = service.stats()["backends"]["mlflow"]
    assert (stats["written_steps"], stats["unchanged_steps"]) == (1, 1)
    kept = mlflow.MlflowClient(server.uri).get_metric_history(run_id, f"{KEY}/kept")
    assert [(m.step, m.value) for m in kept] == [(8, 2.0)]


def test_rollouts_land_as_their_own_artifact_and_metrics(server: MlflowServer, tmp_path: Path) -> None:
    """A step's rollouts: train_step{n}.json (a row per response, by prompt) and train/generations metrics."""
    run_id, resource = trainer_run(server, "exp-kinds")
    service = service_for(server, tmp_path, ["mlflow"])
    for item in both_kinds("valgen-kinds", 4, {"service.name": "trainer"} | resource):
        service.accept(to_otlp_json(item))
    wait_for(lambda: written(service, "mlflow") == 2, 60)
    service.stop()
    client = mlflow.MlflowClient(server.uri)
    assert {item.path for item in client.list_artifacts(run_id)} == {"val_step4.json", "train_step4.json"}
    validation = json.loads(Path(client.download_artifacts(run_id, "val_step4.json", str(tmp_path / "v"))).read_text())
    assert [(row["sample_id"], row["output"]) for row in validation] == [("s000", "a0@4"), ("s001", "a1@4")]
    rollouts = json.loads(Path(client.download_artifacts(run_id, "train_step4.json", str(tmp_path / "r"))).read_text())
    columns = [*ROLLOUT_COLUMNS, "attempt"]
    assert rollouts == [dict(zip(columns, row, strict=True)) for row in rollout_rows(4)]
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, f"{ROLLOUT_KEY}/kept")] == [(4, 4.0)]
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, f"{KEY}/kept")] == [(4, 2.0)]


def test_a_conversation_steps_rows_hold_its_messages_as_json(server: MlflowServer, tmp_path: Path) -> None:
    """A step with a conversation: each row's ``conversation`` holds both sides' messages; text steps are unchanged."""
    run_id, resource = trainer_run(server, "exp-conversation")
    service = service_for(server, tmp_path, ["mlflow"])
    service.accept(to_otlp_json(conversation_step("valgen-conv", 1, resource={"service.name": "trainer"} | resource)))
    service.accept(to_otlp_json(step_for("valgen-conv", 2, 2, resource)))
    wait_for(lambda: written(service, "mlflow") == 2, 60)
    service.stop()
    client = mlflow.MlflowClient(server.uri)
    rows = json.loads(Path(client.download_artifacts(run_id, "val_step1.json", str(tmp_path / "1"))).read_text())
    assert rows[0]["conversation"] == {"input": PROMPT_MESSAGES, "output": TURNS}  # roles, parts, cut marks
    assert rows[0]["input"].startswith("[system] Use the calc tool.")  # verl's keys stay texts
    assert rows[1]["conversation"] is None
    plain = json.loads(Path(client.download_artifacts(run_id, "val_step2.json", str(tmp_path / "2"))).read_text())
    assert [sorted(row) for row in plain] == [sorted(rows[1].keys() - {"conversation"})] * 2


def linking_service(server: MlflowServer, wait_s: float) -> ExporterService:
    """A started service writing to MLflow with trace linking on (``--mlflow-link-traces``)."""
    config = MlflowConfig(tracking_uri=server.uri, link_traces=True, link_traces_wait_s=wait_s)
    service = ExporterService(ServiceConfig(retry_after_s=1.0), create_backends(["mlflow"], None, {"mlflow": config}))
    service.start()
    return service


def trace_links(service: ExporterService) -> dict[str, int]:
    """The MLflow backend's trace links: made, pending, given_up."""
    return dict(service.stats()["backends"]["mlflow"]["trace_links"])


def test_a_steps_trace_that_comes_after_the_write_is_linked_to_the_jobs_run(
    server: MlflowServer, tmp_path: Path
) -> None:
    """With linking on, each written step's trace (validation and rollouts) is linked to the run the records name.

    The traces reach MLflow only after the steps are written: the links wait for them, then the
    run lists exactly the two traces (search_traces(run_id=...)), and /metrics counts them as made.
    """
    from otel_valgen._tracing import step_trace_id
    from otel_valgen.exporter.metrics import registry_for

    run_id, resource = trainer_run(server, "exp-links")
    client = mlflow.MlflowClient(server.uri)
    experiment_id = client.get_run(run_id).info.experiment_id
    service = linking_service(server, wait_s=120)
    try:
        for item in both_kinds("valgen-links", 3, {"service.name": "trainer"} | resource):
            service.accept(to_otlp_json(item))
        wait_for(lambda: written(service, "mlflow") == 2, 60)
        time.sleep(1.5)  # a few tries without the traces
        assert trace_links(service) == {"made": 0, "pending": 2, "given_up": 0}
        ids = [f"{step_trace_id('valgen-links', 3, kind):032x}" for kind in ("validation", "rollout")]
        for trace_id in ids:
            server.post_trace(experiment_id, trace_id)
        wait_for(lambda: trace_links(service)["made"] == 2, 60)
        linked = client.search_traces(locations=[experiment_id], run_id=run_id, include_spans=False)
        assert sorted(trace.info.trace_id for trace in linked) == sorted(f"tr-{trace_id}" for trace_id in ids)
        text = generate_latest(registry_for(service)).decode()
        assert 'valgen_exporter_trace_links_total{backend="mlflow",outcome="made"} 2.0' in text
        assert 'valgen_exporter_trace_links_pending{backend="mlflow"} 0.0' in text
    finally:
        service.stop()
    assert trace_links(service) == {"made": 2, "pending": 0, "given_up": 0}


def test_a_trace_that_never_comes_is_given_up_with_the_fix(
    server: MlflowServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No traces overlay: the step is written all the same; its link is given up after the wait, warned once."""
    run_id, resource = trainer_run(server, "exp-no-traces")
    service = linking_service(server, wait_s=1.0)
    try:
        with caplog.at_level(logging.WARNING, logger="otel_valgen.exporter"):
            for step in (1, 2):
                service.accept(to_otlp_json(step_for("valgen-no-traces", step, 2, resource)))
            wait_for(lambda: written(service, "mlflow") == 2, 60)
            wait_for(lambda: trace_links(service) == {"made": 0, "pending": 0, "given_up": 2}, 60)
    finally:
        service.stop()
    (warning,) = [r.getMessage() for r in caplog.records if "trace_links" in r.getMessage()]
    assert f"could not be linked to run {run_id}: its trace did not reach the tracker within 1 s" in warning
    assert "traces-mlflow.yaml" in warning
    assert "VALGEN_MLFLOW_LINK_TRACES=false" in warning
    kept = mlflow.MlflowClient(server.uri).get_metric_history(run_id, f"{KEY}/kept")
    assert sorted(m.step for m in kept) == [1, 2]


def test_linking_is_off_by_default(server: MlflowServer, tmp_path: Path) -> None:
    """Without --mlflow-link-traces the backend links nothing and reports no trace links."""
    _, resource = trainer_run(server, "exp-no-links")
    service = service_for(server, tmp_path, ["mlflow"])
    service.accept(to_otlp_json(step_for("valgen-no-links", 1, 2, resource)))
    wait_for(lambda: written(service, "mlflow") == 1, 60)
    service.stop()
    assert "trace_links" not in service.stats()["backends"]["mlflow"]
