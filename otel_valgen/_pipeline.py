"""The OTel SDK pipeline of one process: provider, batch processor and exporter.

With an OTLP endpoint the SDK's own OTLP exporter sends the records (its request built in
place, ``_otlp_request``); without one the
embedded sink writes OTLP-JSON lines, the format of the collector's ``file`` exporter, to
one file per process under the configured folder.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import requests
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.context import Context
from opentelemetry.sdk._logs import Logger as SdkLogger
from opentelemetry.sdk._logs import (
    LoggerProvider,
    LogRecordLimits,
    LogRecordProcessor,
    ReadableLogRecord,
    ReadWriteLogRecord,
)
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.util.types import AnyValue

from otel_valgen import _stats, contract
from otel_valgen._courier import Courier, sender_for
from otel_valgen._delivery import CountingExporter, LocalBatcher, QueueGuard, quiet_sdk_delivery_lines
from otel_valgen._env import env_int
from otel_valgen._settings import Settings
from otel_valgen._spool import Spool, claim_orphans

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


class _UnavailableExporter(LogRecordExporter):
    """Stands in when the sink cannot be opened: every export fails and is counted."""

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        return LogRecordExportResult.FAILURE

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class _HttpExporterArgs(TypedDict):
    """What the OTLP/HTTP protobuf and JSON log exporters both take."""

    endpoint: str
    certificate_file: str | None
    client_key_file: str | None
    client_certificate_file: str | None
    headers: dict[str, str]
    timeout: float


def _otlp_exporter(settings: Settings) -> tuple[LogRecordExporter, str]:
    """The SDK's exporter for the protocol, given every resolved setting (``_settings``)."""
    endpoint = settings.endpoint or ""
    if settings.protocol == "grpc":  # the SDK reads the gRPC exporter's TLS and header variables itself
        from otel_valgen._otlp_request import in_place_grpc_exporter

        return in_place_grpc_exporter()(endpoint=endpoint), f"OTLP/gRPC {endpoint}"
    transport = settings.transport
    # Both HTTP exporters take the same arguments, resolved once by the settings.
    common = _HttpExporterArgs(
        endpoint=endpoint,
        certificate_file=transport.certificate_file,
        client_key_file=transport.client_key_file,
        client_certificate_file=transport.client_certificate_file,
        headers=transport.headers,
        timeout=transport.timeout_s,
    )
    if settings.protocol == "http/json":
        from opentelemetry.exporter.otlp.common.http import Compression as JsonCompression
        from opentelemetry.exporter.otlp.json.http._log_exporter import OTLPLogExporter as JsonExporter

        json_exporter = JsonExporter(**common, compression=JsonCompression.from_str(transport.compression))
        return json_exporter, f"OTLP/HTTP JSON {endpoint}"
    from opentelemetry.exporter.otlp.proto.http import Compression

    from otel_valgen._otlp_request import InPlaceHttpExporter

    session = _CertificateFirstSession() if transport.certificate_file else None
    exporter = InPlaceHttpExporter(**common, compression=Compression(transport.compression), session=session)
    return exporter, f"OTLP/HTTP {endpoint}"


class _CertificateFirstSession(requests.Session):
    """A session whose ``verify`` (the SDK sets ``OTEL_EXPORTER_OTLP_CERTIFICATE`` there) wins.

    ``requests`` lets ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` replace a session's own
    ``verify`` when a request does not pass one, as the SDK's exporter does not: a private CA
    named for OTLP was then ignored on machines that set a bundle (while the courier, which
    passes ``verify`` per request, got through; the endpoint flapped between up and away).
    """

    def merge_environment_settings(  # type: ignore[no-untyped-def]
        self, url, proxies, stream, verify, cert
    ) -> dict[str, object]:
        settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
        if verify is None and isinstance(self.verify, str):
            settings["verify"] = self.verify
        return settings


def sink_path(directory: str, instance_id: str) -> Path:
    """The embedded sink's file for this process."""
    name = f"valgen-{socket.gethostname()}-{os.getpid()}-{instance_id[:8]}.jsonl"
    return Path(directory) / name


