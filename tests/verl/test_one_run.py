"""User story: in fully-async mode the rollouter validates, and its generations land in the trainer's tracker runs.

Two Ray actors made from verl 0.9.1's real ``RayPPOTrainer``: a trainer that starts an offline
wandb run and an MLflow run (as verl's ``Tracking`` does in ``FullyAsyncTrainer.__init__``) and
then sets ``current_param_version``, and a rollouter that logs a validation with no tracker run
of its own. No ``WANDB_RUN_ID``, no ``OTEL_VALGEN_RUN_ID``: the driver's env hook is the only setup.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from otel_valgen import _process, contract
from otel_valgen.reader import Generation, read_paths
from tests.support.require import require_module
from tests.test_run_identity import offline_run_ids

# verl's trainer in Ray actors: 304 s once on a loaded CI machine
pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

K = 3


class TrackedTrainer(RayPPOTrainer):
    """verl's trainer base as the fully-async trainer uses it: tracker runs first, then its version."""

    def __init__(self, tmp: str) -> None:  # verl's __init__ needs worker groups; only the trackers matter here
        import mlflow
        import wandb

        self.config = SimpleNamespace(trainer=SimpleNamespace(log_val_generations=K))
        self.run = wandb.init(project="valgen-one-run", mode="offline", dir=tmp)
        mlflow.set_tracking_uri(f"sqlite:///{tmp}/mlflow.db")
        mlflow.set_experiment("valgen-one-run")
        self.mlflow_run = mlflow.start_run()
        self.current_param_version = 0  # published with the runs (the hooked property)

    def advance(self) -> dict[str, str]:
        self.current_param_version += 1
        return {"wandb": self.run.id, "mlflow": self.mlflow_run.info.run_id}


class ValidatingPart(RayPPOTrainer):
    """verl's trainer base as the fully-async rollouter uses it: it validates, with no tracker run."""

    def __init__(self) -> None:
        self.config = SimpleNamespace(trainer=SimpleNamespace(log_val_generations=K))
        self.global_steps = 1  # the rollouter's own counter, never the trainer's step

    def validate(self) -> None:
        inputs = [f"question {i}" for i in range(8)]
        outputs = [f"answer {i}" for i in range(8)]
        self._maybe_log_val_generations(inputs=inputs, outputs=outputs, scores=[1.0] * 8)  # type: ignore[no-untyped-call]
        import otel_valgen as vg

        vg.flush()


@pytest.fixture
def sink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A local Ray cluster whose driver has otel-valgen's env hook and writes records to files."""
    import ray

    require_module("wandb")
    require_module("mlflow")
    folder = tmp_path / "sink"
    for name in ("WANDB_RUN_ID", "OTEL_VALGEN_RUN_ID", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAY_RUNTIME_ENV_HOOK", "otel_valgen.ray.runtime_env_hook")
    monkeypatch.setenv("OTEL_VALGEN_DIR", str(folder))
    for name, value in {"WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true", "WANDB_MODE": "offline"}.items():
        monkeypatch.setenv(name, value)
    repo = str(Path(__file__).resolve().parents[2])  # workers import this module's classes
    pythonpath = os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        logging_level=logging.WARNING,
        runtime_env={"env_vars": {"PYTHONPATH": pythonpath}},
    )
    try:
        yield folder
    finally:
        ray.shutdown()
        _process.reset_for_testing()


def test_the_rollouters_records_carry_the_trainers_runs(sink: Path, tmp_path: Path) -> None:
    """The rollouter's generations carry the trainer's wandb run id as run id, and its wandb and MLflow runs."""
    import ray

    trainer: Any = ray.remote(TrackedTrainer).remote(str(tmp_path))
    runs: dict[str, str] = ray.get(trainer.advance.remote())
    rollouter: Any = ray.remote(ValidatingPart).remote()
    ray.get(rollouter.validate.remote())
    ray.kill(rollouter)
    ray.kill(trainer)

    assert offline_run_ids(tmp_path) == {runs["wandb"]}
    generations = [r for r in read_paths([str(sink)], lambda error: None) if isinstance(r, Generation)]
    assert len(generations) == K
    assert {g.step for g in generations} == {1}  # the trainer's version, not global_steps
    assert {g.source for g in generations} == {"rollouter"}
    assert {g.run_id for g in generations} == {runs["wandb"]}
    assert {g.resource.get(contract.WANDB_RUN_ID) for g in generations} == {runs["wandb"]}
    assert {g.resource.get(contract.WANDB_PROJECT) for g in generations} == {"valgen-one-run"}
    assert {g.resource.get("mlflow.run_id") for g in generations} == {runs["mlflow"]}
