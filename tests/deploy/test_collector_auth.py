"""Bearer-token auth between training jobs and the collector, and the configs compose runs.

Runs the built collector (`build/otelcol-valgen`, from `make collector`; skipped without it)
with collector-config/collector.yaml and the auth.yaml overlay on free loopback ports.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc

from tests.deploy import compose, harness

TOKEN = "test-token-5f1c0e2a"
ENV = {"GF_SECURITY_ADMIN_PASSWORD": "x", "VALGEN_AUTH_TOKEN": TOKEN}


def _compose_commands() -> list[list[str]]:
    """The collector's command lines in the compose stack, with config paths in this repository."""
    commands = []
    for auth in (False, True):
        command = compose.resolved(ENV, auth=auth)["services"]["collector"]["command"]
        commands.append([str(harness.CONFIG_DIR / Path(a).name) if a.startswith("/etc/") else a for a in command])
    return commands


@pytest.mark.parametrize("command", _compose_commands(), ids=["plain", "auth"])
def test_collector_validates_every_config_compose_uses(command: list[str]) -> None:
    """`otelcol-valgen validate` accepts each command line of the stack with the stack's environment."""
    binary = harness.require_collector()
    # A variable compose passes through without a value is unset in the container when unset here.
    stack = compose.resolved(ENV, auth=True)["services"]["collector"]["environment"]
    env = {**os.environ, **{name: value for name, value in stack.items() if value is not None}}
    result = subprocess.run(
        [str(binary), "validate", *command], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_auth_overlay_refuses_to_start_without_a_token() -> None:
    """With VALGEN_AUTH_TOKEN unset the auth overlay is invalid, so the collector never runs unauthenticated."""
    binary = harness.require_collector()
    env = {key: value for key, value in os.environ.items() if key != "VALGEN_AUTH_TOKEN"}
    args = [str(binary), "validate", "--config", str(harness.CONFIG_DIR / "collector.yaml")]
    args += ["--config", str(harness.CONFIG_DIR / "auth.yaml")]
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert "no bearer token" in result.stdout + result.stderr


@pytest.fixture(scope="module")
def authed_collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.Collector]:
    """The collector with collector.yaml + auth.yaml and a known token."""
    workdir = tmp_path_factory.mktemp("auth-collector")
    configs, env = ["collector.yaml", "auth.yaml"], {"VALGEN_AUTH_TOKEN": TOKEN}
    with harness.collector(configs, env, workdir, (harness.MERGE_APPEND,)) as running:
        yield running


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer wrong-token"}, 401),
        ({"Authorization": TOKEN}, 401),
        ({"Authorization": f"Bearer {TOKEN}"}, 200),
    ],
    ids=["no-header", "wrong-token", "no-scheme", "right-token"],
)
def test_otlp_http_needs_the_bearer_token(
    authed_collector: harness.Collector, headers: dict[str, str], status: int
) -> None:
    """OTLP/HTTP answers 401 without the right `Authorization: Bearer <token>` and 200 with it."""
    assert harness.post_logs(authed_collector.http_endpoint, headers) == status


def test_otlp_grpc_needs_the_bearer_token(authed_collector: harness.Collector) -> None:
    """OTLP/gRPC answers UNAUTHENTICATED without the token and accepts the export with it."""
    with grpc.insecure_channel(authed_collector.grpc_endpoint) as channel:
        stub = logs_service_pb2_grpc.LogsServiceStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as refused:
            stub.Export(harness.probe_request(), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        stub.Export(harness.probe_request(), timeout=10, metadata=[("authorization", f"Bearer {TOKEN}")])


def test_sdk_exporter_authenticates_with_otel_exporter_otlp_headers(
    authed_collector: harness.Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's OTel SDK exporter configured only by OTEL_EXPORTER_OTLP_HEADERS gets through; without it, not."""
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor

    def export_once() -> str:
        """Emit one record through an SDK exporter; the name of its export result."""
        results: list[Any] = []

        class Recording(OTLPLogExporter):
            def export(self, batch: Sequence[Any]) -> Any:
                results.append(super().export(batch))
                return results[-1]

        exporter = Recording(endpoint=f"http://{authed_collector.http_endpoint}/v1/logs", timeout=5)
        provider = LoggerProvider()
        provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
        provider.get_logger("deploy-test").emit(body="auth probe")
        provider.shutdown()
        return str(results[0].name)

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer%20{TOKEN}")
    assert export_once() == "SUCCESS"
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_HEADERS")
    assert export_once() == "FAILURE"


@pytest.mark.parametrize("base", [["agent.yaml"], ["collector.yaml", "sampler.yaml"]], ids=["agent", "sampler"])
def test_auth_overlay_fits_the_scale_out_configs(base: list[str], tmp_path: Path) -> None:
    """The same auth.yaml on an agent and on a sampler: they start and refuse unauthenticated requests."""
    env = {"VALGEN_AUTH_TOKEN": TOKEN, "VALGEN_SAMPLER_HOSTS": f"[127.0.0.1:{harness.free_port()}]"}
    with harness.collector([*base, "auth.yaml"], env, tmp_path, (harness.MERGE_APPEND,)) as running:
        assert harness.post_logs(running.http_endpoint, {}) == 401
        assert harness.post_logs(running.http_endpoint, {"Authorization": f"Bearer {TOKEN}"}) == 200


def test_without_list_merging_the_auth_overlay_fails_closed(tmp_path: Path) -> None:
    """Forgetting the merge-append gate drops the base's extensions: the collector exits instead of running open."""
    binary = harness.require_collector()
    args = [str(binary), "--config", str(harness.CONFIG_DIR / "collector.yaml")]
    args += ["--config", str(harness.CONFIG_DIR / "auth.yaml")]
    env = {
        **os.environ,
        "VALGEN_AUTH_TOKEN": TOKEN,
        "VALGEN_STATE_DIR": str(tmp_path),
        "VALGEN_FILE_PATH": str(tmp_path / "out.jsonl"),
        "VALGEN_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{harness.free_port()}",
        "VALGEN_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{harness.free_port()}",
        "VALGEN_HEALTH_ENDPOINT": f"127.0.0.1:{harness.free_port()}",
        "VALGEN_METRICS_PORT": str(harness.free_port()),
    }
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode != 0
    assert "cannot start pipelines" in result.stderr
