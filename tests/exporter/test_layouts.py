"""Both table layouts written by the real wandb SDK (offline) and read back from the run files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_valgen import contract
from otel_valgen.exporter.push import push_paths
from otel_valgen.exporter.service import ExporterService
from otel_valgen.exporter.tables import LAYOUTS, ROLLOUT_COLUMNS, ROW_COLUMNS
from otel_valgen.otlp_json import to_otlp_json

from .conftest import (
    PARAM_VERSION,
    ROLLOUT_KEY,
    both_kinds,
    generation,
    request,
    rollout_request,
    rollout_rows,
    serve_requests,
    step_request,
    summary,
    wandb_backend,
)
from .wandb_files import read_run

KEY = "val/generations"


ROW_FIELDS_SENT = ("data_source", "ground_truth")  # the row fields conftest's generations carry


def verl_columns(width: int, fields: tuple[str, ...] = ROW_FIELDS_SENT) -> list[str]:
    """The verl layout's columns: step, input_i, output_i, score_i per sample, then <field>_i per row field."""
    columns = ["step"] + [f"{name}_{i}" for i in range(1, width + 1) for name in ("input", "output", "score")]
    return columns + [f"{name}_{i}" for name in fields for i in range(1, width + 1)]


def run_service(layout: str, *requests: object, state_dir: Path | None = None) -> ExporterService:
    """Feed ``requests`` to an offline wandb service, wait until written, stop it."""
    return serve_requests([wandb_backend(layout, state_dir)], *requests, state_dir=state_dir)


def test_verl_layout_one_accumulating_row_per_step(wandb_dir: Path) -> None:
    """Verl layout: each step logs the wide table with one row per step so far, at valgen/step."""
    run_service("verl", step_request("run-v", 10, 4), step_request("run-v", 20, 4))
    files = read_run(wandb_dir, "run-v")
    tables = files.tables(KEY)
    assert [step for step, _ in tables] == [10, 20]
    for _, table in tables:
        assert table["columns"] == verl_columns(4)
    assert [row[0] for row in tables[0][1]["data"]] == [10]
    last = tables[1][1]["data"]
    assert [row[0] for row in last] == [10, 20]
    assert last[1][1:4] == ["q0", "a0@20", 0.5]
    assert last[1][10:13] == ["q3", "a3@20", 0.5]
    assert last[1][13:] == ["gsm8k"] * 4 + ["t0", "t1", "t2", "t3"]  # each row's data source and ground truth
    assert files.scalars(f"{KEY}/seen") == [(10, 10), (20, 10)]
    assert files.scalars(f"{KEY}/kept") == [(10, 4), (20, 4)]
    steps = {m.glob_name: m.step_metric for m in files.metrics if m.glob_name}
    assert steps == {f"{KEY}*": "valgen/step", "train/generations*": "valgen/step"}
    assert files.run_ids == {"run-v"}


def test_rows_layout_k_rows_per_step_in_rank_order(wandb_dir: Path) -> None:
    """Rows layout: an incremental table gets the step's k rows, ordered by valgen.rank."""
    logs = [generation("run-r", 5, i, rank=4 - i) for i in range(4)]
    first = request(*logs, summary("run-r", 5, 4), resource={contract.WANDB_PROJECT: "p"})
    run_service("rows", first, step_request("run-r", 6, 4))
    tables = read_run(wandb_dir, "run-r").tables(KEY)
    assert [step for step, _ in tables] == [5, 6]
    for step, table in tables:
        assert table["columns"] == [*ROW_COLUMNS, "attempt"]
        assert len(table["data"]) == 4
        assert {row[0] for row in table["data"]} == {step}
    assert [row[1] for row in tables[0][1]["data"]] == ["s003", "s002", "s001", "s000"]
    row = tables[1][1]["data"][0]
    assert row == [6, "s000", "gsm8k", "trainer", "q0", "a0@6", "t0", 0.5, None, None, ""]


def test_records_name_the_wandb_run(wandb_dir: Path) -> None:
    """The wandb.run_id resource attribute picks the run; valgen.run_id is only the fallback."""
    logs = [generation("valgen-id", 1, i) for i in range(2)]
    item = request(*logs, summary("valgen-id", 1, 2), resource={contract.WANDB_RUN_ID: "wandb-id"})
    run_service("rows", item)
    assert len(read_run(wandb_dir, "wandb-id").tables(KEY)) == 1
    assert read_run(wandb_dir, "valgen-id").folders == []


def _write_otlp_json(path: Path, *requests: object) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for item in requests:
            handle.write(json.dumps(to_otlp_json(item)) + "\n")


