"""User story: verl's sync PPO entry point, with the two documented variables, logs validations at global_steps.

``python -m verl.trainer.main_ppo <overrides>`` logs every validation at verl's ``global_steps``, with
exactly k generations, as source ``trainer``, under the trainer's wandb run.

verl 0.9.1's real ``main_ppo`` runs unmodified as a subprocess with verl's own local ``ray.init`` (which
runs otel-valgen's env hook), once per trainer ``main_ppo.main`` can pick: the v1 one, its default
(``trainer.use_v1: true`` in ``ppo_trainer.yaml``: ``TaskRunnerV1``, ``PPOTrainerSync.fit`` with
TransferQueue, verl's real ``AgentLoopManagerTQ`` agent-loop workers and reward-loop workers), and the
legacy one (``trainer.use_v1=False``: ``main_ppo_v0.TaskRunner``, ``RayPPOTrainer.fit``). Each validates
before training (6 prompts x 2), trains one step of 16 prompts x ``rollout.n=4`` responses with
``OTEL_VALGEN_ROLLOUT_COUNT=4`` and ``trainer.rollout_data_dir`` set (verl dumps the step itself), and
validates after it. What needs GPUs or model servers is stood in for by the test-only verl plugin
(``tests/verl/cpu_plugin.py``; ``harness.REPLACED`` lists every replacement). Records go through the
built collector with its shipped config.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest

from otel_valgen import contract
from otel_valgen.sampling import untagged
from tests.e2e import harness as e2e
from tests.support.ray_cluster import ray_env
from tests.verl import harness, launcher
from tests.verl.conftest import VerlFiles

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]  # one launch runs verl for a few minutes


@dataclass
class Job:
    """A finished ``main_ppo`` launch and the collector that received its records."""

    trainer: str
    launch: launcher.Launch
    collector: e2e.Collector


K = 4  # trainer.log_val_generations
PROMPTS = 16  # data.train_batch_size: the training step's prompts (the step's train file has exactly these)
N = 4  # actor_rollout_ref.rollout.n: responses per prompt
ROLLOUT_K = 4  # OTEL_VALGEN_ROLLOUT_COUNT: prompts kept per training step
VAL_PROMPTS = 6  # the validation file's prompts (as the conftest's), x val_kwargs.n=2: 12 generations > K
TRAINERS = ("legacy", "v1")  # trainer.use_v1=False / True (main_ppo's default)


def _launch(
    verl_files: VerlFiles,
    root_factory: pytest.TempPathFactory,
    trainer: str,
    *,
    hook: bool = True,
    options: dict[str, str] | None = None,
) -> Iterator[Job]:
    """The collector, then ``python -m verl.trainer.main_ppo`` with ``trainer`` run to its end.

    ``hook=False`` leaves ``RAY_RUNTIME_ENV_HOOK`` out of the environment (what a user who forgot it runs);
    ``options`` adds documented ``OTEL_VALGEN_*`` variables.
    """
    root = root_factory.mktemp(f"main_ppo_{trainer}")
    model_dir = harness.make_model_dir(root / "model", verl_files.tokenizer)
    train_path, val_path = harness.make_dataset(root / "data", VAL_PROMPTS, n_train=PROMPTS)
    files = replace(verl_files, train_path=train_path, val_path=val_path)
    with harness.collector(root) as collector:
        run_root = root / "run"
        run_root.mkdir()
        user_env = launcher.user_env(collector.http_endpoint)
        if not hook:
            del user_env["RAY_RUNTIME_ENV_HOOK"]
        user_env |= options or {}
        job_env = {**user_env, **launcher.stand_in_env(run_root, ROLLOUT_K)}
        overrides = launcher.main_ppo_overrides(
            run_root, files, model_dir, K, use_v1=trainer == "v1", prompts=PROMPTS, n=N, dump=True
        )
        launch = launcher.launch_local(run_root, overrides, ray_env(job_env), module=launcher.MAIN_PPO)
        print(f"{trainer}: main_ppo ran {launch.seconds:.1f}s, exit code {launch.returncode}")
        assert launch.returncode == 0, launch.tail()
        yield Job(trainer, launch, collector)


@pytest.fixture(scope="module", params=TRAINERS)
def job(
    request: pytest.FixtureRequest, verl_files: VerlFiles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Job]:
    """``main_ppo`` with the documented variables, one run per trainer."""
    yield from _launch(verl_files, tmp_path_factory, request.param)


def test_each_validation_lands_at_global_steps_with_exactly_k(job: Job) -> None:
    """Validations before and after the training step give k records each at verl's global_steps."""
    print("replaced in verl for CPU:", *(f"  {name}: {why}" for name, why in harness.REPLACED), sep="\n")
    text = job.launch.text()
    legacy_branch = "Legacy trainer `main_ppo_v0.py` is deprecated" in text
    assert legacy_branch == (job.trainer == "legacy"), job.trainer  # the branch of main_ppo.main that ran
    assert ("(TaskRunnerV1 pid=" in text) == (job.trainer == "v1"), job.trainer  # Ray's prefix of its lines
    validations = job.launch.validations()
    steps = [v.trainer_step for v in validations]
    assert steps == [0, 1], steps  # val_before_train, then after the one (last) training step
    for validation in validations:  # verl names each dump by the global_steps it logged the metrics at
        assert validation.rollouter_global_steps == validation.trainer_step

    launcher.wait_for_steps(job.collector.file_path, steps)
    records = [
        r
        for r in e2e.records_of_file(job.collector.file_path)
        if r.attributes.get(contract.KIND) != contract.KIND_ROLLOUT
    ]
    assert {r.attributes[contract.STEP] for r in records if r.event == contract.EVENT_GENERATION} == set(steps)
    for validation in validations:
        assert len(validation.dumped) > K  # so that the summary's kept is K itself
        launcher.assert_validation_sampled(
            job.collector.file_path, validation, K, "trainer", cut_at_limit=job.trainer == "v1"
        )
    # verl's wide wandb table puts the step's rows in rank order (input_1, output_1, score_1, ...):
    # the same prompt's response must keep its column at every validation.
    columns = [
        [
            untagged(r.attributes[contract.SAMPLE_ID])
            for r in sorted(
                launcher.generations(job.collector.file_path, step), key=lambda r: r.attributes[contract.RANK]
            )
        ]
        for step in steps
    ]
    assert all(order == columns[0] for order in columns), columns


