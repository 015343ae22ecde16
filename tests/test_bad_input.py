"""Bad input from the training loop becomes valid records, with counted, logged repairs."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen._sanitize import TRUNCATION_MARKER, clean_score, clean_step, clean_text
from otel_valgen.testing import capture_records
from tests.support.require import require_module


def _one(records: list[dict[str, Any]]) -> dict[str, Any]:
    (record,) = [r for r in records if r["event_name"] == contract.EVENT_GENERATION]
    return record


def test_non_utf8_bytes_are_replaced_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    """Undecodable bytes become U+FFFD; the count is on the record and in stats()."""
    with capture_records(run_id="r", count=4) as records, vg.validation(step=1):
        vg.log_generations([b"caf\xe9 \xff"], [b"ok"], [1.0])
    record = _one(records)
    assert record["body"]["input"] == "caf\ufffd \ufffd"
    assert record["attributes"][contract.REPLACED_CHARS] == 2
    assert vg.stats()["replaced_chars"] == 2
    assert "replaced by U+FFFD" in caplog.text


def test_lone_surrogates_are_replaced() -> None:
    """Strings with lone surrogates (e.g. from surrogateescape) are made valid."""
    with capture_records(run_id="r", count=4) as records, vg.validation(step=1):
        vg.log_generations(["a\udcff"], ["b\ud800c"], [1.0])
    record = _one(records)
    assert record["body"] == {"input": "a\ufffd", "output": "b\ufffdc"}
    assert record["attributes"][contract.REPLACED_CHARS] == 2


def test_huge_output_is_truncated_with_marker_and_original_length(caplog: pytest.LogCaptureFixture) -> None:
    """Fields over the limit lose their middle, cut at character boundaries; the original size is kept."""
    huge = "a" + "é" * 50_000  # 100,001 UTF-8 bytes, 50,001 characters: both cuts fall inside an "é"
    with capture_records(run_id="r", count=4, max_field_bytes=1002) as records, vg.validation(step=1):
        vg.log_generations(["q"], [huge], [1.0])
    record = _one(records)
    output = record["body"]["output"]
    # 1002 bytes - the marker's 34 = 968: a 484-byte head would split an "é" (483 kept), the tail's 485 too (484)
    marker = TRUNCATION_MARKER.format(omitted=50_001 - 242 - 242)
    assert output == "a" + "é" * 241 + marker + "é" * 242  # each split "é" is left out, not replaced
    assert len(output.encode("utf-8")) <= 1002
    assert contract.REPLACED_CHARS not in record["attributes"]
    assert record["attributes"][contract.OUTPUT_LENGTH] == 100_001
    assert vg.stats()["truncated_fields"] == 1
    assert "truncated" in caplog.text


def test_a_field_of_exactly_max_field_bytes_is_sent_whole() -> None:
    """The limit is inclusive: a text of exactly max_field_bytes UTF-8 bytes is neither cut nor counted."""
    exact = "é" * 500  # 1,000 UTF-8 bytes
    with capture_records(run_id="r", count=4, max_field_bytes=1000) as records, vg.validation(step=1):
        vg.log_generations(["q"], [exact], [1.0])
    record = _one(records)
    assert record["body"]["output"] == exact
    assert contract.OUTPUT_LENGTH not in record["attributes"]
    assert vg.stats().get("truncated_fields", 0) == 0
    assert clean_text(exact + "x", 1000).original_length == 1001


def test_a_replacement_character_already_in_byte_input_is_not_a_repair() -> None:
    """Only undecodable bytes count as replaced; a U+FFFD the bytes already encode is kept and not counted."""
    cleaned = clean_text("ok \ufffd ".encode() + b"\xff", 1000)
    assert (cleaned.text, cleaned.replaced_chars) == ("ok \ufffd \ufffd", 1)
    with capture_records(run_id="r", count=4) as records, vg.validation(step=1):
        vg.log_generations(["\ufffd".encode()], [b"fine"], [1.0])
    assert contract.REPLACED_CHARS not in _one(records)["attributes"]
    assert vg.stats().get("replaced_chars", 0) == 0


def test_default_field_limit_is_64_kib() -> None:
    """Without configuration a field is cut to 64 KiB, its end kept."""
    cleaned = clean_text("x" * 70_000 + "end", vg.configure(run_id="r").max_field_bytes)  # type: ignore[union-attr]
    assert len(cleaned.text.encode()) == 64 * 1024
    assert cleaned.text.startswith("xxx")
    assert cleaned.text.endswith("xxxend")
    assert cleaned.original_length == 70_003


@pytest.mark.parametrize(
    ("score", "expected", "invalid"),
    [
        (float("nan"), None, "nan"),
        (float("inf"), None, "inf"),
        (-math.inf, None, "-inf"),
        (None, None, None),
        ("not a number", None, "not_a_number"),
        (1e308, 1e308, None),
        (np.float32(0.25), 0.25, None),
        (np.int64(3), 3.0, None),
        (np.array(0.5), 0.5, None),
        (np.float64("nan"), None, "nan"),
        (True, 1.0, None),
    ],
)
def test_scores_become_finite_floats_or_are_omitted_with_a_reason(score: Any, expected: Any, invalid: Any) -> None:
    """NaN/inf/non-numbers are sent without a score and with valgen.score_invalid."""
    with capture_records(run_id="r", count=4) as records, vg.validation(step=1):
        vg.log_generations(["q"], ["a"], [score])
    attributes = _one(records)["attributes"]
    assert attributes.get(contract.SCORE) == expected
    assert attributes.get(contract.SCORE_INVALID) == invalid
    assert vg.stats().get("invalid_scores", 0) == (1 if invalid else 0)


def test_torch_scalars_and_tensors_are_accepted() -> None:
    """Torch scalars, 0-d tensors and a score tensor are converted like numpy's."""
    torch = require_module("torch", "torch (pyproject dev extra) is not installed")
    with capture_records(run_id="r", count=10) as records, vg.validation(step=torch.tensor(4)):
        vg.log_generations(["a", "b"], ["x", "y"], torch.tensor([0.5, float("nan")]))
        vg.log_generations(["c"], ["z"], [torch.tensor(2.0, dtype=torch.bfloat16)])
    generations = {r["body"]["input"]: r["attributes"] for r in records if r["event_name"] == contract.EVENT_GENERATION}
    assert generations["a"][contract.SCORE] == 0.5
    assert generations["b"][contract.SCORE_INVALID] == "nan"
    assert generations["c"][contract.SCORE] == 2.0
    assert all(a[contract.STEP] == 4 for a in generations.values())


