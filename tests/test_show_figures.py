"""The figures `otel-valgen show` gives of a step read from embedded-sink files.

Each test writes its files with the library as a job does, then runs `otel-valgen show` as a
process, as users run it, and reads its table and its `--format json`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.distinct import SKETCH_SIZE
from otel_valgen.reader import attributes_of
from tests.support.process import run_show

M = SKETCH_SIZE  # the sketch of distinct prompt keys: counts below m keys are exact, from m on an estimate


def _show(folder: Path, *options: str) -> str:
    """``otel-valgen show FOLDER OPTIONS`` run as ``run_show`` runs it (the installed script); its standard output."""
    script = Path(sys.executable).parent / "otel-valgen"
    shown = subprocess.run([str(script), "show", str(folder), *options], capture_output=True, text=True, check=True)
    return shown.stdout


def _words(text: str) -> str:
    """The text with its runs of white space made one space: a table's title or caption as one line."""
    return " ".join(text.split())


# Two sources (two parts of the step, each with its own sketch) log prompts p<i> for i in these ranges.
PROMPT_CASES = {
    "m - 1 distinct prompts, 1,700 logged: exact": (range(900), range(M - 1 - 800, M - 1), M - 1),
    "m distinct prompts, neither source's sketch full: an estimate": (range(600), range(M - 600, M), M),
    "1,500 distinct prompts: an estimate": (range(800), range(700, 1500), 1500),
}


@pytest.mark.parametrize(("first", "second", "distinct"), PROMPT_CASES.values(), ids=PROMPT_CASES.keys())
def test_show_says_when_the_prompts_seen_are_an_estimate(
    tmp_path: Path, first: range, second: range, distinct: int
) -> None:
    """Over embedded files, once the sources' merged sketch holds m keys, `show` calls prompts_seen an estimate.

    Below m distinct prompts (however many the sources logged between them) the title gives the
    exact count and the JSON says `prompts_seen_estimated` false; from m distinct prompts on
    (even when each source alone saw fewer) the title gives `≈N (±3%)` and the JSON says true.
    """
    folder = tmp_path / "files"
    vg.configure(run_id="prompts", rollout_count=2, directory=str(folder))
    for source, ids in (("a", first), ("b", second)):
        assert vg.log_rollouts(
            [f"question {i}" for i in ids],
            ["answer"] * len(ids),
            [1.0] * len(ids),
            step=1,
            prompt_ids=[f"p{i}" for i in ids],
            source=source,
        ) == len(ids)
    vg.flush()
    assert len(set(first) | set(second)) == distinct
    (step,) = [json.loads(line) for line in _show(folder, "--kind", "rollout", "--format", "json").splitlines()]
    title = _words(_show(folder, "--kind", "rollout"))
    responses = rf"· responses [0-9]+ of {len(first) + len(second)} ·"
    if distinct < M:
        assert (step["prompts_seen"], step["prompts_seen_estimated"]) == (distinct, False)
        assert re.search(rf"prompts 2 of {distinct} {responses}", title), title
        assert "≈" not in title
    else:
        assert step["prompts_seen_estimated"] is True
        estimate = step["prompts_seen"]
        assert abs(estimate - distinct) <= 0.15 * distinct  # 5 relative standard errors (3.1% each)
        assert re.search(rf"prompts 2 of ≈{estimate} \(±3%\) {responses}", title), title


def _one_record_requests(folder: Path) -> list[dict[str, Any]]:
    """Each record the library wrote under ``folder``, as an export request of its own (with its resource and scope)."""
    requests = []
    for path in sorted(folder.rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            for resource_logs in json.loads(line)["resourceLogs"]:
                for scope_logs in resource_logs["scopeLogs"]:
                    for record in scope_logs["logRecords"]:
                        one_scope = {**scope_logs, "logRecords": [record]}
                        requests.append({"resourceLogs": [{**resource_logs, "scopeLogs": [one_scope]}]})
    return requests


def _end_seen(request: dict[str, Any]) -> int | None:
    """The ``valgen.seen`` of an end record's request; None for any other record."""
    (record,) = request["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    if record.get("eventName") != contract.EVENT_VALIDATION_END:
        return None
    return int(attributes_of(record["attributes"])[contract.SEEN])


# Where the records go: file name -> its records in order. "newer" is the source's end record of both
# calls, "older" the one of its first call (a redelivered or late copy), "rest" every other record.
LAYOUTS = {
    "one file, the older end record after the newer": {"valgen.jsonl": ["rest", "newer", "older"]},
    "two files, the older end record in the one read last": {"a.jsonl": ["rest", "newer"], "b.jsonl": ["older"]},
    "two files, the older end record in the one read first": {"a.jsonl": ["older"], "b.jsonl": ["rest", "newer"]},
}

FIGURES = [  # the step's figures per data source: both calls' generations, each data source's one kept
    {"data_source": "a", "seen": 3, "kept": 1, "score_count": 3, "score_sum": 2.0, "score_mean": 2.0 / 3},
    {"data_source": "b", "seen": 1, "kept": 1, "score_count": 1, "score_sum": 1.0, "score_mean": 1.0},
    {"data_source": "c", "seen": 1, "kept": 1, "score_count": 1, "score_sum": 0.25, "score_mean": 0.25},
]


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_data_source_figures_come_from_each_sources_latest_end_record(
    tmp_path: Path, layout: dict[str, list[str]]
) -> None:
    """`show`'s figures per data source are each source's latest end record's (the largest `seen`), in any read order.

    One source ends the step in two block-less calls; its end records are cumulative, the first
    call's saw 2 of data source a and 1 of b, both calls' 3 of a, 1 of b and 1 of c. Read with
    the first call's end record after the second's (later in the same file, or in a file read
    after it) or before it, `show` gives the second's figures: a retried or late end record never
    rolls them back.
    """
    written = tmp_path / "written"
    vg.configure(run_id="figures", count=1, sample_by="data_source", directory=str(written))
    vg.log_generations(["q1", "q2", "q3"], ["o"] * 3, [1.0, 0.0, 1.0], step=1, data_sources=["a", "a", "b"])
    vg.log_generations(["q4", "q5"], ["o"] * 2, [1.0, 0.25], step=1, data_sources=["a", "c"])
    vg.flush()
    requests = _one_record_requests(written)
    ends = {seen: request for request in requests if (seen := _end_seen(request)) is not None}
    assert sorted(ends) == [3, 5]
    parts = {"older": [ends[3]], "newer": [ends[5]], "rest": [r for r in requests if _end_seen(r) is None]}
    shown = tmp_path / "shown"
    shown.mkdir()
    for name, contents in layout.items():
        lines = [json.dumps(request) for part in contents for request in parts[part]]
        (shown / name).write_text("\n".join(lines) + "\n", encoding="utf-8")

    (step,) = [json.loads(line) for line in run_show(shown, "json").splitlines()]
    assert (step["sample_by"], step["seen"]) == ("data_source", 5)
    assert step["data_sources"] == [pytest.approx(figures) for figures in FIGURES]
    caption = "k per data source: a kept 1 of 3, mean 0.667 · b kept 1 of 1, mean 1 · c kept 1 of 1, mean 0.25"
    assert caption in _words(run_show(shown, "table"))
