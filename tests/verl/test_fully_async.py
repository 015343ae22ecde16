"""User story: a verl 0.9.1 fully-async job, with no code change, logs each validation at the trainer's step.

verl's real ``FullyAsyncTrainer`` and ``FullyAsyncRollouter`` actors run unmodified on a local Ray
cluster, created as ``fully_async_main.py`` creates them; only what needs GPUs or model servers is
replaced (``harness.REPLACED`` names each with its reason). otel-valgen is switched on the way the
docs tell users to: ``RAY_RUNTIME_ENV_HOOK`` and ``OTEL_EXPORTER_OTLP_ENDPOINT`` in the driver's
environment. Records go through the built collector with its shipped config.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import xxhash
from click.testing import CliRunner

from otel_valgen import _process, contract
from otel_valgen.sampling import SortKey, bottom_k, sample_key
from otel_valgen.tools.cli import main as cli_main
from tests.e2e import harness as e2e
from tests.verl import harness
from tests.verl.conftest import VerlFiles

pytestmark = pytest.mark.ray

K = 4  # trainer.log_val_generations
SEED = 42  # otel-valgen's default seed


@dataclass
class FullyAsyncJob:
    components: harness.FullyAsync
    collector: e2e.Collector
    metrics_log: Path
    run_id: str


@pytest.fixture(scope="module")
def job(verl_files: VerlFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FullyAsyncJob]:
    """The collector, then a Ray driver with otel-valgen's env hook, then verl's two actors."""
    import ray

    assert e2e.COLLECTOR_BIN.is_file(), "build/otelcol-valgen is missing: `make collector` builds it"
    state = tmp_path_factory.mktemp("collector")
    run_id = f"verl-fa-{uuid.uuid4().hex[:8]}"
    with e2e.wandb_stand_in() as wandb_stand_in, e2e.loki_stand_in() as loki_stand_in:
        collector = e2e.start_collector(
            state,
            "collector",
            ["collector.yaml"],
            {
                "VALGEN_WANDB_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
                "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
                "VALGEN_DECISION_WAIT": "2s",
            },
        )
        user_env = {
            "RAY_RUNTIME_ENV_HOOK": "otel_valgen.ray.runtime_env_hook",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.http_endpoint}",
            "OTEL_VALGEN_RUN_ID": run_id,
        }
        metrics_log = verl_files.root / "fully_async_metrics.jsonl"
        with pytest.MonkeyPatch.context() as env:
            for name, value in user_env.items():
                env.setenv(name, value)
            try:
                harness.start_ray(metrics_log)
                config = harness.fully_async_config(
                    verl_files.root / "fully_async",
                    train_path=verl_files.train_path,
                    val_path=verl_files.val_path,
                    model_path=str(verl_files.tokenizer_dir),
                    log_val_generations=K,
                )
                components = harness.create_fully_async(config, verl_files.tokenizer)
                yield FullyAsyncJob(components, collector, metrics_log, run_id)
            finally:
                ray.shutdown()
                _process.reset_for_testing()  # the driver's emitter, configured by the env hook
                collector.stop()


def _expected_bottom_k(dumped: list[dict[str, Any]]) -> list[str]:
    """Bottom-k over every generation verl dumped, with sample ids derived as docs/verl.md says."""
    ids: list[str] = []
    responses: dict[str, int] = {}
    for row in dumped:
        prompt = xxhash.xxh64_hexdigest(row["input"].encode())
        responses[prompt] = responses.get(prompt, -1) + 1
        ids.append(f"{prompt}/{responses[prompt]}")
    return [sample_id for _, sample_id in bottom_k(((SortKey.of(sample_key(SEED, i), i), i) for i in ids), K)]


def _validation_steps(run: harness.ValidationRun) -> set[int]:
    """The steps verl logged this validation's val-core metrics at."""
    return {line["step"] for line in run.logged if any(key.startswith("val-core/") for key in line["data"])}


def test_each_validation_lands_at_the_trainers_step_with_exactly_k(job: FullyAsyncJob) -> None:
    """Two validations at trainer versions 0 and 1 give k records at exactly steps 0 and 1, the true bottom-k."""
    print("replaced in verl for CPU:", *(f"  {name}: {why}" for name, why in harness.REPLACED), sep="\n")
    trainer, rollouter = job.components.trainer, job.components.rollouter
    runs = [harness.run_fit_validate(trainer, True, rollouter=rollouter, metrics_log=job.metrics_log)]
    assert harness.advance_param_version(trainer) == 1
    runs.append(harness.run_fit_validate(trainer, False, rollouter=rollouter, metrics_log=job.metrics_log))
    validations = [run for run in runs if run is not None]
    assert [_validation_steps(run) for run in validations] == [{0}, {1}]
    # the rollouter's own counter is the same for both validations: it is not the step
    assert validations[0].rollouter_global_steps == validations[1].rollouter_global_steps == 1

    def closed_steps() -> set[int]:
        records = e2e.records_of_file(job.collector.file_path)
        return {r.attributes[contract.STEP] for r in records if r.event == contract.EVENT_STEP_SUMMARY}

    e2e.wait_for(lambda: closed_steps() == {0, 1}, 60, "the collector's summaries of steps 0 and 1")
    records = e2e.records_of_file(job.collector.file_path)
    for step, run in zip((0, 1), validations, strict=True):
        (dumped,) = run.dumps.values()  # verl's own validation_data_dir dump still works: every generation
        assert len(dumped) == 12
        kept = [r for r in records if r.event == contract.EVENT_GENERATION and r.attributes[contract.STEP] == step]
        assert [r.attributes[contract.SAMPLE_ID] for r in kept] == _expected_bottom_k(dumped)
        assert {r.attributes[contract.SOURCE] for r in kept} == {"rollouter"}
        assert {r.attributes[contract.RUN_ID] for r in kept} == {job.run_id}
        assert len({r.trace_id for r in kept}) == 1
        summaries = [r for r in records if r.event == contract.EVENT_STEP_SUMMARY]
        (summary,) = [r for r in summaries if r.attributes[contract.STEP] == step]
        assert summary.attributes[contract.SEEN] == 12
        assert summary.attributes[contract.KEPT] == K

    table = CliRunner().invoke(cli_main, ["show", str(job.collector.file_path)])
    print(table.stdout)  # what a user reads (pytest -s)
    result = CliRunner().invoke(cli_main, ["show", str(job.collector.file_path), "--format", "json"])
    assert result.exit_code == 0, result.output
    shown = {entry["step"]: entry for entry in map(json.loads, result.stdout.splitlines())}
    assert sorted(shown) == [0, 1]
    for step, run in zip((0, 1), validations, strict=True):
        (dumped,) = run.dumps.values()
        assert [g["sample_id"] for g in shown[step]["generations"]] == _expected_bottom_k(dumped)
