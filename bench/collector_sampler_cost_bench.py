"""Cost of the valgen_sampler processor in the built collector, against a stock pass-through.

1. Throughput: the same pre-serialized OTLP/gRPC requests, sent by the same load generator
   (2 client threads), to ``otlp -> valgen_sampler -> batch -> file`` and to
   ``otlp -> batch -> file``; records/s accepted by the receiver, and the ratio; the same with
   the ``debug`` exporter (a nearly free sink) to show the processor's own cost; records
   without and with ``valgen.sample_key``, of key version 2 (``valgen.key_version``, as the SDK
   sends them) or, with ``--key-version 1``, of version 1 (no ``valgen.key_version``: HMAC).
2. Memory: the collector's peak RSS (VmHWM) with k = 64 as one step grows from 10k to 100k
   to 1M generations (each run in a fresh collector).

Run: ``python bench/collector_sampler_cost_bench.py`` (needs ``make collector``; a few minutes);
``--collector PATH`` measures another build.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from otel_valgen.sampling import KEY_VERSION, LEGACY_KEY_VERSION, sample_key
from tests.e2e import harness

BATCH = 1000
RUN_ID = "cost-bench"
SEED = 42  # the processor's default seed

PIPELINE = """
extensions:
  health_check:
    endpoint: 127.0.0.1:{health}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{grpc}
        max_recv_msg_size_mib: 64
processors:
  batch:
    timeout: 200ms
  valgen_sampler:
    count: 64
    decision_wait: 120s
exporters:
  file:
    path: {path}
    format: json
  debug:
    verbosity: basic
    sampling_initial: 1
    sampling_thereafter: 1000
service:
  extensions: [health_check]
  telemetry:
    logs:
      level: warn
    metrics:
      level: none
  pipelines:
    logs:
      receivers: [otlp]
      processors: [{processors}]
      exporters: [{exporter}]
