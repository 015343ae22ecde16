"""Processes and stand-ins for the deployment tests: the built collector, Loki, an OTLP/HTTP sink.

Everything listens on 127.0.0.1 at free ports and is stopped by its context manager, so the
tests never clash with a collector or a Loki already running on the default ports.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2

from tests.support.otlp_http import OtlpHttpStandIn, otlp_http_stand_in
from tests.support.ports import free_port
from tests.support.process import ServerProcess, launch
from tests.support.require import require_or_skip

REPO = Path(__file__).resolve().parents[2]
COLLECTOR_BIN = REPO / "build" / "otelcol-valgen"
CONFIG_DIR = REPO / "collector-config"
TOOLS = REPO / "build" / "tools"
INSTALL_TOOLS = "bash tools/deploy/install-tools.sh"
# auth.yaml appends its extension to the base's `service.extensions` (see its header).
MERGE_APPEND = "--feature-gates=confmap.enableMergeAppendOption"


def require_collector() -> Path:
    """The built collector, or skip saying how to build it (a failure under VALGEN_REQUIRE_ALL=1)."""
    require_or_skip(
        COLLECTOR_BIN.is_file(), f"{COLLECTOR_BIN.relative_to(REPO)} is absent; build it with `make collector`"
    )
    return COLLECTOR_BIN


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll `condition` every 0.1 s; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def http_ok(url: str) -> bool:
    """True when GET `url` answers 200 within a second."""
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return int(response.status) == 200
    except (OSError, urllib.error.HTTPError):
        return False


@contextmanager
def started(
    name: str, args: list[str], env: dict[str, str], workdir: Path, ready_url: str, timeout_s: float
) -> Iterator[ServerProcess]:
    """Run `args` until the block ends; wait until `ready_url` answers 200."""
    process = ServerProcess(
        name, launch(name, args, {**os.environ, **env}, workdir, f"{name}.log"), workdir / f"{name}.log"
    )
    try:
        process.wait_ready(lambda: http_ok(ready_url), timeout_s)
        yield process
    finally:
        process.stop()


@dataclass
class Collector:
    """A running collector's addresses."""

    process: ServerProcess
    grpc_endpoint: str
    http_endpoint: str
    file_path: Path


@contextmanager
def collector(
    configs: list[str], env: dict[str, str], workdir: Path, flags: tuple[str, ...] = ()
) -> Iterator[Collector]:
    """The built collector with `configs` (names under collector-config/) on free loopback ports.

    Every listen address and path the shipped configs read from VALGEN_* is overridden; `env`
    is applied last. `flags` are further command-line arguments (e.g. feature gates).
    """
    binary = require_collector()
    grpc_port, http_port, health_port, metrics_port = (free_port() for _ in range(4))
    file_path = workdir / "files" / "valgen.jsonl"
    full_env = {
        "VALGEN_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{grpc_port}",
        "VALGEN_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{http_port}",
        "VALGEN_SAMPLER_GRPC_ENDPOINT": f"127.0.0.1:{grpc_port}",
        "VALGEN_SAMPLER_HTTP_ENDPOINT": f"127.0.0.1:{http_port}",
        "VALGEN_HEALTH_ENDPOINT": f"127.0.0.1:{health_port}",
        "VALGEN_METRICS_HOST": "127.0.0.1",
        "VALGEN_METRICS_PORT": str(metrics_port),
        "VALGEN_STATE_DIR": str(workdir / "state"),
        "VALGEN_FILE_PATH": str(file_path),
        # Nothing listens there: the wandb export only queues, which is all these tests need.
        "VALGEN_TRACKER_EXPORTER_ENDPOINT": f"127.0.0.1:{free_port()}",
        "VALGEN_LOKI_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}/otlp",
        "VALGEN_BATCH_TIMEOUT": "200ms",
        **env,
    }
    args = [str(binary)]
    for config in configs:
        args += ["--config", str(CONFIG_DIR / config)]
    args += flags
    health = f"http://127.0.0.1:{health_port}/"
    with started("collector", args, full_env, workdir, health, 30) as process:
        yield Collector(process, f"127.0.0.1:{grpc_port}", f"127.0.0.1:{http_port}", file_path)


@contextmanager
def otlp_http_sink() -> Iterator[OtlpHttpStandIn]:
    """An OTLP/HTTP sink on a free loopback port keeping requests at any path (Loki's /otlp/v1/logs)."""
    with otlp_http_stand_in(path=None) as sink:
        yield sink


def probe_request() -> logs_service_pb2.ExportLogsServiceRequest:
    """One log record that is not a valgen event (the sampler passes it through)."""
    record = logs_pb2.LogRecord(body=common_pb2.AnyValue(string_value="auth probe"))
    return logs_service_pb2.ExportLogsServiceRequest(
        resource_logs=[logs_pb2.ResourceLogs(scope_logs=[logs_pb2.ScopeLogs(log_records=[record])])]
    )


def post_logs(endpoint: str, headers: dict[str, str]) -> int:
    """POST one protobuf export request to http://`endpoint`/v1/logs; the HTTP status."""
    request = urllib.request.Request(
        f"http://{endpoint}/v1/logs",
        data=probe_request().SerializeToString(),
        headers={"Content-Type": "application/x-protobuf", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def loki_targets(dashboard: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(panel, target) of every Loki query of the dashboard (test_pipeline_health.py checks the Prometheus ones)."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            if target["datasource"]["type"] != "prometheus":
                yield panel, target
