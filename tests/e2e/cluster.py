"""Samplers, agents and the exporter service on loopback: the scale-out shape, for re-routing tests.

Every collector is the built distribution with the shipped configs; a sampler or agent started
again under its name keeps its ports and stored state (a restarted pod on its volume). The
exporter service runs in the test process, with the backends the test asks for.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_valgen.exporter.backends import create_backends
from otel_valgen.exporter.server import ExporterServer
from otel_valgen.exporter.service import ExporterService, ServiceConfig
from tests.e2e import harness
from tests.e2e.harness import Collector
from tests.support.ports import free_port

SAMPLER_CONFIGS = ["collector.yaml", "sampler.yaml"]


@dataclass
class Cluster:
    """Collectors by name, the exporter service they export to, and what they share."""

    home: Path
    env: dict[str, str]
    collectors: dict[str, Collector] = field(default_factory=dict)
    ports: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    service: ExporterService | None = None
    server: ExporterServer | None = None
    jobs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def exporter_endpoint(self) -> str:
        """Where the samplers export to (the exporter service's OTLP/gRPC address)."""
        return self.env["VALGEN_TRACKER_EXPORTER_ENDPOINT"]

    def start_exporter(self, backends: list[str], configs: dict[str, Any]) -> ExporterService:
        """The exporter service on the samplers' export address, its state in ``home/exporter``."""
        state = str(self.home / "exporter")
        service = ExporterService(
            ServiceConfig(state_dir=state, retry_after_s=1.0), create_backends(backends, state, configs)
        )
        server = ExporterServer(service, http=None, grpc_address=self.exporter_endpoint)
        service.start()
        server.start()
        self.service, self.server = service, server
        return service

    def _start(self, name: str, configs: list[str], env: dict[str, str]) -> Collector:
        ports = self.ports.setdefault(name, (free_port(), free_port(), free_port(), free_port()))
        collector = harness.launch_collector(self.home / name, name, configs, self.env | env, ports)
        collector.wait_ready(collector.healthy)
        self.collectors[name] = collector
        return collector

    def start_sampler(self, name: str) -> Collector:
        """Start (or restart, on its stored state and ports) the sampler ``name``."""
        return self._start(name, SAMPLER_CONFIGS, {"VALGEN_SAMPLER_ID": name})

    def start_agent(self, name: str, samplers: list[str]) -> Collector:
        """Start (or restart, with its queue) the agent ``name``, routing to ``samplers`` (a static list)."""
        hosts = ", ".join(self.collectors[sampler].grpc_endpoint for sampler in samplers)
        return self._start(name, ["agent.yaml"], {"VALGEN_SAMPLER_HOSTS": f"[{hosts}]"})

    def kill(self, name: str) -> None:
        """SIGKILL the collector ``name``: what it holds lives on in its stored state only."""
        process = self.collectors[name].process
        process.kill()
        process.wait(10)

    def stats(self) -> dict[str, Any]:
        """The exporter service's counters."""
        assert self.service is not None
        return self.service.stats()

    def idle(self) -> bool:
        """Whether the exporter service has written everything it received."""
        assert self.service is not None
        return self.service.idle()

    def written(self, backend: str) -> int:
        """Steps the backend has written (first writes and rewrites)."""
        return int(self.stats()["backends"][backend]["written_steps"])

    def stop(self) -> None:
        """Kill the jobs still running, stop every collector still running, then the exporter service."""
        for job in self.jobs:
            if job.poll() is None:
                job.kill()
                job.wait(10)
        for collector in self.collectors.values():
            if collector.process.poll() is None:
                collector.stop()
        if self.server is not None and self.service is not None:
            self.server.stop(1)
            self.service.stop()


def cluster_env(exporter_port: int, loki_endpoint: str, decision_wait: str, max_step_duration: str) -> dict[str, str]:
    """What every collector of a cluster is started with."""
    return {
        "VALGEN_TRACKER_EXPORTER_ENDPOINT": f"127.0.0.1:{exporter_port}",
        "VALGEN_LOKI_OTLP_ENDPOINT": loki_endpoint,
        "VALGEN_DECISION_WAIT": decision_wait,
        "VALGEN_MAX_STEP_DURATION": max_step_duration,
    }
