"""Delivery accounting: every record handed to the SDK ends exported, spooled or counted.

``CountingExporter`` wraps the real exporter: it counts what was confirmed, sends to the
spool (a local OTLP-JSON file) while the endpoint is away, and counts the rest as failed.
``QueueGuard`` sits in front of the SDK's batch processor, whose queue would otherwise drop
records silently when full. ``LocalBatcher`` replaces both for the embedded sink.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from opentelemetry.context import Context
from opentelemetry.sdk._logs import LogRecordProcessor, ReadableLogRecord, ReadWriteLogRecord
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource

from otel_valgen import _stats
from otel_valgen._courier import Courier
from otel_valgen._spool import Spool, read_offset

_logger = logging.getLogger("otel_valgen")


MIN_ANSWER_WAIT_S = 0.5
"""The least a delivery is waited for before the endpoint counts as away (a flush timeout of 0 still sends)."""

_SDK_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.exporter.otlp.proto.http._log_exporter",
    "opentelemetry.exporter.otlp.json.http._log_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
)
_SDK_DELIVERY_LINES = ("Transient error", "Failed to export", "Shutdown in progress")


class _DeliveryLinesToDebug(logging.Filter):
    """The SDK exporters' retry and failure lines go to our debug log: the exporter reports outages once."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if not message.startswith(_SDK_DELIVERY_LINES):
            return True
        _logger.debug("otel_valgen: the SDK exporter logged: %s", record.getMessage())
        return False


_DELIVERY_LINES_FILTER = _DeliveryLinesToDebug()


