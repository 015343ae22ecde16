"""What Loki stores of an OTLP log request, per Loki's documented mapping, for the stand-in tests.

No Loki runs in the tests (its code is AGPL-licensed and kept out of this project), so this
module reproduces the mapping as Loki documents it, and the tests check the collector's real
requests and the dashboard's queries against it. Sources, read for Loki 3.x:

- "Ingesting logs to Loki using OpenTelemetry Collector", section "Format considerations":
  https://grafana.com/docs/loki/latest/send-data/otel/#format-considerations
- "How is native OTLP endpoint different from Loki Exporter" (its worked sample log):
  https://grafana.com/docs/loki/latest/send-data/otel/native_otlp_vs_loki_exporter/

What they say, and how this module follows it:

- Index labels: the resource attributes listed in the distributor's
  ``otlp_config.default_resource_attributes_as_index_labels`` (docker/loki/loki.yaml sets it;
  without it, Loki's documented default list, `DEFAULT_INDEX_LABEL_ATTRIBUTES`). The per-tenant
  ``limits_config.otlp_config`` can change that; it is not modelled, and a config using it is
  refused (`index_label_attributes`).
- Structured metadata: everything else, i.e. the other resource attributes, everything under
  the instrumentation scope, and everything under the log record except its body and time.
  The docs name ``severity_text`` (in the sample log); ``trace_id`` and ``span_id`` as lowercase
  hex follow OpenTelemetry's "Trace Context in non-OTLP Log Formats"; the scope becomes
  ``scope_name``/``scope_version`` plus its attributes.
- The log line: the body, stringified with the collector library's ``AsString`` (a map body
  becomes its JSON).
- The timestamp: the record's time, else its observed time, else the time of ingestion.
- Names: dots and every other character Loki does not allow in a label name become ``_``
  (``service.name`` -> ``service_name``); nested attribute values are flattened with ``_``;
  non-string values are stringified with ``AsString``.
- The OTLP event name is not listed anywhere in that mapping and is not kept here.
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

# Loki's documented default index labels (resource attributes), used when the config sets none.
DEFAULT_INDEX_LABEL_ATTRIBUTES = (
    "cloud.availability_zone",
    "cloud.region",
    "container.name",
    "deployment.environment",
    "k8s.cluster.name",
    "k8s.container.name",
    "k8s.cronjob.name",
    "k8s.daemonset.name",
    "k8s.deployment.name",
    "k8s.job.name",
    "k8s.namespace.name",
    "k8s.pod.name",
    "k8s.replicaset.name",
    "k8s.statefulset.name",
    "service.instance.id",
    "service.name",
    "service.namespace",
)
# The log record's own fields, as structured metadata (names per the module docstring).
RECORD_FIELDS = ("severity_text", "severity_number", "trace_id", "span_id")
SCOPE_FIELDS = ("scope_name", "scope_version")
# "Loki has a default limit of 15 index labels" (the same page).
MAX_INDEX_LABELS = 15


def index_label_attributes(config_path: Path = LOKI_CONFIG) -> list[str]:
    """The resource attributes that the Loki config at `config_path` turns into index labels."""
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    if "otlp_config" in (config.get("limits_config") or {}):
        raise ValueError(f"{config_path}: per-tenant limits_config.otlp_config is not modelled")
    distributor = (config.get("distributor") or {}).get("otlp_config") or {}
    return list(distributor.get("default_resource_attributes_as_index_labels", DEFAULT_INDEX_LABEL_ATTRIBUTES))


def normalize(name: str) -> str:
    """Loki's name for an OTLP attribute key: every character but letters, digits and ``_`` -> ``_``."""
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
    """One stored log line: its stream's labels, its structured metadata, the line and its time."""

    labels: dict[str, str]
    metadata: dict[str, str]
    line: str
    timestamp_ns: int = 0  # 0: Loki would use the time of ingestion


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
                timestamp = record.time_unix_nano or record.observed_time_unix_nano
                out.append(Entry(dict(labels), metadata, as_string(record.body), timestamp))
    return out


def _names(key: str, value: common_pb2.AnyValue) -> list[str]:
    flattened: dict[str, str] = {}
    _flatten(key, value, flattened)
    return list(flattened)


def name_collisions(request: logs_service_pb2.ExportLogsServiceRequest) -> list[tuple[str, str, str]]:
    """Pairs of a record's inputs (resource, scope, record attributes, record fields) Loki would store as one name.

    Each item is (the shared Loki name, one input, the other input); after normalisation and
    flattening, one value would silently replace the other.
    """
    found = []
    for resource_logs in request.resource_logs:
        for scope_logs in resource_logs.scope_logs:
            scope = scope_logs.scope
            for record in scope_logs.log_records:
                inputs = [
                    (f"resource attribute {kv.key}", _names(kv.key, kv.value))
                    for kv in resource_logs.resource.attributes
                ]
                inputs += [(f"scope attribute {kv.key}", _names(kv.key, kv.value)) for kv in scope.attributes]
                inputs += [(f"record attribute {kv.key}", _names(kv.key, kv.value)) for kv in record.attributes]
                fields = {
                    "scope_name": scope.name,
                    "scope_version": scope.version,
                    "severity_text": record.severity_text,
                    "severity_number": record.severity_number,
                    "trace_id": record.trace_id,
                    "span_id": record.span_id,
                }
                inputs += [(f"field {name}", [name]) for name, value in fields.items() if value]
                seen: dict[str, str] = {}
                for source, produced in inputs:
                    for name in produced:
                        if name in seen:
                            found.append((name, seen[name], source))
                        else:
                            seen[name] = source
    return found
