"""OTLP/JSON, as the collector's ``file`` exporter writes it, to and from the protobuf request.

OTLP/JSON is the proto3 JSON mapping with one difference: trace and span ids are hex, not
base64. These two functions are the only place that difference is handled.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from google.protobuf.json_format import MessageToDict, ParseDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

__all__ = ["from_otlp_json", "to_otlp_json"]

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