def test_push_backfills_bottom_k_and_twice_adds_nothing(wandb_dir: Path, tmp_path: Path) -> None:
    """Push writes each step's bottom-k from OTLP-JSON files; a second push with the ledger adds nothing."""
    logs = [generation("run-p", 3, i) for i in range(6)]
    _write_otlp_json(tmp_path / "a.jsonl", request(*logs[:3]), request(*logs[3:]))
    report = push_paths([tmp_path / "a.jsonl"], [wandb_backend("rows", tmp_path / "state")], count=4)
    assert (report.steps, report.rows, report.errors) == (1, 4, [])
    again = push_paths([tmp_path], [wandb_backend("rows", tmp_path / "state")], count=4)
    assert (again.steps, again.rows, again.steps_skipped) == (0, 0, 1)
    (table,) = [t for _, t in read_run(wandb_dir, "run-p").tables(KEY)]
    assert sorted(row[1] for row in table["data"]) == ["s000", "s001", "s002", "s003"]


def test_push_rows_layout_writes_and_counts_only_the_rows_not_written_before(wandb_dir: Path, tmp_path: Path) -> None:
    """Rows layout: a later push whose bottom-k takes in new samples adds those rows only, and counts them."""
    logs = [generation("run-pr", 3, i) for i in range(6)]  # keys ascend with i
    _write_otlp_json(tmp_path / "late.jsonl", request(*logs[3:]))
    first = push_paths([tmp_path / "late.jsonl"], [wandb_backend("rows", tmp_path / "state")], count=4)
    assert (first.steps, first.rows) == (1, 3)
    _write_otlp_json(tmp_path / "early.jsonl", request(*logs[:3]))
    files = [tmp_path / "late.jsonl", tmp_path / "early.jsonl"]
    again = push_paths(files, [wandb_backend("rows", tmp_path / "state")], count=4)
    assert (again.steps, again.rows, again.errors) == (1, 3, [])  # s003 of the bottom-4 was written already
    # (The two pushes may log to one offline run folder, named to the second: the report is what is checked.)
    third = push_paths(files, [wandb_backend("rows", tmp_path / "state")], count=4)
    assert (third.steps, third.rows, third.steps_skipped) == (0, 0, 1)


def test_push_verl_layout(wandb_dir: Path, tmp_path: Path) -> None:
    """Push in the verl layout writes one row per step, accumulating."""
    _write_otlp_json(tmp_path / "a.jsonl", step_request("run-pv", 1, 2), step_request("run-pv", 2, 2))
    report = push_paths([tmp_path / "a.jsonl"], [wandb_backend("verl")])
    assert (report.steps, report.rows, report.errors) == (2, 2, [])
    tables = read_run(wandb_dir, "run-pv").tables(KEY)
    assert [[row[0] for row in t["data"]] for _, t in tables] == [[1], [1, 2]]


def test_push_verl_layout_twice_with_one_state_folder_writes_no_step_again(wandb_dir: Path, tmp_path: Path) -> None:
    """Verl layout: a second push with the same state folder skips every written step and logs no table."""
    _write_otlp_json(tmp_path / "a.jsonl", step_request("run-pv2", 1, 2), step_request("run-pv2", 2, 2))
    first = push_paths([tmp_path / "a.jsonl"], [wandb_backend("verl", tmp_path / "state")])
    assert (first.steps, first.rows) == (2, 2)
    again = push_paths([tmp_path / "a.jsonl"], [wandb_backend("verl", tmp_path / "state")])
    assert (again.steps, again.rows, again.steps_skipped, again.errors) == (0, 0, 2, [])
    tables = read_run(wandb_dir, "run-pv2").tables(KEY)
    assert [[row[0] for row in t["data"]] for _, t in tables] == [[1], [1, 2]]


def test_verl_table_is_as_wide_as_its_widest_row(wandb_dir: Path) -> None:
    """A step that kept fewer samples than an earlier one is padded with None; no column is lost."""
    run_service("verl", step_request("run-w", 1, 3), step_request("run-w", 2, 1))
    (_, first), (_, second) = read_run(wandb_dir, "run-w").tables(KEY)
    assert first["columns"] == second["columns"] == verl_columns(3)
    assert second["data"] == [
        [1, "q0", "a0@1", 0.5, "q1", "a1@1", 0.5, "q2", "a2@1", 0.5, *["gsm8k"] * 3, "t0", "t1", "t2"],
        [2, "q0", "a0@2", 0.5, None, None, None, None, None, None, "gsm8k", None, None, "t0", None, None],
    ]


