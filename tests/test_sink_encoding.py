"""The embedded sink writes, byte for byte, the lines of the OTel OTLP-JSON file exporter."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.json.file._log_exporter import FileLogExporter
from opentelemetry.sdk._logs import ReadableLogRecord

import otel_valgen as vg
from otel_valgen import _sink
from tests.support.sdk_records import VALUES, full_record, sdk_records, sparse_batch


@pytest.mark.parametrize("body", [*VALUES, {"input": "q", "output": "a"}, {1: "int key", None: "none key"}])
def test_each_kind_of_value_is_encoded_as_the_library_does(body: Any) -> None:
    """Every value the SDK hands over, as body and as attribute, gives the library's bytes."""
    attributes = {f"a{index}": value for index, value in enumerate(VALUES) if value is not None}
    batch = full_record(body, attributes)
    assert _sink._direct(batch) == _sink.library_line(batch)


def test_sparse_records_scopes_and_resources_group_as_the_library_does() -> None:
    """Missing fields are left out, and records group by resource then scope in order of appearance."""
    batch = sparse_batch()
    assert _sink._direct(batch) == _sink.library_line(batch)
    assert _sink._direct([]) is None
    assert _sink.library_line([]) is None


def test_many_attribute_names_encode_as_the_library_does_and_stay_bounded() -> None:
    """More distinct attribute names than the sink keeps the JSON of: the same line, a bounded table."""
    names = _sink._KEY_HEADS_MAX + 100
    batch = full_record({f"key.{index}": index for index in range(names)}, {"k": "v"})  # a body is not limited
    assert _sink._direct(batch) == _sink.library_line(batch)
    assert len(_sink._KEY_HEADS) == _sink._KEY_HEADS_MAX


def test_unusual_values_fall_back_to_the_library() -> None:
    """A value the direct encoding does not take (bytes, a subclass) leaves the batch to the library."""

    class Text(str):
        pass

    for value in (b"raw bytes", bytearray(b"ab"), Text("sub"), 3.5 + 0j):
        batch = sdk_records([{"body": value, "attributes": {"k": "v"}}])
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
