"""Python values as OTLP ``AnyValue`` protobufs, for tests that build requests by hand."""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList


def any_value(value: Any) -> AnyValue:  # noqa: PLR0911 (one return per OTLP value kind)
    """Encode bool, int, float, bytes, list, dict or (anything else, as) str."""
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, list):
        return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))
    if isinstance(value, dict):
        return AnyValue(
            kvlist_value=KeyValueList(values=[KeyValue(key=k, value=any_value(v)) for k, v in value.items()])
        )
    return AnyValue(string_value=str(value))
