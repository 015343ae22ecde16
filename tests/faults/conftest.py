"""Fixtures for the fault tests: the built collector (restartable, SIGKILL-able) and its stand-ins.

Tests that need ``build/otelcol-valgen`` ask for the ``collectors`` fixture, which skips with a
message when the binary is absent (``make collector`` builds it).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.e2e import harness
from tests.e2e.conftest import loki_stand_in, wandb_stand_in  # noqa: F401 (shared fixtures)
from tests.e2e.harness import Collector, Record, StandIn, records_of_json
from tests.support.otlp_grpc import otlp_grpc_stand_in
from tests.support.require import require_or_skip


def metrics(port: int) -> dict[str, float]:
    """The collector's own Prometheus metrics: ``name{labels}`` -> value (labels sorted as exposed)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def metric_sum(values: dict[str, float], name: str, **labels: str) -> float:
    """Sum of every series of ``name`` whose labels include ``labels``."""
    total = 0.0
    for series, value in values.items():
        base = series.split("{", 1)[0]
        if base != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', series))
        if all(found.get(k) == v for k, v in labels.items()):
            total += value
    return total


@dataclass
class RunningCollector(Collector):
    """A collector whose own Prometheus metrics the fault tests read."""

    def metrics(self) -> dict[str, float]:
        """Its current Prometheus metrics."""
        return metrics(self.metrics_port)


@dataclass
class Collectors:
    """Starts collectors under ``state``; every one is stopped (SIGTERM, then SIGKILL) at teardown."""

    state: Path
    started: list[RunningCollector] = field(default_factory=list)
    ports: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def start(
        self,
        name: str,
        env: dict[str, str],
        configs: list[str] | None = None,
        wait: bool = True,
        extra_args: list[str] | None = None,
    ) -> RunningCollector:
        """Start ``name`` on free loopback ports (same name = same queue, file and log); wait until healthy."""
        if name not in self.ports:  # a restart under the same name listens where emitters already send
            self.ports[name] = tuple(harness.free_port() for _ in range(4))
        grpc_port, http_port, health, metrics_port = self.ports[name]
        launched = harness.launch_collector(
            self.state / name,
            name,
            configs or ["collector.yaml"],
            env,
            (grpc_port, http_port, health, metrics_port),
            extra_args=tuple(extra_args or ()),
        )
        collector = RunningCollector(**vars(launched))
        self.started.append(collector)
        if wait:
            collector.wait_ready(collector.healthy)
        return collector

    @staticmethod
    def kill(collector: Collector) -> None:
        """SIGKILL: no shutdown flush, no queue drain; what is only in memory is gone."""
        collector.process.send_signal(signal.SIGKILL)
        collector.process.wait(10)

    def stop_all(self) -> None:
        """Stop every collector still running."""
        for collector in reversed(self.started):
            try:
                collector.stop(10)
            except (OSError, subprocess.SubprocessError):
                collector.process.kill()


@pytest.fixture
def collectors(tmp_path: Path) -> Iterator[Collectors]:
    """The built collector, restartable; skipped, saying why, when it has not been built."""
    require_or_skip(
        harness.COLLECTOR_BIN.is_file(),
        f"{harness.COLLECTOR_BIN.relative_to(harness.REPO)} is absent; build it with `make collector`",
    )
    started = Collectors(tmp_path / "collectors")
    yield started
    started.stop_all()


@contextmanager
def grpc_stand_in_at(endpoint: str) -> Iterator[StandIn]:
    """An OTLP/gRPC logs stand-in on a given ``host:port``, so it can come up after the collector."""
    with otlp_grpc_stand_in(endpoint) as server:
        yield StandIn(endpoint=endpoint, requests=server.requests)


def file_records(path: Path) -> list[Record]:
    """The file exporter's records so far; a last line still being written is left for the next read."""
    if not path.exists():
        return []
    out: list[Record] = []
    # Split on "\n" only: str.splitlines() also splits inside strings at U+0085, U+2028, \x1c..\x1e,
    # which JSON encoders may leave unescaped.
    for line in path.read_text(encoding="utf-8").split("\n"):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        out += records_of_json(data)
    return out
