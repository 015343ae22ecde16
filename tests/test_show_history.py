"""``otel-valgen show --prompt ID``: one prompt's kept rows at every step, on embedded-sink files."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.cli.history import CSV_COLUMNS
from otel_valgen.cli.main import main
from otel_valgen.sampling import SortKey, sample_key, untagged

RUN_ID, SEED, STEPS, PROMPTS, RESPONSES, ROLLOUT_K = "history", 42, (10, 20, 30), 6, 2, 2


def _emit(directory: Path) -> None:
    """Three steps: every prompt validated (k = 50, all kept), and rolled out twice (2 of 4 prompts kept)."""
    vg.configure(run_id=RUN_ID, count=50, rollout_count=ROLLOUT_K, directory=str(directory), seed=SEED)
    ids = [f"uid-{i}" for i in range(PROMPTS)]
    for step in STEPS:
        with vg.validation(step=step, source="trainer"):
            vg.log_generations(
                [f"prompt {i}" for i in range(PROMPTS)],
                [f"answer {i} at {step}" for i in range(PROMPTS)],
                [i * step / 100 for i in range(PROMPTS)],
                sample_ids=ids,
            )
        rows = [(p, r) for p in range(4) for r in range(RESPONSES)]
        vg.log_rollouts(
            [f"prompt {p}" for p, _ in rows],
            [f"response {r} to {p} at {step}" for p, r in rows],
            [float(r == 0) for _, r in rows],
            step=step,
            prompt_ids=[f"uid-{p}" for p, _ in rows],
            advantages=[0.5 - r for _, r in rows],
            response_lengths=[100 * r + step for _, r in rows],
        )
    vg.shutdown()


def _kept_rollout_prompts() -> list[str]:
    """The prompts the rollout group view keeps at every step: the ROLLOUT_K smallest prompt keys of uid-0..3."""
    return sorted((f"uid-{p}" for p in range(4)), key=lambda p: SortKey.of(sample_key(SEED, p), p))[:ROLLOUT_K]


def _show(folder: Path, *args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(main, ["show", str(folder), "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_a_validation_prompt_is_listed_at_every_step_in_step_order(tmp_path: Path) -> None:
    """`--prompt uid-2 --kind validation`: one object per step, its row's output, score and length in characters."""
    _emit(tmp_path)
    shown = _show(tmp_path, "--prompt", "uid-2", "--kind", "validation")
    assert [(s["run_id"], s["step"], s["kind"]) for s in shown] == [(RUN_ID, step, "validation") for step in STEPS]
    for step, obj in zip(STEPS, shown, strict=True):
        (row,) = obj["generations"]
        assert untagged(row["sample_id"]) == "uid-2/0"
        assert (row["output"], row["score"]) == (f"answer 2 at {step}", 2 * step / 100)
        assert (row["length"], row["length_unit"]) == (len(f"answer 2 at {step}"), "chars")
        assert row["input"] == "prompt 2"


def test_the_id_may_carry_its_index_and_tag(tmp_path: Path) -> None:
    """`uid-2/0` matches at every step; the full `uid-2/0@<tag>` only at the step whose part drew that tag."""
    _emit(tmp_path)
    every = _show(tmp_path, "--prompt", "uid-2/0", "--kind", "validation")
    assert [s["step"] for s in every] == list(STEPS)
    tagged = every[1]["generations"][0]["sample_id"]
    assert "@" in tagged
    (only,) = _show(tmp_path, "--prompt", tagged, "--kind", "validation")
    assert only["step"] == STEPS[1]
    assert [g["sample_id"] for g in only["generations"]] == [tagged]


def test_without_kind_both_streams_are_searched_and_labelled(tmp_path: Path) -> None:
    """A prompt both validated and rolled out: per step its validation row, then its responses (lengths in tokens)."""
    _emit(tmp_path)
    prompt = _kept_rollout_prompts()[0]
    shown = _show(tmp_path, "--prompt", prompt)
    assert [(s["step"], s["kind"]) for s in shown] == [
        (step, kind) for step in STEPS for kind in ("validation", "rollout")
    ]
    for obj in shown:
        if obj["kind"] == contract.KIND_ROLLOUT:
            assert sorted(untagged(g["sample_id"]) for g in obj["generations"]) == [f"{prompt}/{r}" for r in range(2)]
            for g in obj["generations"]:
                response = int(untagged(g["sample_id"]).rsplit("/", 1)[1])
                assert g["prompt_id"] == prompt
                assert (g["length"], g["length_unit"]) == (100 * response + obj["step"], "tokens")
                assert g["response_length"] == g["length"]
                assert g["advantage"] == 0.5 - response
        else:
            assert [g["output"] for g in obj["generations"]] == [f"answer {prompt[4:]} at {obj['step']}"]


def test_csv_and_table_carry_the_same_rows(tmp_path: Path) -> None:
    """The CSV has one row per kept row with kind, score and length; the table names the steps kept of read."""
    _emit(tmp_path)
    prompt = _kept_rollout_prompts()[0]
    result = CliRunner().invoke(main, ["show", str(tmp_path), "--prompt", prompt, "--format", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert list(rows[0]) == CSV_COLUMNS
    assert [(int(r["step"]), r["kind"]) for r in rows] == [
        (step, kind) for step in STEPS for kind in ("validation", "rollout", "rollout")[: 1 + RESPONSES]
    ]
    assert {r["length_unit"] for r in rows if r["kind"] == "rollout"} == {"tokens"}
    table = CliRunner().invoke(main, ["show", str(tmp_path), "--prompt", prompt], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert f"prompt {prompt} · run {RUN_ID}: validation 3 of 3 step(s), rollout 3 of 3 step(s)" in table.stdout


def test_a_prompt_never_kept_says_so_and_exits_3(tmp_path: Path) -> None:
    """An unknown id, and a rolled-out prompt the group view never kept: one line naming the steps read, exit 3."""
    _emit(tmp_path)
    result = CliRunner().invoke(main, ["show", str(tmp_path), "--prompt", "uid-99"])
    assert result.exit_code == 3
    assert result.stdout == ""
    assert result.stderr == (
        f"prompt uid-99 was never kept: run {RUN_ID}: validation 0 of 3 step(s), rollout 0 of 3 step(s)\n"
    )
    dropped = sorted({f"uid-{p}" for p in range(4)} - set(_kept_rollout_prompts()))[0]
    result = CliRunner().invoke(main, ["show", str(tmp_path), "--prompt", dropped, "--kind", "rollout"])
    assert result.exit_code == 3
    assert result.stderr == f"prompt {dropped} was never kept: run {RUN_ID}: rollout 0 of 3 step(s)\n"


def test_an_empty_input_with_prompt_finds_nothing(tmp_path: Path) -> None:
    """`--prompt` over a folder with no records: nothing found, exit 3, as `show`."""
    result = CliRunner().invoke(main, ["show", str(tmp_path), "--prompt", "uid-1"])
    assert result.exit_code == 3
    assert "no validation or rollout generations found" in result.stderr
