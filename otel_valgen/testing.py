"""Helpers for users' own tests: capture the records otel_valgen would send, in memory.

Example::

    from otel_valgen.testing import capture_records

    with capture_records(run_id="t", count=4) as records:
        with vg.validation(step=1):
            vg.log_generations(["q"], ["a"], [1.0])
    assert records[0]["attributes"]["valgen.step"] == 1
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

from otel_valgen import _process
from otel_valgen._settings import resolve_settings

__all__ = ["CapturingExporter", "capture_records", "record_to_dict"]


def record_to_dict(record: ReadableLogRecord) -> dict[str, Any]:
    """A plain view of one SDK record: event name, body, attributes, resource, trace id."""
    log = record.log_record
    return {
        "event_name": log.event_name,
        "body": log.body,
        "attributes": dict(log.attributes or {}),
        "resource": dict(record.resource.attributes),
        "trace_id": format(log.trace_id or 0, "032x"),
        "span_id": format(log.span_id or 0, "016x"),
        "severity_text": log.severity_text,
    }


class CapturingExporter(LogRecordExporter):
    """An exporter that appends every exported record, as a dict, to ``records``."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        """Append the batch."""
        self.records.extend(record_to_dict(record) for record in batch)
        return LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered."""
        return True


@contextmanager
def capture_records(**settings: Any) -> Iterator[list[dict[str, Any]]]:
    """Route otel_valgen's records into a list for the duration of the block.

    Keyword arguments are those of ``otel_valgen.configure``. The list fills as records are
    exported: at each step end, after each block-less ``log_generations`` call, at ``flush()``
    and when the block exits. Counters start from zero and stay readable with
    ``otel_valgen.stats()`` after the block.
    """
    exporter = CapturingExporter()
    _process.reset_for_testing()
    emitter = _process.install_for_testing(resolve_settings(**settings), exporter)
    try:
        yield exporter.records
    finally:
        emitter.flush(5.0)
        _process.reset_for_testing(keep_stats=True)
