"""The OTLP export request of a batch of SDK log records, built in place, and the exporters that send it.

The SDK's encoder (``encode_logs``) builds every value as a message of its own and hands it to
its parent, and protobuf copies a message handed to a parent: a record is copied once per level
it is nested in (its values, the record, its scope, its resource, the request). A rollout
record holds tens of KiB (its texts, its conversation, its per-token columns), and those copies
cost ten times the building: 13-30 ms for a step's 32 kept rollouts. ``export_request`` builds
the same request with each message added where it lives (``add()``), which serializes to the
same bytes. It takes the values the SDK hands over (texts, bytes, bools, ints, floats, None,
and tuples, lists and dicts of them); a batch holding anything else (a subclass, a value out of
range) is encoded by the library, with its handling of bad values.

``InPlaceHttpExporter`` and ``in_place_grpc_exporter`` are the SDK's OTLP log exporters with
that request; everything else (transport, retries, limits, metrics) is the SDK's.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.http._common import _is_request_too_large
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.semconv.attributes.http_attributes import HTTP_RESPONSE_STATUS_CODE

from otel_valgen._sink import by_resource_and_scope


class _Unusual(Exception):
    """A value the in-place encoding does not take: the library encodes the batch."""


_SCALAR_FIELDS: dict[type, str] = {
    str: "string_value",
    bool: "bool_value",
    int: "int_value",  # out of int64: ValueError, the library's case
    float: "double_value",
    bytes: "bytes_value",
}
"""The ``AnyValue`` field of each scalar type, by exact type (subclasses are unusual)."""


def _put_value(target: AnyValue, value: object) -> None:
    """Set ``target`` to the library's ``_encode_value(value)``, for these types."""
    kind = type(value)
    scalar = _SCALAR_FIELDS.get(kind)
    if scalar is not None:
        setattr(target, scalar, value)
        return
    if value is None:
        return
    if kind is tuple or kind is list:
        array = target.array_value
        array.SetInParent()  # present when empty, as the library's
        values = array.values
        for item in value:  # type: ignore[attr-defined]
            _put_value(values.add(), item)
        return
    if kind is dict:
        kvlist = target.kvlist_value
        kvlist.SetInParent()
        _put_key_values(kvlist.values, value.items())  # type: ignore[attr-defined]
        return
    raise _Unusual


def _put_key_values(target: Any, items: Any) -> None:
    """Append a ``KeyValue`` per item to the repeated field ``target`` (keys as ``str(key)``, as the library's)."""
    for key, value in items:
        entry = target.add(key=key if type(key) is str else str(key))
        entry.value.SetInParent()
        _put_value(entry.value, value)


def _put_record(target: Any, readable: ReadableLogRecord) -> None:
    """Fill the ``LogRecord`` message ``target`` as the library's ``_encode_log`` does."""
    log = readable.log_record
    if log.timestamp:
        target.time_unix_nano = log.timestamp
    if log.observed_timestamp:
        target.observed_time_unix_nano = log.observed_timestamp
    if log.span_id:
        target.span_id = log.span_id.to_bytes(length=8, byteorder="big", signed=False)
    if log.trace_id:
        target.trace_id = log.trace_id.to_bytes(length=16, byteorder="big", signed=False)
    flags = int(log.trace_flags)  # type: ignore[arg-type]
    if flags:
        target.flags = flags
    target.body.SetInParent()
    _put_value(target.body, log.body)
    if log.severity_text:
        target.severity_text = log.severity_text
    if log.attributes:
        # BoundedAttributes.copy() is its dict, read in C (its items() goes through Mapping's, key by key).
        _put_key_values(target.attributes, log.attributes.copy().items())  # type: ignore[attr-defined]
    dropped = readable.dropped_attributes
    if dropped:
        target.dropped_attributes_count = dropped
    severity = getattr(log.severity_number, "value", None)
    if severity:
        target.severity_number = severity
    if log.event_name:
        target.event_name = log.event_name


def _put_scope(target: Any, scope: InstrumentationScope | None) -> None:
    target.SetInParent()
    if scope is None:
        return
    if scope.name:
        target.name = scope.name
    if scope.version:
        target.version = scope.version
    if scope.attributes:
        _put_key_values(target.attributes, scope.attributes.items())


def _in_place(batch: Sequence[ReadableLogRecord]) -> ExportLogsServiceRequest:
    """The request, records grouped by resource then scope in order of first appearance. Raises on unusual values."""
    request = ExportLogsServiceRequest()
    for resource, scopes in by_resource_and_scope(batch).items():
        resource_logs = request.resource_logs.add()
        resource_logs.resource.SetInParent()
        if resource.attributes:
            _put_key_values(resource_logs.resource.attributes, resource.attributes.items())
        if resource.schema_url:
            resource_logs.schema_url = resource.schema_url
        for scope, members in scopes.items():
            scope_logs = resource_logs.scope_logs.add()
            _put_scope(scope_logs.scope, scope)
            if scope is not None and scope.schema_url:
                scope_logs.schema_url = scope.schema_url
            records = scope_logs.log_records
            for readable in members:
                _put_record(records.add(), readable)
    return request


def export_request(batch: Sequence[ReadableLogRecord]) -> ExportLogsServiceRequest:
    """The library's ``encode_logs(batch)``: built in place, or by the library for unusual values."""
    try:
        return _in_place(batch)
    except (_Unusual, ValueError, TypeError):
        return encode_logs(batch)


class InPlaceHttpExporter(HttpExporter):
    """The SDK's OTLP/HTTP protobuf log exporter, its request built in place (``export_request``)."""

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        if self._shutdown:
            return super().export(batch)  # the library's warning and failure
        data = export_request(batch).SerializeToString()
        if _is_request_too_large(data, self._max_request_size):
            return super().export(batch)  # the library's warning, drop and error, on its own encoding
        with self._metrics.export_operation(len(batch)) as result:
            answer = self._client.export(data)
            if not answer.success:
                result.error = answer.error
                result.error_attrs = (
                    {HTTP_RESPONSE_STATUS_CODE: answer.status_code} if answer.status_code is not None else None
                )
                return LogRecordExportResult.FAILURE
        return LogRecordExportResult.SUCCESS


@functools.cache
def in_place_grpc_exporter() -> type:
    """The SDK's OTLP/gRPC log exporter class, its request built in place (imports gRPC on first use)."""
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcExporter

    class InPlaceGrpcExporter(GrpcExporter):
        def _translate_data(self, data: Sequence[ReadableLogRecord]) -> ExportLogsServiceRequest:
            return export_request(data)

    return InPlaceGrpcExporter
