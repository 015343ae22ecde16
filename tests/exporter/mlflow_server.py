"""A real MLflow tracking server on a free loopback port, with a temporary backend store."""

from __future__ import annotations

import os
import shutil
import sys
import time
import urllib.request
from pathlib import Path

from tests.support.ports import free_port
from tests.support.process import ServerProcess, launch


class MlflowServer:
    """``mlflow server`` (SQLite store, artifacts served by the server), stoppable and restartable on its port."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.server: ServerProcess | None = None

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def start(self) -> None:
        """Start it and wait until it answers /health."""
        mlflow = shutil.which("mlflow", path=os.path.dirname(sys.executable)) or "mlflow"
        args = [mlflow, "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        args += ["--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}"]
        args += ["--artifacts-destination", str(self.folder / "artifacts")]
        env = os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        process = launch("mlflow server", args, env, self.folder, "mlflow-server.log")
        self.server = ServerProcess("mlflow server", process, self.folder / "mlflow-server.log")
        self.server.wait_ready(self._ready, timeout_s=120)

    def stop(self) -> None:
        """Stop it (its store stays)."""
        if self.server is not None:
            self.server.stop()
            self.server = None

    def post_trace(self, experiment_id: str, trace_id: str, name: str = "valgen validation step") -> None:
        """Send one span of trace ``trace_id`` (32 hex) to the server's OTLP endpoint, as a collector does."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        message = ExportTraceServiceRequest()
        span = message.resource_spans.add().scope_spans.add().spans.add()
        now = time.time_ns()
        span.trace_id, span.span_id, span.name = bytes.fromhex(trace_id), os.urandom(8), name
        span.start_time_unix_nano, span.end_time_unix_nano = now - 1_000_000, now
        headers = {"Content-Type": "application/x-protobuf", "x-mlflow-experiment-id": experiment_id}
        request = urllib.request.Request(f"{self.uri}/v1/traces", data=message.SerializeToString(), headers=headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200, response.read()