"""


def _kv(key: str, value: str | int) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _batch(step: int, start: int, size: int, text: str, keyed: bool = False, version: int = KEY_VERSION) -> bytes:
    """One request of ``size`` generations of step ``step``, of key ``version``.

    With ``keyed`` they carry ``valgen.sample_key`` as the SDK sends it; else the collector
    computes every key. Version 1 records carry no ``valgen.key_version``.
    """
    request = logs_service_pb2.ExportLogsServiceRequest()
    resource_logs = request.resource_logs.add()
    resource_logs.resource.attributes.extend([_kv("service.name", "bench"), _kv("service.instance.id", "bench-0")])
    records = resource_logs.scope_logs.add().log_records
    for index in range(start, start + size):
        record = records.add(event_name="valgen.generation", severity_number=9, trace_id=step.to_bytes(16, "big"))
        record.attributes.extend(
            [
                _kv("valgen.run_id", RUN_ID),
                _kv("valgen.step", step),
                _kv("valgen.sample_id", f"prompt-{index:07d}/0"),
                _kv("valgen.source", "trainer"),
                _kv("valgen.sample_count", 64),
            ]
        )
        if version != LEGACY_KEY_VERSION:
            record.attributes.append(_kv("valgen.key_version", version))
        if keyed:
            record.attributes.append(_kv("valgen.sample_key", sample_key(SEED, f"prompt-{index:07d}/0", version)))
        record.body.kvlist_value.values.extend([_kv("input", text), _kv("output", text)])
    return request.SerializeToString()


class Collector:
    """The built collector with a generated minimal pipeline."""

    def __init__(self, binary: Path, home: Path, processors: str, exporter: str = "file") -> None:
        self.grpc_port, health = harness.free_port(), harness.free_port()
        config = home / f"{processors.replace(', ', '-')}.yaml"
        config.write_text(
            PIPELINE.format(
                health=health,
                grpc=self.grpc_port,
                path=home / "out.jsonl",
                processors=processors,
                exporter=exporter,
            ),
            encoding="utf-8",
        )
        self.process = subprocess.Popen(
            [str(binary), "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        harness.wait_for(lambda: _healthy(health), 30, "collector healthy")

    def export_all(self, payloads: Iterator[bytes], threads: int = 2) -> None:
        """Send every payload, from ``threads`` client threads sharing one channel."""
        channel = grpc.insecure_channel(
            f"127.0.0.1:{self.grpc_port}", options=[("grpc.max_send_message_length", 64 << 20)]
        )
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
            request_serializer=lambda payload: payload,
            response_deserializer=logs_service_pb2.ExportLogsServiceResponse.FromString,
        )
        lock = threading.Lock()

        def worker() -> None:
            while True:
                with lock:
                    payload = next(payloads, None)
                if payload is None:
                    return
                export(payload, timeout=60)

        workers = [threading.Thread(target=worker) for _ in range(threads)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        channel.close()

    def peak_rss_mib(self) -> float:
        """VmHWM of the collector."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        """SIGTERM and wait."""
        self.process.terminate()
        self.process.wait(60)


def _healthy(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def throughput(binary: Path, records: int, text: str, repeats: int, keyed: bool, version: int) -> None:
    """Records/s accepted through the sampler pipeline and through the pass-through."""
    steps = max(1, records // 10_000)
    payloads = [
        _batch(step, start, BATCH, text, keyed, version)
        for step in range(1, steps + 1)
        for start in range(0, records // steps, BATCH)
    ]
    sent = len(payloads) * BATCH
    shapes = [(p, e) for e in ("file", "debug") for p in ("valgen_sampler, batch", "batch")]
    rates: dict[tuple[str, str], list[float]] = {shape: [] for shape in shapes}
    with tempfile.TemporaryDirectory() as tmp:
        for attempt in range(repeats):
            for index, (processors, exporter) in enumerate(shapes):
                home = Path(tmp) / f"{attempt}-{index}"
                home.mkdir()
                collector = Collector(binary, home, processors, exporter)
                try:
                    started = time.perf_counter()
                    collector.export_all(iter(payloads))
                    rates[(processors, exporter)].append(sent / (time.perf_counter() - started))
                finally:
                    collector.stop()
    keys = "with valgen.sample_key (as the SDK sends)" if keyed else "without keys (the collector computes each)"
    print(
        f"throughput: {sent:,} generations of {2 * len(text)} B text {keys}, key version {version}, "
        f"2 client threads, best of {repeats}"
    )
    for exporter in ("file", "debug"):
        sampled, passed = max(rates[("valgen_sampler, batch", exporter)]), max(rates[("batch", exporter)])
        print(f"  otlp -> valgen_sampler -> batch -> {exporter:<5}: {sampled:>10,.0f} records/s")
        print(f"  otlp -> batch -> {exporter:<5} (pass-through):   {passed:>10,.0f} records/s")
        print(f"  ratio with the {exporter} exporter: {sampled / passed:.2f}")


def memory(binary: Path, sizes: list[int], text: str) -> None:
    """Peak RSS of the sampler collector as one step grows."""
    print(f"peak RSS with k = 64, one step of N generations ({2 * len(text)} B text each):")
    first = None
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            home = Path(tmp) / str(size)
            home.mkdir()
            collector = Collector(binary, home, "valgen_sampler, batch")
            try:
                payloads = (_batch(1, start, BATCH, text) for start in range(0, size, BATCH))
                collector.export_all(payloads)
                rss = collector.peak_rss_mib()
            finally:
                collector.stop()
            first = first or rss
            print(f"  N = {size:>9,}: {rss:6.1f} MiB  ({(rss / first - 1) * 100:+.1f}% vs the first)")


def main() -> None:
    """Run both measurements and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--text", type=int, default=500, help="bytes of input and of output")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--collector", type=Path, default=harness.COLLECTOR_BIN, help="the collector binary")
    parser.add_argument("--key-version", type=int, choices=(LEGACY_KEY_VERSION, KEY_VERSION), default=KEY_VERSION)
    args = parser.parse_args()
    if not args.collector.is_file():
        sys.exit(f"{args.collector} is absent; run `make collector` first")
    text = "x" * args.text
    throughput(args.collector, args.records, text, args.repeats, keyed=False, version=args.key_version)
    throughput(args.collector, args.records, text, args.repeats, keyed=True, version=args.key_version)
    memory(args.collector, [int(size) for size in args.sizes.split(",")], "y" * 100)


if __name__ == "__main__":
    main()
