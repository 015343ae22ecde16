"""Score statistics over everything seen: ``valgen.score.count`` / ``valgen.score.sum`` on end records.

Each source's end record counts the valid scores of every generation it saw (not only the kept
ones), cumulatively like ``valgen.seen``; ``otel-valgen show`` adds them up per step from the
end records by the rule the collector's summary follows. The cases of that rule are shared with
the Go processor's tests (testdata/sampling/score_stats.json).
"""

from __future__ import annotations

import json
import logging
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.cli.main import main
from otel_valgen.reader import EndRecord, Summary, records_from_request
from otel_valgen.selection import select_steps
from otel_valgen.testing import capture_records
from tests.conftest import REPO
from tests.support.require import require_module

CASES = json.loads((REPO / "testdata" / "sampling" / "score_stats.json").read_text(encoding="utf-8"))["cases"]


def _ends(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r["attributes"] for r in records if r["event_name"] == contract.EVENT_VALIDATION_END]


def _otlp_end(record: dict[str, Any]) -> dict[str, Any]:
    """One shared case's end record as an OTLP/JSON request, as an SDK sends it."""
    attributes: list[dict[str, Any]] = [
        {"key": contract.RUN_ID, "value": {"stringValue": "r"}},
        {"key": contract.STEP, "value": {"intValue": "1"}},
        {"key": contract.SOURCE, "value": {"stringValue": record["source"]}},
        {"key": contract.SEEN, "value": {"intValue": str(record["seen"])}},
        {"key": contract.EMITTED, "value": {"intValue": str(record["emitted"])}},
    ]
    if "score_count" in record:
        attributes.append({"key": contract.SCORE_COUNT, "value": {"intValue": str(record["score_count"])}})
        attributes.append({"key": contract.SCORE_SUM, "value": {"doubleValue": record["score_sum"]}})
    resource = {"attributes": [{"key": "service.instance.id", "value": {"stringValue": record["instance"]}}]}
    log = {"eventName": contract.EVENT_VALIDATION_END, "attributes": attributes}
    return {"resourceLogs": [{"resource": resource, "scopeLogs": [{"logRecords": [log]}]}]}


@pytest.mark.parametrize("case", CASES, ids=lambda case: case["name"])
def test_a_step_adds_up_its_sources_end_records_by_the_shared_rule(case: dict[str, Any]) -> None:
    """`show`'s selection over the shared end records, in order and reversed, gives the shared figures."""
    ends = [r for record in case["end_records"] for r in records_from_request(_otlp_end(record))]
    assert all(isinstance(end, EndRecord) for end in ends)
    expected = case["expected"]
    for order in (ends, ends[::-1]):
        (step,) = select_steps(order)
        assert step.score_count == expected["score_count"]
        assert step.score_sum == expected["score_sum"]
        assert step.score_mean == expected["score_mean"]


def test_the_shared_cases_cover_the_rule() -> None:
    """The vectors hold the cases that tell the rule apart from near misses."""
    names = {case["name"] for case in CASES}
    assert {
        "cumulative_parts_keep_the_largest_count",
        "negative_scores_pair_count_and_sum",
        "sources_without_statistics",
        "sum_is_exact",
        "sum_overflows",
        "no_valid_score",
    } <= names


@pytest.mark.parametrize("presample", [True, False])
def test_the_end_record_counts_every_generation_seen_not_only_the_kept(presample: bool) -> None:
    """With k = 4 of 300: the end record's count and sum are those of all 300 valid scores, over several calls."""
    rng = random.Random(5)
    batches = [[rng.uniform(-1, 1) for _ in range(n)] for n in (100, 1, 150, 49)]
    with capture_records(run_id="r", count=4, presample=presample) as records, vg.validation(step=1):
        for b, scores in enumerate(batches):
            vg.log_generations([f"q{b}-{i}" for i in range(len(scores))], ["a"] * len(scores), scores)
    (end,) = _ends(records)
    everything = [score for scores in batches for score in scores]
    assert end[contract.SEEN] == 300
    assert end[contract.SCORE_COUNT] == 300
    assert end[contract.SCORE_SUM] == pytest.approx(math.fsum(everything), rel=1e-12, abs=1e-12)
    kept = [r["attributes"][contract.SCORE] for r in records if r["event_name"] == contract.EVENT_GENERATION]
    if presample:
        assert len(kept) == 4
        assert end[contract.SCORE_SUM] != pytest.approx(math.fsum(kept))


