"""The OTLP exporters' request, built in place, is the library's ``encode_logs`` request, byte for byte."""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from opentelemetry.exporter.otlp.proto.common._internal import _encode_value
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.sdk._logs import ReadableLogRecord

import otel_valgen as vg
from otel_valgen import _otlp_request, contract, tokens
from otel_valgen._otlp_request import InPlaceHttpExporter, export_request
from tests.conftest import OtlpHttpReceiver
from tests.support.sdk_records import VALUES, full_record, sparse_batch


def _library(batch: Sequence[ReadableLogRecord]) -> bytes | type[BaseException]:
    """The library's request bytes, or the type of what it raised."""
    try:
        return encode_logs(batch).SerializeToString()
    except Exception as error:
        return type(error)


def _ours(batch: Sequence[ReadableLogRecord]) -> bytes | type[BaseException]:
    try:
        return export_request(batch).SerializeToString()
    except Exception as error:
        return type(error)


def _encodable(value: Any) -> bool:
    """Whether the library encodes the value (it refuses ints beyond 64 bits and lone surrogates)."""
    try:
        _encode_value(value).SerializeToString()
    except Exception:
        return False
    return True


# Every kind of value as an attribute, all taken by the library: the in-place request is built whole.
ATTRIBUTES = {f"a{index}": value for index, value in enumerate(VALUES) if value is not None and _encodable(value)}
ATTRIBUTES["packed"] = {"version": 1, "ids": b"\x78\x01", "nested": [{"k": b""}, ()]}


@pytest.mark.parametrize(
    "body", [*VALUES, b"\x00\xffraw", {"input": "q", "output": "a"}, {1: "int key", None: "none key"}]
)
def test_each_kind_of_value_is_encoded_as_the_library_does(body: Any) -> None:
    """Every value the SDK hands over, as body and as attribute, gives the library's bytes (or its refusal)."""
    batch = full_record(body, ATTRIBUTES)
    if _encodable(body):
        assert _otlp_request._in_place(batch).SerializeToString() == _library(batch)
    assert _ours(batch) == _library(batch)
    assert len(ATTRIBUTES) > 20


def test_sparse_records_scopes_and_resources_group_as_the_library_does() -> None:
    """Missing fields are left out, and records group by resource then scope in order of appearance."""
    batch = sparse_batch()
    assert _ours(batch) == _library(batch)
    assert _ours([]) == _library([])


def test_unusual_values_fall_back_to_the_library() -> None:
    """A value the in-place encoding does not take leaves the batch to the library, whatever it makes of it."""

    class Text(str):
        pass

    unusual = (bytearray(b"ab"), Text("sub"), 3.5 + 0j, np.float32(0.5), types.MappingProxyType({"k": 1}), 2**64)
    for value in unusual:
        as_body = full_record(value, {"k": "v"})  # the SDK hands a body over as it is
        with pytest.raises((_otlp_request._Unusual, ValueError, TypeError)):
            _otlp_request._in_place(as_body)
        assert _ours(as_body) == _library(as_body), repr(value)
        as_attribute = full_record("body", {"k": "v", "odd": value})  # after the SDK's cleaning of attributes
        assert _ours(as_attribute) == _library(as_attribute), repr(value)


def test_a_rollout_step_reaches_the_endpoint_as_the_library_encodes_it(
    otlp_http: OtlpHttpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept rollouts with conversations and per-token columns: each request received is the library's."""
    handed: list[list[ReadableLogRecord]] = []
    export = InPlaceHttpExporter.export

    def keep(self: InPlaceHttpExporter, batch: Sequence[ReadableLogRecord]) -> Any:
        handed.append(list(batch))
        return export(self, batch)

    monkeypatch.setattr(InPlaceHttpExporter, "export", keep)
    vg.configure(run_id="wire", rollout_count=2, endpoint=otlp_http.endpoint)
    rng = np.random.default_rng(7)
    prompts = [[{"role": "user", "content": f"question {i // 4} «é»"}] for i in range(16)]
    responses = [
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "calc", "arguments": '{"x": 2}'}}],
            },
            {"role": "tool", "content": f"{i}"},
            {"role": "assistant", "content": f"so {i}"},
        ]
        for i in range(16)
    ]
    columns = {
        tokens.IDS: rng.integers(0, 1000, (16, 24)),
        tokens.ROLLOUT: rng.normal(-1.0, 0.5, (16, 24)),
        tokens.TRAINER: rng.normal(-1.0, 0.5, (16, 24)),
        tokens.MODEL: rng.integers(0, 2, (16, 24)).astype(bool),
    }
    vg.log_rollouts(prompts, responses, [float(i % 2) for i in range(16)], step=1, tokens=columns)
    vg.shutdown()
    records = [record.log_record for batch in handed for record in batch]
    kept = [record for record in records if record.event_name == contract.EVENT_GENERATION]
    assert len(kept) == 8  # the 4 responses of each of the 2 kept prompts
    assert all(
        contract.TOKENS in record.attributes and record.attributes[contract.GEN_AI_OUTPUT_MESSAGES] for record in kept
    )  # type: ignore[operator,index]
    assert otlp_http.requests == [encode_logs(batch) for batch in handed]
