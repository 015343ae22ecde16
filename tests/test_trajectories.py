"""Figures over every trajectory of a step: counted by each source, merged exactly, shown and sent as scalars.

The merge rule is shared with the collector through testdata/sampling/trajectories.json.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import otel_valgen as vg
from otel_valgen import contract, trajectories
from otel_valgen.exporter.steps import summary_scalars
from otel_valgen.partials import merge_summaries
from otel_valgen.reader import EndRecord
from otel_valgen.selection import select_steps
from otel_valgen.testing import capture_records
from tests.e2e.agentic_job import trajectory
from tests.support.partial_summaries import one_sampler_per_source
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


@pytest.mark.parametrize("name", ["two_sources_add_up_and_max", "rewards_min_max_and_sums", "rewards_per_data_source"])
def test_merged_parts_give_the_figures_one_sampler_would_have(name: str) -> None:
    """Two samplers' summaries, each with one source's figures (rewards too), merge to the step's figures."""
    (case,) = [c for c in CASES if c["name"] == name]
    parts = one_sampler_per_source(case["end_records"], contract.FIELD_TRAJECTORIES, "trajectories")
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


# -- verl's per-trajectory rewards: tool_rewards and turn_scores ----------------------------------------------

REWARD_CASES = [c for c in CASES if c["name"].startswith("rewards_")]


def test_the_reward_cases_merge_min_max_and_sums_as_computed_by_hand() -> None:
    """The shared case, checked apart from the generator: .min the smallest, .max the largest, the rest added."""
    (case,) = [c for c in REWARD_CASES if c["name"] == "rewards_min_max_and_sums"]
    expected = case["expected"]
    # a: tool rewards 1, .5, -.5, 0, .25, .25 over 3 trajectories; b: -1, -.25 over 2; c: none
    assert {key: value for key, value in expected.items() if key.startswith("tool_rewards.")} == {
        "tool_rewards.trajectories": 5,
        "tool_rewards.count": 8,
        "tool_rewards.sum": 0.25,
        "tool_rewards.min": -1.0,
        "tool_rewards.max": 1.0,
        "tool_rewards.mean": 0.25 / 8,
        "tool_rewards.per_trajectory": 0.25 / 5,
    }
    # only a has turn scores: trajectories (0, 1, .5) and (1,), so the last scores .5 and 1
    derived = ("turn_scores.mean", "turn_scores.per_trajectory", "turn_scores.last.mean")
    assert [expected[key] for key in derived] == [2.5 / 4, 2.5 / 2, 1.5 / 2]


def _rewards_of(figures: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in figures.items() if key.startswith(("tool_rewards.", "turn_scores."))}


def test_tool_rewards_and_turn_scores_over_every_trajectory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """100 trajectories, 4 kept: the reward figures count all 100, empty and None rows left out, not zeros."""
    monkeypatch.setenv("COLUMNS", "250")
    rows = [trajectory(i) for i in range(100)]
    # even rows: two tool rewards; odd rows: none ([]); row 1: None (an agent loop without the field)
    tool_rewards: list[Any] = [[1.0, -0.5] if i % 2 == 0 else [] for i in range(100)]
    tool_rewards[1] = None
    # rows 0-9 were scored turn by turn (0.5, then 1.0); the others have no turn scores
    turn_scores = [[0.5, 1.0] if i < 10 else None for i in range(100)]
    vg.configure(run_id="rewards", count=4, directory=str(tmp_path), endpoint="")
    with vg.validation(step=3):
        for start in range(0, 100, 25):  # four calls: the figures add up across them
            vg.log_generations(
                [r[0] for r in rows[start : start + 25]],
                [r[1] for r in rows[start : start + 25]],
                [r[2] for r in rows[start : start + 25]],
                tool_rewards=tool_rewards[start : start + 25],
                turn_scores=turn_scores[start : start + 25],
            )
    vg.shutdown()
    assert vg.stats().get("trajectory_rewards_invalid", 0) == 0
    expected = {
        "tool_rewards.trajectories": 50,
        "tool_rewards.count": 100,
        "tool_rewards.sum": 25.0,
        "tool_rewards.min": -0.5,
        "tool_rewards.max": 1.0,
        "tool_rewards.mean": 0.25,
        "tool_rewards.per_trajectory": 0.5,
        "turn_scores.trajectories": 10,
        "turn_scores.count": 20,
        "turn_scores.sum": 15.0,
        "turn_scores.min": 0.5,
        "turn_scores.max": 1.0,
        "turn_scores.last.sum": 10.0,
        "turn_scores.mean": 0.75,
        "turn_scores.per_trajectory": 1.5,
        "turn_scores.last.mean": 1.0,
    }
    (shown,) = [json.loads(line) for line in run_show(tmp_path, "json").splitlines()]
    assert (shown["kept"], shown["trajectories"]["count"]) == (4, 100)
    assert _rewards_of(shown["trajectories"]) == expected
    table = " ".join(run_show(tmp_path, "table").split())
    assert "tool rewards 0.25 mean [-0.5, 1], 0.50 per trajectory (50 trajectories)" in table
    assert "turn scores 0.75 mean [0.5, 1], 1.50 per trajectory, last 1.00 (10 trajectories)" in table
    scalars = summary_scalars({contract.TRAJECTORIES: shown["trajectories"]})
    assert scalars["trajectories/tool_rewards_mean"] == 0.25
    assert scalars["trajectories/tool_rewards_min"] == -0.5
    assert scalars["trajectories/tool_rewards_per_trajectory"] == 0.5
    assert scalars["trajectories/turn_scores_last_mean"] == 1.0
    assert scalars["trajectories/turn_scores_per_trajectory"] == 1.5


