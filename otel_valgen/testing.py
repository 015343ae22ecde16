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
from typing import Any, overload

from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter

from otel_valgen import _process
from otel_valgen._settings import resolve_settings

__all__ = ["CapturedRecords", "capture_records", "record_to_dict"]


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


class CapturedRecords(Sequence[dict[str, Any]]):
    """The records the SDK's in-memory exporter holds so far, each as ``record_to_dict`` shows it."""

    def __init__(self, exporter: InMemoryLogRecordExporter) -> None:
        self._exporter = exporter

    def _records(self) -> list[dict[str, Any]]:
        return [record_to_dict(record) for record in self._exporter.get_finished_logs()]

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        return self._records()[index]

    def __len__(self) -> int:
        return len(self._exporter.get_finished_logs())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._records())

    def __eq__(self, other: object) -> bool:
        return list(self) == other if isinstance(other, list) else NotImplemented

    __hash__ = None  # type: ignore[assignment]


@contextmanager
def capture_records(**settings: Any) -> Iterator[CapturedRecords]:
    """Route otel_valgen's records into memory for the duration of the block.

    Keyword arguments are those of ``otel_valgen.configure``. The records appear as they are
    exported: at each step end, after each block-less ``log_generations`` call, at ``flush()``
    and when the block exits (the SDK's ``InMemoryLogRecordExporter`` holds them). Counters start
    from zero and stay readable with ``otel_valgen.stats()`` after the block. What was
    configured before the block is configured again after it (with fresh counters kept).
    """
    previous = _process.current_emitter()
    exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated
    _process.reset_for_testing()
    emitter = _process.install_for_testing(resolve_settings(**settings), exporter)
    try:
        yield CapturedRecords(exporter)
    finally:
        emitter.flush(5.0)
        _process.reset_for_testing(keep_stats=True)
        if previous is not None:
            _process.install(previous.settings)
