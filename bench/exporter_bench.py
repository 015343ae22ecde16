"""Benchmark the exporter service per backend (loopback only).

Backends: wandb offline (verl and rows layouts), TensorBoard (event files in a temporary
folder), MLflow (a local ``mlflow server`` with a SQLite store, started here), ClearML (offline,
a task made by verl's tracking in another process), Trackio (a local store).

Figures, per backend:
- latency from a step's request (its records and summary) arriving to the step being written;
- sustained records/s into the service over OTLP/HTTP and OTLP/gRPC, until all is written.

k = 64 generations per step, input and output of 2.5 KB each. Run:
    python bench/exporter_bench.py [--steps 30] [--seconds 8] [--backends wandb-rows,wandb-verl,tensorboard,mlflow]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

K = 64
TEXT = 2500


def _request(run: str, step: int, *, summary: bool = True) -> Any:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue, KeyValueList

    from otel_valgen import contract

    def kv(key: str, value: Any) -> KeyValue:
        if isinstance(value, int):
            return KeyValue(key=key, value=AnyValue(int_value=value))
        if isinstance(value, float):
            return KeyValue(key=key, value=AnyValue(double_value=value))
        return KeyValue(key=key, value=AnyValue(string_value=value))

    message = ExportLogsServiceRequest()
    rl = message.resource_logs.add()
    rl.resource.attributes.append(kv("service.name", "bench"))
    rl.resource.attributes.extend(kv(k, v) for k, v in RESOURCE.items())
    logs = rl.scope_logs.add().log_records
    for i in range(K):
        log = logs.add(event_name=contract.EVENT_GENERATION, severity_number=9)
        body = {"input": f"{i}" + "q" * TEXT, "output": f"{step}" + "a" * TEXT}
        log.body.kvlist_value.CopyFrom(KeyValueList(values=[kv(k, v) for k, v in body.items()]))
        attrs = {contract.RUN_ID: run, contract.STEP: step, contract.SAMPLE_ID: f"s{i}", contract.SAMPLE_KEY: i}
        attrs |= {contract.RANK: i + 1, contract.SCORE: 0.5, contract.SAMPLE_COUNT: K}
        log.attributes.extend(kv(k, v) for k, v in attrs.items())
    if summary:
        log = logs.add(event_name=contract.EVENT_STEP_SUMMARY, severity_number=9)
        attrs = {contract.RUN_ID: run, contract.STEP: step, contract.SEEN: 512, contract.KEPT: K}
        log.attributes.extend(kv(k, v) for k, v in attrs.items())
    return message


MLFLOW_URI: str | None = None  # set by main when the mlflow backend is measured
RESOURCE: dict[str, str] = {}  # the runs the records name (Trackio's, ClearML's), set by main


def _trackio_run(folder: str) -> dict[str, str]:
    """Start a local Trackio run as a job would (TRACKIO_DIR must be set before trackio is imported)."""
    os.environ["TRACKIO_DIR"] = os.path.join(folder, "trackio")
    import trackio

    trackio.init(project="bench", name="bench", embed=False, auto_log_cpu=False, auto_log_gpu=False)
    trackio.log({"train/loss": 1.0}, step=0)
    trackio.finish()
    return {"trackio.project": "bench", "trackio.run_name": "bench"}


def _clearml_task(folder: str) -> dict[str, str]:
    """An offline ClearML task made by verl's own tracking in another process, as the tests make one."""
    import json
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    work = Path(folder, "clearml-job")
    work.mkdir()
    os.environ.update(CLEARML_OFFLINE_MODE="1", CLEARML_CACHE_DIR=str(work / "cache"), HOME=str(work))
    script = shutil.copy(root / "tests" / "exporter" / "clearml_trainer.py", work / "trainer.py")
    env = os.environ | {"PYTHONPATH": str(root)}
    subprocess.run([sys.executable, str(script), str(work / "out.json")], cwd=work, env=env, check=True)
    resource: dict[str, str] = json.loads((work / "out.json").read_text())["resource"]
    return resource


def _backend(name: str, folder: str) -> Any:
    from otel_valgen.exporter.backends import create_backends
    from otel_valgen.exporter.backends.mlflow import MlflowConfig
    from otel_valgen.exporter.backends.tensorboard import TensorBoardConfig
    from otel_valgen.exporter.backends.wandb import WriterConfig

    tracker, _, layout = name.partition("-")
    configs = {
        "wandb": WriterConfig(layout=layout or "verl", mode="offline"),
        "tensorboard": TensorBoardConfig(root=folder),
        "mlflow": MlflowConfig(tracking_uri=MLFLOW_URI),
    }
    return create_backends([tracker], None, configs)[0]


