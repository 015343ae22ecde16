"""The OTel SDK pipeline of one process: provider, batch processor and exporter.

With an OTLP endpoint the SDK's own OTLP exporter sends the records; without one the
embedded sink writes OTLP-JSON lines, the format of the collector's ``file`` exporter, to
one file per process under the configured folder.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.context import Context
from opentelemetry.sdk._logs import LoggerProvider, LogRecordProcessor, ReadableLogRecord, ReadWriteLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource

from otel_valgen import _stats
from otel_valgen._settings import Settings, env_int

_logger = logging.getLogger("otel_valgen")

_DEFAULT_MAX_QUEUE_SIZE = 16384
_DEFAULT_MAX_EXPORT_BATCH_SIZE = 512
_SCHEDULE_DELAY_MS = 1000


@dataclass(frozen=True)
class BatchSettings:
    """The SDK batch processor's settings, validated here so a bad variable cannot stop us."""

    schedule_delay_ms: int = _SCHEDULE_DELAY_MS
    max_queue_size: int = _DEFAULT_MAX_QUEUE_SIZE
    max_export_batch_size: int = _DEFAULT_MAX_EXPORT_BATCH_SIZE


def batch_settings() -> BatchSettings:
    """``OTEL_BLRP_*`` as the SDK reads them, with bad values and combinations repaired."""
    queue = env_int("OTEL_BLRP_MAX_QUEUE_SIZE", _DEFAULT_MAX_QUEUE_SIZE, minimum=1)
    batch = env_int("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", _DEFAULT_MAX_EXPORT_BATCH_SIZE, minimum=1)
    if batch > queue:
        _logger.warning(
            "otel_valgen: OTEL_BLRP_MAX_EXPORT_BATCH_SIZE %d > queue size %d; using %d", batch, queue, queue
        )
        batch = queue
    delay = env_int("OTEL_BLRP_SCHEDULE_DELAY", _SCHEDULE_DELAY_MS, minimum=1)
    return BatchSettings(delay, queue, batch)


def _safe_export(exporter: LogRecordExporter, batch: Sequence[ReadableLogRecord], what: str) -> bool:
    try:
        return exporter.export(batch) == LogRecordExportResult.SUCCESS
    except Exception:  # an exporter bug must not kill the SDK's worker thread
        _logger.exception("otel_valgen: exporter %s raised", what)
        return False


class CountingExporter(LogRecordExporter):
    """Wraps an exporter, counts what it confirmed, and spools what it could not deliver.

    A batch the exporter rejects (after the OTLP exporter's own retries) is written to the
    spool, a local OTLP-JSON file, when one is configured: nothing is lost while the
    collector is down, and ``otel-valgen resend`` replays it later. Never raises.
    """

    def __init__(
        self,
        inner: LogRecordExporter,
        stats: _stats.Stats,
        description: str,
        spool: Callable[[], tuple[LogRecordExporter, str]] | None = None,
    ) -> None:
        self._inner = inner
        self._stats = stats
        self.description = description
        self._spool_factory = spool
        self._spool: LogRecordExporter | None = None
        self._spool_lock = threading.Lock()
        self._queued = 0
        self.capacity = _DEFAULT_MAX_QUEUE_SIZE

    def _spool_exporter(self) -> LogRecordExporter | None:
        with self._spool_lock:
            if self._spool is None and self._spool_factory is not None:
                self._spool, where = self._spool_factory()
                _logger.warning("otel_valgen: %s did not accept records; spooling them to %s", self.description, where)
            return self._spool

    def enqueue(self) -> bool:
        """Count one record into the SDK's queue; False if the queue is already full."""
        with self._spool_lock:
            if self._queued >= self.capacity:
                return False
            self._queued += 1
            return True

    def divert(self, record: ReadableLogRecord) -> None:
        """Take a record the full SDK queue would drop: spool it, or count it as lost."""
        spool = self._spool_exporter()
        if spool is not None and _safe_export(spool, [record], "spool"):
            self._stats.add(_stats.RECORDS_SPOOLED)
            self._stats.warn("queue_full_spooled", "the SDK queue (%d) is full; record spooled", self.capacity)
            return
        self._stats.add(_stats.RECORDS_EXPORT_FAILED)
        self._stats.add(_stats.DROP_PREFIX + "queue_full")
        self._stats.warn("queue_full", "the SDK queue (%d) is full; record lost", self.capacity)

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        with self._spool_lock:
            self._queued = max(0, self._queued - len(batch))
        if _safe_export(self._inner, batch, self.description):
            self._stats.add(_stats.RECORDS_EXPORTED, len(batch))
            return LogRecordExportResult.SUCCESS
        spool = self._spool_exporter()
        if spool is not None and _safe_export(spool, batch, "spool"):
            self._stats.add(_stats.RECORDS_SPOOLED, len(batch))
            self._stats.warn("spooled", "%d record(s) not accepted by %s were spooled", len(batch), self.description)
            return LogRecordExportResult.SUCCESS
        self._stats.add(_stats.RECORDS_EXPORT_FAILED, len(batch))
        self._stats.warn("export_failed", "%d record(s) could not be exported to %s", len(batch), self.description)
        return LogRecordExportResult.FAILURE

    def shutdown(self) -> None:
        for exporter in (self._inner, self._spool):
            if exporter is None:
                continue
            try:
                exporter.shutdown()  # type: ignore[no-untyped-call]
            except Exception:
                _logger.exception("otel_valgen: exporter %s failed to shut down", self.description)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        try:
            return self._inner.force_flush(timeout_millis)
        except Exception:
            _logger.exception("otel_valgen: exporter %s failed to flush", self.description)
            return False


