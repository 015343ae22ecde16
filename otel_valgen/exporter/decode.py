"""Decode OTLP log payloads (protobuf, JSON, gzip) into valgen records via ``otel_valgen.reader``.

Protobuf requests are turned into their OTLP/JSON shape and read by the same decoder as the
files, one log record at a time, so that a bad record is rejected alone (partial success)
while the rest of the request is kept. Records that are not valgen events are ignored.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from otel_valgen.otlp_json import to_otlp_json
from otel_valgen.reader import Generation, Summary, attributes_of, records_from_request

__all__ = ["Decoded", "MalformedPayload", "decode_body", "decode_request", "split_records"]

MAX_ERRORS_REPORTED = 3


class MalformedPayload(ValueError):
    """The payload is not an OTLP logs request at all."""


@dataclass
class Decoded:
    """The valgen records of one request, each with its resource attributes, and what was rejected."""

    records: list[tuple[Generation | Summary, dict[str, Any]]] = field(default_factory=list)
    rejected: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        """A short explanation of the rejected records (empty when none was)."""
        if not self.rejected:
            return ""
        return f"{self.rejected} log records rejected: " + "; ".join(self.errors[:MAX_ERRORS_REPORTED])


def decode_body(body: bytes, content_encoding: str | None = None) -> bytes:
    """Undo ``Content-Encoding`` (gzip, deflate or none)."""
    encoding = (content_encoding or "").strip().lower()
    try:
        if encoding in ("gzip", "x-gzip"):
            return gzip.decompress(body)
        if encoding == "deflate":
            return zlib.decompress(body)
    except (OSError, zlib.error, EOFError) as error:
        raise MalformedPayload(f"cannot decompress {encoding} body: {error}") from error
    if encoding not in ("", "identity"):
        raise MalformedPayload(f"unsupported content encoding {encoding!r}")
    return body


def decode_request(body: bytes, *, json_body: bool) -> dict[str, Any]:
    """Parse an ``ExportLogsServiceRequest`` (protobuf or OTLP/JSON bytes) into an OTLP/JSON dict."""
    if json_body:
        try:
            request = json.loads(body)
        except (ValueError, UnicodeDecodeError) as error:
            raise MalformedPayload(f"invalid JSON: {error}") from error
        if not isinstance(request, dict):
            raise MalformedPayload("the JSON body is not an object")
        return request
    message = ExportLogsServiceRequest()
    try:
        message.ParseFromString(body)
    except DecodeError as error:
        raise MalformedPayload(f"invalid protobuf: {error}") from error
    return to_otlp_json(message)


def split_records(request: dict[str, Any]) -> Decoded:
    """Read each log record of an OTLP/JSON request on its own; count the unreadable ones."""
    decoded = Decoded()
    try:
        for resource_logs in request.get("resourceLogs", []):
            resource_json = resource_logs.get("resource", {})
            resource = attributes_of(resource_json.get("attributes"))
            for scope_logs in resource_logs.get("scopeLogs", []):
                for log in scope_logs.get("logRecords", []):
                    single = {"resourceLogs": [{"resource": resource_json, "scopeLogs": [{"logRecords": [log]}]}]}
                    try:
                        records = list(records_from_request(single))
                    except (ValueError, KeyError, TypeError, AttributeError) as error:
                        decoded.rejected += 1
                        decoded.errors.append(str(error))
                        continue
                    decoded.records.extend((r, resource) for r in records if isinstance(r, Generation | Summary))
    except (AttributeError, TypeError, KeyError) as error:
        raise MalformedPayload(f"not an OTLP logs request: {error}") from error
    return decoded
