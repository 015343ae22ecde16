"""User story: WANDB_RUN_ID set in the launching shell names the run in every Ray process, wandb's included.

verl's layout: the driver starts Ray before any wandb run exists, one actor (the trainer) starts
the wandb run, another (the rollouter) never does. wandb runs offline; its run id is read back
from the run's files.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen import ray as vg_ray
from otel_valgen.reader import Generation, read_paths
from tests.conftest import REPO
from tests.support.require import require_module
from tests.test_run_identity import offline_run_ids, shown_run_ids

ray = require_module("ray")
wandb = require_module("wandb")

pytestmark = pytest.mark.ray


@ray.remote(num_cpus=0)
class Part:
    """A process validating its part of a step, with or without its own wandb run."""

    def validate(self, step: int, source: str, with_wandb: bool) -> str | None:
        run = wandb.init(project="valgen-identity") if with_wandb else None
        prompts = [f"{source}-{i}" for i in range(5)]
        with vg.validation(step=step, source=source, sources_expected=3):
            vg.log_generations(prompts, ["a"] * 5, [0.5] * 5, sample_ids=prompts)
        run_id = run.id if run is not None else None
        if run is not None:
            run.finish()
        return run_id


def test_every_process_names_the_run_of_the_launching_shells_wandb_run_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Driver, trainer actor (wandb.init) and rollouter actor (no wandb) all send under WANDB_RUN_ID, wandb's id."""
    wandb_dir = tmp_path / "wandb-dir"
    wandb_dir.mkdir()
    launched = f"launch{uuid.uuid4().hex[:8]}"
    environment = {"WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir), "WANDB_SILENT": "true"}
    for name, value in {**environment, "WANDB_DISABLE_GIT": "true", "WANDB_RUN_ID": launched}.items():
        monkeypatch.setenv(name, value)
    # Ray workers import otel_valgen from this checkout, whichever one is installed.
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    sink = tmp_path / "sink"
    vg.configure(count=20, directory=str(sink), source="driver")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=vg_ray.runtime_env())
    try:
        trainer, rollouter = Part.remote(), Part.remote()
        results: list[Any] = ray.get(
            [trainer.validate.remote(1, "trainer", True), rollouter.validate.remote(1, "rollouter", False)]
        )
        with vg.validation(step=1, source="driver", sources_expected=3):
            vg.log_generations(["d-0", "d-1"], ["a", "a"], [0.1, 0.2], sample_ids=["d-0", "d-1"])
    finally:
        ray.shutdown()
        vg.shutdown()

    assert results == [launched, None]
    assert offline_run_ids(wandb_dir) == {launched}
    assert shown_run_ids(sink) == {launched}
    generations = [r for r in read_paths([str(sink)], lambda error: None) if isinstance(r, Generation)]
    assert sorted({g.source for g in generations}) == ["driver", "rollouter", "trainer"]
    assert {g.resource.get(contract.WANDB_RUN_ID) for g in generations} == {launched}
