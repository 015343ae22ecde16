"""Load benchmark of the whole pipeline: Ray actors -> SDK -> built collector -> file + wandb.

A local Ray cluster runs 8 emitting actors; each step, together they validate 20,000
generations of about 4 KB (k = 64), for 5 steps. Records go over OTLP/HTTP through a
byte-counting TCP proxy to ``build/otelcol-valgen`` running the shipped
``collector-config/collector.yaml``, which exports to its file output, to the real
``otel-valgen exporter`` (wandb offline, rows layout) and to a Loki stand-in.

Printed per mode (presampling on, then off): generations/s emitted, time from each step's end
to its wandb table, peak RSS of the emitting actors, the collector and the exporter, bytes on
the wire, and whether the counts reconcile (summary seen = all generated; kept = min(k, seen)
in the file output and in wandb).

Run: ``python bench/load_bench.py`` (needs ``make collector``; a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import ray  # noqa: E402

import otel_valgen as vg  # noqa: E402
from otel_valgen import ray as vg_ray  # noqa: E402
from otel_valgen.reader import Generation, Summary, read_paths  # noqa: E402
from tests.e2e import harness  # noqa: E402

K = 64
ACTORS = 8
TEXT = ("Solve the following problem step by step and explain every step carefully. " * 60)[:2000]


class ByteCountingProxy:
    """A TCP proxy on loopback that counts the bytes clients send through it."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.bytes_up = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self) -> None:
        """Start counting from zero."""
        with self._lock:
            self.bytes_up = 0

    def _accept(self) -> None:
        while True:
            client, _ = self._server.accept()
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, count: bool) -> None:
        try:
            while chunk := source.recv(65536):
                if count:
                    with self._lock:
                        self.bytes_up += len(chunk)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)


