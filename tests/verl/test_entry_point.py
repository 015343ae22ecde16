"""User story: verl's fully-async launcher, with the two documented variables, logs validations at the trainer's step.

``python -m verl.experimental.fully_async_policy.fully_async_main`` logs every validation at the trainer's
version, with exactly k generations, under the trainer's wandb run.

verl 0.9.1's real launcher runs unmodified as a subprocess, with its import order (the actor classes are
decorated before ``run_ppo``'s ``ray.init`` runs otel-valgen's env hook), its TaskRunner, MessageQueue,
trainer ``fit`` and rollouter ``fit`` (one training step of 16 prompts x ``rollout.n=4`` responses, with
``OTEL_VALGEN_ROLLOUT_COUNT=4`` and ``trainer.rollout_data_dir`` set, so that verl dumps the step itself).
What needs GPUs or model servers is stood in for by a test-only verl plugin (``tests/verl/cpu_plugin.py``;
``harness.REPLACED`` lists every replacement). Three ways to start the job: verl's own local ``ray.init``,
``ray job submit`` to a ``ray start --head`` cluster with the variables in ``--runtime-env-json``, and verl's
own local ``ray.init`` with no env hook but the worker setup hook in verl's config (``+ray_kwargs...``).
Records go through the built collector with its shipped config.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest
from click.testing import CliRunner

from otel_valgen import contract
from otel_valgen.cli.main import main as cli_main
from otel_valgen.sampling import untagged
from tests.e2e import harness as e2e
from tests.support.ray_cluster import ray_env, ray_head
from tests.verl import harness, launcher
from tests.verl.conftest import VerlFiles

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]  # each launch runs verl for about 2 minutes

K = 4  # trainer.log_val_generations
PROMPTS = 16  # the training step's prompts (actor.ppo_mini_batch_size; the step's train file has exactly these)
N = 4  # actor_rollout_ref.rollout.n: responses per prompt
ROLLOUT_K = 4  # OTEL_VALGEN_ROLLOUT_COUNT: prompts kept per training step
VAL_PROMPTS = 6  # the validation file's prompts (as the conftest's), x val_kwargs.n=2: 12 generations > K
# verl's own ray.init with the env hook; ray job submit; verl's own ray.init with the setup hook in verl's config
VARIANTS = ("ray_init", "job_submit", "config_route")


@dataclass
class Job:
    """A finished launch and the collector that received its records."""

    variant: str
    launch: launcher.Launch
    collector: e2e.Collector


@pytest.fixture(scope="module", params=VARIANTS)
def job(
    request: pytest.FixtureRequest, verl_files: VerlFiles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Job]:
    """The collector, then verl's launcher run to its end one of the two ways."""
    variant: str = request.param
    root = tmp_path_factory.mktemp(variant)
    train_path, val_path = harness.make_dataset(root / "data", VAL_PROMPTS, n_train=PROMPTS)
    files = replace(verl_files, train_path=train_path, val_path=val_path)
    with harness.collector(root) as collector:
        run_root = root / "run"
        run_root.mkdir()
        test_env = launcher.stand_in_env(run_root, ROLLOUT_K)
        job_env = {**launcher.user_env(collector.http_endpoint), **test_env}
        overrides = launcher.launcher_overrides(
            run_root, files, K, local_cluster=variant != "job_submit", prompts=PROMPTS, n=N, dump=True
        )
        if variant == "ray_init":
            launch = launcher.launch_local(run_root, overrides, ray_env(job_env))
        elif variant == "config_route":  # docs/verl.md, "Without the hook variable"
            config_route = [
                "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=otel_valgen.ray.setup_worker",
                f"+ray_kwargs.ray_init.runtime_env.env_vars.OTEL_EXPORTER_OTLP_ENDPOINT={job_env['OTEL_EXPORTER_OTLP_ENDPOINT']}",
            ]
            env = ray_env(test_env)
            launch = launcher.launch_local(run_root, [*overrides, *config_route], env)
        else:
            with ray_head(ray_env(), root, num_cpus=32) as head:
                launch = launcher.launch_job(run_root, head, overrides, job_env, ray_env())
        print(f"{variant}: verl's launcher ran {launch.seconds:.1f}s, exit code {launch.returncode}")
        assert launch.returncode == 0, launch.tail()
        yield Job(variant, launch, collector)


