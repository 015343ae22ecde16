"""Delivery accounting: every record handed to the SDK ends exported, spooled or counted.

``CountingExporter`` wraps the real exporter: it counts what was confirmed, writes what was
refused to the spool (a local OTLP-JSON file), and counts the rest as failed.
``QueueGuard`` sits in front of the SDK's batch processor, whose queue would otherwise drop
records silently when full.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Sequence

from opentelemetry.context import Context
from opentelemetry.sdk._logs import LogRecordProcessor, ReadableLogRecord, ReadWriteLogRecord
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource

from otel_valgen import _stats

_logger = logging.getLogger("otel_valgen")


def _safe_export(
    exporter: LogRecordExporter, batch: Sequence[ReadableLogRecord], what: str, stats: _stats.Stats
) -> bool:
    """Export ``batch``; True on success. An exception (it must not kill the SDK's worker thread) is warned."""
    try:
        return exporter.export(batch) == LogRecordExportResult.SUCCESS
    except Exception as error:
        stats.warn("exporter_raised", "exporter %s raised %s: %s", what, type(error).__name__, error)
        _logger.debug("otel_valgen: exporter %s raised", what, exc_info=error)
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
        capacity: int = 2048,
    ) -> None:
        self._inner = inner
        self._stats = stats
        self.description = description
        self._spool_factory = spool
        self._spool: LogRecordExporter | None = None
        self._spool_lock = threading.Lock()
        self._queued = 0
        self.capacity = capacity

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
        if spool is not None and _safe_export(spool, [record], "spool", self._stats):
            self._stats.add(_stats.RECORDS_SPOOLED)
            self._stats.warn("queue_full_spooled", "the SDK queue (%d) is full; record spooled", self.capacity)
            return
        self._stats.add(_stats.RECORDS_EXPORT_FAILED)
        self._stats.add(_stats.DROP_PREFIX + "queue_full")
        self._stats.warn("queue_full", "the SDK queue (%d) is full; record lost", self.capacity)

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        with self._spool_lock:
            self._queued = max(0, self._queued - len(batch))
        if _safe_export(self._inner, batch, self.description, self._stats):
            self._stats.add(_stats.RECORDS_EXPORTED, len(batch))
            return LogRecordExportResult.SUCCESS
        spool = self._spool_exporter()
        if spool is not None and _safe_export(spool, batch, "spool", self._stats):
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
