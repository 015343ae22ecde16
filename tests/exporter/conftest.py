"""Fixtures: an offline wandb folder per test, and OTLP requests built from plain values."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from otel_valgen import contract
from tests.support.otlp_values import any_value


@pytest.fixture
def wandb_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty WANDB_DIR in offline mode; no network, no API key."""
    folder = tmp_path / "wandb-dir"
    folder.mkdir()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(folder))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    yield folder
    import wandb

    wandb.teardown()  # the SDK caches settings (WANDB_DIR) process-wide
    assert os.environ["WANDB_MODE"] == "offline"


def _attrs(values: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in values.items() if v is not None]


def generation(
    run: str,
    step: int,
    i: int,
    *,
    text: str = "",
    rank: int | None = None,
    score: float = 0.5,
    attempt: str | None = None,
    late: bool | None = None,
) -> LogRecord:
    """A ``valgen.generation`` log record for sample ``s{i}``."""
    return LogRecord(
        event_name=contract.EVENT_GENERATION,
        severity_number=9,
        body=any_value({"input": f"q{i}{text}", "output": f"a{i}@{step}{text}", "ground_truth": f"t{i}"}),
        attributes=_attrs(
            {
                contract.RUN_ID: run,
                contract.STEP: step,
                contract.SAMPLE_ID: f"s{i:03d}",
                contract.SAMPLE_KEY: 1000 + i,
                contract.SCORE: score,
                contract.SOURCE: "trainer",
                contract.DATA_SOURCE: "gsm8k",
                contract.SAMPLE_COUNT: 4,
                contract.RANK: rank if rank is not None else (None if late else i + 1),
                contract.ATTEMPT: attempt,
                contract.LATE: late,
            }
        ),
    )


def summary(
    run: str,
    step: int,
    kept: int,
    *,
    seen: int = 10,
    attempt: str | None = None,
    attempt_start: int | None = None,
    closed_reason: str = "complete",
) -> LogRecord:
    """A ``valgen.step.summary`` log record."""
    values = {contract.RUN_ID: run, contract.STEP: step, contract.SEEN: seen, contract.KEPT: kept}
    values |= {contract.LATE: 0, contract.MISSING: 0, contract.CLOSED_REASON: closed_reason}
    values |= {contract.ATTEMPT: attempt, contract.ATTEMPT_START: attempt_start}
    return LogRecord(event_name=contract.EVENT_STEP_SUMMARY, severity_number=9, attributes=_attrs(values))


def request(*logs: LogRecord, resource: dict[str, Any] | None = None) -> ExportLogsServiceRequest:
    """One request with one resource holding ``logs``."""
    message = ExportLogsServiceRequest()
    resource_logs = message.resource_logs.add()
    resource_logs.resource.attributes.extend(_attrs(resource or {"service.name": "test"}))
    resource_logs.scope_logs.add().log_records.extend(logs)
    return message


def step_request(
    run: str,
    step: int,
    k: int,
    *,
    attempt: str | None = None,
    attempt_start: int | None = None,
    closed_reason: str = "complete",
    **kwargs: Any,
) -> ExportLogsServiceRequest:
    """A step's k generations (ranked) followed by its summary (of one attempt when given)."""
    logs = [generation(run, step, i, attempt=attempt, **kwargs) for i in range(k)]
    closing = summary(run, step, k, attempt=attempt, attempt_start=attempt_start, closed_reason=closed_reason)
    return request(*logs, closing, resource={"service.name": "t", contract.WANDB_PROJECT: "proj"})


def wait_for(predicate: Any, timeout_s: float = 20.0) -> None:
    """Poll ``predicate`` until true; fail after ``timeout_s``."""
    import time

    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def wandb_backend(layout: str = "rows", state_dir: Path | None = None, backend_class: Any = None) -> Any:
    """An offline wandb backend with its ledger in ``state_dir`` (memory when None)."""
    from otel_valgen.exporter.backends.wandb import WandbBackend, WriterConfig
    from otel_valgen.exporter.ledger import Ledger, ledger_dir

    cls = backend_class or WandbBackend
    return cls(WriterConfig(layout=layout, mode="offline"), Ledger(ledger_dir(state_dir, "wandb")))


def written(service: Any, backend: str = "wandb") -> int:
    """Steps ``backend`` has written so far."""
    return int(service.stats()["backends"][backend]["written_steps"])


def serve_requests(backends: list[Any], *requests: Any, state_dir: Path | None = None) -> Any:
    """Feed ``requests`` to a service writing to ``backends``, wait until written, stop it; the service."""
    from otel_valgen.exporter.service import ExporterService, ServiceConfig
    from otel_valgen.otlp_json import to_otlp_json

    service = ExporterService(ServiceConfig(state_dir=str(state_dir) if state_dir else None), backends)
    service.start()
    for item in requests:
        service.accept(to_otlp_json(item))
    wait_for(service.idle)
    service.stop()
    return service


def post_protobuf(port: int, body: bytes) -> bool:
    """POST one OTLP/protobuf request to the service on loopback ``port``; whether it was accepted (200)."""
    import urllib.request

    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/logs", data=body, headers={"Content-Type": "application/x-protobuf"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return bool(response.status == 200)
    except OSError:
        return False