def _file_exporter(directory: str, instance_id: str) -> tuple[LogRecordExporter, str]:
    from otel_valgen._sink import SinkFileExporter  # the OTel file exporter's lines, encoded faster

    path = sink_path(directory, instance_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return SinkFileExporter(path), f"file {path}"
    except OSError as error:
        _logger.error("otel_valgen: cannot open the embedded sink %s: %s; records will be counted as lost", path, error)
        return _UnavailableExporter(), f"unavailable file {path}"


def _report_to_ray(run_id: str, records: int) -> None:
    from otel_valgen._ray_metric import report_spool_waiting

    report_spool_waiting(run_id, records)


def build_resource(settings: Settings, instance_id: str, extra: dict[str, str]) -> Resource:
    """The process's resource: OTEL_RESOURCE_ATTRIBUTES/OTEL_SERVICE_NAME, then what we know."""
    detected = Resource.create({"service.instance.id": instance_id})
    attributes: dict[str, str] = {**settings.resource_attributes, **extra}
    if str(detected.attributes.get("service.name", "")).startswith("unknown_service"):
        attributes["service.name"] = "otel-valgen"
    return detected.merge(Resource(attributes))


_PLAIN_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})


def plain_value(value: object) -> bool:
    """Whether the SDK's attribute checks leave ``value`` as it is (up to lists read as tuples).

    Texts, ints, floats, bools, bytes and None, and lists, tuples and dicts (non-empty text
    keys) of them, with no subclass anywhere.
    """
    kind = type(value)
    if kind in _PLAIN_SCALARS:
        return True
    if kind is list or kind is tuple:
        return all(map(plain_value, value))  # type: ignore[call-overload]
    if kind is dict:
        return plain_attributes(value)  # type: ignore[arg-type]
    return False


