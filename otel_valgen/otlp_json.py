"""OTLP/JSON, as the collector's ``file`` exporter writes it, to and from the protobuf request.

OTLP/JSON is the proto3 JSON mapping with one difference: trace and span ids are hex, not
base64. These functions are the only place that difference is handled, and ``parse_request``
is the one way bytes (a file's message, a request body) become the OTLP/JSON dict that
``otel_valgen.reader`` reads records from.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

__all__ = ["MalformedPayload", "from_otlp_json", "parse_request", "to_otlp_json"]

_ID_KEYS = ("traceId", "spanId")


def _map_ids(data: dict[str, Any], convert: Callable[[str], str]) -> dict[str, Any]:
    for resource_logs in data.get("resourceLogs", []):
        for scope_logs in resource_logs.get("scopeLogs", []):
            for log in scope_logs.get("logRecords", []):
                for key in _ID_KEYS:
                    if log.get(key):
                        log[key] = convert(log[key])
    return data


def to_otlp_json(request: ExportLogsServiceRequest) -> dict[str, Any]:
    """The OTLP/JSON form of a protobuf request (camelCase keys, hex ids)."""
    return _map_ids(MessageToDict(request), lambda value: base64.b64decode(value).hex())


def from_otlp_json(data: dict[str, Any]) -> ExportLogsServiceRequest:
    """The protobuf request of an OTLP/JSON dict (modified in place: hex ids become base64)."""
    _map_ids(data, lambda value: base64.b64encode(bytes.fromhex(value)).decode())
    request = ExportLogsServiceRequest()
    ParseDict(data, request, ignore_unknown_fields=True)
    return request


class MalformedPayload(ValueError):
    """The bytes are not an OTLP logs request at all."""


def parse_request(data: bytes, *, json_body: bool) -> dict[str, Any]:
    """An ``ExportLogsServiceRequest`` (OTLP/JSON or OTLP/protobuf bytes) as its OTLP/JSON dict.

    Raises:
        MalformedPayload: the bytes are neither.

    """
    if json_body:
        try:
            request = json.loads(data.decode("utf-8", errors="replace"))
        except ValueError as error:
            raise MalformedPayload(f"invalid JSON: {error}") from error
        if not isinstance(request, dict):
            raise MalformedPayload("the JSON body is not an object")
        return request
    message = ExportLogsServiceRequest()
    try:
        message.ParseFromString(data)
    except DecodeError as error:
        raise MalformedPayload(f"invalid protobuf: {error}") from error
    return to_otlp_json(message)