def test_the_training_steps_rollouts_arrive_whole(job: Job) -> None:
    """The training step's batch arrives as k whole GRPO groups at global_steps, in the trainer's run.

    With OTEL_VALGEN_ROLLOUT_COUNT=4: of 16 prompts x rollout.n=4 responses, 4 prompts, each with its 4
    responses (sample ids ``<prompt id>/0..3``), one trace, the summary counting 64 responses and 16 prompts.
    """
    trained = job.launch.training_steps()
    assert trained == [1], trained
    launcher.wait_for_steps(job.collector.file_path, trained, kind=contract.KIND_ROLLOUT)
    kept = launcher.assert_rollouts_sampled(
        job.collector.file_path, 1, n=N, prompts=PROMPTS, cut=job.trainer == "v1", count=ROLLOUT_K
    )
    print("rollouts:", *(r.attributes for r in kept), sep="\n")
    assert {r.attributes[contract.RUN_ID] for r in kept} == {job.launch.wandb_run_id()}
    assert all(contract.PARAM_VERSION in r.attributes for r in kept) == (job.trainer == "v1")  # v1: the TQ tags
    # v1: the hook read the rows verl's trainer held (its fallback, fetching them, warns at its first step)
    assert "fetched from TransferQueue instead" not in job.launch.text()