def test_invalid_scores_are_left_out_of_the_statistics() -> None:
    """None, NaN, inf and non-numbers are not counted; numeric strings, numpy scalars and bools are, as on records."""
    scores: list[Any] = [1.0, None, math.nan, math.inf, "x", "2.5", np.float32(0.5), True, 3, -math.inf]
    n = len(scores)
    with capture_records(run_id="r", count=n) as records, vg.validation(step=1):
        vg.log_generations([f"q{i}" for i in range(n)], ["a"] * n, scores)
    (end,) = _ends(records)
    sent = [r["attributes"][contract.SCORE] for r in records if contract.SCORE in r["attributes"]]
    assert sorted(sent) == [0.5, 1.0, 1.0, 2.5, 3.0]  # what the records carry
    assert (end[contract.SCORE_COUNT], end[contract.SCORE_SUM]) == (5, 8.0)


def test_array_and_tensor_columns_are_counted() -> None:
    """A numpy array or a torch tensor of scores (with a NaN) is counted like a list."""
    torch = require_module("torch", "torch (pyproject dev extra) is not installed")
    with capture_records(run_id="r", count=2) as records, vg.validation(step=1):
        vg.log_generations(["a", "b", "c"], ["x"] * 3, np.array([0.25, np.nan, 0.5]))
        vg.log_generations(["d", "e"], ["x"] * 2, torch.tensor([1.0, 2.0]))
    (end,) = _ends(records)
    assert (end[contract.SCORE_COUNT], end[contract.SCORE_SUM]) == (4, 3.75)


class _Unconvertible:
    """A score-like object whose conversion to float fails with an unexpected exception."""

    def __float__(self) -> float:
        raise RuntimeError("no float here")


def test_a_score_that_float_cannot_convert_is_invalid_not_an_error() -> None:
    """Scores whose float() raises (a multi-element tensor, any odd object) are invalid; the call goes on."""
    torch = require_module("torch", "torch (pyproject dev extra) is not installed")
    with capture_records(run_id="r", count=4) as records, vg.validation(step=1):
        assert vg.log_generations(["a", "b", "c"], ["x"] * 3, [torch.tensor([1.0, 2.0]), 0.5, _Unconvertible()]) == 3
    (end,) = _ends(records)
    assert (end[contract.SCORE_COUNT], end[contract.SCORE_SUM]) == (1, 0.5)
    invalid = [
        r["attributes"].get(contract.SCORE_INVALID) for r in records if r["event_name"] == contract.EVENT_GENERATION
    ]
    assert sorted(invalid, key=str) == [None, "not_a_number", "not_a_number"]
    assert vg.stats().get("internal_errors", 0) == 0


def test_no_scores_give_a_count_of_zero() -> None:
    """Calls without scores: the end record says 0 valid scores (not: unknown)."""
    with capture_records(run_id="r", count=2) as records, vg.validation(step=1):
        vg.log_generations(["a", "b"], ["x", "y"])
    (end,) = _ends(records)
    assert (end[contract.SCORE_COUNT], end[contract.SCORE_SUM]) == (0, 0.0)


def test_block_less_calls_carry_cumulative_statistics() -> None:
    """Each block-less call's end record counts the step's scores so far in this process."""
    with capture_records(run_id="r", count=2) as records:
        vg.log_generations(["a", "b"], ["x", "y"], [1.0, 2.0], step=4)
        vg.log_generations(["c"], ["z"], [math.nan], step=4)
        vg.log_generations(["d"], ["w"], [-0.5], step=4)
    ends = _ends(records)
    assert [(e[contract.SCORE_COUNT], e[contract.SCORE_SUM]) for e in ends] == [(2, 3.0), (2, 3.0), (3, 2.5)]


