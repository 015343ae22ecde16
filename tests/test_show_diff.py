"""``otel-valgen diff``: two steps of one run, or one step of two runs, on embedded-sink files."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import otel_valgen as vg
from otel_valgen.cli.diff import CSV_COLUMNS
from otel_valgen.cli.main import main


def _validate(step: int, ids: list[str], outputs: dict[str, str], scores: dict[str, float]) -> None:
    with vg.validation(step=step, source="trainer"):
        vg.log_generations(
            [f"prompt {i}" for i in ids], [outputs[i] for i in ids], [scores[i] for i in ids], sample_ids=ids
        )


def _emit(directory: Path) -> None:
    """Run diff-a: step 1 holds uid-0..5, step 2 uid-2..7 (uid-4, uid-5 answered anew, scored up); diff-b: step 1."""
    vg.configure(run_id="diff-a", count=50, directory=str(directory / "a"), seed=42)
    first = [f"uid-{i}" for i in range(6)]
    _validate(1, first, {i: f"old {i}" for i in first}, dict.fromkeys(first, 0.5))
    second = [f"uid-{i}" for i in range(2, 8)]
    changed = {"uid-4", "uid-5"}
    outputs = {i: (f"new answer {i}" if i in changed else f"old {i}") for i in second}
    _validate(2, second, outputs, {i: 1.0 if i in changed else 0.5 for i in second})
    vg.shutdown()
    vg._process.reset_for_testing(keep_stats=True)
    vg.configure(run_id="diff-b", count=50, directory=str(directory / "b"), seed=42)
    _validate(1, first, {i: f"other {i}" for i in first}, dict.fromkeys(first, 0.0))
    vg.shutdown()


def _diff(folder: Path, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["diff", str(folder), "--format", "json", *args])
    assert result.exit_code == 0, result.output
    (obj,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert isinstance(obj, dict)
    return obj


def test_two_steps_of_one_run_match_by_untagged_id(tmp_path: Path) -> None:
    """`--steps 1 2`: both/only-A/only-B by sample id without tag, changed or same, deltas B - A, a mean delta."""
    _emit(tmp_path)
    obj = _diff(tmp_path, "--steps", "1", "2", "--run", "diff-a")
    assert (obj["a"]["step"], obj["b"]["step"], obj["a"]["label"], obj["b"]["label"]) == (1, 2, "step 1", "step 2")
    assert obj["summary"] == {
        "both": 4,
        "only_a": 2,
        "only_b": 2,
        "changed": 2,
        "same": 2,
        "mean_score_delta": 0.25,
        "score_deltas": 4,
    }
    both = {row["id"]: row for row in obj["both"]}
    assert set(both) == {f"uid-{i}/0" for i in range(2, 6)}
    assert both["uid-4/0"]["a"]["output"] == "old uid-4"
    assert both["uid-4/0"]["b"]["output"] == "new answer uid-4"
    assert (both["uid-4/0"]["changed"], both["uid-4/0"]["score_delta"]) == (True, 0.5)
    assert (both["uid-4/0"]["length_delta"], both["uid-4/0"]["length_unit"]) == (
        len("new answer uid-4") - len("old uid-4"),
        "chars",
    )
    assert (both["uid-2/0"]["changed"], both["uid-2/0"]["score_delta"], both["uid-2/0"]["length_delta"]) == (
        False,
        0.0,
        0,
    )
    assert both["uid-2/0"]["a"]["sample_id"] != both["uid-2/0"]["b"]["sample_id"], "each step's part has its own tag"
    assert sorted(row["id"] for row in obj["only_a"]) == ["uid-0/0", "uid-1/0"]
    assert sorted(row["id"] for row in obj["only_b"]) == ["uid-6/0", "uid-7/0"]
    assert all(row["b"] is None for row in obj["only_a"])


def test_one_step_of_two_runs(tmp_path: Path) -> None:
    """`--runs diff-a diff-b --step 1`: every id on both sides, every output changed, scores down by 0.5."""
    _emit(tmp_path)
    obj = _diff(tmp_path, "--runs", "diff-a", "diff-b", "--step", "1")
    assert (obj["a"]["run_id"], obj["b"]["run_id"], obj["a"]["label"]) == ("diff-a", "diff-b", "run diff-a")
    assert obj["summary"]["both"] == 6
    assert (obj["summary"]["changed"], obj["summary"]["same"]) == (6, 0)
    assert obj["summary"]["mean_score_delta"] == -0.5
    assert {row["b"]["output"] for row in obj["both"]} == {f"other uid-{i}" for i in range(6)}


def test_csv_rows_and_table_summary(tmp_path: Path) -> None:
    """CSV: one row per id with its status; table: side by side, then the summary line."""
    _emit(tmp_path)
    result = CliRunner().invoke(main, ["diff", str(tmp_path / "a"), "--steps", "1", "2", "--format", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert list(rows[0]) == CSV_COLUMNS
    assert [r["status"] for r in rows] == ["both"] * 4 + ["only_a"] * 2 + ["only_b"] * 2
    assert {r["id"]: r["changed"] for r in rows if r["status"] == "both"} == {
        "uid-2/0": "false",
        "uid-3/0": "false",
        "uid-4/0": "true",
        "uid-5/0": "true",
    }
    table = CliRunner().invoke(main, ["diff", str(tmp_path / "a"), "--steps", "1", "2"], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "new answer uid-4" in table.stdout
    assert "only in step 1: 2" in table.stdout
    assert table.stdout.rstrip().endswith(
        "both 4 · only step 1 2 · only step 2 2 · changed 2 · same 2 · mean score delta +0.25 over 4"
    )


def test_rollouts_match_by_prompt_and_response_index(tmp_path: Path) -> None:
    """`--kind rollout`: the i-th response of a prompt faces the i-th at the other step; lengths in tokens."""
    vg.configure(run_id="grpo", rollout_count=5, directory=str(tmp_path), seed=42)
    for step in (1, 2):
        rows = [(p, r) for p in range(3) for r in range(2)]
        vg.log_rollouts(
            [f"prompt {p}" for p, _ in rows],
            [f"response {r} to {p}" + ("!" * step if r else "") for p, r in rows],
            [float(r == 0) * step for _, r in rows],
            step=step,
            prompt_ids=[f"p{p}" for p, _ in rows],
            response_lengths=[10 * step + r for _, r in rows],
        )
    vg.shutdown()
    obj = _diff(tmp_path, "--steps", "1", "2", "--kind", "rollout")
    assert obj["kind"] == "rollout"
    assert obj["summary"]["both"] == 6
    both = {row["id"]: row for row in obj["both"]}
    assert set(both) == {f"p{p}/{r}" for p in range(3) for r in range(2)}
    assert (both["p1/0"]["changed"], both["p1/0"]["score_delta"], both["p1/0"]["prompt_id"]) == (False, 1.0, "p1")
    assert (both["p1/1"]["changed"], both["p1/1"]["length_delta"], both["p1/1"]["length_unit"]) == (True, 10, "tokens")


def test_usage_errors_and_a_missing_side(tmp_path: Path) -> None:
    """Neither or both of --steps/--runs, --runs without --step, several runs and no --run: exit 2; no such step: 3."""
    _emit(tmp_path)
    for args in ([], ["--steps", "1", "2", "--runs", "a", "b"], ["--runs", "diff-a", "diff-b"]):
        result = CliRunner().invoke(main, ["diff", str(tmp_path), *args])
        assert result.exit_code == 2, (args, result.output)
    result = CliRunner().invoke(main, ["diff", str(tmp_path), "--steps", "1", "2"])
    assert result.exit_code == 2
    assert "diff-a, diff-b); pick one with --run" in result.stderr
    result = CliRunner().invoke(main, ["diff", str(tmp_path), "--steps", "1", "9", "--run", "diff-a"])
    assert result.exit_code == 3
    assert result.stderr == (
        "no validation generations of run diff-a step 9; the input holds diff-a (steps 1-2), diff-b (step 1)\n"
    )
