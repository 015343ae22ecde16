"""A record handed to the SDK reaches the exporter as the SDK's own checks would have made it.

``Pipeline.emit`` skips the SDK's per-value attribute checks for plain values under no limit;
each case here emits the same record that way and through ``Logger.emit``'s keywords, and
compares what the exporter is handed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk._logs import (
    LoggerProvider,
    LogRecordDroppedAttributesWarning,
    LogRecordProcessor,
    ReadableLogRecord,
    ReadWriteLogRecord,
)
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter

from otel_valgen import _sink, _stats
from otel_valgen._pipeline import Pipeline, plain_attributes
from otel_valgen._settings import resolve_settings
from tests.support.sdk_records import VALUES, traced

_TIME = 1_700_000_000_000_000_001
_BODY = {"input": "q", "output": "a"}
_MESSAGES = [
    {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "calc", "arguments": {"x": [1, 2.5]}}]},
    {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": None}]},
]


class _Text(str):
    pass


def _pipeline(tmp_path: Path) -> tuple[Pipeline, InMemoryLogRecordExporter]:
    exporter = InMemoryLogRecordExporter()
    settings = resolve_settings(run_id="r", directory=str(tmp_path))
    return Pipeline(settings, _stats.Stats(), exporter=exporter), exporter


def _both_ways(tmp_path: Path, attributes: dict[Any, Any]) -> tuple[ReadableLogRecord, ReadableLogRecord]:
    """The record as ``Pipeline.emit`` hands it over, then as the SDK's keyword ``emit`` does."""
    pipeline, exporter = _pipeline(tmp_path)
    context = traced()
    pipeline.emit(_TIME, context, _BODY, dict(attributes), "valgen.generation")
    pipeline.logger.emit(
        timestamp=_TIME,
        context=context,
        severity_number=SeverityNumber.INFO,
        severity_text="INFO",
        body=_BODY,
        attributes=dict(attributes),
        event_name="valgen.generation",
    )
    assert pipeline.flush(10)
    ours, sdks = exporter.get_finished_logs()
    pipeline.shutdown(10)
    ours.log_record.observed_timestamp = sdks.log_record.observed_timestamp  # set at emit: the one field apart
    return ours, sdks


def test_plain_attributes_reach_the_exporter_as_the_sdk_would_hand_them(tmp_path: Path) -> None:
    """Every plain kind of value, nested lists and maps (GenAI messages): the same record, not checked again."""
    values = [value for value in VALUES if not (isinstance(value, dict) and "" in value)]  # the SDK drops that key
    attributes = {f"a{index}": value for index, value in enumerate(values)}
    attributes.update({"bytes": b"\x00\xff", "messages": _MESSAGES, "empty": [], "map": {"k": (1, "two")}})
    assert plain_attributes(attributes)
    ours, sdks = _both_ways(tmp_path, attributes)
    assert type(ours.log_record.attributes) is dict  # the SDK's checks were skipped
    assert isinstance(sdks.log_record.attributes, BoundedAttributes)
    assert _sink.library_line([ours]) == _sink.library_line([sdks])
    assert ours.dropped_attributes == sdks.dropped_attributes == 0


@pytest.mark.parametrize(
    "attributes",
    [
        {"score": np.float64(0.5)},
        {"text": _Text("sub")},
        {"": "empty key"},
        {"map": {1: "int key"}},
        {"map": {"inner": {"": "empty key"}}},
        {"nested": [{"a": {"b", "c"}}]},
        {"object": object()},
    ],
    ids=["numpy-scalar", "str-subclass", "empty-key", "int-key", "inner-empty-key", "set-in-list", "object"],
)
@pytest.mark.filterwarnings("ignore::opentelemetry.sdk._logs.LogRecordDroppedAttributesWarning")  # the empty key's
def test_values_the_sdk_would_change_take_its_way(tmp_path: Path, attributes: dict[Any, Any]) -> None:
    """A subclass, a set, an object or a bad key goes through the SDK's checks, with their repairs."""
    assert not plain_attributes(attributes)
    ours, sdks = _both_ways(tmp_path, attributes)
    assert isinstance(ours.log_record.attributes, BoundedAttributes)
    assert ours.log_record.attributes.copy() == sdks.log_record.attributes.copy()  # type: ignore[attr-defined]
    assert ours.dropped_attributes == sdks.dropped_attributes


def test_the_users_attribute_limits_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT and _COUNT_LIMIT cut and drop as the SDK does."""
    monkeypatch.setenv("OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT", "4")
    ours, sdks = _both_ways(tmp_path / "length", {"k": "abcdefgh", "n": 7})
    assert ours.log_record.attributes.copy() == {"k": "abcd", "n": 7}  # type: ignore[union-attr]
    assert _sink.library_line([ours]) == _sink.library_line([sdks])
    monkeypatch.delenv("OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT")
    monkeypatch.setenv("OTEL_LOGRECORD_ATTRIBUTE_COUNT_LIMIT", "2")
    with pytest.warns(LogRecordDroppedAttributesWarning):
        ours, sdks = _both_ways(tmp_path / "count", {"a": 1, "b": 2, "c": 3})
    assert ours.log_record.attributes.copy() == {"b": 2, "c": 3}  # type: ignore[union-attr]
    assert ours.dropped_attributes == sdks.dropped_attributes == 1


def test_a_disabled_sdk_takes_records_without_failing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_SDK_DISABLED=true gives the SDK's no-op logger: records go nowhere, and nothing raises."""
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    pipeline, exporter = _pipeline(tmp_path)
    pipeline.emit(_TIME, None, _BODY, {"k": "v"}, "valgen.generation")
    assert pipeline.flush(10)
    assert exporter.get_finished_logs() == ()
    pipeline.shutdown(10)


def test_the_sdk_logger_hands_a_built_record_to_its_processors_as_it_is() -> None:
    """What ``Pipeline.emit`` relies on: ``Logger.emit`` passes a ReadWriteLogRecord through, attributes and all."""
    received: list[ReadWriteLogRecord] = []

    class Keep(LogRecordProcessor):
        def on_emit(self, log_record: ReadWriteLogRecord) -> None:
            received.append(log_record)

        def shutdown(self) -> None:
            pass

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    provider = LoggerProvider(shutdown_on_exit=False)
    provider.add_log_record_processor(Keep())
    logger = provider.get_logger("s")
    record = LogRecord(timestamp=_TIME, body="b")
    writable = ReadWriteLogRecord(record, provider.resource, logger.instrumentation_scope)  # type: ignore[attr-defined]
    attributes = {"k": ["v"]}
    record.attributes = attributes
    logger.emit(writable)  # type: ignore[arg-type]
    assert received == [writable]
    assert received[0].log_record.attributes is attributes