def test_numpy_columns_and_steps_are_accepted() -> None:
    """Numpy arrays as columns and numpy ints as steps work like lists and ints."""
    with capture_records(run_id="r", count=10) as records:
        vg.log_generations(np.array(["a", "b"]), np.array(["x", "y"]), np.array([1.0, 2.0]), step=np.int64(7))
        vg.end_step(np.int64(7))  # type: ignore[arg-type]
    steps = {r["attributes"][contract.STEP] for r in records}
    assert steps == {7}
    assert len(records) == 4  # start, two generations, end


@pytest.mark.parametrize(
    ("raw", "step"),
    [(3, 3), (np.int32(5), 5), (4.0, 4), ("12", 12), (None, None), (True, None), (2.5, None), ("x", None)],
)
def test_step_coercion(raw: Any, step: int | None) -> None:
    """Steps are ints; integral floats, numpy ints and digit strings are accepted."""
    assert clean_step(raw) == step


def test_missing_fields_become_empty_strings() -> None:
    """None texts are sent as empty strings; None ground truth is omitted."""
    with capture_records(run_id="r", count=4) as records, vg.validation(step=1):
        vg.log_generations([None], [None], [None], ground_truths=[None])
    record = _one(records)
    assert record["body"] == {"input": "", "output": ""}
    assert contract.SCORE not in record["attributes"]


def test_every_warning_kind_is_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    """A flood of bad values logs only the first few warnings of each kind, but counts all."""
    with (
        caplog.at_level(logging.WARNING, "otel_valgen"),
        capture_records(run_id="r", count=2000) as _,
        vg.validation(step=1),
    ):
        vg.log_generations([f"q{i}" for i in range(1500)], ["a"] * 1500, [float("nan")] * 1500)
    assert vg.stats()["invalid_scores"] == 1500
    assert 5 <= caplog.text.count("invalid_score #") <= 7


texts = st.one_of(st.text(), st.binary(max_size=64), st.none(), st.integers(), st.floats())
scores = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.none(), st.integers(-(2**70), 2**70), st.text(max_size=5)
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.lists(st.tuples(texts, texts, scores, texts), min_size=0, max_size=20))
def test_arbitrary_input_never_raises_and_every_generation_is_accounted(data: list[tuple[Any, Any, Any, Any]]) -> None:
    """Whatever the values, the call returns and seen == emitted + dropped for the step."""
    with capture_records(run_id="r", count=100, presample=False) as records, vg.validation(step=1):
        vg.log_generations(
            [d[0] for d in data], [d[1] for d in data], [d[2] for d in data], ground_truths=[d[3] for d in data]
        )
    end = next(r for r in records if r["event_name"] == contract.EVENT_VALIDATION_END)["attributes"]
    assert end[contract.SEEN] == len(data)
    assert end[contract.EMITTED] + end[contract.DROPPED] == len(data)
    for record in records:
        if record["event_name"] == contract.EVENT_GENERATION:
            for value in record["body"].values():
                value.encode("utf-8")  # valid Unicode, always


def test_clean_score_handles_objects_without_float() -> None:
    """Objects that are not numbers are invalid, never an exception."""
    assert clean_score(object()).invalid == "not_a_number"
    assert clean_score([1, 2]).invalid == "not_a_number"
