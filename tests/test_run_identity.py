"""User story: otel-valgen starts before the tracker (verl's order); Grafana, ``show`` and wandb name one run.

wandb runs offline here and the run id is read back from the run's own files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen import ray as vg_ray
from otel_valgen.cli.main import main
from otel_valgen.reader import Generation, read_paths
from otel_valgen.selection import select_steps
from tests.support.require import require_module

wandb = require_module("wandb")


@pytest.fixture
def wandb_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An offline WANDB_DIR; no network, no API key."""
    folder = tmp_path / "wandb-dir"
    folder.mkdir()
    for name, value in {"WANDB_MODE": "offline", "WANDB_DIR": str(folder), "WANDB_SILENT": "true"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    yield folder
    wandb.teardown()


def offline_run_ids(wandb_dir: Path) -> set[str]:
    """The ids of the offline runs under ``wandb_dir``, from their folders and ``run-<id>.wandb`` files."""
    ids = set()
    for folder in (wandb_dir / "wandb").glob("offline-run-*"):
        run_id = folder.name.rsplit("-", 1)[1]
        assert (folder / f"run-{run_id}.wandb").is_file()
        ids.add(run_id)
    return ids


def shown_run_ids(sink: Path) -> set[str]:
    """The run ids ``otel-valgen show --format json`` prints for ``sink``."""
    result = CliRunner().invoke(main, ["show", str(sink), "--format", "json"])
    assert result.exit_code == 0, result.output
    return {json.loads(line)["run_id"] for line in result.stdout.splitlines() if line.strip()}


def test_a_wandb_run_started_after_runtime_env_names_the_records(wandb_dir: Path, tmp_path: Path) -> None:
    """configure() and runtime_env() before wandb.init(): the next step carries wandb's run id, in show and resource."""
    sink = tmp_path / "sink"
    settings = vg.configure(count=4, directory=str(sink))
    assert settings is not None
    assert settings.run_id_origin == "generated"
    forwarded = vg_ray.worker_env()
    assert "OTEL_VALGEN_RUN_ID" not in forwarded  # a generated id must not override a worker's own wandb run
    assert forwarded["OTEL_VALGEN_DEFAULT_RUN_ID"] == settings.run_id

    run = wandb.init(project="valgen-identity")
    with vg.validation(step=1, source="trainer", sources_expected=1):
        vg.log_generations([f"q{i}" for i in range(6)], ["a"] * 6, [0.1 * i for i in range(6)])
    run.finish()
    vg.shutdown()

    (on_disk,) = offline_run_ids(wandb_dir)
    assert shown_run_ids(sink) == {on_disk}
    generations = [r for r in read_paths([str(sink)], lambda error: None) if isinstance(r, Generation)]
    assert len(generations) == 4
    assert {g.resource.get(contract.WANDB_RUN_ID) for g in generations} == {on_disk}
    assert {g.resource.get(contract.WANDB_PROJECT) for g in generations} == {"valgen-identity"}


def test_an_explicit_run_id_is_never_replaced_by_the_wandb_run(wandb_dir: Path, tmp_path: Path) -> None:
    """configure(run_id=...) stays the run id of every step, also after wandb.init()."""
    sink = tmp_path / "sink"
    vg.configure(run_id="mine", count=4, directory=str(sink))
    run = wandb.init(project="valgen-identity")
    vg.log_generations(["q"], ["a"], [1.0], step=1)
    vg.end_step(1)
    run.finish()
    vg.shutdown()
    assert shown_run_ids(sink) == {"mine"}


def test_an_mlflow_run_started_later_and_the_tensorboard_folder_name_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """configure() before mlflow.start_run(): the next step's resource names the MLflow run and TENSORBOARD_DIR.

    The variables that name a run without the tracker's API are forwarded to Ray workers.
    """
    mlflow = require_module("mlflow")
    monkeypatch.setenv("TENSORBOARD_DIR", "tensorboard_log/proj/exp")
    monkeypatch.setenv("CLEARML_TASK_ID", "task-from-agent")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "proj")
    sink = tmp_path / "sink"
    settings = vg.configure(count=2, directory=str(sink), run_id="job-1")
    assert settings is not None
    assert "mlflow.run_id" not in settings.resource_attributes
    forwarded = vg_ray.worker_env()
    assert forwarded["TENSORBOARD_DIR"] == "tensorboard_log/proj/exp"
    assert forwarded["CLEARML_TASK_ID"] == "task-from-agent"
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_experiment("proj")  # mlflow keeps the active experiment process-wide: not another test's
    with mlflow.start_run() as run, vg.validation(step=1, source="trainer", sources_expected=1):
        vg.log_generations(["q0", "q1", "q2"], ["a"] * 3, [0.5] * 3)
    vg.shutdown()
    generations = [r for r in read_paths([str(sink)], lambda error: None) if isinstance(r, Generation)]
    assert len(generations) == 2
    resources = {json.dumps(g.resource, sort_keys=True) for g in generations}
    (resource,) = [json.loads(item) for item in resources]
    assert resource["mlflow.run_id"] == run.info.run_id
    assert resource["mlflow.experiment_name"] == "proj"
    assert resource["tensorboard.log_dir"] == "tensorboard_log/proj/exp"
    assert resource["clearml.task_id"] == "task-from-agent"
    assert {g.run_id for g in generations} == {"job-1"}