class QueueGuard(LogRecordProcessor):
    """In front of the SDK's batch processor: what would overflow its queue is spooled or counted.

    The SDK's queue drops the oldest record when full, with only a log line; here the record
    that does not fit goes to the spool (or is counted as lost) instead.
    """

    def __init__(self, inner: BatchLogRecordProcessor, exporter: CountingExporter) -> None:
        self._inner = inner
        self._exporter = exporter

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        """Hand the record to the batch processor, or divert it when the queue is full."""
        if self._exporter.enqueue():
            self._inner.on_emit(log_record)
            return
        api_record = copy.copy(log_record.log_record)
        api_record.context = Context()
        readable = ReadableLogRecord(
            log_record=api_record,
            resource=log_record.resource if log_record.resource is not None else Resource.create({}),
            instrumentation_scope=log_record.instrumentation_scope,
            limits=log_record.limits,
        )
        self._exporter.divert(readable)

    def shutdown(self) -> None:
        """Shut the batch processor down (it exports what it holds)."""
        self._inner.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export everything queued."""
        return self._inner.force_flush(timeout_millis)


class _UnavailableExporter(LogRecordExporter):
    """Stands in when the sink cannot be opened: every export fails and is counted."""

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        return LogRecordExportResult.FAILURE

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _otlp_exporter(settings: Settings) -> tuple[LogRecordExporter, str]:
    endpoint = settings.endpoint or ""
    if settings.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcExporter

        return GrpcExporter(endpoint=endpoint), f"OTLP/gRPC {endpoint}"
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpExporter

    url = endpoint if endpoint.rstrip("/").endswith("/v1/logs") else endpoint.rstrip("/") + "/v1/logs"
    return HttpExporter(endpoint=url), f"OTLP/HTTP {url}"


def sink_path(directory: str, instance_id: str) -> Path:
    """The embedded sink's file for this process."""
    name = f"valgen-{socket.gethostname()}-{os.getpid()}-{instance_id[:8]}.jsonl"
    return Path(directory) / name


def _file_exporter(directory: str, instance_id: str) -> tuple[LogRecordExporter, str]:
    from opentelemetry.exporter.otlp.json.file._log_exporter import FileLogExporter

    path = sink_path(directory, instance_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return FileLogExporter(path), f"file {path}"
    except OSError as error:
        _logger.error("otel_valgen: cannot open the embedded sink %s: %s; records will be counted as lost", path, error)
        return _UnavailableExporter(), f"unavailable file {path}"


def build_resource(settings: Settings, instance_id: str, extra: dict[str, str]) -> Resource:
    """The process's resource: OTEL_RESOURCE_ATTRIBUTES/OTEL_SERVICE_NAME, then what we know."""
    detected = Resource.create({"service.instance.id": instance_id})
    attributes: dict[str, str] = {**settings.resource_attributes, **extra}
    if str(detected.attributes.get("service.name", "")).startswith("unknown_service"):
        attributes["service.name"] = "otel-valgen"
    return detected.merge(Resource(attributes))


class Pipeline:
    """One process's SDK provider and exporter; flushes are bounded in time."""

    def __init__(
        self,
        settings: Settings,
        stats: _stats.Stats,
        resource_extra: dict[str, str] | None = None,
        exporter: LogRecordExporter | None = None,
    ) -> None:
        self.instance_id = str(uuid.uuid4())
        if exporter is not None:
            inner, description = exporter, f"custom {type(exporter).__name__}"
        elif settings.endpoint:
            inner, description = _otlp_exporter(settings)
        else:
            inner, description = _file_exporter(settings.directory, self.instance_id)
        spool = None
        if settings.endpoint and settings.spool and exporter is None:
            spool_dir = os.path.join(settings.directory, "spool")
            spool = functools.partial(_file_exporter, spool_dir, self.instance_id)
        self.exporter = CountingExporter(inner, stats, description, spool)
        self.resource = build_resource(settings, self.instance_id, resource_extra or {})
        self.provider = LoggerProvider(resource=self.resource, shutdown_on_exit=False)
        batching = batch_settings()
        self.exporter.capacity = batching.max_queue_size
        batch_processor = BatchLogRecordProcessor(
            self.exporter,
            schedule_delay_millis=batching.schedule_delay_ms,
            max_queue_size=batching.max_queue_size,
            max_export_batch_size=batching.max_export_batch_size,
        )
        self.provider.add_log_record_processor(QueueGuard(batch_processor, self.exporter))
        self.logger = self.provider.get_logger("otel_valgen")
        self._stats = stats

    @property
    def description(self) -> str:
        """Where records go, for people."""
        return self.exporter.description

    def _bounded(self, action: str, timeout_s: float, call: object) -> bool:
        outcome: list[bool] = []

        def run() -> None:
            try:
                outcome.append(bool(call()))  # type: ignore[operator]
            except Exception:
                _logger.exception("otel_valgen: %s failed", action)
                outcome.append(False)

        worker = threading.Thread(target=run, name=f"otel-valgen-{action}", daemon=True)
        worker.start()
        worker.join(timeout_s)
        if worker.is_alive():
            self._stats.add(_stats.FLUSH_TIMEOUTS)
            self._stats.warn(
                "flush_timeout",
                "%s did not finish within %.1fs; records keep being sent in the background",
                action,
                timeout_s,
            )
            return False
        return bool(outcome and outcome[0])

    def flush(self, timeout_s: float) -> bool:
        """Export everything queued; wait at most ``timeout_s``. True when all was confirmed."""
        return self._bounded("flush", timeout_s, lambda: self.provider.force_flush(int(timeout_s * 1000)))

    def shutdown(self, timeout_s: float) -> bool:
        """Flush and release the exporter; wait at most ``timeout_s``."""
        return self._bounded("shutdown", timeout_s, self.provider.shutdown)