def quiet_sdk_delivery_lines() -> None:
    """Install the filter on the SDK exporters' loggers (once; idempotent)."""
    for name in _SDK_EXPORTER_LOGGERS:
        logger = logging.getLogger(name)
        if _DELIVERY_LINES_FILTER not in logger.filters:
            logger.addFilter(_DELIVERY_LINES_FILTER)


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
    """Wraps an exporter, counts what it confirmed, and spools what the endpoint does not take.

    Two states. *Up*: batches go to the endpoint. *Away* (a delivery failed, or the caller
    stopped waiting for one): batches go straight to the spool, a local OTLP-JSON file, so
    no call waits for the endpoint; the courier (``_courier``) sends the spool in the
    background, in order, and puts the exporter back up once the spool is empty and the
    endpoint answers in time. One WARNING when it goes away, one INFO when it is back.
    Without a spool, batches keep going to the endpoint while away (in the SDK's worker
    thread) and what it refuses is counted as failed. Never raises.
    """

    def __init__(
        self,
        inner: LogRecordExporter,
        stats: _stats.Stats,
        description: str,
        spool: Callable[[], Spool] | None = None,
        capacity: int = 2048,
        answer_within_s: float = 2.0,
        local: bool = False,
    ) -> None:
        self._inner = inner
        self._local = local  # a local file: nothing to wait for, so each export runs in the caller's thread
        self.answer_within_s = max(answer_within_s, MIN_ANSWER_WAIT_S)
        self._stats = stats
        self.description = description
        self._spool_factory = spool
        self._spool: Spool | None = None
        self._spool_lock = threading.Lock()
        self._queued = 0
        self.capacity = capacity
        self.courier: Courier | None = None
        self._state_lock = threading.Lock()
        # Held while a batch is spooled because the endpoint is away, and while the courier puts
        # delivery back: no batch is appended after the courier found the spool sent.
        self._handoff = threading.Lock()
        self._away_since: float | None = None
        self._spooled_in_outage = 0
        self._spooled = 0  # records this exporter wrote to its spool
        self._inflight = 0  # exports to the endpoint running now
        self.on_waiting: Callable[[int], None] | None = None  # told the spool's waiting records on change

    # -- state ------------------------------------------------------------------------

    @property
    def away(self) -> bool:
        """True while records go to the spool instead of the endpoint."""
        return self._away_since is not None

    def waits_for_endpoint(self) -> bool:
        """Whether a flush may wait: the endpoint is up, or away and only the (fast) spool is written."""
        return not self.away or self._spool_factory is not None

    def exporting(self) -> bool:
        """Whether a delivery to the endpoint is running now."""
        return self._inflight > 0

    def go_away(self, reason: str) -> None:
        """Stop sending to the endpoint: warn once, spool from now on, let the courier find its return."""
        with self._state_lock:
            if self._away_since is not None:
                return
            self._away_since = time.monotonic()
            self._spooled_in_outage = 0
        self._stats.add(_stats.ENDPOINT_OUTAGES)
        if self._spool_factory is None:
            _logger.warning(
                "otel_valgen: %s is not answering (%s); the spool is off (OTEL_VALGEN_SPOOL=false), so what it "
                "does not take is counted as lost; training does not wait for it",
                self.description,
                reason,
            )
            return
        spool = self._spool_file()
        _logger.warning(
            "otel_valgen: %s is not answering (%s); records go to the spool %s and are sent by themselves when it "
            "is back; training does not wait for it",
            self.description,
            reason,
            spool.path if spool is not None else "(unavailable)",
        )
        if self.courier is not None:
            self.courier.start(away=True)

    def resume(self) -> bool:
        """Back to the endpoint, if every spooled line was sent (checked under the spool's lock)."""
        with self._handoff:
            spool = self._spool
            if spool is not None and read_offset(spool.path) < spool.size():
                return False
            return self._back()

    def _back(self) -> bool:
        with self._state_lock:
            since, self._away_since = self._away_since, None
            resent = self._spooled_in_outage
        if since is not None:
            _logger.info(
                "otel_valgen: %s answers again after %.1fs; %d spooled record(s) were sent",
                self.description,
                time.monotonic() - since,
                resent,
            )
        return True

    def report_waiting(self) -> None:
        """Tell ``on_waiting`` how many records wait in the spool (a metrics hook must never break delivery)."""
        if self.on_waiting is None:
            return
        try:
            self.on_waiting(self.spool_waiting())
        except Exception as error:
            self.on_waiting = None
            self._stats.failed("reporting the spool's size", error)

    def spool_path(self) -> Path | None:
        """The spool file of this process, once opened."""
        spool = self._spool
        return spool.path if spool is not None else None

    def spool_waiting(self) -> int:
        """Records in the spools (this process's and claimed orphans') not yet delivered."""
        if self.courier is None:
            return self._spooled
        return max(0, self._spooled - self.courier.own_settled) + self.courier.orphans_waiting

    # -- spool ------------------------------------------------------------------------

    def _spool_file(self) -> Spool | None:
        with self._spool_lock:
            if self._spool is None and self._spool_factory is not None:
                try:
                    self._spool = self._spool_factory()
                except OSError as error:
                    self._spool_factory = None
                    _logger.error(
                        "otel_valgen: cannot open the spool: %s; undelivered records are counted as lost", error
                    )
            return self._spool

    def _to_spool(self, batch: Sequence[ReadableLogRecord]) -> bool | None:
        """Spool ``batch``: True when written, False when lost (full, failed write: counted), None: no spool."""
        spool = self._spool_file()
        if spool is None:
            return None
        if spool.append(batch):
            self._stats.add(_stats.RECORDS_SPOOLED, len(batch))
            with self._state_lock:
                self._spooled_in_outage += len(batch)
                self._spooled += len(batch)
            self.report_waiting()
            return True
        reason = "spool_full" if spool.size() >= spool.max_bytes else "spool_write_failed"
        self._stats.add(_stats.RECORDS_EXPORT_FAILED, len(batch))
        self._stats.add(_stats.DROP_PREFIX + reason, len(batch))
        self._stats.warn(
            reason,
            "%d record(s) lost: the spool %s %s",
            len(batch),
            spool.path,
            f"is full ({spool.max_bytes} bytes): raise OTEL_VALGEN_SPOOL_MAX_MB, free the disk, or bring the "
            "endpoint back"
            if reason == "spool_full"
            else "could not be written (see the error above)",
        )
        return False

    def enqueue(self) -> bool:
        """Count one record into the SDK's queue; False if the queue is already full."""
        with self._spool_lock:
            if self._queued >= self.capacity:
                return False
            self._queued += 1
            return True

    def divert(self, record: ReadableLogRecord) -> None:
        """Take a record the full SDK queue would drop: spool it, or count it as lost."""
        spooled = self._to_spool([record])
        if spooled:
            self._stats.warn("queue_full_spooled", "the SDK queue (%d) is full; record spooled", self.capacity)
            if self.courier is not None:  # sent like an outage's records, then delivery goes on as it was
                self.courier.start(away=True)
        if spooled is not None:
            return
        self._stats.add(_stats.RECORDS_EXPORT_FAILED)
        self._stats.add(_stats.DROP_PREFIX + "queue_full")
        self._stats.warn("queue_full", "the SDK queue (%d) is full; record lost", self.capacity)

    # -- the SDK's exporter interface --------------------------------------------------

    def _deliver(self, batch: Sequence[ReadableLogRecord]) -> bool | None:
        """Export to the endpoint in a thread of its own; None when it did not answer in time.

        The call goes on after we stop waiting (its retries end at the SDK's deadline); the
        batch is spooled meanwhile, so a late success delivers it twice, which the collector
        and the trackers' ledgers take once.
        """
        if self._local:
            return _safe_export(self._inner, batch, self.description, self._stats)
        outcome: list[bool] = []
        answered = threading.Event()

        def call() -> None:
            with self._state_lock:
                self._inflight += 1
            try:
                outcome.append(_safe_export(self._inner, batch, self.description, self._stats))
            finally:
                with self._state_lock:
                    self._inflight -= 1
                answered.set()

        threading.Thread(target=call, name="otel-valgen-export", daemon=True).start()
        return outcome[0] if answered.wait(self.answer_within_s) else None

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        with self._spool_lock:
            self._queued = max(0, self._queued - len(batch))
        if self._spool_factory is not None:
            with self._handoff:
                spooled = self._to_spool(batch) if self.away else None
            if spooled is not None:
                return LogRecordExportResult.SUCCESS if spooled else LogRecordExportResult.FAILURE
        delivered = self._deliver(batch)
        if delivered:
            self._stats.add(_stats.RECORDS_EXPORTED, len(batch))
            if self.away and self._spool_factory is None:
                self._back()
            return LogRecordExportResult.SUCCESS
        self.go_away("a delivery failed" if delivered is False else f"no answer within {self.answer_within_s:g}s")
        with self._handoff:
            spooled = self._to_spool(batch)
            resumed_meanwhile = not self.away
        if spooled and resumed_meanwhile and self.courier is not None:
            self.courier.start(away=True)  # the courier found the endpoint back before this batch was spooled
        if spooled is not None:
            return LogRecordExportResult.SUCCESS if spooled else LogRecordExportResult.FAILURE
        self._stats.add(_stats.RECORDS_EXPORT_FAILED, len(batch))
        self._stats.warn("export_failed", "%d record(s) could not be exported to %s", len(batch), self.description)
        return LogRecordExportResult.FAILURE

    def shutdown(self) -> None:
        if self.courier is not None:
            self.courier.stop()
        waiting = self.spool_waiting()
        spool = self._spool
        if spool is not None:
            if waiting:
                _logger.warning(
                    "otel_valgen: %d record(s) wait in the spool %s: the next process of this run sends them when it "
                    "starts, or run `otel-valgen resend %s`",
                    waiting,
                    spool.path,
                    spool.path.parent,
                )
            spool.close()
        try:
            self._inner.shutdown()  # type: ignore[no-untyped-call]
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