def plain_attributes(attributes: Mapping[str, object]) -> bool:
    """Whether every key is a non-empty ``str`` and every value ``plain_value``."""
    for key, value in attributes.items():
        if type(key) is not str or not key:
            return False
        if type(value) not in _PLAIN_SCALARS and not plain_value(value):
            return False
    return True


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
            quiet_sdk_delivery_lines()
        else:
            inner, description = _file_exporter(settings.directory, self.instance_id)
        spool_dir = Path(settings.directory) / "spool"
        spool = None
        if settings.endpoint and settings.spool and exporter is None:
            path = sink_path(str(spool_dir), self.instance_id)
            spool = functools.partial(Spool, path, settings.spool_max_mb * 1024 * 1024)
        batching = batch_settings()
        # The embedded sink writes a local file: no peer can keep an export or a flush waiting,
        # so both run in the caller's thread instead of a bounded thread each (a hand-off per step end).
        self._local = exporter is None and not settings.endpoint
        self.exporter = CountingExporter(
            inner, stats, description, spool, batching.max_queue_size, settings.flush_timeout_s, local=self._local
        )
        if settings.endpoint and exporter is None:
            self.exporter.courier = self._courier(settings, stats, spool_dir)
            self.exporter.on_waiting = functools.partial(_report_to_ray, settings.run_id)
        self.resource = build_resource(settings, self.instance_id, resource_extra or {})
        self.limits = LogRecordLimits()  # OTEL_LOGRECORD_ATTRIBUTE_* and OTEL_ATTRIBUTE_*, read once
        self.provider = LoggerProvider(resource=self.resource, shutdown_on_exit=False, log_record_limits=self.limits)
        processor: LogRecordProcessor
        if self._local:
            processor = LocalBatcher(self.exporter, batching.schedule_delay_ms / 1000, batching.max_export_batch_size)
        else:
            batch_processor = BatchLogRecordProcessor(
                self.exporter,
                schedule_delay_millis=batching.schedule_delay_ms,
                max_queue_size=batching.max_queue_size,
                max_export_batch_size=batching.max_export_batch_size,
            )
            processor = QueueGuard(batch_processor, self.exporter)
        self.provider.add_log_record_processor(processor)
        self.logger = self.provider.get_logger(contract.SCOPE_NAME)
        # The SDK's logger takes a record built here as it is (``emit``); its no-op one
        # (``OTEL_SDK_DISABLED``) is only called.
        self._sdk_logger = self.logger if isinstance(self.logger, SdkLogger) else None
        self._stats = stats

    def _courier(self, settings: Settings, stats: _stats.Stats, spool_dir: Path) -> Courier | None:
        """The courier of this pipeline's spool; started now when an ended process of the run left one."""
        try:
            courier = Courier(
                sender_for(settings),
                stats,
                self.exporter.description,
                self.exporter.answer_within_s,  # the delivery's own bound, so the two never disagree
                self.exporter.resume,
                self.exporter.spool_path,
                lambda: claim_orphans(spool_dir, settings.run_id, self.exporter.spool_path()),
                self.exporter.report_waiting,
            )
        except Exception as error:  # e.g. grpc missing: delivery works, the spool then waits for `resend`
            stats.failed("starting the spool's courier", error)
            return None
        if settings.spool and any(spool_dir.glob("*.jsonl")):
            courier.start(away=False)
        return courier

    def emit(
        self, timestamp: int, context: Context | None, body: AnyValue, attributes: dict[str, AnyValue], event_name: str
    ) -> None:
        """Hand one INFO record to the SDK's logger.

        The SDK copies every attribute value through its checks (``BoundedAttributes``), which
        cost more than the rest of a record's way to the exporter. Records built here hold
        nothing those checks would change when the values are plain (``plain_attributes``)
        and no limit applies: the record then goes to the logger with ``attributes`` as they
        are. Any other record takes the SDK's own way, with its repairs, limits and warnings.
        """
        record = LogRecord(
            timestamp=timestamp,
            context=context,
            severity_number=SeverityNumber.INFO,
            severity_text="INFO",
            body=body,
            event_name=event_name,
        )
        limits, logger = self.limits, self._sdk_logger
        if (
            logger is None
            or limits.max_log_record_attribute_length is not None
            or (limits.max_log_record_attributes is not None and len(attributes) > limits.max_log_record_attributes)
            or not plain_attributes(attributes)
        ):
            record.attributes = attributes
            self.logger.emit(record)  # the SDK makes its ReadWriteLogRecord, checking each value
            return
        writable = ReadWriteLogRecord(record, logger.resource, logger.instrumentation_scope, limits)
        record.attributes = attributes  # after the record's own (empty) checked attributes: as they are
        # The SDK's logger passes a ReadWriteLogRecord to its processors as it is (its annotation
        # names the API's record only); tests/test_record_emit.py pins that.
        logger.emit(writable)  # type: ignore[arg-type]

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

        if self._local:  # the local sink: nothing to abandon, so no thread to bound it
            run()
            return outcome[0]
        worker = threading.Thread(target=run, name=f"otel-valgen-{action}", daemon=True)
        worker.start()
        worker.join(timeout_s)
        if worker.is_alive():
            self._stats.add(_stats.FLUSH_TIMEOUTS)
            if self.exporter.exporting():  # the endpoint did not answer in time: stop waiting for it
                self.exporter.go_away(f"no answer within {timeout_s:g}s")
                return False
            self._stats.warn(
                "flush_timeout",
                "%s did not finish within %.1fs; records keep being sent in the background",
                action,
                timeout_s,
            )
            return False
        return bool(outcome and outcome[0])

    def flush(self, timeout_s: float) -> bool:
        """Export everything queued; wait at most ``timeout_s``. True when all was confirmed.

        While the endpoint is away this waits only for the spool, never for the endpoint: not
        at all while a delivery to it still runs (the SDK's worker holds the export then).
        """
        if not self.exporter.waits_for_endpoint():
            return False
        return self._bounded("flush", timeout_s, lambda: self.provider.force_flush(int(timeout_s * 1000)))

    def shutdown(self, timeout_s: float) -> bool:
        """Flush, then release the exporter; wait at most ``timeout_s``. True when the flush completed.

        ``LoggerProvider.shutdown()`` returns None, so the answer comes from the flush before it.
        """

        def flush_then_shut_down() -> bool:
            flushed = self.provider.force_flush(int(timeout_s * 1000))
            self.provider.shutdown()
            return bool(flushed)

        return self._bounded("shutdown", timeout_s, flush_then_shut_down)
