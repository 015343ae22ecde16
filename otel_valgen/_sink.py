"""The embedded sink's exporter: OTLP-JSON lines, byte for byte those of the OTel file exporter.

``opentelemetry-exporter-otlp-json-file`` writes each batch as one line: the batch becomes an
``ExportLogsServiceRequest`` of ``opentelemetry.proto_json`` messages, then a dict
(``to_dict``), then ``json.dumps(..., separators=(",", ":"))``; at the end of a step that took
longer than emitting the records through the SDK. ``encode_line`` writes the same line directly: the same
keys in the same order, each text through ``json.encoder.encode_basestring_ascii`` and each
number through ``repr``, which is what ``json.dumps`` does with them. It takes the values the
SDK hands over (texts, bools, ints, floats, None, and tuples, lists and dicts of them); a batch
holding anything else (bytes, a subclass, a value the library refuses) is encoded by the
library, with its handling of bad values. The file is opened, written, flushed and closed as
the library's exporter does, and its failures are logged on that exporter's logger.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from json.encoder import encode_basestring_ascii

from opentelemetry.exporter.otlp.json.common._log_encoder import encode_logs
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

# The library exporter's logger (it filters repeated lines), so that a failure reads as it did.
_logger = logging.getLogger("opentelemetry.exporter.otlp.json.file._log_exporter")

_text: Callable[[str], str] = encode_basestring_ascii  # json.dumps's encoding of a text (ensure_ascii)


class _Unusual(Exception):
    """A value the direct encoding does not take: the library encodes the batch."""


def _double(value: float) -> str:
    """A ``doubleValue`` as JSON: ``repr`` when finite, else ``proto_json``'s texts ``"NaN"``, ``"Infinity"``..."""
    if math.isfinite(value):
        return float.__repr__(value)
    if math.isnan(value):
        return '"NaN"'
    return '"Infinity"' if value > 0 else '"-Infinity"'


# The encoding appends pieces to one list, joined once: a 2 KB text is then copied twice, not
# once per level of the request it is nested in.


def _put_value(value: object, out: list[str]) -> None:  # noqa: PLR0911 (one return per kind of value)
    """Append the JSON of ``AnyValue.to_dict()`` of the library's ``_encode_value(value)``, for these types."""
    kind = type(value)
    if kind is str:
        out += ('{"stringValue":', _text(value), "}")  # type: ignore[arg-type]
        return
    if kind is bool:
        out.append('{"boolValue":true}' if value else '{"boolValue":false}')
        return
    if kind is int:
        out.append('{"intValue":"' + int.__repr__(value) + '"}')  # type: ignore[arg-type]  # int64 as a JSON text
        return
    if kind is float:
        out.append('{"doubleValue":' + _double(value) + "}")  # type: ignore[arg-type]
        return
    if value is None:
        out.append("{}")
        return
    if kind is tuple or kind is list:
        if not value:
            out.append('{"arrayValue":{}}')
            return
        out.append('{"arrayValue":{"values":[')
        items: Sequence[object] = value  # type: ignore[assignment]
        for index, item in enumerate(items):
            if index:
                out.append(",")
            _put_value(item, out)
        out.append("]}}")
        return
    if kind is dict:
        if not value:
            out.append('{"kvlistValue":{}}')
            return
        out.append('{"kvlistValue":{"values":[')
        _put_key_values(((str(key), item) for key, item in value.items()), out)  # type: ignore[attr-defined]
        out.append("]}}")
        return
    raise _Unusual


# Each record repeats the same attribute names: the JSON that opens a key's KeyValue is kept,
# for as many names as a run's records and resources use (nested maps may bring more, unkept).
_KEY_HEADS: dict[str, str] = {}
_KEY_HEADS_MAX = 4096


def _put_key_values(items: Iterable[tuple[str, object]], out: list[str]) -> None:
    """Append the JSON of each ``KeyValue.to_dict()`` (the key when not empty, then the value), comma-separated."""
    first = True
    for key, value in items:
        if type(key) is not str:
            raise _Unusual
        if not first:
            out.append(",")
        first = False
        head = _KEY_HEADS.get(key)
        if head is None:
            head = '{"key":' + _text(key) + ',"value":' if key else '{"value":'
            if len(_KEY_HEADS) < _KEY_HEADS_MAX:
                _KEY_HEADS[key] = head
        out.append(head)
        _put_value(value, out)
        out.append("}")


def _put_int(value: object, out: list[str], prefix: str, suffix: str = "") -> None:
    """Append an int field (``repr``), between ``prefix`` and ``suffix``."""
    if type(value) is not int:
        raise _Unusual
    out.append(prefix + int.__repr__(value) + suffix)


