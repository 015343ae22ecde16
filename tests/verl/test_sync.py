"""User story: verl 0.9.1's synchronous trainers log every validation at global_steps, through verl's own code.

The legacy ``RayPPOTrainer`` runs its real ``_validate`` (generation replaced by a CPU stand-in,
``harness.REPLACED``); the v1 ``PPOTrainerSync`` (main_ppo's default) calls its real hook as its
``_validate`` does, which cannot run on CPU. Records go to the embedded sink and are read back
with ``otel-valgen show``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import otel_valgen as vg
from otel_valgen import _process, contract
from otel_valgen.cli.main import main as cli_main
from otel_valgen.integrations import verl as vg_verl
from otel_valgen.reader import EndRecord, Generation, Record, StartRecord, read_paths
from otel_valgen.sampling import untagged
from tests.verl import harness, launcher
from tests.verl.conftest import VerlFiles

K = 4


def _show(directory: Path) -> dict[int, dict[str, Any]]:
    result = CliRunner().invoke(cli_main, ["show", str(directory), "--format", "json"])
    assert result.exit_code == 0, result.output
    return {entry["step"]: entry for entry in map(json.loads, result.stdout.splitlines())}


def _validate_once(trainer: Any, sink: Path, run_id: str, **settings: Any) -> dict[int, dict[str, Any]]:
    """Run verl's real ``_validate`` once into the embedded sink ``sink``; what ``show`` prints of it.

    ``vg.stats()`` keeps the counters of the run (the test's fixture resets them).
    """
    vg.configure(run_id=run_id, directory=str(sink), **settings)
    try:
        harness.run_validate(trainer)
        assert vg.flush()
    finally:
        _process.reset_for_testing(keep_stats=True)
    return _show(sink)


def _lifecycle_records(sink: Path) -> list[Record]:
    """The start and end records in the embedded sink ``sink``."""
    errors: list[object] = []
    records = [r for r in read_paths([sink], errors.append) if isinstance(r, StartRecord | EndRecord)]
    assert errors == []
    return records


def _config(verl_files: VerlFiles, tmp_path: Path, use_v1: bool) -> Any:
    """The ppo_trainer config of verl itself, for the tiny model and data; k = log_val_generations = K."""
    assert vg_verl.install()  # what otel-valgen's Ray setup hook does in the TaskRunner's process
    return harness.sync_config(
        tmp_path,
        train_path=verl_files.train_path,
        val_path=verl_files.val_path,
        model_path=str(verl_files.tokenizer_dir),
        log_val_generations=K,
        use_v1=use_v1,
    )


def test_sync_trainer_validations_land_at_global_steps(verl_files: VerlFiles, tmp_path: Path) -> None:
    """Two real _validate runs at global_steps 0 and 3 give min(k, M) generations at exactly those steps."""
    config = _config(verl_files, tmp_path, use_v1=False)
    trainer = harness.make_sync_trainer(config, verl_files.tokenizer)
    sink = tmp_path / "valgen-data"
    vg.configure(run_id="verl-sync", directory=str(sink))
    try:
        harness.run_validate(trainer)  # as fit() does before training: global_steps 0
        trainer.global_steps = 3
        harness.run_validate(trainer)
        assert vg.flush()
    finally:
        _process.reset_for_testing()
    dumps = Path(config.trainer.validation_data_dir)
    assert sorted(p.name for p in dumps.glob("*.jsonl")) == ["0.jsonl", "3.jsonl"]  # verl's own dump still works
    shown = _show(sink)
    assert sorted(shown) == [0, 3]
    for entry in shown.values():
        assert entry["seen"] == 12  # 6 prompts x val_kwargs.n = 2: all of them reached otel-valgen
        assert entry["kept"] == K
        assert {g["source"] for g in entry["generations"]} == {"trainer"}
    assert [untagged(g["sample_id"]) for g in shown[0]["generations"]] == [
        untagged(g["sample_id"]) for g in shown[3]["generations"]
    ]


def test_each_row_carries_what_verls_own_dump_writes(verl_files: VerlFiles, tmp_path: Path) -> None:
    """With no code change, each kept row has verl's dumped ground truth, reward columns, its data source and sizes.

    verl passes its hook only inputs, outputs and scores; the rest is read from its real ``_validate``.
    The oracle is verl's own ``validation_data_dir`` row of the same prompt and response.
    """
    config = _config(verl_files, tmp_path, use_v1=False)
    trainer = harness.make_sync_trainer(config, verl_files.tokenizer)
    sink = tmp_path / "valgen-data"
    _validate_once(trainer, sink, "verl-rows")
    assert vg.stats().get("verl_row_columns_missing", 0) == 0
    dumped = harness.read_jsonl(Path(config.trainer.validation_data_dir) / "0.jsonl")
    by_id = dict(zip(launcher.dumped_ids(dumped), dumped, strict=True))
    errors: list[object] = []
    kept = [r for r in read_paths([sink], errors.append) if isinstance(r, Generation)]
    assert errors == []
    assert len(kept) == K
    for generation in kept:
        row = by_id[untagged(generation.sample_id)]
        launcher.assert_conversation(generation.attributes)
        texts = launcher.row_texts(generation.attributes, {})
        assert (*texts, generation.score) == (row["input"], row["output"], row["score"])
        assert generation.ground_truth == row["gts"]
        assert generation.data_source == harness.DATA_SOURCE
        columns = {name: value for name, value in row.items() if name not in launcher.DUMP_OWN_COLUMNS}
        assert columns
        assert generation.extra == columns
        length = generation.attributes[contract.RESPONSE_LENGTH]
        assert length == len(verl_files.tokenizer.encode(row["output"], add_special_tokens=False)) + 1  # and EOS
        assert generation.attributes[contract.TRUNCATED] is False


def test_v1_trainer_hook_lands_at_global_steps(verl_files: VerlFiles, tmp_path: Path) -> None:
    """The v1 PPOTrainerSync's real hook, called as its _validate calls it, logs min(k, M) at global_steps."""
    config = _config(verl_files, tmp_path, use_v1=True)
    trainer = harness.make_v1_trainer(config, verl_files.tokenizer)
    trainer.global_steps = 5
    sink = tmp_path / "valgen-data"
    vg.configure(run_id="verl-v1", directory=str(sink))
    try:
        inputs = [harness.question(i // 2) for i in range(12)]
        harness.run_v1_log_val_generations(trainer, inputs, [f"answer {i}" for i in range(12)], [1.0] * 12)
        assert vg.flush()
    finally:
        _process.reset_for_testing()
    shown = _show(sink)
    assert sorted(shown) == [5]
    assert shown[5]["seen"] == 12
    assert shown[5]["kept"] == K


def test_a_config_without_log_val_generations_logs_with_the_default_k(verl_files: VerlFiles, tmp_path: Path) -> None:
    """No trainer.log_val_generations key in the config: verl's real _validate logs with otel-valgen's k, not 0."""
    from omegaconf import open_dict

    config = _config(verl_files, tmp_path, use_v1=False)
    with open_dict(config):
        del config.trainer["log_val_generations"]
    trainer = harness.make_sync_trainer(config, verl_files.tokenizer)
    assert "log_val_generations" not in trainer.config.trainer
    shown = _validate_once(trainer, tmp_path / "valgen-data", "verl-no-key", count=5)
    assert sorted(shown) == [0]
    assert (shown[0]["seen"], shown[0]["kept"]) == (12, 5)


def test_a_trainer_validating_by_itself_logs_at_its_current_param_version(
    verl_files: VerlFiles, tmp_path: Path
) -> None:
    """A RayPPOTrainer (the fully-async trainer's base) with a current_param_version logs at it, as trainer.

    verl's FullyAsyncTrainer sets ``current_param_version`` in ``__init__`` and validates on its own side
    (``use_trainer_do_validate``) through the inherited ``_validate``; its ``global_steps`` is another counter.
    """
    config = _config(verl_files, tmp_path, use_v1=False)
    trainer = harness.make_sync_trainer(config, verl_files.tokenizer)
    trainer.current_param_version = 7  # through otel-valgen's property on RayPPOTrainer, as verl assigns it
    trainer.global_steps = 2
    shown = _validate_once(trainer, tmp_path / "valgen-data", "verl-own")
    assert sorted(shown) == [7]
    assert shown[7]["kept"] == K
    assert {g["source"] for g in shown[7]["generations"]} == {"trainer"}


def test_a_routed_validation_names_the_integration_on_its_records(verl_files: VerlFiles, tmp_path: Path) -> None:
    """The real _validate of verl, routed by the integration: its start record says valgen.integration = verl/<version>.

    The same function called by user code (the plain API) says nothing.
    """
    import verl

    trainer = harness.make_sync_trainer(_config(verl_files, tmp_path, use_v1=False), verl_files.tokenizer)
    sink = tmp_path / "valgen-data"
    _validate_once(trainer, sink, "verl-routed")
    vg.configure(run_id="verl-routed", directory=str(sink))
    vg_verl.log_val_generations(["q"], ["a"], [1.0], step=9)
    assert vg.flush()
    integration = {(type(r).__name__, r.step): r.integration for r in _lifecycle_records(sink)}
    routed = f"verl/{verl.__version__}"
    assert integration == {
        ("StartRecord", 0): routed,
        ("EndRecord", 0): routed,
        ("StartRecord", 9): None,
        ("EndRecord", 9): None,
    }


def test_a_subclass_that_writes_verls_own_table_is_loud(
    verl_files: VerlFiles, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A RayPPOTrainer subclass whose _maybe_log_val_generations calls verl's table as verl's own body does.

    Its validation completes and verl's table gets the rows; otel-valgen logs one WARNING naming the class
    and the fix, counts it, and the step's part ends marked unhooked (no generation), which show reports.
    """
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils.tracking import ValidationGenerationsLogger

    class OwnTableTrainer(RayPPOTrainer):
        def _maybe_log_val_generations(self, inputs: Any, outputs: Any, scores: Any) -> None:
            samples = list(zip(inputs, outputs, scores, strict=True))[: self.config.trainer.log_val_generations]
            self.validation_generations_logger.log(self.config.trainer.logger, samples, self.global_steps)

    tables: list[tuple[int, int]] = []
    verls_table = ValidationGenerationsLogger.log

    def spy(self: Any, loggers: Any, samples: list[Any], step: int) -> None:
        tables.append((len(samples), step))
        verls_table(self, loggers, samples, step)

    monkeypatch.setattr(ValidationGenerationsLogger, "log", spy)
    monkeypatch.setattr(vg_verl._validation, "_warned", set())  # "once per process" starts with this test
    trainer = harness.make_sync_trainer(_config(verl_files, tmp_path, use_v1=False), verl_files.tokenizer)
    trainer.__class__ = OwnTableTrainer
    trainer.global_steps = 2
    sink = tmp_path / "valgen-data"
    with caplog.at_level(logging.WARNING, logger="otel_valgen"):
        shown = _validate_once(trainer, sink, "verl-own-table")
    (warning,) = [r.getMessage() for r in caplog.records if "verl's own validation table ran" in r.getMessage()]
    assert "OwnTableTrainer overrides _maybe_log_val_generations" in warning
    assert "put ValGenerationsMixin first" in warning
    assert vg.stats()["verl_tables_unrouted"] == 1
    assert tables == [(K, 2)]  # verl's table still ran, unchanged
    (end,) = [r for r in _lifecycle_records(sink) if isinstance(r, EndRecord)]
    assert (end.step, end.seen, end.integration, end.unhooked_reason) == (
        2,
        0,
        contract.INTEGRATION_UNHOOKED,
        "override",
    )
    assert (shown[2]["kept"], shown[2]["sources_unhooked"]) == (0, [f"trainer@{end.instance}"])