def test_a_wandb_run_started_inside_a_block_does_not_split_the_step(wandb_dir: Path, tmp_path: Path) -> None:
    """wandb.init() while a block is open: the step stays one attempt; the next step takes the wandb run's id."""
    sink = tmp_path / "sink"
    vg.configure(count=8, directory=str(sink), launch_id="L", progress_interval_s=0)
    with vg.validation(step=4, source="trainer", sources_expected=1):
        vg.log_generations(["q0", "q1"], ["a"] * 2, None)
        run = wandb.init(project="valgen-identity")
        vg.log_generations(["q2", "q3"], ["a"] * 2, None)
    with vg.validation(step=5, source="trainer", sources_expected=1):
        vg.log_generations(["q0"], ["a"], None)
    run.finish()
    vg.shutdown()
    records = list(read_paths([str(sink)], lambda error: None))
    assert {r.attempt for r in records} == {"L.1"}
    by_step = {selection.step: selection for selection in select_steps(records)}
    assert (by_step[4].attempts, by_step[4].complete, by_step[4].seen) == (1, True, 4)
    assert sorted(g.input for g in by_step[4].generations) == ["q0", "q1", "q2", "q3"]
    assert by_step[5].run_id == run.id


def test_a_tracker_run_started_inside_a_block_does_not_split_the_step(tmp_path: Path) -> None:
    """mlflow.start_run() while a block is open: the emitter stays, the step is one attempt with every generation."""
    mlflow = require_module("mlflow")
    sink = tmp_path / "sink"
    vg.configure(run_id="job-2", count=8, directory=str(sink), launch_id="L", progress_interval_s=0)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_experiment("inside-block")
    with vg.validation(step=4, source="trainer", sources_expected=1):
        vg.log_generations(["q0", "q1"], ["a"] * 2, None)
        with mlflow.start_run():
            vg.log_generations(["q2", "q3"], ["a"] * 2, None)
    vg.shutdown()
    records = list(read_paths([str(sink)], lambda error: None))
    assert {r.attempt for r in records} == {"L.1"}
    (selection,) = select_steps(records)
    assert (selection.attempts, selection.complete, selection.seen) == (1, True, 4)
    assert sorted(g.input for g in selection.generations) == ["q0", "q1", "q2", "q3"]


def test_the_run_id_sources_rank_as_documented(wandb_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Argument > OTEL_VALGEN_RUN_ID > the wandb run > WANDB_RUN_ID > OTEL_VALGEN_DEFAULT_RUN_ID > generated."""
    from otel_valgen._identity import resolve_run_id

    assert resolve_run_id(None)[1] == "generated"
    monkeypatch.setenv("OTEL_VALGEN_DEFAULT_RUN_ID", "forwarded")
    assert resolve_run_id(None) == ("forwarded", "default")
    monkeypatch.setenv("WANDB_RUN_ID", "from-wandb-env")
    assert resolve_run_id(None) == ("from-wandb-env", "wandb_environment")
    run = wandb.init(project="precedence", id="live-run")
    try:
        assert resolve_run_id(None) == ("live-run", "wandb")
        monkeypatch.setenv("OTEL_VALGEN_RUN_ID", "the-jobs-own")
        assert resolve_run_id(None) == ("the-jobs-own", "environment")
        assert resolve_run_id("from-code") == ("from-code", "argument")
    finally:
        run.finish()
