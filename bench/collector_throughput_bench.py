"""Benchmark the built collector (build/otelcol-valgen, collector-config/collector.yaml).

Sends S steps of M generations (text of about T bytes each, no precomputed sample key, so the
collector computes every HMAC) over OTLP/gRPC, each step ended by one end record with
sources_expected = 1, to a collector exporting to local stand-ins (wandb gRPC, Loki HTTP,
file). Figures:
- ingest rate: generations/s accepted by the collector's OTLP receiver;
- end to end: from the first send until every step's summary reached the wandb stand-in;
- close latency: from a step's end record being accepted until its summary arrived;
- the collector's peak RSS (VmHWM).

Run: ``python bench/collector_throughput_bench.py [--steps 20] [--per-step 5000]``
(needs ``make collector``; about half a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1 import logs_pb2

from tests.e2e import harness

RUN_ID = "bench-run"
BATCH = 1000


def _kv(key: str, value: str | int) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _request(records: list[logs_pb2.LogRecord]) -> logs_service_pb2.ExportLogsServiceRequest:
    request = logs_service_pb2.ExportLogsServiceRequest()
    resource_logs = request.resource_logs.add()
    resource_logs.resource.attributes.extend([_kv("service.name", "bench"), _kv("service.instance.id", "bench-0")])
    resource_logs.scope_logs.add().log_records.extend(records)
    return request


def _generation(step: int, index: int, k: int, text: str) -> logs_pb2.LogRecord:
    record = logs_pb2.LogRecord(event_name="valgen.generation", severity_number=9, trace_id=step.to_bytes(16, "big"))
    record.attributes.extend(
        [
            _kv("valgen.run_id", RUN_ID),
            _kv("valgen.step", step),
            _kv("valgen.sample_id", f"prompt-{index:06d}/0"),
            _kv("valgen.source", "trainer"),
            _kv("valgen.sample_count", k),
        ]
    )
    body = record.body.kvlist_value.values
    body.extend([KeyValue(key="input", value=AnyValue(string_value=text)), _kv("output", text)])
    return record


def _end(step: int, seen: int) -> logs_pb2.LogRecord:
    record = logs_pb2.LogRecord(
        event_name="valgen.validation.end", severity_number=9, trace_id=step.to_bytes(16, "big")
    )
    record.attributes.extend(
        [
            _kv("valgen.run_id", RUN_ID),
            _kv("valgen.step", step),
            _kv("valgen.source", "trainer"),
            _kv("valgen.seen", seen),
            _kv("valgen.emitted", seen),
            _kv("valgen.sources_expected", 1),
        ]
    )
    return record


def _summaries(stand_in: harness.StandIn) -> dict[int, float]:
    out = {}
    for request in list(stand_in.requests):
        for rl in request.resource_logs:
            for sl in rl.scope_logs:
                for record in sl.log_records:
                    if record.event_name == "valgen.step.summary":
                        step = next(a.value.int_value for a in record.attributes if a.key == "valgen.step")
                        out.setdefault(step, time.monotonic())
    return out


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--per-step", type=int, default=5000)
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--text", type=int, default=500, help="bytes of input and of output per generation")
    args = parser.parse_args()
    if not harness.COLLECTOR_BIN.is_file():
        sys.exit("build/otelcol-valgen is absent; run `make collector` first")

    text = "x" * args.text
    print(f"building {args.steps} x {args.per_step} generations ...", flush=True)
    plan = []
    for step in range(1, args.steps + 1):
        records = [_generation(step, i, args.k, text) for i in range(args.per_step)]
        batches = [_request(records[i : i + BATCH]).SerializeToString() for i in range(0, len(records), BATCH)]
        plan.append((step, batches, _request([_end(step, args.per_step)]).SerializeToString()))

    with tempfile.TemporaryDirectory() as state, harness.bench_collector(Path(state), "120s") as (collector, wandb, _):
        channel = grpc.insecure_channel(collector.grpc_endpoint, options=[("grpc.max_send_message_length", 64 << 20)])
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
            request_serializer=lambda payload: payload,
            response_deserializer=logs_service_pb2.ExportLogsServiceResponse.FromString,
        )
        ended_at: dict[int, float] = {}
        start = time.monotonic()
        for step, batches, end in plan:
            for payload in batches:
                export(payload, timeout=30)
            export(end, timeout=30)
            ended_at[step] = time.monotonic()
        sent = time.monotonic() - start
        harness.wait_for(lambda: len(_summaries(wandb)) == args.steps, 120, "every summary")
        closed = _summaries(wandb)
        total = time.monotonic() - start
        rss = _peak_rss_mib(collector.process.pid)
        channel.close()
    kept = wandb.record_count() - args.steps

    generations = args.steps * args.per_step
    latencies = sorted((closed[s] - ended_at[s]) * 1000 for s in ended_at)
    print(f"generations sent:      {generations} ({args.text} B input + {args.text} B output each), k = {args.k}")
    print(f"ingest:                {generations / sent:,.0f} generations/s ({sent:.2f} s)")
    print(f"end to end:            {generations / total:,.0f} generations/s ({total:.2f} s until the last summary)")
    print(f"close latency (ms):    median {statistics.median(latencies):.0f}, max {latencies[-1]:.0f}")
    print(f"kept at wandb:         {kept} (expected {args.steps * min(args.k, args.per_step)})")
    print(f"collector peak RSS:    {rss:.0f} MiB")


if __name__ == "__main__":
    main()
