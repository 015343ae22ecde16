"""What the OTel SDK hands an exporter, for the tests of our encodings against the library's."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags


def sdk_records(
    emits: Sequence[dict[str, Any]],
    resource: Resource | None = None,
    scope: tuple[str, str | None, str | None] = ("s", None, None),
) -> list[ReadableLogRecord]:
    """What the SDK hands the exporter for ``emits`` (``Logger.emit`` keyword arguments)."""
    captured = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=resource or Resource.create({"service.name": "t"}), shutdown_on_exit=False)
    provider.add_log_record_processor(SimpleLogRecordProcessor(captured))
    name, version, schema_url = scope
    logger = provider.get_logger(name, version, schema_url)
    for arguments in emits:
        logger.emit(**arguments)
    provider.shutdown()
    return list(captured.get_finished_logs())


def full_record(body: Any, attributes: dict[str, Any]) -> list[ReadableLogRecord]:
    """One record with every field the SDK hands over set: times, trace context, severity, event name."""
    return sdk_records(
        [
            {
                "timestamp": 1_700_000_000_000_000_001,
                "observed_timestamp": 1_700_000_000_000_000_002,
                "context": traced(),
                "severity_number": SeverityNumber.INFO,
                "severity_text": "INFO",
                "body": body,
                "attributes": attributes,
                "event_name": "valgen.generation",
            }
        ]
    )


def sparse_batch() -> list[ReadableLogRecord]:
    """Records missing most fields, under three resources and two scopes, interleaved."""
    plain = sdk_records([{"body": "only a body"}, {}, {"attributes": {"k": 1}, "severity_number": SeverityNumber.WARN}])
    versioned = sdk_records(
        [{"body": "x", "event_name": "e"}],
        resource=Resource({"service.name": "other", "n": 3}, schema_url="https://schema/r"),
        scope=("scope", "1.2", "https://schema/s"),
    )
    bare = sdk_records([{"body": "y"}], resource=Resource({}))
    return [plain[0], versioned[0], plain[1], bare[0], plain[2]]


def traced() -> Any:
    """A context whose span gives a record a trace id, a span id and the sampled flag."""
    span = NonRecordingSpan(SpanContext(0xABC, 0xDEF, is_remote=False, trace_flags=TraceFlags(1)))
    return trace.set_span_in_context(span)


ODD_TEXTS = ['quote " back \\ slash', "tab\tnew\nline\x00\x1f\x7f", "é ü 中文 🚀", "lone \ud800 surrogate", ""]
VALUES: list[Any] = [
    *ODD_TEXTS,
    True,
    False,
    0,
    -1,
    2**63 - 1,
    -(2**63),
    2**70,
    0.0,
    -0.0,
    1.5,
    1e300,
    5e-324,
    math.nan,
    math.inf,
    -math.inf,
    (),
    ("a", 1, 2.5, True),
    {},
    {"inner": {"deeper": [1, "x"]}, "": "empty key", "n": None},
    None,
]
"""Every kind of value the SDK hands over, with the texts and numbers encoders get wrong."""
