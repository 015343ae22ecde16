"""The embedded sink writes, byte for byte, the lines of the OTel OTLP-JSON file exporter."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.json.file._log_exporter import FileLogExporter
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

import otel_valgen as vg
from otel_valgen import _sink


def _records(
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


def _traced() -> Any:
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


@pytest.mark.parametrize("body", [*VALUES, {"input": "q", "output": "a"}, {1: "int key", None: "none key"}])
def test_each_kind_of_value_is_encoded_as_the_library_does(body: Any) -> None:
    """Every value the SDK hands over, as body and as attribute, gives the library's bytes."""
    attributes = {f"a{index}": value for index, value in enumerate(VALUES) if value is not None}
    batch = _records(
        [
            {
                "timestamp": 1_700_000_000_000_000_001,
                "observed_timestamp": 1_700_000_000_000_000_002,
                "context": _traced(),
                "severity_number": SeverityNumber.INFO,
                "severity_text": "INFO",
                "body": body,
                "attributes": attributes,
                "event_name": "valgen.generation",
            }
        ]
    )
    assert _sink._direct(batch) == _sink.library_line(batch)


def test_sparse_records_scopes_and_resources_group_as_the_library_does() -> None:
    """Missing fields are left out, and records group by resource then scope in order of appearance."""
    plain = _records([{"body": "only a body"}, {}, {"attributes": {"k": 1}, "severity_number": SeverityNumber.WARN}])
    versioned = _records(
        [{"body": "x", "event_name": "e"}],
        resource=Resource({"service.name": "other", "n": 3}, schema_url="https://schema/r"),
        scope=("scope", "1.2", "https://schema/s"),
    )
    bare = _records([{"body": "y"}], resource=Resource({}))
    batch = [plain[0], versioned[0], plain[1], bare[0], plain[2]]
    assert _sink._direct(batch) == _sink.library_line(batch)
    assert _sink._direct([]) is None
    assert _sink.library_line([]) is None


def test_unusual_values_fall_back_to_the_library() -> None:
    """A value the direct encoding does not take (bytes, a subclass) leaves the batch to the library."""

    class Text(str):
        pass

    for value in (b"raw bytes", bytearray(b"ab"), Text("sub"), 3.5 + 0j):
        batch = _records([{"body": value, "attributes": {"k": "v"}}])
        with pytest.raises(Exception):  # noqa: B017, PT011 (any refusal sends the batch to the library)
            _sink._direct(batch)
        try:
            expected = _sink.library_line(batch)
        except Exception:  # the library refuses it too: the exporter then fails the batch, as before
            continue
        assert _sink.encode_line(batch) == expected


def test_the_sink_file_is_the_file_exporters_file(tmp_path: Path) -> None:
    """A step's records written by the sink, and the same batches by FileLogExporter: the same bytes."""
    batches: list[list[ReadableLogRecord]] = []
    write = _sink.SinkFileExporter.export

    def keep(self: _sink.SinkFileExporter, batch: Sequence[ReadableLogRecord]) -> Any:
        batches.append(list(batch))
        return write(self, batch)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_sink.SinkFileExporter, "export", keep)
        vg.configure(run_id="sink", count=4, directory=str(tmp_path / "sink"), sample_by="data_source", extremes=1)
        with vg.validation(step=3, source="trainer"):
            vg.log_generations(
                [f"prompt {i} «é»" for i in range(40)],
                [[{"role": "assistant", "content": f"answer {i}"}] if i % 3 else f'answer {i}\t"q"' for i in range(40)],
                [i / 7 if i % 5 else math.nan for i in range(40)],
                ground_truths=[str(i) for i in range(40)],
                data_sources=["gsm8k", "math"] * 20,
                extra={"acc": [i % 2 for i in range(40)], "pred": [[i, "x"] for i in range(40)]},
                response_lengths=[512] * 40,
                truncated=[i % 4 == 0 for i in range(40)],
            )
        vg.shutdown()
    assert sum(len(batch) for batch in batches) > 10
    (written,) = (tmp_path / "sink").glob("*.jsonl")
    reference = FileLogExporter(tmp_path / "reference.jsonl")
    for batch in batches:
        reference.export(batch)
    reference.shutdown()
    assert written.read_bytes() == (tmp_path / "reference.jsonl").read_bytes()
