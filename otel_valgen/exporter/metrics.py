"""The exporter service's Prometheus metrics and health, on an address of their own (``--metrics-address``).

``ServiceCollector`` reads ``ExporterService.stats()`` at each scrape, so every count is kept
in one place (the service's and its workers' counters) and the log line at shutdown and
``/metrics`` never disagree. ``MetricsServer`` serves a private registry holding only that
collector (not prometheus_client's global one) with three paths:

- ``GET /metrics``: the text format (OpenMetrics when the scraper asks for it);
- ``GET /healthz``: 200 while the process serves;
- ``GET /readyz``: 200 while the service takes requests, else 503 with the reason: it is
  stopping, every backend is failing, or one backend holds ``--max-pending-steps`` (the
  reasons ``accept`` answers 503 for).

Metrics (counters since the process started; ``backend`` is a tracker name, ``kind``
``validation`` or ``rollout``):

==============================================  ========  ==========================================
name                                            type      what
==============================================  ========  ==========================================
valgen_exporter_requests_total{outcome}         counter   OTLP requests: accepted, refused (503,
                                                          the collector retries), malformed (4xx,
                                                          not retried), failed (500)
valgen_exporter_records_total{event}            counter   log records read: generation, summary
valgen_exporter_records_dropped_total{reason}   counter   records not written: rejected (not a
                                                          valgen record), late, duplicate
valgen_exporter_steps_received_total{kind}      counter   closed steps received
valgen_exporter_steps_flagged_total{reason}     counter   steps written with a warning:
                                                          without_summary, summary_without_records,
                                                          split (attempts at once), unhooked,
                                                          merged (parts of samplers), part_unmerged
valgen_exporter_steps_total                     counter   steps a backend is done with: written,
{backend,kind,outcome}                                    unchanged (its ledger had them), failed
                                                          (dropped after an error)
valgen_exporter_rows_written_total              counter   table rows written
{backend,kind}
valgen_exporter_steps_held{backend}             gauge     steps queued, not yet written (queue depth)
valgen_exporter_steps_held_limit                gauge     --max-pending-steps
valgen_exporter_oldest_held_step_age_seconds    gauge     age of the oldest held step (0 when none)
{backend}
valgen_exporter_steps_spooled_total{backend}    counter   steps spooled unwritten at stop
valgen_exporter_steps_requeued_total{backend}   counter   steps queued again from the spool at start
valgen_exporter_backend_up{backend}             gauge     0 while the last write found the tracker
                                                          unavailable, else 1
valgen_exporter_backend_outages_total{backend}  counter   times the tracker became unavailable
valgen_exporter_trace_links_total               counter   step traces linked to their run (MLflow
{backend,outcome}                                         with --mlflow-link-traces): made, given_up
valgen_exporter_trace_links_pending{backend}    gauge     links waiting for their trace
==============================================  ========  ==========================================

The trace link families hold samples only for backends that link traces.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from otel_valgen import contract
from otel_valgen.exporter.server import ListenError, parse_address
from otel_valgen.exporter.service import ExporterService

__all__ = ["MetricsServer", "ServiceCollector", "readiness", "registry_for"]

_logger = logging.getLogger("otel_valgen.exporter")

_PREFIX = "valgen_exporter_"
_REQUESTS = ("accepted", "refused", "malformed", "failed")
_RECORDS = {"generation": "generations", "summary": "summaries"}
_DROPPED = {"rejected": "rejected", "late": "late_dropped", "duplicate": "duplicates"}
_FLAGGED = {
    "without_summary": "without_summary",
    "summary_without_records": "summary_without_records",
    "split": "split_steps",
    "unhooked": "unhooked_steps",
    "merged": "merged_steps",  # a part of another sampler merged in: written again (otel_valgen.partials)
    "part_unmerged": "parts_unmerged",
}
_STEP_OUTCOMES = {"written": "written_steps", "unchanged": "unchanged_steps", "failed": "failed_steps"}


class ServiceCollector(Collector):
    """The metric families of one ``ExporterService``, read from its counters at each scrape."""

    def __init__(self, service: ExporterService) -> None:
        self._service = service

    def collect(self) -> Iterator[Metric]:
        """Yield every metric family (see the module's docstring)."""
        stats = self._service.stats()
        backends: dict[str, dict[str, Any]] = stats["backends"]

        def counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
            return CounterMetricFamily(_PREFIX + name, doc, labels=labels)

        def gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
            return GaugeMetricFamily(_PREFIX + name, doc, labels=labels)

        requests = counter("requests", "OTLP requests, by outcome.", ["outcome"])
        for outcome in _REQUESTS:
            requests.add_metric([outcome], stats[f"{outcome}_requests"])
        records = counter("records", "Log records read, by event.", ["event"])
        for label, key in _RECORDS.items():
            records.add_metric([label], stats[key])
        dropped = counter("records_dropped", "Log records not written, by reason.", ["reason"])
        for label, key in _DROPPED.items():
            dropped.add_metric([label], stats[key])
        received = counter("steps_received", "Closed steps received, by kind.", ["kind"])
        for kind in sorted(contract.KINDS):
            received.add_metric([kind], stats[f"{kind}_steps"])
        flagged = counter("steps_flagged", "Steps written with a warning, by reason.", ["reason"])
        for label, key in _FLAGGED.items():
            flagged.add_metric([label], stats[key])
        yield from (requests, records, dropped, received, flagged)

        steps = counter("steps", "Steps a backend is done with, by kind and outcome.", ["backend", "kind", "outcome"])
        rows = counter("rows_written", "Table rows written, by kind.", ["backend", "kind"])
        held = gauge("steps_held", "Steps queued and not yet written (queue depth).", ["backend"])
        age = gauge("oldest_held_step_age_seconds", "Age of the oldest held step; 0 when none.", ["backend"])
        spooled = counter("steps_spooled", "Steps spooled unwritten at stop.", ["backend"])
        requeued = counter("steps_requeued", "Steps queued again from the spool at start.", ["backend"])
        up = gauge("backend_up", "0 while the last write found the tracker unavailable.", ["backend"])
        outages = counter("backend_outages", "Times the tracker became unavailable.", ["backend"])
        for name, worker in backends.items():
            for kind, per_kind in sorted(worker["kinds"].items()):
                for outcome, key in _STEP_OUTCOMES.items():
                    steps.add_metric([name, kind, outcome], per_kind[key])
                rows.add_metric([name, kind], per_kind["rows"])
            held.add_metric([name], worker["pending"])
            age.add_metric([name], worker["oldest_pending_s"])
            spooled.add_metric([name], worker["spooled"])
            requeued.add_metric([name], worker["requeued"])
            up.add_metric([name], 0 if worker["failing"] else 1)
            outages.add_metric([name], worker["outages"])
        limit = GaugeMetricFamily(
            _PREFIX + "steps_held_limit",
            "Steps a backend may hold before requests are refused (--max-pending-steps).",
            value=self._service.config.max_pending_steps,
        )
        yield from (steps, rows, held, limit, age, spooled, requeued, up, outages)

        links = counter("trace_links", "Step traces linked to their run, by outcome.", ["backend", "outcome"])
        waiting = gauge("trace_links_pending", "Trace links waiting for their trace.", ["backend"])
        for name, worker in backends.items():
            if "trace_links" in worker:
                for outcome in ("made", "given_up"):
                    links.add_metric([name, outcome], worker["trace_links"][outcome])
                waiting.add_metric([name], worker["trace_links"]["pending"])
        yield from (links, waiting)


def registry_for(service: ExporterService) -> CollectorRegistry:
    """A registry of its own holding the service's collector (never prometheus_client's global one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(service))
    return registry


def readiness(service: ExporterService) -> str:
    """Why the service cannot take a request now ('' when it can)."""
    return service.refusal()


class _Handler(BaseHTTPRequestHandler):
    server_version = "otel-valgen-exporter-metrics"
    service: ExporterService  # set on the subclass made per server
    registry: CollectorRegistry

    def log_message(self, format: str, *args: Any) -> None:
        _logger.debug("%s " + format, self.address_string(), *args)

    def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        """``/metrics``, ``/healthz``, ``/readyz``."""
        path = self.path.split("?")[0]
        if path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept") or "")
            try:
                body = encoder(self.registry)
            except Exception:
                _logger.exception("collecting the metrics failed")
                self._send(500, b"collecting the metrics failed\n")
                return
            self._send(200, body, content_type)
        elif path == "/healthz":
            self._send(200, b"ok\n")
        elif path == "/readyz":
            reason = readiness(self.service)
            self._send(503, f"not ready: {reason}\n".encode()) if reason else self._send(200, b"ready\n")
        else:
            self._send(404, b"not found\n")


class _HTTPServer6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class MetricsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` of one service on ``address`` (``HOST:PORT``)."""

    def __init__(self, service: ExporterService, address: str) -> None:
        self.service = service
        self.registry = registry_for(service)
        self._address = address
        self._http: ThreadingHTTPServer | None = None
        self.port: int | None = None

    def start(self) -> None:
        """Bind and serve on a thread of its own (port 0 picks a free port; see ``port``).

        Raises:
            ListenError: the address cannot be bound (``protocol`` ``metrics``).

        """
        handler = type("Handler", (_Handler,), {"service": self.service, "registry": self.registry})
        try:
            host, port = parse_address(self._address)
            server_class = _HTTPServer6 if ":" in host else ThreadingHTTPServer
            self._http = server_class((host, port), handler)
        except (OSError, ValueError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else error
            raise ListenError("metrics", f"metrics cannot listen on {self._address}: {reason}") from error
        self._http.daemon_threads = True
        self.port = int(self._http.server_address[1])
        threading.Thread(target=self._http.serve_forever, name="valgen-metrics-http", daemon=True).start()

    def stop(self) -> None:
        """Stop serving; safe to call again."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