def test_each_validation_lands_at_the_trainers_version_with_exactly_k(job: Job) -> None:
    """Validations before and after a training step give k records each at exactly the trainer's versions."""
    print("replaced in verl for CPU:", *(f"  {name}: {why}" for name, why in harness.REPLACED), sep="\n")
    validations = job.launch.validations()
    versions = [v.trainer_step for v in validations]
    assert versions[0] == 0, versions  # val_before_train
    assert len(set(versions)) >= 2, versions  # and after at least one training step
    for validation in validations:  # the rollouter's own counter is not the step
        assert validation.rollouter_global_steps != validation.trainer_step

    launcher.wait_for_steps(job.collector.file_path, versions)
    records = [
        r
        for r in e2e.records_of_file(job.collector.file_path)
        if r.attributes.get(contract.KIND) != contract.KIND_ROLLOUT
    ]
    assert {r.attributes[contract.STEP] for r in records if r.event == contract.EVENT_GENERATION} == set(versions)
    for validation in validations:
        launcher.assert_validation_sampled(job.collector.file_path, validation, K, "rollouter")

    table = CliRunner().invoke(cli_main, ["show", str(job.collector.file_path)])
    print(table.stdout)  # what a user reads (pytest -s)
    result = CliRunner().invoke(cli_main, ["show", str(job.collector.file_path), "--format", "json"])
    assert result.exit_code == 0, result.output
    shown = {entry["step"]: entry for entry in map(json.loads, result.stdout.splitlines())}
    assert sorted(shown) == sorted(versions)
    for validation in validations:
        shown_ids = [untagged(g["sample_id"]) for g in shown[validation.trainer_step]["generations"]]
        assert shown_ids == launcher.expected_bottom_k(validation.dumped, K)


def test_the_training_steps_rollouts_arrive_at_the_trainers_version(job: Job) -> None:
    """The trainer's training step (16 prompts x rollout.n=4) arrives whole at its version, with param versions.

    With OTEL_VALGEN_ROLLOUT_COUNT=4: 4 prompts with their 4 responses each, at the version its update
    leads to (the version verl validates the updated model at, the last one here); each response carries
    the parameter version that generated it (0: before the first sync).
    """
    trained = [max(job.launch.validation_steps())]
    assert trained == [1], trained
    launcher.wait_for_steps(job.collector.file_path, trained, kind=contract.KIND_ROLLOUT)
    kept = launcher.assert_rollouts_sampled(
        job.collector.file_path, 1, n=N, prompts=PROMPTS, data_source=False, count=ROLLOUT_K
    )
    print("rollouts:", *(r.attributes for r in kept), sep="\n")
    assert {r.attributes[contract.PARAM_VERSION] for r in kept} == {0}
    assert {r.attributes[contract.RUN_ID] for r in kept} == {job.launch.wandb_run_id()}


def test_the_kept_prompts_are_the_bottom_k_of_verls_own_dump(job: Job) -> None:
    """The kept prompts are exactly the oracle's bottom-4 of verl's dump of the step, each with its 4 outputs.

    The fully-async trainer honours ``trainer.rollout_data_dir`` too: ``FullyAsyncTrainer.fit_step`` calls
    ``SeparateRayPPOTrainer._fit_dump_data(batch)``, which runs ``RayPPOTrainer._log_rollout_data`` on the
    batch it trained on, named by the trainer's ``global_steps`` (1 for the first step; the records' step
    is ``current_param_version``, also 1 here). The oracle (``launcher.expected_rollout_prompts``) ids each
    dumped ``input`` by XXH64, keys it with ``sample_key``, keeps the 4 smallest (key, id); the collector's
    kept records must be those prompts, each with the dump's outputs of that prompt (as a multiset).
    """
    launcher.assert_rollouts_match_dump(job.collector.file_path, job.launch, 1, PROMPTS, N, ROLLOUT_K)


def test_rollouters_records_carry_the_trainers_wandb_run_id(job: Job) -> None:
    """The run id of the rollouter's records is the id of the wandb run verl's trainer made (no id set by hand)."""
    run_id = job.launch.wandb_run_id()
    versions = job.launch.validation_steps()
    launcher.wait_for_steps(job.collector.file_path, versions)
    for step in versions:
        assert {r.attributes[contract.RUN_ID] for r in launcher.generations(job.collector.file_path, step)} == {
            run_id
        }, f"step {step}"
