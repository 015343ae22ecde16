"""The embedded sink's files and the ``otel-valgen show`` command that reads them."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import zstandard
from click.testing import CliRunner

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.cli.main import main
from otel_valgen.reader import Generation, ReadError, read_paths
from otel_valgen.sampling import SortKey, bottom_k, sample_key, split_sample_id, untagged


def _emit(directory: Path, run_id: str = "run-a", steps: int = 2, n: int = 40, k: int = 5) -> None:
    vg.configure(run_id=run_id, count=k, directory=str(directory), seed=42)
    for step in range(1, steps + 1):
        with vg.validation(step=step, source="trainer"):
            vg.log_generations(
                [f"prompt {i}" for i in range(n)],
                [f"answer {i} at {step}" for i in range(n)],
                [float(i) for i in range(n)],
                sample_ids=[f"uid-{i}" for i in range(n)],
            )
    vg.shutdown()


def _unexpected(error: ReadError) -> None:
    raise AssertionError(error)


def test_embedded_sink_writes_collector_file_exporter_json(tmp_path: Path) -> None:
    """Each line is an OTLP/JSON ExportLogsServiceRequest, as the collector's file exporter writes."""
    _emit(tmp_path)
    files = list(tmp_path.glob("valgen-*.jsonl"))
    assert len(files) == 1
    line = json.loads(files[0].read_text().splitlines()[0])
    log = line["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    assert log["eventName"] == contract.EVENT_VALIDATION_START  # a block announces itself first
    assert len(log["traceId"]) == 32
    assert log["severityNumber"] == 9
    step = next(a for a in log["attributes"] if a["key"] == contract.STEP)
    assert step["value"] == {"intValue": "1"}


def test_show_json_prints_bottom_k_per_step_in_key_order(tmp_path: Path) -> None:
    """`show --format json` prints one object per (run, step) with the documented fields."""
    _emit(tmp_path)
    result = CliRunner().invoke(main, ["show", str(tmp_path), "--format", "json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(o["run_id"], o["step"]) for o in lines] == [("run-a", 1), ("run-a", 2)]
    expected = [
        sid
        for _, sid in bottom_k(
            ((SortKey.of(sample_key(42, f"uid-{i}/0"), f"uid-{i}/0"), f"uid-{i}/0") for i in range(40)), 5
        )
    ]
    for obj in lines:
        assert obj["seen"] == 40
        assert obj["kept"] == 5
        assert [untagged(g["sample_id"]) for g in obj["generations"]] == expected
        assert set(obj["generations"][0]) == {
            "sample_id",
            "sample_key",
            "input",
            "output",
            "score",
            "ground_truth",
            "data_source",
            "source",
            "slots",
            "extra",
            "input_messages",
            "output_messages",
            "response_length",
            "truncated",
        }
        assert obj["generations"][0]["slots"] is None, "no extremes asked: no slots"
        assert obj["generations"][0]["output_messages"] is None, "a text output has no messages"


def test_show_filters_run_and_step_and_reads_zstd(tmp_path: Path) -> None:
    """--run/--step filter; a .zst file of the same lines reads the same."""
    _emit(tmp_path / "a", run_id="run-a")
    _emit(tmp_path / "b", run_id="run-b")
    source = next((tmp_path / "b").glob("*.jsonl"))
    compressed = tmp_path / "b" / "copy.jsonl.zst"
    compressed.write_bytes(zstandard.ZstdCompressor().compress(source.read_bytes()))
    source.unlink()
    result = CliRunner().invoke(main, ["show", str(tmp_path), "--run", "run-b", "--step", "2", "--format", "json"])
    assert result.exit_code == 0, result.output
    (obj,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert (obj["run_id"], obj["step"], obj["kept"]) == ("run-b", 2, 5)


def test_bad_lines_are_reported_with_file_and_line_and_the_rest_is_read(tmp_path: Path) -> None:
    """A broken line names its file and line on stderr, exit code 1, good lines still shown."""
    _emit(tmp_path)
    path = next(tmp_path.glob("*.jsonl"))
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    result = CliRunner().invoke(main, ["show", str(path), "--format", "csv"])
    assert result.exit_code == 1
    assert f"{path}:2" in result.stderr
    rows = result.stdout.strip().splitlines()
    assert rows[0].startswith("run_id,step,rank")
    assert len(rows) == 1 + 2 * 5


def test_show_table_and_nothing_found(tmp_path: Path) -> None:
    """The table format names run and step; an empty folder exits 3 with a message."""
    _emit(tmp_path)
    result = CliRunner().invoke(main, ["show", str(tmp_path)])
    assert result.exit_code == 0
    assert "run run-a · step 1 · kept 5 of 40" in result.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["show", str(empty)])
    assert result.exit_code == 3
    assert "no validation generations found" in result.stderr


def test_records_from_several_processes_merge_to_the_single_process_choice(tmp_path: Path) -> None:
    """Files written by separate emitters (presampled each) merge to the global bottom-k."""
    ids = [f"uid-{i}" for i in range(90)]
    for part in range(3):
        vg.configure(run_id="merge", count=7, directory=str(tmp_path), source=f"worker-{part}")
        with vg.validation(step=1):
            mine = ids[part::3]
            vg.log_generations(mine, ["o"] * len(mine), None, sample_ids=mine)
        vg.shutdown()
        vg._process.reset_for_testing(keep_stats=True)
    generations = [r for r in read_paths([tmp_path], print) if isinstance(r, Generation)]
    assert len(generations) == 3 * 7
    result = CliRunner().invoke(main, ["show", str(tmp_path), "--format", "json"])
    (obj,) = [json.loads(line) for line in result.stdout.splitlines()]
    expected = [
        sid for _, sid in bottom_k(((SortKey.of(sample_key(42, f"{i}/0"), f"{i}/0"), f"{i}/0") for i in ids), 7)
    ]
    assert [untagged(g["sample_id"]) for g in obj["generations"]] == expected
    assert obj["seen"] == 90


def test_mixed_counts_in_one_step_keep_the_smallest_k() -> None:
    """When records of one step ask for different k, the smallest applies, whatever the order."""
    from otel_valgen.reader import Generation as Gen
    from otel_valgen.selection import select_steps

    def gen(i: int, k: int) -> Gen:
        return Gen(run_id="r", step=1, sample_id=f"{i}/0", sample_key=None, input="", output="", sample_count=k)

    records = [gen(i, 5 if i % 2 else 3) for i in range(40)]
    forward = select_steps(records)[0]
    backward = select_steps(list(reversed(records)))[0]
    assert forward.k == backward.k == 3
    assert [g.sample_id for g in forward.generations] == [g.sample_id for g in backward.generations]


def test_a_truncated_zst_file_warns_and_keeps_the_records_before_the_cut(tmp_path: Path) -> None:
    """A .zst cut short yields the records before the cut; `show` prints them, warns, and exits 1."""
    _emit(tmp_path / "sink", steps=4, n=600, k=600)
    source = next((tmp_path / "sink").glob("*.jsonl"))
    compressed = zstandard.ZstdCompressor().compress(source.read_bytes())
    cut = tmp_path / "cut.jsonl.zst"
    cut.write_bytes(compressed[: len(compressed) * 3 // 4])
    errors: list[ReadError] = []
    records = list(read_paths([cut], errors.append))
    whole = list(read_paths([source], _unexpected))
    assert 0 < len(records) < len(whole)
    assert records == whole[: len(records)]
    assert [(e.path, e.line) for e in errors] == [(str(cut), 0)]
    result = CliRunner().invoke(main, ["show", str(cut), "--format", "json"])
    assert result.exit_code == 1, result.output
    assert f"warning: {cut}: truncated: it ends inside the zstd frame that starts at byte 0;" in result.stderr
    steps = [json.loads(line)["step"] for line in result.stdout.splitlines()]
    assert steps[:1] == [1]


def test_a_filter_that_matches_nothing_names_the_runs_and_steps_read(tmp_path: Path) -> None:
    """`show --run nope` says the filter matched nothing and which runs and steps the input holds."""
    _emit(tmp_path / "a", run_id="run-a", steps=3)
    _emit(tmp_path / "b", run_id="run-b", steps=2)
    result = CliRunner().invoke(main, ["show", str(tmp_path), "--run", "nope", "--step", "2"])
    assert result.exit_code == 3
    assert result.stderr == (
        "no validation generations match --run nope --step 2; the input holds 2 run(s) and 5 step(s): "
        "run-a (steps 1-3), run-b (steps 1-2)\n"
    )


def test_csv_has_the_ground_truth_column_the_json_has(tmp_path: Path) -> None:
    """Each CSV row carries the generation's ground truth, as `--format json` does."""
    vg.configure(run_id="truth", count=3, directory=str(tmp_path), seed=42)
    vg.log_generations(["2+2", "3+3", "4+4"], ["4", "7", "8"], [1.0, 0.0, 1.0], ground_truths=["4", "6", "8"], step=1)
    vg.shutdown()
    as_json = CliRunner().invoke(main, ["show", str(tmp_path), "--format", "json"])
    as_csv = CliRunner().invoke(main, ["show", str(tmp_path), "--format", "csv"])
    assert as_json.exit_code == as_csv.exit_code == 0, as_csv.output
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    (step,) = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [row["ground_truth"] for row in rows] == [g["ground_truth"] for g in step["generations"]]
    assert sorted(row["ground_truth"] for row in rows) == ["4", "6", "8"]


def _show_step(folder: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["show", str(folder), "--format", "json"])
    assert result.exit_code == 0, result.output
    (shown,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert isinstance(shown, dict)
    return shown


def test_two_processes_answering_the_same_prompts_keep_all_forty(tmp_path: Path) -> None:
    """Two emitters of one launch validate the same 20 prompts (k = 40): 40 of 40; files read twice change nothing."""
    prompts = [f"prompt {i}" for i in range(20)]
    for name in ("a", "b"):
        vg.configure(run_id="twice", count=40, directory=str(tmp_path / "sink"), source=name, launch_id="L")
        with vg.validation(step=1):
            vg.log_generations(prompts, [f"{name}: answer {i}" for i in range(20)], [1.0] * 20)
        vg.shutdown()
        vg._process.reset_for_testing(keep_stats=True)
    shown = _show_step(tmp_path / "sink")
    assert (shown["seen"], shown["kept"]) == (40, 40)
    assert len({g["output"] for g in shown["generations"]}) == 40
    for written in list((tmp_path / "sink").iterdir()):  # every record delivered twice
        shutil.copy(written, tmp_path / "sink" / f"again-{written.name}")
    assert _show_step(tmp_path / "sink") == shown


def test_two_sampling_passes_in_one_block_keep_all_forty(tmp_path: Path) -> None:
    """One process calls log_generations once per sampling pass over 20 prompts (k = 40): 40 of 40, ids /0 and /1."""
    prompts = [f"prompt {i}" for i in range(20)]
    vg.configure(run_id="passes", count=40, directory=str(tmp_path))
    with vg.validation(step=1):
        for sampling_pass in range(2):
            vg.log_generations(prompts, [f"pass {sampling_pass}: answer {i}" for i in range(20)], [1.0] * 20)
    vg.shutdown()
    shown = _show_step(tmp_path)
    assert (shown["seen"], shown["kept"]) == (40, 40)
    assert len({g["output"] for g in shown["generations"]}) == 40
    assert {split_sample_id(g["sample_id"])[1] for g in shown["generations"]} == {1, 2}


def test_two_processes_rolling_out_the_same_prompts_keep_every_response(tmp_path: Path) -> None:
    """Two emitters of one launch each answer the same 3 prompts twice (rollouts): each prompt keeps all 4 responses."""
    prompts = [f"prompt {i}" for i in range(3) for _ in range(2)]
    for name in ("a", "b"):
        vg.configure(run_id="grpo", rollout_count=3, directory=str(tmp_path), source=name, launch_id="L")
        vg.log_rollouts(prompts, [f"{name}: response {i}" for i in range(6)], [1.0] * 6, step=1)
        vg.shutdown()
        vg._process.reset_for_testing(keep_stats=True)
    result = CliRunner().invoke(main, ["show", str(tmp_path), "--kind", "rollout", "--format", "json"])
    assert result.exit_code == 0, result.output
    (shown,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(shown["generations"]) == 12
    assert len({g["output"] for g in shown["generations"]}) == 12


def test_validation_response_sizes_reach_json_csv_and_table(tmp_path: Path) -> None:
    """A row's response length, truncated flag, ground truth and data source (verl's rows) are in every format."""
    vg.configure(run_id="sizes", count=3, directory=str(tmp_path), seed=42)
    vg.log_generations(
        ["a", "b", "c"],
        ["x", "y", "z"],
        [1.0, 0.0, 1.0],
        step=1,
        response_lengths=[7, 512, 9],
        truncated=[False, True, False],
        ground_truths=["t-a", "t-b", "t-c"],
        data_sources=["gsm8k"] * 3,
    )
    vg.shutdown()
    as_json = CliRunner().invoke(main, ["show", str(tmp_path), "--format", "json"])
    as_csv = CliRunner().invoke(main, ["show", str(tmp_path), "--format", "csv"])
    assert as_json.exit_code == as_csv.exit_code == 0, as_csv.output
    (step,) = [json.loads(line) for line in as_json.stdout.splitlines()]
    sizes = {g["input"]: (g["response_length"], g["truncated"]) for g in step["generations"]}
    assert sizes == {"a": (7, False), "b": (512, True), "c": (9, False)}
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert list(rows[0])[-3:] == ["ground_truth", "response_length", "truncated"]
    assert {row["input"]: (int(row["response_length"]), row["truncated"]) for row in rows} == {
        "a": (7, "False"),
        "b": (512, "True"),
        "c": (9, "False"),
    }
    table = CliRunner().invoke(main, ["show", str(tmp_path)], env={"COLUMNS": "200"})
    header = next(line for line in table.stdout.splitlines() if "output" in line)
    assert "length" in header
    assert "truncated" in header
    assert "truth" in header
    assert "data source" in header
    assert "512" in table.stdout
    assert "t-b" in table.stdout
    assert "gsm8k" in table.stdout


def _roll_out(directory: Path) -> None:
    """One training step: 4 prompts x 3 responses with every rollout column; 2 prompts kept."""
    vg.configure(run_id="columns", rollout_count=2, directory=str(directory), seed=42)
    rows = [(p, r) for p in range(4) for r in range(3)]
    vg.log_rollouts(
        [f"prompt {p}" for p, _ in rows],
        [f"response {p}.{r}" for p, r in rows],
        [float(r == 0) for _, r in rows],
        step=5,
        prompt_ids=[f"q{p}" for p, _ in rows],
        advantages=[0.5 - r for _, r in rows],
        response_lengths=[10 + r for _, r in rows],
        truncated=[r == 2 for _, r in rows],
        param_versions=[4] * len(rows),
    )
    vg.shutdown()


def test_rollout_columns_reach_the_csv_and_the_table(tmp_path: Path) -> None:
    """`--kind rollout`: CSV and table carry prompt id, advantage, length, truncated, param version, as JSON does."""
    _roll_out(tmp_path)
    as_json = CliRunner().invoke(main, ["show", str(tmp_path), "--kind", "rollout", "--format", "json"])
    as_csv = CliRunner().invoke(main, ["show", str(tmp_path), "--kind", "rollout", "--format", "csv"])
    assert as_json.exit_code == as_csv.exit_code == 0, as_csv.output
    (step,) = [json.loads(line) for line in as_json.stdout.splitlines()]
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    columns = ["prompt_id", "advantage", "response_length", "truncated", "param_version"]
    assert list(rows[0])[-len(columns) :] == columns
    assert len(rows) == len(step["generations"]) == 6
    for row, generation in zip(rows, step["generations"], strict=True):
        assert row["sample_id"] == generation["sample_id"]
        assert (row["prompt_id"], float(row["advantage"]), int(row["response_length"])) == (
            generation["prompt_id"],
            generation["advantage"],
            generation["response_length"],
        )
        assert (row["truncated"], int(row["param_version"])) == (str(generation["truncated"]), 4)
    table = CliRunner().invoke(main, ["show", str(tmp_path), "--kind", "rollout"], env={"COLUMNS": "220"})
    assert table.exit_code == 0, table.output
    assert "run columns · step 5 · prompts 2 of 4 · responses 6 of 12" in table.stdout
    header = next(line for line in table.stdout.splitlines() if "advantage" in line)
    assert [name in header for name in ("prompt", "advantage", "length", "truncated", "param")] == [True] * 5
    kept = {g["prompt_id"] for g in step["generations"]}
    assert all(prompt in table.stdout for prompt in kept)
    assert "-1.5" in table.stdout, "the third response's advantage"


def test_a_folder_of_the_other_kind_names_the_kind_to_use(tmp_path: Path) -> None:
    """Only rollouts, and `show` (validation): exit 3 naming `--kind rollout`; only validation: the reverse."""
    _roll_out(tmp_path / "rollouts")
    result = CliRunner().invoke(main, ["show", str(tmp_path / "rollouts")])
    assert result.exit_code == 3
    assert result.stderr == (
        f"no validation generations found in {tmp_path / 'rollouts'}; "
        "it holds rollout records (columns (step 5)): use --kind rollout\n"
    )
    vg._process.reset_for_testing()
    _emit(tmp_path / "validation", steps=1)
    result = CliRunner().invoke(main, ["show", str(tmp_path / "validation"), "--kind", "rollout", "--step", "1"])
    assert result.exit_code == 3
    assert result.stderr == (
        "no rollout generations match --step 1; the input holds 1 run(s) and 1 step(s): run-a (step 1); "
        "it holds validation records (run-a (step 1)): use --kind validation\n"
    )