def _start(layout: str, state: str | None = None) -> tuple[Any, Any]:
    from otel_valgen.exporter.server import ExporterServer
    from otel_valgen.exporter.service import ExporterService, ServiceConfig

    config = ServiceConfig(state_dir=state, max_pending_steps=256)
    service = ExporterService(config, [_backend(layout, os.environ["WANDB_DIR"])])
    server = ExporterServer(service, http="127.0.0.1:0", grpc_address="127.0.0.1:0")
    service.start()
    server.start()
    return service, server


def _post(port: int, body: bytes) -> int:
    """POST until accepted, retrying 503 as the collector would (without its backoff)."""
    while True:
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/logs", data=body, headers={"Content-Type": "application/x-protobuf"}
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            if error.code != 503:
                raise
            time.sleep(0.01)


def _export(stub: Any, request: Any) -> None:
    """Export over gRPC until accepted, retrying UNAVAILABLE."""
    import grpc

    while True:
        try:
            stub.Export(request, timeout=30)
            return
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            time.sleep(0.01)


def _wait_idle(service: Any, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not service.idle():
        if time.monotonic() > deadline:
            raise TimeoutError("service did not drain")
        time.sleep(0.005)


def latency(layout: str, steps: int) -> None:
    """Summary arrival -> table written, one step at a time."""
    service, server = _start(layout)
    bodies = [_request(f"lat-{layout}", step).SerializeToString() for step in range(1, steps + 1)]
    for body in bodies:
        _post(server.http_port, body)
        _wait_idle(service)
    ms = [value * 1000 for value in list(service.workers[0].latencies)]
    server.stop(1)
    service.stop()
    first, rest = ms[0], ms[1:]
    print(
        f"latency {layout:11s}: first step (attach) {first:7.1f} ms; next {len(rest)} steps: "
        f"p50 {statistics.median(rest):6.1f} ms, p95 {sorted(rest)[int(0.95 * (len(rest) - 1))]:6.1f} ms, "
        f"max {max(rest):6.1f} ms, last {rest[-1]:6.1f} ms"
    )


def throughput(layout: str, protocol: str, seconds: float, max_steps: int) -> None:
    """Sustained records/s (sent, accepted and written), one step (64 records + summary) per request."""
    import grpc
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc

    service, server = _start(layout)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    stub = logs_service_pb2_grpc.LogsServiceStub(channel)
    requests = [_request(f"tp-{protocol}", step) for step in range(1, max_steps + 1)]
    bodies = [r.SerializeToString() for r in requests] if protocol == "http" else []
    sent, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds and sent < len(requests):
        if protocol == "http":
            _post(server.http_port, bodies[sent])
        else:
            _export(stub, requests[sent])
        sent += 1
    accepted = time.perf_counter() - start
    _wait_idle(service)
    written = time.perf_counter() - start
    channel.close()
    server.stop(1)
    service.stop()
    records = sent * (K + 1)
    mb = sent * K * 2 * TEXT / 1e6
    print(
        f"throughput {layout:11s} {protocol:4s}: {records} records ({mb:.0f} MB text) in {written:5.1f} s: "
        f"{records / written:7.0f} records/s sustained (sending took {accepted:4.1f} s, with backpressure)"
    )


def main() -> None:
    """Run every figure."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30, help="steps for the latency figure")
    parser.add_argument("--seconds", type=float, default=8.0, help="sending time per throughput figure")
    parser.add_argument(
        "--backends", default="wandb-rows,wandb-verl,tensorboard,mlflow,clearml,trackio", help="what to measure"
    )
    args = parser.parse_args()
    global MLFLOW_URI
    names = args.backends.split(",")
    with tempfile.TemporaryDirectory() as folder:
        os.environ.update(WANDB_MODE="offline", WANDB_DIR=folder, WANDB_SILENT="true")
        os.environ.pop("WANDB_API_KEY", None)
        server = None
        if "mlflow" in names:
            from pathlib import Path

            from tests.exporter.mlflow_server import MlflowServer

            server = MlflowServer(Path(folder))
            server.start()
            MLFLOW_URI = server.uri
        if "trackio" in names:
            RESOURCE.update(_trackio_run(folder))
        if "clearml" in names:
            RESOURCE.update(_clearml_task(folder))
        print(f"k={K}, input and output {TEXT} B each, wandb offline, cpus={os.cpu_count()}")
        try:
            for name in names:
                latency(name, args.steps)
            # verl logs its whole accumulating table at every step (as verl does): cost grows with
            # the steps already written, so its figure is for the first 60 steps of one run.
            for name in names:
                for protocol in ("http", "grpc"):
                    throughput(name, protocol, args.seconds, 60 if name == "wandb-verl" else 2000)
        finally:
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