class LocalBatcher(LogRecordProcessor):
    """The embedded sink's batch processor: records wait in a list, written in the thread that flushes.

    A local file keeps nobody waiting, so a flush writes in the caller's thread, with no queue
    hand-off to a worker; a batch that reaches ``max_batch`` is written by the call that fills
    it (so the list stays bounded), and a background thread writes whatever waits every
    ``delay_s``, as the SDK's batch processor does, so a record reaches the file without a flush.
    """

    def __init__(self, exporter: LogRecordExporter, delay_s: float, max_batch: int) -> None:
        self._exporter = exporter
        self._delay_s = delay_s
        self._max_batch = max_batch
        self._closed = False
        self._start()

    def _start(self) -> None:
        """Fresh state and worker (at construction, and in a forked child, whose parent writes its records)."""
        self._pid = os.getpid()
        self._pending: list[ReadableLogRecord] = []
        self._lock = threading.Lock()  # the list
        self._writing = threading.Lock()  # one write at a time, so a flush returns after the worker's
        self._wake = threading.Event()
        self._worker = threading.Thread(target=self._run, name="otel-valgen-sink", daemon=True)
        self._worker.start()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self._delay_s)
            if not self._closed:
                self._write()

    def _write(self) -> bool:
        """Export what waits; True when nothing failed."""
        with self._writing:
            with self._lock:
                batch, self._pending = self._pending, []
            if not batch:
                return True
            return self._exporter.export(batch) is LogRecordExportResult.SUCCESS

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        """Keep the record; write the batch when it is full."""
        if self._pid != os.getpid():
            self._start()
        readable = ReadableLogRecord(
            log_record=log_record.log_record,
            resource=log_record.resource if log_record.resource is not None else Resource.create({}),
            instrumentation_scope=log_record.instrumentation_scope,
            limits=log_record.limits,
        )
        with self._lock:
            self._pending.append(readable)
            full = len(self._pending) >= self._max_batch
        if full:
            self._write()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Write everything kept, in this thread."""
        if self._pid != os.getpid():
            self._start()
        return self._write()

    def shutdown(self) -> None:
        """Stop the worker, write the rest, release the exporter."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        self._worker.join()
        self._write()
        self._exporter.shutdown()  # type: ignore[no-untyped-call]
