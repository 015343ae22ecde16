"""Figures over every trajectory of a step: counted by each source, merged exactly, shown and sent as scalars.

The merge rule is shared with the collector through testdata/sampling/trajectories.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.exporter.steps import summary_scalars
from otel_valgen.partials import merge_summaries
from otel_valgen.reader import EndRecord
from otel_valgen.selection import select_steps
from otel_valgen.testing import capture_records
from tests.e2e.agentic_job import trajectory
from tests.support.process import run_show

CASES = json.loads(
    (Path(__file__).resolve().parent.parent / "testdata" / "sampling" / "trajectories.json").read_text("utf-8")
)["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_show_merges_the_end_records_figures_as_the_shared_cases_say(case: dict[str, Any]) -> None:
    """Each source's latest figures, merged (.max the largest, maps by key, numbers added), in either order."""
    ends = [
        EndRecord("r", 1, e["source"], e["instance"], e["seen"], e["emitted"], trajectories=e.get("trajectories"))
        for e in case["end_records"]
    ]
    for order in (ends, ends[::-1]):
        (step,) = select_steps(order)
        assert step.trajectories == case["expected"]


def test_merged_parts_give_the_figures_one_sampler_would_have() -> None:
    """Two samplers' summaries, each with one source's figures, merge to the step's figures."""
    (case,) = [c for c in CASES if c["name"] == "two_sources_add_up_and_max"]
    parts = [
        {
            contract.RUN_ID: "r",
            contract.STEP: 1,
            contract.SAMPLER: f"s{i}",
            contract.SOURCE_FIGURES: [
                {
                    "source": f"{e['source']}@{e['instance']}",
                    "announced": True,
                    "ended": True,
                    "seen": e["seen"],
                    "emitted": 0,
                    contract.FIELD_TRAJECTORIES: e["trajectories"],
                }
            ],
        }
        for i, e in enumerate(case["end_records"])
    ]
    assert merge_summaries(parts, [])[contract.TRAJECTORIES] == case["expected"]


def _log_step(tmp_path: Path, count: int) -> list[tuple[Any, Any, float]]:
    rows = [trajectory(i) for i in range(count)]
    rows[0][1].pop()  # trajectory 0 stops on a tool result: the turn limit
    rows[1][1][1]["is_error"] = True  # trajectory 1's first tool call failed
    vg.configure(run_id="figures", count=4, directory=str(tmp_path), endpoint="")
    with vg.validation(step=7):
        for start in range(0, count, 25):
            batch = rows[start : start + 25]
            vg.log_generations(
                [r[0] for r in batch],
                [r[1] for r in batch],
                [r[2] for r in batch],
                truncated=[start + i == 2 for i in range(len(batch))],  # trajectory 2: the length limit
            )
    vg.shutdown()
    return rows


def test_every_trajectory_counts_not_only_the_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """100 trajectories, 4 kept: the end record counts all 100; show gives the figures and the trackers the scalars."""
    monkeypatch.setenv("COLUMNS", "200")  # show's table in a terminal wide enough for its caption
    _log_step(tmp_path, 100)
    # Independently: each trajectory has 3 assistant turns and 2 calc calls; trajectory 0 lost its last answer.
    expected = {
        "count": 100,
        "turns.sum": 299,
        "turns.max": 3,
        "tool_calls.sum": 200,
        "tool_calls.by_name": {"calc": 200},
        "tool_errors": 1,
        "turn_limit": 1,
        "length_limit": 1,
        "turns.mean": 2.99,
        "tool_calls.mean": 2.0,
        "turn_limit.share": 0.01,
        "length_limit.share": 0.01,
    }
    (shown,) = [json.loads(line) for line in run_show(tmp_path, "json").splitlines()]
    assert shown["kept"] == 4
    assert shown["trajectories"] == expected
    table = " ".join(run_show(tmp_path, "table").split())
    assert "100 trajectories · turns 2.99 mean, 3 max · tool calls 2.00 mean (calc 200) · tool errors 1" in table
    scalars = summary_scalars({contract.TRAJECTORIES: expected})
    assert scalars["trajectories/turns_mean"] == 2.99
    assert scalars["trajectories/tool_calls/calc"] == 200
    assert scalars["trajectories/turn_limit_share"] == 0.01


def test_text_outputs_send_no_trajectory_figures() -> None:
    """A step of text outputs has no valgen.trajectories on its end record."""
    with capture_records(run_id="plain", count=2) as captured:
        vg.log_generations(["q"], ["a"], step=1)
    (end,) = [r for r in captured if r["event_name"] == contract.EVENT_VALIDATION_END]
    assert contract.TRAJECTORIES not in end["attributes"]


def test_a_step_split_by_data_source_gives_each_its_figures() -> None:
    """With k per data source, the end record's figures hold each data source's own, over all its trajectories."""
    rows = [trajectory(i) for i in range(30)]
    sources = ["gsm8k" if i % 3 else "math" for i in range(30)]
    rows[3][1].pop()  # a math trajectory stops on a tool result
    with capture_records(run_id="split", count=2, sample_by="data_source") as captured, vg.validation(step=1):
        vg.log_generations([r[0] for r in rows], [r[1] for r in rows], data_sources=sources)
    (end,) = [r for r in captured if r["event_name"] == contract.EVENT_VALIDATION_END]
    figures = end["attributes"][contract.TRAJECTORIES]
    per_source = figures["by_data_source"]
    assert (figures["count"], per_source["gsm8k"]["count"], per_source["math"]["count"]) == (30, 20, 10)
    assert (per_source["math"]["turns.sum"], per_source["math"]["turn_limit"]) == (29, 1)
    assert per_source["gsm8k"]["tool_calls.by_name"] == {"calc": 40}
    (step,) = select_steps([EndRecord("split", 1, "main", "i", 30, 4, trajectories=json.loads(json.dumps(figures)))])
    assert step.trajectories is not None
    assert step.trajectories["by_data_source"]["math"]["turn_limit.share"] == 0.1
    scalars = summary_scalars({contract.TRAJECTORIES: step.trajectories})
    assert scalars["trajectories/by_data_source/math/turn_limit_share"] == 0.1
    assert scalars["trajectories/by_data_source/gsm8k/tool_calls/calc"] == 40
