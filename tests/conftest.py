"""Shared fixtures: a clean emitter per test and real OTLP receivers on loopback."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc

from otel_valgen import _api
from otel_valgen.otlp_json import to_otlp_json
from tests.support.otlp_http import OtlpHttpStandIn
from tests.support.require import REQUIRE_ALL

REPO = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--require-all``: a missing tool the project installs fails the test (tests/support/require.py)."""
    parser.addoption(
        "--require-all",
        action="store_true",
        help=f"a missing tool, binary or package the project installs fails the test ({REQUIRE_ALL}=1)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Pass ``--require-all`` on as ``VALGEN_REQUIRE_ALL=1`` (subprocesses of the tests see it too)."""
    if config.getoption("--require-all"):
        os.environ[REQUIRE_ALL] = "1"


_ENV = (
    "OTEL_VALGEN_RUN_ID",
    "OTEL_VALGEN_COUNT",
    "OTEL_VALGEN_SEED",
    "OTEL_VALGEN_PRESAMPLE",
    "OTEL_VALGEN_DIR",
    "OTEL_VALGEN_SOURCE",
    "OTEL_VALGEN_MAX_FIELD_BYTES",
    "OTEL_VALGEN_FLUSH_TIMEOUT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_VALGEN_DEFAULT_RUN_ID",
    "OTEL_VALGEN_SPOOL",
    "OTEL_VALGEN_VERL",
    "WANDB_RUN_ID",
    "WANDB_PROJECT",
    "WANDB_ENTITY",
    *(
        f"OTEL_EXPORTER_OTLP_{signal}{name}"
        for signal in ("", "LOGS_")
        for name in ("HEADERS", "CERTIFICATE", "CLIENT_CERTIFICATE", "CLIENT_KEY", "COMPRESSION", "TIMEOUT")
    ),
)


@pytest.fixture(autouse=True)
def clean_emitter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Each test starts with no emitter, no valgen environment and its own sink folder."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_VALGEN_DIR", str(tmp_path / "sink"))
    _api._reset_for_testing()
    yield
    _api._reset_for_testing()


class OtlpHttpReceiver(OtlpHttpStandIn):
    """A real OTLP/HTTP logs endpoint for the SDK exporter, at ``endpoint`` + ``/v1/logs``."""

    @property
    def endpoint(self) -> str:
        """The base URL to give the SDK (it appends /v1/logs)."""
        return self.base_url

    def json_requests(self) -> list[dict[str, Any]]:
        """Every received request in OTLP/JSON form."""
        return [to_otlp_json(request) for request in self.requests]


@pytest.fixture
def otlp_http() -> Iterator[OtlpHttpReceiver]:
    """An OTLP/HTTP receiver on a free loopback port."""
    receiver = OtlpHttpReceiver()
    receiver.thread.start()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


class _LogsService(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self) -> None:
        self.requests: list[logs_service_pb2.ExportLogsServiceRequest] = []

    def Export(self, request: Any, context: Any) -> logs_service_pb2.ExportLogsServiceResponse:
        self.requests.append(request)
        return logs_service_pb2.ExportLogsServiceResponse()


@pytest.fixture
def otlp_grpc() -> Iterator[tuple[str, _LogsService]]:
    """An OTLP/gRPC receiver on a free loopback port: (endpoint, service)."""
    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    service = _LogsService()
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"http://127.0.0.1:{port}", service
    server.stop(grace=None)
