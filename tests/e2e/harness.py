"""Run the built collector on loopback with local stand-ins for its destinations.

The collector binary is ``build/otelcol-valgen`` (``make collector``). Stand-ins: an OTLP/gRPC
logs server for the wandb exporter service and an HTTP server that decodes the OTLP/protobuf
posted to Loki's ``/otlp/v1/logs``. Used by the end-to-end tests and by
``bench/collector_throughput_bench.py`` and ``bench/rollout_dump_bench.py``.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

from otel_valgen.otlp_json import to_otlp_json
from tests.support.otlp_grpc import otlp_grpc_stand_in
from tests.support.otlp_http import otlp_http_stand_in
from tests.support.ports import free_port
from tests.support.process import ServerProcess, launch

REPO = Path(__file__).resolve().parents[2]
COLLECTOR_BIN = REPO / "build" / "otelcol-valgen"
AUTH_FEATURE_GATE = "confmap.enableMergeAppendOption"
CONFIG_DIR = REPO / "collector-config"


@dataclass
class Record:
    """One log record as a destination received it, flattened for assertions."""

    event: str
    attributes: dict[str, Any]
    trace_id: str
    resource: dict[str, Any]
    body: Any = None


def _value(value: dict[str, Any]) -> Any:
    for kind, convert in (("stringValue", str), ("intValue", int), ("doubleValue", float), ("boolValue", bool)):
        if kind in value:
            return convert(value[kind])
    if "arrayValue" in value:
        return [_value(item) for item in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return _attributes(value["kvlistValue"].get("values", []))
    if "bytesValue" in value:  # base64 in OTLP/JSON
        return base64.b64decode(value["bytesValue"])
    return value


def _attributes(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {item["key"]: _value(item.get("value", {})) for item in items}


def records_of_json(data: dict[str, Any]) -> list[Record]:
    """Flatten an OTLP/JSON logs payload (the file exporter's lines or a decoded request)."""
    out = []
    for resource_logs in data.get("resourceLogs", []):
        resource = _attributes(resource_logs.get("resource", {}).get("attributes", []))
        for scope_logs in resource_logs.get("scopeLogs", []):
            for log in scope_logs.get("logRecords", []):
                trace_id = log.get("traceId", "")
                attributes = _attributes(log.get("attributes", []))
                body = _value(log["body"]) if "body" in log else None
                out.append(Record(log.get("eventName", ""), attributes, trace_id, resource, body))
    return out


def records_of_request(request: logs_service_pb2.ExportLogsServiceRequest) -> list[Record]:
    """Flatten a protobuf export request."""
    return records_of_json(to_otlp_json(request))


def records_of_file(path: Path) -> list[Record]:
    """Flatten every line the collector's file exporter wrote (format: json).

    A last line without its newline is still being written: it is left for the next read.
    """
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines(): U+2028 etc. stay inside JSON strings
    return [r for line in lines[:-1] if line.strip() for r in records_of_json(json.loads(line))]


@dataclass
class StandIn:
    """A destination stand-in: where it listens and the export requests it decoded."""

    endpoint: str
    requests: list[logs_service_pb2.ExportLogsServiceRequest] = field(default_factory=list)
    wrong_paths: list[str] = field(default_factory=list)

    def records(self) -> list[Record]:
        """Every record received so far."""
        return [r for request in list(self.requests) for r in records_of_request(request)]

    def record_count(self) -> int:
        """How many records arrived, without flattening them."""
        requests = list(self.requests)
        return sum(len(sl.log_records) for request in requests for rl in request.resource_logs for sl in rl.scope_logs)


@contextmanager
def wandb_stand_in() -> Iterator[StandIn]:
    """OTLP/gRPC logs server standing in for the wandb exporter service; endpoint is host:port."""
    with otlp_grpc_stand_in(f"127.0.0.1:{free_port()}") as server:
        yield StandIn(endpoint=server.endpoint, requests=server.requests)


@contextmanager
def loki_stand_in() -> Iterator[StandIn]:
    """HTTP server decoding what Loki receives at /otlp/v1/logs; endpoint is its OTLP base URL."""
    with otlp_http_stand_in("/otlp/v1/logs") as server:
        yield StandIn(endpoint=f"{server.base_url}/otlp", requests=server.requests, wrong_paths=server.wrong_paths)


@dataclass
class Collector(ServerProcess):
    """A running otelcol-valgen process and the addresses it listens on."""

    grpc_endpoint: str
    http_endpoint: str
    file_path: Path
    health_port: int = 0
    metrics_port: int = 0

    def healthy(self) -> bool:
        """True while its health check answers 200."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/", timeout=1) as response:
                return int(response.status) == 200
        except OSError:
            return False


def launch_collector(
    home: Path,
    name: str,
    configs: list[str],
    env: dict[str, str],
    ports: tuple[int, int, int, int],
    feature_gates: tuple[str, ...] = (),
    extra_args: tuple[str, ...] = (),
) -> Collector:
    """Start otelcol-valgen on ``ports`` (gRPC, HTTP, health, metrics) with its queue, file and log in ``home``.

    A config given as an absolute path is used as it is (a test's own config). It does not wait.
    """
    grpc_port, http_port, health_port, metrics_port = ports
    grpc_endpoint, http_endpoint = f"127.0.0.1:{grpc_port}", f"127.0.0.1:{http_port}"
    file_path = home / "valgen.jsonl"
    full_env = {
        **os.environ,
        "VALGEN_OTLP_GRPC_ENDPOINT": grpc_endpoint,
        "VALGEN_OTLP_HTTP_ENDPOINT": http_endpoint,
        "VALGEN_SAMPLER_GRPC_ENDPOINT": grpc_endpoint,
        "VALGEN_SAMPLER_HTTP_ENDPOINT": http_endpoint,
        "VALGEN_HEALTH_ENDPOINT": f"127.0.0.1:{health_port}",
        "VALGEN_METRICS_PORT": str(metrics_port),
        "VALGEN_STATE_DIR": str(home),
        "VALGEN_FILE_PATH": str(file_path),
        "VALGEN_BATCH_TIMEOUT": "200ms",
        **env,
    }
    args = [str(COLLECTOR_BIN)]
    for config in configs:
        args += ["--config", str(CONFIG_DIR / config)]
    # auth.yaml appends to the base's extension list, a traces-*.yaml overlay to the logs
    # pipeline's exporters (see their headers): both need the list-append merge.
    if "auth.yaml" in configs or any(Path(config).name.startswith("traces-") for config in configs):
        feature_gates = (*feature_gates, AUTH_FEATURE_GATE)
    if feature_gates:
        args.append(f"--feature-gates={','.join(feature_gates)}")
    args += extra_args
    process = launch(name, args, full_env, home, "collector.log")
    return Collector(
        name, process, home / "collector.log", grpc_endpoint, http_endpoint, file_path, health_port, metrics_port
    )


def start_collector(
    state: Path, name: str, configs: list[str], env: dict[str, str], feature_gates: tuple[str, ...] = ()
) -> Collector:
    """Start otelcol-valgen with shipped configs on free loopback ports; wait until healthy.

    Its queue and file live in ``state/name``, so a restart under the same name keeps them.
    """
    ports = (free_port(), free_port(), free_port(), free_port())
    collector = launch_collector(state / name, name, configs, env, ports, feature_gates)
    try:
        collector.wait_ready(collector.healthy)
    except BaseException:
        collector.stop()
        raise
    return collector


@contextmanager
def bench_collector(state: Path, decision_wait: str) -> Iterator[tuple[Collector, StandIn, StandIn]]:
    """The built collector (collector.yaml, log level warn) exporting to a wandb and a Loki stand-in, for the benches.

    Yields (collector, wandb stand-in, Loki stand-in); the collector is stopped on exit.
    """
    with wandb_stand_in() as wandb, loki_stand_in() as loki:
        env = {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki.endpoint,
            "VALGEN_DECISION_WAIT": decision_wait,
            "VALGEN_LOG_LEVEL": "warn",
        }
        collector = start_collector(state, "bench", ["collector.yaml"], env)
        try:
            yield collector, wandb, loki
        finally:
            collector.stop()


def wait_for(condition: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition") -> None:
    """Poll until condition() holds; fail with `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
