"""What Loki stores of an OTLP log request, per its documented mapping, for the stand-in tests.

Loki's OTLP ingestion (docs: "Ingesting logs to Loki using OpenTelemetry Collector", and
pkg/loghttp/push/otlp.go) maps a record to one entry:
- index labels: the resource attributes listed in
  ``distributor.otlp_config.default_resource_attributes_as_index_labels``;
- structured metadata: every other resource attribute, every record attribute, the scope
  name and version (``scope_name``, ``scope_version``), ``severity_text``,
  ``severity_number``, ``trace_id`` and ``span_id`` in hex, ``observed_timestamp``;
- the log line: the body, stringified (a map body becomes its JSON);
- names: every character other than letters, digits and ``_`` becomes ``_``
  (``valgen.run_id`` -> ``valgen_run_id``); values are stringified.
The OTLP event name is not kept. This module reproduces that mapping so that a test can
check the dashboard's queries against what the collector really sends, without a Loki.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

LOKI_CONFIG = Path(__file__).resolve().parents[2] / "docker" / "loki" / "loki.yaml"


def index_label_attributes(config_path: Path = LOKI_CONFIG) -> list[str]:
    """The resource attributes the Loki config turns into index labels."""
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    return list(config["distributor"]["otlp_config"]["default_resource_attributes_as_index_labels"])


def normalize(name: str) -> str:
    """Loki's name for an OTLP attribute key."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _raw(value: common_pb2.AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "kvlist_value":
        return {kv.key: _raw(kv.value) for kv in value.kvlist_value.values}
    if kind == "array_value":
        return [_raw(item) for item in value.array_value.values]
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind) if kind else None


def as_string(value: common_pb2.AnyValue) -> str:
    """The collector library's AsString: strings as they are, maps and lists as JSON."""
    raw = _raw(value)
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if raw is None:
        return ""
    if isinstance(raw, float) and raw.is_integer():
        return str(int(raw))
    if isinstance(raw, (dict, list)):
        return json.dumps(raw, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return str(raw)


def _flatten(key: str, value: common_pb2.AnyValue, out: dict[str, str]) -> None:
    if value.WhichOneof("value") == "kvlist_value":
        for kv in value.kvlist_value.values:
            _flatten(f"{key}_{kv.key}", kv.value, out)
    else:
        out[normalize(key)] = as_string(value)


@dataclass
class Entry:
    """One stored log line: its stream's labels, its structured metadata and the line."""

    labels: dict[str, str]
    metadata: dict[str, str]
    line: str


def entries(request: logs_service_pb2.ExportLogsServiceRequest, index_attributes: list[str]) -> list[Entry]:
    """The entries Loki would store for `request` with the given index-label resource attributes."""
    out = []
    for resource_logs in request.resource_logs:
        labels: dict[str, str] = {}
        resource_metadata: dict[str, str] = {}
        for kv in resource_logs.resource.attributes:
            _flatten(kv.key, kv.value, labels if kv.key in index_attributes else resource_metadata)
        for scope_logs in resource_logs.scope_logs:
            scope_metadata: dict[str, str] = {}
            for kv in scope_logs.scope.attributes:
                _flatten(kv.key, kv.value, scope_metadata)
            if scope_logs.scope.name:
                scope_metadata["scope_name"] = scope_logs.scope.name
            if scope_logs.scope.version:
                scope_metadata["scope_version"] = scope_logs.scope.version
            for record in scope_logs.log_records:
                metadata: dict[str, str] = {}
                for kv in record.attributes:
                    _flatten(kv.key, kv.value, metadata)
                if record.severity_number:
                    metadata["severity_number"] = str(record.severity_number)
                if record.severity_text:
                    metadata["severity_text"] = record.severity_text
                if record.trace_id:
                    metadata["trace_id"] = record.trace_id.hex()
                if record.span_id:
                    metadata["span_id"] = record.span_id.hex()
                metadata.update(resource_metadata)
                metadata.update(scope_metadata)
                out.append(Entry(dict(labels), metadata, as_string(record.body)))
    return out