def test_a_dropped_call_counts_no_score() -> None:
    """Scores of a call dropped for unequal lengths are not counted; its generations are seen and dropped."""
    with capture_records(run_id="r", count=2) as records, vg.validation(step=1):
        vg.log_generations(["a", "b"], ["x"], [1.0, 1.0])
        vg.log_generations(["c"], ["z"], [0.25])
    (end,) = _ends(records)
    assert (end[contract.SEEN], end[contract.DROPPED], end[contract.SCORE_COUNT], end[contract.SCORE_SUM]) == (
        3,
        2,
        1,
        0.25,
    )


def test_a_sum_beyond_a_double_sends_no_statistics(caplog: pytest.LogCaptureFixture) -> None:
    """Scores adding up past the largest double: the end record carries neither count nor sum, with a warning."""
    with (
        caplog.at_level(logging.WARNING, "otel_valgen"),
        capture_records(run_id="r", count=2) as records,
        vg.validation(step=1),
    ):
        vg.log_generations(["a", "b"], ["x", "y"], [1e308, 1e308])
    (end,) = _ends(records)
    assert {contract.SCORE_COUNT, contract.SCORE_SUM}.isdisjoint(end)
    assert "score_sum_overflow" in caplog.text


def test_the_reader_and_summary_expose_the_statistics() -> None:
    """EndRecord.score_count/score_sum, and Summary.score_count/score_sum/score_mean from its attributes."""
    (end,) = records_from_request(
        _otlp_end({"source": "t", "instance": "i", "seen": 3, "emitted": 1, "score_count": 2, "score_sum": 1.5})
    )
    assert isinstance(end, EndRecord)
    assert (end.score_count, end.score_sum) == (2, 1.5)
    (old,) = records_from_request(_otlp_end({"source": "t", "instance": "i", "seen": 3, "emitted": 1}))
    assert isinstance(old, EndRecord)
    assert (old.score_count, old.score_sum) == (None, None)
    summary = Summary("r", 1, {contract.SCORE_COUNT: 4, contract.SCORE_SUM: 1.0, contract.SCORE_MEAN: 0.25})
    assert (summary.score_count, summary.score_sum, summary.score_mean) == (4, 1.0, 0.25)
    assert (Summary("r", 1, {}).score_count, Summary("r", 1, {}).score_mean) == (None, None)


def test_show_reports_the_statistics_of_every_step(tmp_path: Path) -> None:
    """`show --format json` has score_count, score_sum and score_mean per step, over all generations seen."""
    vg.configure(run_id="run-s", count=2, directory=str(tmp_path), seed=1)
    with vg.validation(step=1, source="trainer"):
        vg.log_generations([f"q{i}" for i in range(10)], ["a"] * 10, [float(i) for i in range(10)])
    with vg.validation(step=1, source="rollouter"):
        vg.log_generations(["r1", "r2"], ["a"] * 2, [None, 5.0])
    vg.log_generations(["p"], ["a"], [None], step=2)
    vg.shutdown()
    result = CliRunner().invoke(main, ["show", str(tmp_path), "--format", "json"])
    assert result.exit_code == 0, result.output
    steps = {obj["step"]: obj for obj in map(json.loads, result.stdout.splitlines())}
    assert (steps[1]["score_count"], steps[1]["score_sum"], steps[1]["score_mean"]) == (11, 50.0, 50.0 / 11)
    assert (steps[2]["score_count"], steps[2]["score_sum"], steps[2]["score_mean"]) == (0, 0.0, None)
    table = " ".join(CliRunner().invoke(main, ["show", str(tmp_path)]).stdout.split())  # titles wrap
    assert "step 1 · kept 2 of 12 · mean score 4.55 over 11" in table
    assert table.count("mean score") == 1  # step 2 has no valid score
