"""``otel-valgen show`` over an end record whose score statistics are invalid.

A source's end record carries its score statistics as a pair, ``valgen.score.count`` and
``valgen.score.sum``. One with only one of them, or a negative count, is invalid: the collector
drops it, and ``show`` still reads the record (its seen, emitted and dropped count) but without
statistics, so the step's score count, sum and mean are those of its other sources.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import otel_valgen as vg
from otel_valgen import contract
from tests.support.process import run_show

_SCORES: list[float | None] = [1.0, 2.0, 3.0, None]  # three valid scores, sum 6


def _judge_end(trainer_line: str, score_attributes: list[dict[str, Any]]) -> str:
    """The trainer's start and end records as another process's source that saw 2 and sent none."""
    request = json.loads(trainer_line)
    resource_logs = request["resourceLogs"][0]
    for attribute in resource_logs["resource"]["attributes"]:
        if attribute["key"] == "service.instance.id":
            attribute["value"] = {"stringValue": "judge-process"}
    scope = resource_logs["scopeLogs"][0]
    lifecycle = [
        r
        for r in scope["logRecords"]
        if r["eventName"] in (contract.EVENT_VALIDATION_START, contract.EVENT_VALIDATION_END)
    ]
    replaced = {
        contract.SOURCE: {"stringValue": "judge"},
        contract.SEEN: {"intValue": "2"},
        contract.EMITTED: {"intValue": "0"},
        contract.DROPPED: {"intValue": "0"},
    }
    for record in lifecycle:
        attributes = [
            {"key": a["key"], "value": replaced.get(a["key"], a["value"])}
            for a in record["attributes"]
            if a["key"] not in (contract.SCORE_COUNT, contract.SCORE_SUM)
        ]
        if record["eventName"] == contract.EVENT_VALIDATION_END:
            attributes += score_attributes
        record["attributes"] = attributes
    scope["logRecords"] = lifecycle
    return json.dumps(request) + "\n"


@pytest.mark.parametrize(
    "score_attributes",
    [
        [
            {"key": contract.SCORE_COUNT, "value": {"intValue": "-2"}},
            {"key": contract.SCORE_SUM, "value": {"doubleValue": 30.0}},
        ],
        [{"key": contract.SCORE_COUNT, "value": {"intValue": "2"}}],
        [{"key": contract.SCORE_SUM, "value": {"doubleValue": 30.0}}],
    ],
    ids=["negative count", "count alone", "sum alone"],
)
def test_show_reads_an_end_record_with_invalid_score_statistics_without_them(
    tmp_path: Path, score_attributes: list[dict[str, Any]]
) -> None:
    """An end record with a negative score count, or only one of count and sum, counts its generations, no scores."""
    vg.configure(run_id="r", count=2, seed=1, launch_id="L", directory=str(tmp_path), progress_interval_s=0)
    with vg.validation(step=1, source="trainer"):
        vg.log_generations([f"q{i}" for i in range(len(_SCORES))], ["a"] * len(_SCORES), _SCORES)
    vg.shutdown()
    (trainer_file,) = tmp_path.glob("*.jsonl")
    (trainer_line,) = trainer_file.read_text(encoding="utf-8").splitlines()
    (tmp_path / "judge.jsonl").write_text(_judge_end(trainer_line, score_attributes), encoding="utf-8")

    (step,) = map(json.loads, run_show(tmp_path, "json").splitlines())
    assert (step["step"], step["attempt"], step["seen"], step["kept"]) == (1, "L.1", 6, 2)  # the judge's 2 count
    assert (step["score_count"], step["score_sum"], step["score_mean"]) == (3, 6.0, 2.0)  # the trainer's alone
