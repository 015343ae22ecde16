"""User story: an operator exposes the pipeline and must trust what it refuses and what it writes.

Oversized requests are refused with a clear error; with ``collector-config/auth.yaml`` a
client without the bearer token is refused; and no secret (the OTLP bearer token, the wandb
API key) appears in any log line or file that the emitter, the collector, ``resend`` or the
wandb exporter writes, even at debug log level.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc

from tests.e2e.harness import REPO, StandIn, free_port, wait_for
from tests.faults.conftest import Collectors, RunningCollector
from tests.faults.exporter import start_exporter

TOKEN = "s3cr3t-token-7f2d9c"
WANDB_KEY = "f" * 8 + "fake-wandb-api-key-0123456789abcdef"


def _post(endpoint: str, body: bytes, token: str | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/x-protobuf"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"http://{endpoint}/v1/logs", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status), response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode("utf-8", "replace")


def _request_of(mib: int) -> logs_service_pb2.ExportLogsServiceRequest:
    """A request of about ``mib`` MiB: one plain log record of 1 MiB per MiB."""
    request = logs_service_pb2.ExportLogsServiceRequest()
    scope = request.resource_logs.add().scope_logs.add()
    for _ in range(mib):
        scope.log_records.add().body.string_value = "x" * (1 << 20)
    return request


def _auth_args() -> list[str]:
    """The command-line flags auth.yaml asks for in its header (its list-append merge feature gate)."""
    auth = REPO / "collector-config" / "auth.yaml"
    gate = "confmap.enableMergeAppendOption"
    return [f"--feature-gates={gate}"] if auth.is_file() and gate in auth.read_text(encoding="utf-8") else []


def _collector(collectors: Collectors, wandb: StandIn, loki: StandIn, configs: list[str]) -> RunningCollector:
    env = {
        "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb.endpoint,
        "VALGEN_LOKI_OTLP_ENDPOINT": loki.endpoint,
        "VALGEN_AUTH_TOKEN": TOKEN,
        "VALGEN_DECISION_WAIT": "2s",
    }
    return collectors.start("c", env, configs, extra_args=_auth_args() if "auth.yaml" in configs else None)


@pytest.mark.timeout(60)
def test_oversized_requests_are_refused_with_a_clear_error(
    collectors: Collectors, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """OTLP/HTTP and OTLP/gRPC over 64 MiB: 400 'request body too large' / RESOURCE_EXHAUSTED."""
    import grpc

    collector = _collector(collectors, wandb_stand_in, loki_stand_in, ["collector.yaml"])
    assert _post(collector.http_endpoint, _request_of(63).SerializeToString())[0] == 200
    status, body = _post(collector.http_endpoint, _request_of(65).SerializeToString())
    assert status == 400
    assert "request body too large" in body

    channel = grpc.insecure_channel(collector.grpc_endpoint, options=[("grpc.max_send_message_length", 100 << 20)])
    stub = logs_service_pb2_grpc.LogsServiceStub(channel)
    with pytest.raises(grpc.RpcError) as refused:
        stub.Export(_request_of(65), timeout=30)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in str(refused.value.details())
    channel.close()
    assert collector.healthy()


@pytest.mark.timeout(60)
def test_client_without_the_token_is_refused(
    collectors: Collectors, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """With auth.yaml: no token or a wrong one gets 401 (HTTP) / UNAUTHENTICATED (gRPC); the token gets 200."""
    import grpc

    if not (REPO / "collector-config" / "auth.yaml").is_file():
        pytest.skip("collector-config/auth.yaml is absent")
    collector = _collector(collectors, wandb_stand_in, loki_stand_in, ["collector.yaml", "auth.yaml"])
    empty = logs_service_pb2.ExportLogsServiceRequest().SerializeToString()
    assert _post(collector.http_endpoint, empty)[0] == 401
    assert _post(collector.http_endpoint, empty, "wrong-token")[0] == 401
    assert _post(collector.http_endpoint, empty, TOKEN)[0] == 200
    with grpc.insecure_channel(collector.grpc_endpoint) as channel, pytest.raises(grpc.RpcError) as refused:
        logs_service_pb2_grpc.LogsServiceStub(channel).Export(logs_service_pb2.ExportLogsServiceRequest(), timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


_EMITTER = """
import logging, sys
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
import otel_valgen as vg
vg.configure(run_id="faults-secret", count=3, endpoint=sys.argv[1], flush_timeout_s=3)
for step in (1, 2):
    with vg.validation(step=step, source="trainer", sources_expected=1):
        vg.log_generations([f"q{i}" for i in range(5)], ["a"] * 5, [0.5] * 5)
print(vg.stats(), file=sys.stderr)
"""


@pytest.mark.timeout(120)
def test_no_secret_appears_in_any_log_or_file_the_pipeline_writes(
    collectors: Collectors, loki_stand_in: StandIn, tmp_path: Path
) -> None:
    """Bearer token and wandb key set everywhere; debug logs, outputs, queues, spool, wandb files hold neither."""
    if not (REPO / "collector-config" / "auth.yaml").is_file():
        pytest.skip("collector-config/auth.yaml is absent")
    exporter_endpoint = f"127.0.0.1:{free_port()}"
    secrets_env = {
        "WANDB_API_KEY": WANDB_KEY,
        "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer {TOKEN}",
        "VALGEN_AUTH_TOKEN": TOKEN,
    }
    collector = collectors.start(
        "c",
        {
            **secrets_env,
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": exporter_endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
            "VALGEN_LOG_LEVEL": "debug",
        },
        ["collector.yaml", "auth.yaml"],
        extra_args=_auth_args(),
    )
    exporter = start_exporter(
        exporter_endpoint, tmp_path / "exporter-state", tmp_path / "wandb", tmp_path / "exporter.log", secrets_env
    )
    (tmp_path / "wandb").mkdir(exist_ok=True)
    env = {**os.environ, **secrets_env, "OTEL_VALGEN_DIR": str(tmp_path / "emitter"), "PYTHONPATH": str(REPO)}
    try:
        logs = tmp_path / "emitter-logs"
        logs.mkdir()
        # One emitter reaches the collector; one sends to a dead port and spools, then resend replays the spool.
        for name, endpoint in (
            ("live", f"http://{collector.http_endpoint}"),
            ("dead", f"http://127.0.0.1:{free_port()}"),
        ):
            with (logs / f"{name}.log").open("wb") as log:
                done = subprocess.run(
                    [sys.executable, "-c", _EMITTER, endpoint],
                    env={**env, "OTEL_EXPORTER_OTLP_TIMEOUT": "1"},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=REPO,
                    timeout=60,
                    check=False,
                )
            assert done.returncode == 0, (logs / f"{name}.log").read_text()
        with (logs / "resend.log").open("wb") as log:
            resend = [sys.executable, "-m", "otel_valgen.cli.main", "resend", str(tmp_path / "emitter" / "spool")]
            resend += ["--endpoint", f"http://{collector.http_endpoint}"]
            done = subprocess.run(
                resend, check=False, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, timeout=60
            )
        assert done.returncode == 0, (logs / "resend.log").read_text()
        wait_for(lambda: sorted(set(exporter.written_steps("faults-secret"))) == [1, 2], 60, "steps written to wandb")
        assert exporter.stop() == 0
    finally:
        exporter.kill()
    assert collector.stop() == 0

    checked, leaks = 0, []
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            checked += 1
            leaks += [f"{path}: {secret}" for secret in (TOKEN, WANDB_KEY) if secret.encode() in data]
    assert checked > 10
    assert (tmp_path / "emitter" / "spool").exists()  # the spool was written (and replayed)
    assert leaks == []
