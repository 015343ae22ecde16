"""The OTLP service on loopback: real HTTP and gRPC clients, answers per the OTLP spec, faults."""

from __future__ import annotations

import gzip
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.exporter.backends import BackendUnavailable
from otel_valgen.exporter.backends.wandb import WandbBackend
from otel_valgen.exporter.server import ExporterServer
from otel_valgen.exporter.service import ExporterService, ServiceConfig
from otel_valgen.exporter.steps import ClosedStep
from otel_valgen.otlp_json import to_otlp_json

from .conftest import (
    ROLLOUT_KEY,
    generation,
    request,
    rollout_request,
    rollout_rows,
    step_request,
    wait_for,
    wandb_backend,
    written,
)
from .wandb_files import read_run

KEY = "val/generations"


class Running:
    """A service with both front ends on ephemeral loopback ports."""

    def __init__(self, layout: str = "rows", state_dir: Path | None = None, backend: Any = None) -> None:
        config = ServiceConfig(state_dir=str(state_dir) if state_dir else None, retry_after_s=1.0)
        self.service = ExporterService(config, [backend or wandb_backend(layout, state_dir)])
        self.server = ExporterServer(self.service, http="127.0.0.1:0", grpc_address="127.0.0.1:0")
        self.service.start()
        self.server.start()
        self.http = f"http://127.0.0.1:{self.server.http_port}"
        self.grpc = f"127.0.0.1:{self.server.grpc_port}"

    def post(self, body: bytes, content_type: str = "application/x-protobuf", **headers: str) -> tuple[int, Any, bytes]:
        req = urllib.request.Request(
            f"{self.http}/v1/logs", data=body, headers={"Content-Type": content_type} | headers
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers, error.read()

    def stop(self) -> None:
        self.server.stop(1.0)
        self.service.stop()


@pytest.fixture
def running(wandb_dir: Path) -> Iterator[Running]:
    """A running service in the rows layout, stopped after the test."""
    service = Running()
    yield service
    service.stop()


def rows_of(wandb_dir: Path, run: str, key: str = KEY) -> list[list[Any]]:
    """Every row of the table ``key`` logged to ``run``, in order."""
    return [row for _, table in read_run(wandb_dir, run).tables(key) for row in table["data"]]


def test_http_protobuf_success_and_duplicate_batch_adds_no_rows(wandb_dir: Path, running: Running) -> None:
    """A protobuf POST is answered 200; the same batch again (a retry) adds no rows."""
    body = step_request("h", 1, 4).SerializeToString()
    for _ in range(2):
        status, headers, payload = running.post(body)
        assert status == 200
        assert headers["Content-Type"] == "application/x-protobuf"
        assert not ExportLogsServiceResponse.FromString(payload).HasField("partial_success")
    wait_for(running.service.idle)
    running.stop()
    rows = rows_of(wandb_dir, "h")
    assert sorted(row[1] for row in rows) == ["s000", "s001", "s002", "s003"]
    stats = running.service.stats()["backends"]["wandb"]
    assert (stats["written_steps"], stats["unchanged_steps"], stats["rows"]) == (1, 1, 4)


def test_http_json_and_gzip_bodies_are_accepted(running: Running) -> None:
    """OTLP/JSON and gzip-compressed protobuf bodies are both accepted."""
    as_json = json.dumps(to_otlp_json(step_request("j", 1, 2))).encode()
    status, headers, payload = running.post(as_json, "application/json")
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert json.loads(payload) == {}
    zipped = gzip.compress(step_request("z", 1, 2).SerializeToString())
    assert running.post(zipped, **{"Content-Encoding": "gzip"})[0] == 200
    wait_for(lambda: written(running.service) == 2)


def test_partial_success_counts_rejected_records_http_and_grpc(running: Running) -> None:
    """A record without valgen.sample_id is rejected alone: partial success with count and message."""
    bad = generation("p", 1, 0)
    del bad.attributes[2]  # valgen.sample_id
    body = request(bad, generation("p", 1, 1))
    status, _, payload = running.post(body.SerializeToString())
    response = ExportLogsServiceResponse.FromString(payload)
    assert status == 200
    assert response.partial_success.rejected_log_records == 1
    assert contract.SAMPLE_ID in response.partial_success.error_message
    with grpc.insecure_channel(running.grpc) as channel:
        reply = logs_service_pb2_grpc.LogsServiceStub(channel).Export(body, timeout=10)
    assert reply.partial_success.rejected_log_records == 1


def test_malformed_payload_is_a_client_error_and_service_keeps_serving(running: Running) -> None:
    """Garbage gets HTTP 400 (a google.rpc.Status) or a gRPC error; the next valid request succeeds."""
    status, _, payload = running.post(b"\xff\xff\xff not protobuf")
    assert status == 400
    assert Status.FromString(payload).code == 3
    assert running.post(b"[1, 2]", "application/json")[0] == 400
    assert running.post(b"x", **{"Content-Encoding": "gzip"})[0] == 400
    assert running.post(b"x", "text/plain")[0] == 415
    with grpc.insecure_channel(running.grpc) as channel:
        raw = channel.unary_unary("/opentelemetry.proto.collector.logs.v1.LogsService/Export")
        with pytest.raises(grpc.RpcError) as error:
            raw(b"\xff\xff\xff", timeout=10)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        ok = logs_service_pb2_grpc.LogsServiceStub(channel).Export(step_request("m", 1, 1), timeout=10)
    assert not ok.HasField("partial_success")
    assert running.post(step_request("m", 2, 1).SerializeToString())[0] == 200


class FlakyBackend(WandbBackend):
    """The real wandb backend, failing while ``down`` is set, as when wandb cannot be reached."""

    down = True

    def write(self, step: ClosedStep) -> int | None:
        if self.down:
            raise BackendUnavailable("wandb down (test)")
        return super().write(step)


def test_retryable_while_wandb_is_down_then_recovers(wandb_dir: Path) -> None:
    """While writes fail: HTTP 503 with Retry-After and gRPC UNAVAILABLE; afterwards every step lands once."""
    writer = wandb_backend("rows", backend_class=FlakyBackend)
    running = Running(backend=writer)
    try:
        assert running.post(step_request("u", 1, 2).SerializeToString())[0] == 200
        wait_for(lambda: running.post(step_request("u", 2, 2).SerializeToString())[0] == 503)
        status, headers, _ = running.post(step_request("u", 2, 2).SerializeToString())
        assert status == 503
        assert headers["Retry-After"] == "1"
        with grpc.insecure_channel(running.grpc) as channel, pytest.raises(grpc.RpcError) as error:
            logs_service_pb2_grpc.LogsServiceStub(channel).Export(step_request("u", 2, 2), timeout=10)
        assert error.value.code() == grpc.StatusCode.UNAVAILABLE
        writer.down = False
        wait_for(lambda: running.post(step_request("u", 2, 2).SerializeToString())[0] == 200)
        wait_for(running.service.idle)
    finally:
        running.stop()
    assert sorted((row[0], row[1]) for row in rows_of(wandb_dir, "u")) == [
        (1, "s000"),
        (1, "s001"),
        (2, "s000"),
        (2, "s001"),
    ]


def test_restart_writes_only_what_is_missing(wandb_dir: Path, tmp_path: Path) -> None:
    """Restarted on the same state folder and sent everything again (a collector resend): each step once."""
    state = tmp_path / "state"
    full = [step_request("rs", step, 3) for step in (1, 2)]
    first = Running(layout="verl", state_dir=state)
    first.post(full[0].SerializeToString())
    wait_for(lambda: written(first.service) == 1)
    first.stop()
    time.sleep(1.1)  # offline run folders are named to the second; a restart gets its own
    second = Running(layout="verl", state_dir=state)
    for item in full:
        assert second.post(item.SerializeToString())[0] == 200
    wait_for(second.service.idle)
    second.stop()
    assert written(second.service) == 1
    tables = read_run(wandb_dir, "rs").tables(KEY)
    assert [step for step, _ in tables] == [1, 2]
    assert [row[0] for row in tables[-1][1]["data"]] == [1, 2]
    assert all(value is not None for value in tables[-1][1]["data"][1])


def test_steps_held_at_shutdown_are_spooled_and_written_after_the_restart(wandb_dir: Path, tmp_path: Path) -> None:
    """With wandb down when the service stops: the held steps go to the spool, and the next start writes them.

    A spooled rollout step stays a rollout step (its kind and prompts), written to its own table.
    """
    state = tmp_path / "state"
    down = wandb_backend("rows", state, backend_class=FlakyBackend)
    first = Running(state_dir=state, backend=down)
    both = step_request("sp", 4, 2)
    both.resource_logs.extend(rollout_request("sp", 4).resource_logs)  # one request: the next is refused (503)
    assert first.post(both.SerializeToString())[0] == 200
    wait_for(lambda: first.service.stats()["backends"]["wandb"]["failing"])
    first.stop()
    assert (state / "wandb" / "spool.json").exists()
    assert first.service.stats()["backends"]["wandb"]["spooled"] == 2
    second = Running(state_dir=state)
    wait_for(lambda: written(second.service) == 2)
    second.stop()
    assert (
        second.service.stats()["backends"]["wandb"]["requeued"],
        second.service.stats()["backends"]["wandb"]["spooled"],
    ) == (2, 0)
    assert not (state / "wandb" / "spool.json").exists()
    assert sorted((row[0], row[1]) for row in rows_of(wandb_dir, "sp")) == [(4, "s000"), (4, "s001")]
    assert rows_of(wandb_dir, "sp", ROLLOUT_KEY) == rollout_rows(4)


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_core_library_sdk_exporter_into_the_service(
    wandb_dir: Path, protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records sent by otel_valgen straight to the service (no collector, so no summary) land as rows, incomplete."""
    running = Running()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        endpoint = running.http if protocol != "grpc" else f"http://{running.grpc}"
        vg.configure(run_id=f"sdk-{protocol[:4]}", count=3, endpoint=endpoint)
        with vg.validation(step=7, source="trainer"):
            vg.log_generations([f"q{i}" for i in range(5)], [f"a{i}" for i in range(5)], [1.0] * 5)
        vg.flush()
        wait_for(lambda: running.service.stats()["backends"]["wandb"]["rows"] == 3)
        assert running.service.stats()["without_summary"] >= 1
    finally:
        running.stop()
    rows = rows_of(wandb_dir, f"sdk-{protocol[:4]}")
    assert len(rows) == 3
    assert {row[0] for row in rows} == {7}
