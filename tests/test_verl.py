"""verl compatibility, called with the exact shapes verl's trainers use (no verl install)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from otel_valgen import contract
from otel_valgen.integrations.verl import ValGenerationsMixin, ValidationGenerationsLogger, log_val_generations
from otel_valgen.testing import capture_records


def _by_event(records: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [r for r in records if r["event_name"] == event]


def test_logger_log_takes_verls_samples_and_step() -> None:
    """log(loggers, samples, step) with (input, output, score) tuples emits and ends the step."""
    samples = [("q1", "a1", 0.5), ("q2", "a2", np.float32(1.0)), ("q3", "a3", 0)]
    with capture_records(run_id="verl", count=8) as records:
        ValidationGenerationsLogger(project_name="p", experiment_name="e").log(["console", "wandb"], samples, 40)
    generations = _by_event(records, contract.EVENT_GENERATION)
    assert sorted(r["body"]["input"] for r in generations) == ["q1", "q2", "q3"]
    assert {r["attributes"][contract.STEP] for r in generations} == {40}
    (end,) = _by_event(records, contract.EVENT_VALIDATION_END)
    assert end["attributes"][contract.SEEN] == 3


def test_newer_log_signature_with_table_name() -> None:
    """Verl's newer log(..., table_name=...) shape is accepted too."""
    with capture_records(run_id="verl", count=8) as records:
        ValidationGenerationsLogger().log(["wandb"], [("q", "a", 1.0)], 2, table_name="val/generations")
    assert len(_by_event(records, contract.EVENT_GENERATION)) == 1


class _BaseTrainer:
    """Stands for verl's RayPPOTrainer: the mixin must override its method."""

    def _maybe_log_val_generations(self, inputs: Any, outputs: Any, scores: Any) -> None:
        raise AssertionError("verl's own pre-selection must not run")


class _Trainer(ValGenerationsMixin, _BaseTrainer):
    def __init__(self) -> None:  # deliberately no super().__init__(), as in verl #6438
        self.config = SimpleNamespace(trainer=SimpleNamespace(log_val_generations=4, logger=["wandb"]))
        self.global_steps = 12


class _Rollouter(ValGenerationsMixin, _BaseTrainer):
    valgen_source = "rollouter"
    valgen_step_attribute = "current_param_version"

    def __init__(self) -> None:
        self.config = SimpleNamespace(trainer=SimpleNamespace(log_val_generations=4))
        self.current_param_version = 7
        self.global_steps = 999  # the rollouter's own counter: must not be used


def test_mixin_sends_all_generations_with_the_trainers_step_and_k() -> None:
    """The mixin sends every generation (presampled to k locally) at the trainer's step, as k=log_val_generations."""
    inputs = [f"prompt {i}" for i in range(50)]
    with capture_records(run_id="verl", count=64) as records:
        _Trainer()._maybe_log_val_generations(inputs, [f"out {i}" for i in range(50)], list(range(50)))
    generations = _by_event(records, contract.EVENT_GENERATION)
    assert len(generations) == 4
    assert {r["attributes"][contract.SAMPLE_COUNT] for r in generations} == {4}
    assert {r["attributes"][contract.STEP] for r in generations} == {12}
    assert {r["attributes"][contract.RUN_ID] for r in generations} == {"verl"}
    (end,) = _by_event(records, contract.EVENT_VALIDATION_END)
    assert end["attributes"][contract.SEEN] == 50


def test_rollouter_uses_the_parameter_version_and_uids() -> None:
    """A fully-async rollouter logs at the parameter version, with dataset uids as sample ids."""
    metadata = [{"uid": f"u{i}"} for i in range(6)]
    with capture_records(run_id="verl", count=64) as records:
        _Rollouter()._maybe_log_val_generations(["q"] * 6, ["a"] * 6, [1.0] * 6, sample_metadata=metadata)
    generations = _by_event(records, contract.EVENT_GENERATION)
    assert {r["attributes"][contract.STEP] for r in generations} == {7}
    assert {r["attributes"][contract.SOURCE] for r in generations} == {"rollouter"}
    assert all(r["attributes"][contract.SAMPLE_ID].startswith("u") for r in generations)


def test_mixin_is_silent_when_verl_disables_logging() -> None:
    """log_val_generations == 0 means nothing is sent, as in verl."""
    trainer = _Trainer()
    trainer.config.trainer.log_val_generations = 0
    with capture_records(run_id="verl", count=64) as records:
        trainer._maybe_log_val_generations(["q"], ["a"], [1.0])
    assert records == []


def test_missing_step_attribute_never_raises() -> None:
    """A subclass without the step attribute gets a counted drop, not an AttributeError."""
    trainer = _Trainer()
    del trainer.global_steps
    with capture_records(run_id="verl", count=64) as records:
        trainer._maybe_log_val_generations(["q"], ["a"], [1.0])
    assert _by_event(records, contract.EVENT_GENERATION) == []


def test_function_form_reports_delivery() -> None:
    """log_val_generations returns True once the step's records were exported."""
    with capture_records(run_id="verl", count=2) as records:
        assert log_val_generations(["a", "b", "c"], ["x", "y", "z"], [1, 2, 3], step=5, sources_expected=2) is True
    (end,) = _by_event(records, contract.EVENT_VALIDATION_END)
    assert end["attributes"][contract.SOURCES_EXPECTED] == 2