@ray.remote(num_cpus=0)
class Emitter:
    """One emitting actor: validates its share of each step in batches."""

    def __init__(self, index: int) -> None:
        self.index = index

    def configure(self, settings: dict[str, Any]) -> None:
        """Configure this actor's emitter for one mode of the benchmark."""
        vg.configure(**settings)

    def validate(self, step: int, carrier: dict[str, str], count: int, batch: int) -> dict[str, float]:
        """Emit this actor's share of a step; return its time and peak RSS."""
        started = time.perf_counter()
        with vg.validation(step=step, source=f"emitter-{self.index}", carrier=carrier):
            for start in range(0, count, batch):
                size = min(batch, count - start)
                uids = [f"p{self.index}-{i}" for i in range(start, start + size)]
                vg.log_generations(
                    [f"{uid}: {TEXT}" for uid in uids],
                    [f"answer {uid} step {step}: {TEXT}" for uid in uids],
                    [float(i % 5) for i in range(size)],
                    sample_ids=uids,
                )
        return {"seconds": time.perf_counter() - started, "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}

    def stats(self) -> dict[str, int]:
        """The otel_valgen counters of this actor."""
        return vg.stats()


def peak_rss_kib(pid: int) -> int:
    """VmHWM (peak resident set) of a process, KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def ledger_steps(state_dir: Path) -> dict[tuple[str, int], int]:
    """Steps the wandb exporter wrote: (run, step) -> number of rows."""
    path = state_dir / "ledger.jsonl"
    written: dict[tuple[str, int], int] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            written[(str(entry["group"]), int(entry["step"]))] = len(entry.get("samples", []))
    return written


def run_mode(
    presample: bool, steps: int, per_step: int, proxy: ByteCountingProxy, state_dir: Path, actors: list[Any]
) -> dict[str, Any]:
    """Emit ``steps`` steps with presampling on or off; measure and reconcile."""
    run_id = f"load-{'on' if presample else 'off'}-{int(time.time())}"
    endpoint = f"http://127.0.0.1:{proxy.port}"
    settings = {"run_id": run_id, "count": K, "presample": presample, "endpoint": endpoint, "flush_timeout_s": 120}
    vg.configure(**settings, source="driver")
    ray.get([actor.configure.remote(settings) for actor in actors])
    proxy.reset()
    per_actor = per_step // len(actors)
    emit_seconds: list[float] = []
    latencies: list[float] = []
    rss: list[float] = []
    for step in range(1, steps + 1):
        started = time.perf_counter()
        with vg.validation(step=step, source="driver", sources_expected=len(actors) + 1) as block:
            results = ray.get([a.validate.remote(step, block.carrier(), per_actor, 500) for a in actors])
        ended = time.perf_counter()
        emit_seconds.append(ended - started)
        rss.extend(r["rss_kib"] for r in results)
        deadline = ended + 300
        while (run_id, step) not in ledger_steps(state_dir) and time.perf_counter() < deadline:
            time.sleep(0.02)
        latencies.append(time.perf_counter() - ended)
    return {
        "run_id": run_id,
        "generations_per_s": steps * per_actor * len(actors) / sum(emit_seconds),
        "latency_s": latencies,
        "emitter_peak_rss_mib": max(rss) / 1024,
        "bytes_on_wire": proxy.bytes_up,
        "wandb_rows": {step: rows for (run, step), rows in ledger_steps(state_dir).items() if run == run_id},
        "actor_stats": ray.get([a.stats.remote() for a in actors]),
    }


def reconcile(file_path: Path, run_id: str, steps: int, per_step: int) -> list[str]:
    """Check the collector's file output: kept = min(k, seen) and seen = all generated."""
    problems = []
    records = list(read_paths([file_path.parent], lambda error: problems.append(str(error))))
    for step in range(1, steps + 1):
        kept = [r for r in records if isinstance(r, Generation) and r.run_id == run_id and r.step == step]
        summaries = [r for r in records if isinstance(r, Summary) and r.run_id == run_id and r.step == step]
        if len(summaries) != 1:
            problems.append(f"step {step}: {len(summaries)} summaries")
            continue
        seen = summaries[0].attributes.get("valgen.seen")
        if seen != per_step or len(kept) != min(K, per_step):
            problems.append(f"step {step}: seen {seen} (want {per_step}), kept {len(kept)} (want {min(K, per_step)})")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--per-step", type=int, default=20_000)
    parser.add_argument("--steps-off", type=int, default=2, help="steps with presampling off")
    args = parser.parse_args()
    if not harness.COLLECTOR_BIN.is_file():
        sys.exit("build/otelcol-valgen is absent: run `make collector` first")
    with tempfile.TemporaryDirectory() as tmp, harness.loki_stand_in() as loki:
        home = Path(tmp)
        state_dir = home / "exporter-state"
        grpc_port = harness.free_port()
        exporter_env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(home / "wandb"), "WANDB_SILENT": "true"}
        exporter = subprocess.Popen(
            [sys.executable, "-m", "otel_valgen.cli.main", "exporter", "--grpc", f"127.0.0.1:{grpc_port}",
             "--http", "", "--layout", "rows", "--wandb-mode", "offline", "--state-dir", str(state_dir),
             "--project", "load-bench"],
            env=exporter_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        collector = harness.start_collector(
            home,
            "collector",
            ["collector.yaml"],
            {
                "VALGEN_TRACKER_EXPORTER_ENDPOINT": f"127.0.0.1:{grpc_port}",
                "VALGEN_LOKI_OTLP_ENDPOINT": loki.endpoint,
                "VALGEN_DECISION_WAIT": "60s",
                "VALGEN_MEMORY_LIMIT_MIB": "2048",
                "VALGEN_MEMORY_SPIKE_LIMIT_MIB": "512",
            },
        )
        proxy = ByteCountingProxy(int(collector.http_endpoint.rsplit(":", 1)[1]))
        vg.configure(run_id="load-bench-driver", count=K)  # resolve the driver's settings before Ray forwards them
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=vg_ray.runtime_env())
        try:
            actors = [Emitter.remote(i) for i in range(ACTORS)]  # type: ignore[attr-defined]
            results = {
                "on": run_mode(True, args.steps, args.per_step, proxy, state_dir, actors),
                "off": run_mode(False, args.steps_off, args.per_step, proxy, state_dir, actors),
            }
        finally:
            ray.shutdown()
        collector_rss = peak_rss_kib(collector.process.pid) / 1024
        exporter_rss = peak_rss_kib(exporter.pid) / 1024
        collector.stop()
        exporter.terminate()
        exporter.wait(60)
        print(f"machine: {os.cpu_count()} cores; {ACTORS} actors, {args.per_step} generations/step of ~4 KB, k={K}")
        for mode, result in results.items():
            steps = args.steps if mode == "on" else args.steps_off
            problems = reconcile(collector.file_path, result["run_id"], steps, args.per_step)
            rows_ok = all(rows == K for rows in result["wandb_rows"].values()) and len(result["wandb_rows"]) == steps
            latencies = ", ".join(f"{x:.2f}" for x in result["latency_s"])
            print(f"presampling {mode}: {steps} steps")
            print(f"  generations/s emitted (all actors):  {result['generations_per_s']:,.0f}")
            print(f"  step end -> wandb table written, s:  {latencies}")
            print(f"  peak RSS of an emitting actor:       {result['emitter_peak_rss_mib']:.0f} MiB")
            print(f"  bytes on the wire (SDK -> collector): {result['bytes_on_wire'] / 1e6:,.1f} MB")
            print(f"  counts reconcile in the file output:  {problems or 'yes'}")
            print(f"  wandb rows per step == k:             {'yes' if rows_ok else result['wandb_rows']}")
        print(f"peak RSS: collector {collector_rss:.0f} MiB, wandb exporter {exporter_rss:.0f} MiB")


if __name__ == "__main__":
    main()