def _attempts(run: str) -> list[object]:
    """Step 10 of ``run`` in three attempts: cut by silence, resumed and complete, retried and cut."""
    return [
        step_request(run, 10, 2, attempt="L1.1", attempt_start=1_000, closed_reason="wait", text="-old"),
        step_request(run, 10, 2, attempt="L2.1", attempt_start=2_000, text="-new"),
        step_request(run, 10, 2, attempt="L1.1", attempt_start=1_000, closed_reason="wait", text="-old"),
        step_request(run, 10, 2, attempt="L3.1", attempt_start=3_000, closed_reason="max_duration", text="-cut"),
    ]


def test_verl_layout_a_later_complete_attempt_replaces_the_steps_row(wandb_dir: Path, tmp_path: Path) -> None:
    """Verl: the step is logged again with the new attempt's row; worse attempts are never written."""
    service = run_service("verl", step_request("run-a", 5, 2), *_attempts("run-a"), state_dir=tmp_path / "state")
    stats = service.stats()["backends"]["wandb"]
    assert (stats["written_steps"], stats["unchanged_steps"]) == (3, 2)  # L3.1 is superseded, L1.1 resent
    files = read_run(wandb_dir, "run-a")
    tables = files.tables(KEY)
    assert [step for step, _ in tables] == [5, 10, 10]
    last = tables[-1][1]["data"]
    assert [row[0] for row in last] == [5, 10]
    assert last[1][1:3] == ["q0-new", "a0@10-new"]
    assert files.scalars(f"{KEY}/attempt") == [(10, "L1.1"), (10, "L2.1")]
    # a restart with the same state folder: the same records add nothing
    again = run_service("verl", *_attempts("run-a"), state_dir=tmp_path / "state")
    assert again.stats()["backends"]["wandb"]["written_steps"] == 0


def test_rows_layout_a_later_complete_attempt_adds_its_rows_with_the_attempt(wandb_dir: Path) -> None:
    """Rows: the new attempt's rows are added (attempt column); nothing is added twice."""
    run_service("rows", *_attempts("run-b"))
    tables = read_run(wandb_dir, "run-b").tables(KEY)
    rows = [row for _, table in tables for row in table["data"]]
    assert len({(row[1], row[-1]) for row in rows}) == len(rows) == 4
    assert [(row[-1], row[4]) for row in rows] == [
        ("L1.1", "q0-old"),
        ("L1.1", "q1-old"),
        ("L2.1", "q0-new"),
        ("L2.1", "q1-new"),
    ]


def test_push_writes_the_attempt_show_picks(wandb_dir: Path, tmp_path: Path) -> None:
    """Push over collector output with two attempts writes the latest complete one."""
    _write_otlp_json(tmp_path / "a.jsonl", *_attempts("run-c"))
    report = push_paths([tmp_path / "a.jsonl"], [wandb_backend("verl")])
    assert report.steps == 1
    ((_, table),) = read_run(wandb_dir, "run-c").tables(KEY)
    assert table["data"][0][1] == "q0-new"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rollouts_get_a_table_of_their_own_next_to_the_validation_table(wandb_dir: Path, layout: str) -> None:
    """A step's rollouts land in train/generations, one row per response by prompt; val/generations is as before."""
    service = run_service(layout, *both_kinds(f"run-k{layout}", 3))
    files = read_run(wandb_dir, f"run-k{layout}")
    ((step, validation),) = files.tables(KEY)
    assert step == 3
    assert validation["columns"] == (verl_columns(2) if layout == "verl" else [*ROW_COLUMNS, "attempt"])
    assert "p0/0" not in json.dumps(validation["data"])
    ((step, rollouts),) = files.tables(ROLLOUT_KEY)
    assert step == 3
    assert rollouts["columns"] == [*ROLLOUT_COLUMNS, "attempt"]
    assert rollouts["data"] == rollout_rows(3)
    assert files.scalars(f"{ROLLOUT_KEY}/kept") == [(3, 4)]
    assert files.scalars(f"{ROLLOUT_KEY}/prompts_kept") == [(3, 2)]
    assert files.scalars(f"{KEY}/kept") == [(3, 2)]
    rows = service.stats()["backends"]["wandb"]["kinds"]
    assert (rows["validation"]["rows"], rows["rollout"]["rows"]) == (1 if layout == "verl" else 2, 4)


def test_rollout_table_columns_take_extra_columns_and_the_param_version(wandb_dir: Path) -> None:
    """Extra columns follow data_source, then param_version when the records carry valgen.param_version."""
    extra = {f"{contract.EXTRA_PREFIX}acc": 1.0, PARAM_VERSION: 7}
    run_service("verl", rollout_request("run-pv", 4, **extra))
    ((_, table),) = read_run(wandb_dir, "run-pv").tables(ROLLOUT_KEY)
    assert table["columns"] == [*ROLLOUT_COLUMNS, "acc", "param_version", "attempt"]
    assert table["data"] == rollout_rows(4, extra=(1.0, 7))