def test_the_kept_prompts_are_the_bottom_k_of_verls_own_dump(job: Job) -> None:
    """The kept prompts are exactly the oracle's bottom-4 of verl's dump of the step, each with its 4 outputs.

    verl's ``trainer.rollout_data_dir`` dump of step 1 (legacy: ``RayPPOTrainer._log_rollout_data`` of the
    batch ``_update_actor`` trained on; v1: ``PPOTrainer._log_rollout_data``, which fetches the batch's
    prompts and responses from TransferQueue) holds every one of the 64 responses. The oracle
    (``launcher.expected_rollout_prompts``) ids each dumped ``input`` by XXH64, keys it with
    ``sample_key``, keeps the 4 smallest (key, id); the collector's kept records must be those prompts,
    and each prompt's outputs must equal the dump's outputs of that prompt (as a multiset).
    """
    launcher.assert_rollouts_match_dump(job.collector.file_path, job.launch, 1, PROMPTS, N, ROLLOUT_K)


def test_records_carry_the_trainers_wandb_run_id(job: Job) -> None:
    """The run id on the records is the id of the offline wandb run verl's trainer made (no id set by hand)."""
    run_id = job.launch.wandb_run_id()
    steps = job.launch.validation_steps()
    launcher.wait_for_steps(job.collector.file_path, steps)
    for step in steps:
        assert {r.attributes[contract.RUN_ID] for r in launcher.generations(job.collector.file_path, step)} == {
            run_id
        }, f"step {step}"


EXTREMES = 1  # OTEL_VALGEN_EXTREMES of the options job


@pytest.fixture(scope="module")
def options_job(verl_files: VerlFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    """``main_ppo`` (v1, its default) with k per data source and the best and the worst turned on by variables."""
    options = {"OTEL_VALGEN_SAMPLE_BY": "data_source", "OTEL_VALGEN_EXTREMES": str(EXTREMES)}
    yield from _launch(verl_files, tmp_path_factory, "v1", options=options)


def test_the_best_and_the_worst_and_each_data_sources_figures_follow_verls_own_dump(options_job: Job) -> None:
    """With the two variables and no code: k keyed picks, then verl's lowest and highest, and the data source's figures.

    The oracle is verl's ``validation_data_dir`` dump of each validation: every kept row equals one of its
    rows; the keyed picks are its bottom-k and keep the first ranks; the lowest and highest are rows of its
    smallest and largest score; the summary's figures of the data source count every dumped row and
    average their scores.
    """
    job = options_job
    validations = job.launch.validations()
    launcher.wait_for_steps(job.collector.file_path, [v.trainer_step for v in validations])
    for validation in validations:
        step = validation.trainer_step
        launcher.assert_rows_equal_dump(job.collector.file_path, validation, cut_at_limit=True)
        ranked = sorted(launcher.generations(job.collector.file_path, step), key=lambda r: r.attributes[contract.RANK])
        slots = [tuple(r.attributes[contract.SLOTS]) for r in ranked]
        keyed = [untagged(r.attributes[contract.SAMPLE_ID]) for r, s in zip(ranked, slots, strict=True) if "keyed" in s]
        assert keyed == launcher.expected_bottom_k(validation.dumped, K)
        assert all("keyed" in s for s in slots[:K]), "the keyed picks keep the first ranks"
        assert all(r.attributes[contract.SAMPLE_BY] == "data_source" for r in ranked)
        # A row of the smallest (largest) score of the dump; of several, verl's order of a prompt's responses
        # may differ from the order they were logged in, so the tie is checked on the prompt's ids.
        scores = [float(row["score"]) for row in validation.dumped]
        ids = launcher.dumped_ids(validation.dumped)
        for slot, extreme in (("lowest", min(scores)), ("highest", max(scores))):
            (chosen,) = [r for r, s in zip(ranked, slots, strict=True) if slot in s]
            assert chosen.attributes[contract.SCORE] == extreme, slot
            tied = {i.rpartition("/")[0] for i, score in zip(ids, scores, strict=True) if score == extreme}
            assert untagged(chosen.attributes[contract.SAMPLE_ID]).rpartition("/")[0] in tied, slot
        summary = launcher.validation_summary(job.collector.file_path, step)
        assert summary[contract.EXTREMES] == EXTREMES
        (figure,) = summary[contract.DATA_SOURCES]
        assert figure["data_source"] == harness.DATA_SOURCE
        assert (figure["seen"], figure["kept"]) == (len(validation.dumped), len(ranked))
        assert figure["score.mean"] == pytest.approx(sum(scores) / len(scores))