def _put_record(readable: ReadableLogRecord, out: list[str]) -> None:
    """Append the JSON of ``LogRecord.to_dict()`` of the library's ``_encode_log``, field by field in its order."""
    log = readable.log_record
    out.append("{")
    mark = len(out)  # a field after the first one opens with a comma
    if log.timestamp:
        _put_int(log.timestamp, out, '"timeUnixNano":"', '"')
    if log.observed_timestamp:
        prefix = ',"observedTimeUnixNano":"' if len(out) > mark else '"observedTimeUnixNano":"'
        _put_int(log.observed_timestamp, out, prefix, '"')
    severity = getattr(log.severity_number, "value", None)
    if severity:
        out.append((',"severityNumber":' if len(out) > mark else '"severityNumber":') + int.__repr__(int(severity)))
    if log.severity_text:
        out += (',"severityText":' if len(out) > mark else '"severityText":', _text(log.severity_text))
    out.append(',"body":' if len(out) > mark else '"body":')
    _put_value(log.body, out)
    if log.attributes:
        out.append(',"attributes":[')
        # BoundedAttributes.copy() is its dict, read in C (its items() goes through Mapping's, key by key).
        _put_key_values(log.attributes.copy().items(), out)  # type: ignore[attr-defined]
        out.append("]")
    dropped = readable.dropped_attributes
    if dropped:
        _put_int(dropped, out, ',"droppedAttributesCount":')
    flags = int(log.trace_flags)  # type: ignore[arg-type]
    if flags:
        out.append(',"flags":' + int.__repr__(flags))
    if log.trace_id:
        out.append(',"traceId":"' + log.trace_id.to_bytes(length=16, byteorder="big", signed=False).hex() + '"')
    if log.span_id:
        out.append(',"spanId":"' + log.span_id.to_bytes(length=8, byteorder="big", signed=False).hex() + '"')
    if log.event_name:
        out += (',"eventName":', _text(log.event_name))
    out.append("}")


def _put_scope(scope: InstrumentationScope | None, out: list[str]) -> None:
    """Append the JSON of ``InstrumentationScope.to_dict()`` of the library's ``_encode_instrumentation_scope``."""
    fields: list[str] = []
    if scope is not None:
        if scope.name:
            fields.append('"name":' + _text(scope.name))
        if scope.version:
            fields.append('"version":' + _text(scope.version))
        if scope.attributes:
            attributes: list[str] = []
            _put_key_values(scope.attributes.items(), attributes)
            fields.append('"attributes":[' + "".join(attributes) + "]")
    out.append("{" + ",".join(fields) + "}")


Groups = dict[Resource, dict[InstrumentationScope | None, list[ReadableLogRecord]]]


def by_resource_and_scope(batch: Sequence[ReadableLogRecord]) -> Groups:
    """A batch's records grouped by resource then scope, in order of first appearance (the OTLP encoders' order)."""
    groups: Groups = {}
    last: tuple[object, object, list[ReadableLogRecord]] | None = None
    for readable in batch:
        resource, scope = readable.resource, readable.instrumentation_scope or None
        if last is not None and resource is last[0] and scope is last[1]:
            members = last[2]  # the same objects as the record before: its group, without hashing them again
        else:
            members = groups.setdefault(resource, {}).setdefault(scope, [])  # type: ignore[arg-type]
            last = (resource, scope, members)
        members.append(readable)
    return groups


def _direct(batch: Sequence[ReadableLogRecord]) -> str | None:
    """The request's line, its records grouped by resource then scope in order of first appearance."""
    groups = by_resource_and_scope(batch)
    if not groups:
        return None
    out = ['{"resourceLogs":[']
    for number, (resource, scopes) in enumerate(groups.items()):
        out.append(',{"resource":' if number else '{"resource":')
        if resource.attributes:
            out.append('{"attributes":[')
            _put_key_values(resource.attributes.items(), out)
            out.append("]}")
        else:
            out.append("{}")
        out.append(',"scopeLogs":[')
        for index, (scope, members) in enumerate(scopes.items()):
            out.append(',{"scope":' if index else '{"scope":')
            _put_scope(scope, out)
            out.append(',"logRecords":[')
            for position, readable in enumerate(members):
                if position:
                    out.append(",")
                _put_record(readable, out)
            out.append("]")
            scope_url = scope.schema_url if scope is not None else None
            if scope_url:
                out += (',"schemaUrl":', _text(scope_url))
            out.append("}")
        out.append("]")
        if resource.schema_url:
            out += (',"schemaUrl":', _text(resource.schema_url))
        out.append("}")
    out.append("]}\n")
    return "".join(out)


def library_line(batch: Sequence[ReadableLogRecord]) -> str | None:
    """The line the library's file exporter writes for ``batch`` (None: nothing to write)."""
    request = encode_logs(batch)
    if not request.resource_logs:
        return None
    return json.dumps(request.to_dict(), separators=(",", ":")) + "\n"


def encode_line(batch: Sequence[ReadableLogRecord]) -> str | None:
    """The line of ``batch``, ``library_line``'s, written directly when its values allow (None: nothing to write)."""
    try:
        return _direct(batch)
    except Exception:  # an unusual value, or one the library too refuses: its encoding, its handling
        return library_line(batch)


class SinkFileExporter(LogRecordExporter):
    """Appends each batch to a file as one OTLP-JSON line, as ``FileLogExporter(path)`` does."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._stream = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open until shutdown)
        self._lock = threading.Lock()
        self._shutdown = False

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        if self._shutdown:
            _logger.warning("Exporter already shutdown, ignoring call")
            return LogRecordExportResult.FAILURE
        try:
            line = encode_line(batch)
            with self._lock:
                if self._stream.closed:
                    _logger.warning("Stream is closed, ignoring %s export call", "logs")
                    return LogRecordExportResult.FAILURE
                if line is not None:
                    self._stream.write(line)
                self._stream.flush()
        except Exception as error:
            _logger.exception("Failed to write %s batch to stream: %s: %s", "logs", type(error).__name__, error)
            return LogRecordExportResult.FAILURE
        return LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        if self._shutdown:
            _logger.warning("Exporter already shutdown, ignoring call")
            return
        self._shutdown = True
        with self._lock:
            self._stream.close()

    def force_flush(self, timeout_millis: int = 10_000) -> bool:
        return True