def test_no_reward_values_send_no_reward_keys() -> None:
    """Empty lists and None (verl's single-turn loop, a loop without the field) leave the figures out, not zero."""
    rows = [trajectory(i) for i in range(4)]
    with capture_records(run_id="empty", count=2) as captured:
        vg.log_generations(
            [r[0] for r in rows],
            [r[1] for r in rows],
            step=1,
            tool_rewards=[[], None, [], []],
            turn_scores=[[], [], None, []],
        )
    (end,) = [r for r in captured if r["event_name"] == contract.EVENT_VALIDATION_END]
    figures = end["attributes"][contract.TRAJECTORIES]
    assert figures["count"] == 4
    assert _rewards_of(figures) == {}
    assert (
        trajectories.scalars(trajectories.summary(figures))
        .keys()
        .isdisjoint({"trajectories/tool_rewards_mean", "trajectories/turn_scores_mean"})
    )
    assert "rewards" not in (trajectories.caption(trajectories.summary(figures)) or "")


def test_bad_reward_values_are_left_out_counted_and_warned_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    """NaN, inf, None, texts, maps and lists inside the list are left out; numpy values are read as numbers."""
    rows = [trajectory(i) for i in range(9)]
    tool_rewards: list[Any] = [
        [math.nan, 1.0],  # nan left out
        [None, 2.0],  # None left out
        ["x", 0.5],  # a text left out
        [[1.0], np.float32(0.25)],  # a list in the list left out; numpy scalar read
        np.array([0.5, 0.5]),  # an array: two values
        0.75,  # a bare number: one value
        "text",  # a row that is a text: left out
        {"reward": 1.0},  # a row that is a map: left out
        [math.inf, np.int64(-2)],  # inf left out; numpy int read
    ]
    with (
        caplog.at_level(logging.WARNING, logger="otel_valgen"),
        capture_records(run_id="bad", count=2) as captured,
    ):
        accepted = vg.log_generations([r[0] for r in rows], [r[1] for r in rows], step=1, tool_rewards=tool_rewards)
        assert accepted == 9
        assert vg.stats()["trajectory_rewards_invalid"] == 7
    (end,) = [r for r in captured if r["event_name"] == contract.EVENT_VALIDATION_END]
    figures = end["attributes"][contract.TRAJECTORIES]
    assert _rewards_of(figures) == {
        "tool_rewards.trajectories": 7,
        "tool_rewards.count": 8,
        "tool_rewards.sum": 1.0 + 2.0 + 0.5 + 0.25 + 0.5 + 0.5 + 0.75 - 2.0,
        "tool_rewards.min": -2.0,
        "tool_rewards.max": 2.0,
    }
    (warning,) = [r.getMessage() for r in caplog.records if "left out of the trajectory figures" in r.getMessage()]
    assert warning.startswith("otel_valgen: 7 tool_rewards/turn_scores value(s) left out")
    assert "(inf: 1, nan: 1, none: 1, not_a_number: 4)" in warning


def test_a_failure_while_reading_rewards_costs_the_figures_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A value that raises on reading loses the call's figures, never its generations."""

    class Broken:
        def tolist(self) -> list[float]:
            raise RuntimeError("boom")

    rows = [trajectory(i) for i in range(2)]
    with capture_records(run_id="broken", count=2) as captured:
        assert vg.log_generations([r[0] for r in rows], [r[1] for r in rows], step=1, tool_rewards=[Broken(), [1.0]])
    (end,) = [r for r in captured if r["event_name"] == contract.EVENT_VALIDATION_END]
    assert _rewards_of(end["attributes"][contract.TRAJECTORIES])["tool_rewards.count"] == 1
    assert vg.stats()["trajectory_rewards_invalid"] == 1


def test_rollouts_carry_the_reward_figures_per_data_source() -> None:
    """log_rollouts takes the columns too; with k per data source each gets its own reward figures."""
    rows = [trajectory(i) for i in range(6)]
    sources = ["chat" if i < 4 else "math" for i in range(6)]
    with capture_records(run_id="roll", rollout_count=1, sample_by="data_source") as captured:
        vg.log_rollouts(
            [r[0] for r in rows],
            [r[1] for r in rows],
            [r[2] for r in rows],
            step=2,
            data_sources=sources,
            turn_scores=[[0.0, 1.0]] * 4 + [[], [-1.0]],
            tool_rewards=[[0.5]] * 6,
        )
    (end,) = [r for r in captured if r["event_name"] == contract.EVENT_VALIDATION_END]
    figures = end["attributes"][contract.TRAJECTORIES]
    assert (figures["turn_scores.trajectories"], figures["turn_scores.min"], figures["turn_scores.last.sum"]) == (
        5,
        -1.0,
        3.0,
    )
    per_source = figures["by_data_source"]
    assert per_source["chat"]["turn_scores.sum"] == 4.0
    assert per_source["math"]["turn_scores.trajectories"] == 1
    assert per_source["math"]["tool_rewards.count"] == 2
