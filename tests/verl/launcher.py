"""Run verl's real fully-async launcher (``fully_async_main``) as a user would, on CPU, and read what it left.

Two ways in: ``python -m verl.experimental.fully_async_policy.fully_async_main <overrides>`` (verl's
``run_ppo`` starts a local Ray cluster with its own ``ray.init``), and ``ray job submit`` of the same
command to a cluster started by ``ray start --head``. The environment holds what docs/verl.md tells
users to set (``user_env``) plus test-only items (``test_only_env``): the checkout on ``PYTHONPATH`` and
``VERL_USE_EXTERNAL_MODULES`` naming ``tests.verl.cpu_plugin`` (the CPU stand-ins, see
``harness.REPLACED``), an offline wandb run in the test's folder and the path of verl's ``file`` tracker.

What the run leaves is read from verl's own outputs: the trainer's ``file`` tracker (one JSON line per
``logger.log(data, step)``, written unbuffered by the trainer actor; its ``console`` and ``wandb``
trackers log the same), ``trainer.validation_data_dir`` (``{rollouter global_steps}.jsonl`` per
validation) and the offline wandb run folder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from otel_valgen import contract
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from tests.e2e.harness import Record, records_of_file, wait_for
from tests.support.ray_cluster import RAY, RayCluster
from tests.verl import harness

LAUNCHER = "verl.experimental.fully_async_policy.fully_async_main"
MAIN_PPO = "verl.trainer.main_ppo"  # the sync PPO entry point: legacy TaskRunner or v1 (trainer.use_v1)
PLUGIN = "tests.verl.cpu_plugin"
METRICS_FILE = "metrics.jsonl"  # verl's file tracker (VERL_FILE_LOGGER_PATH), in the run's folder


def user_env(otlp_http_endpoint: str) -> dict[str, str]:
    """Exactly what docs/verl.md tells a user to set, except ``WANDB_RUN_ID`` (the run id must come from wandb)."""
    return {
        "RAY_RUNTIME_ENV_HOOK": "otel_valgen.ray.runtime_env_hook",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{otlp_http_endpoint}",
    }


def test_only_env(root: Path) -> dict[str, str]:
    """The CPU stand-ins (verl imports the plugin in every process), an offline wandb run and the file tracker.

    Also rollouts on (docs/verl.md: one setting), so each launch checks the training steps' rollouts too.
    """
    return {
        "OTEL_VALGEN_ROLLOUT_COUNT": str(ROLLOUT_COUNT),
        "PYTHONPATH": str(harness.REPO),
        "VERL_USE_EXTERNAL_MODULES": PLUGIN,
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(root / "wandb"),
        "VERL_FILE_LOGGER_PATH": str(root / METRICS_FILE),
    }


def launcher_overrides(root: Path, files: Any, k: int, *, local_cluster: bool) -> list[str]:
    """Verl's hydra overrides: the tiny CPU run, k, the console, wandb and file trackers, one training step.

    ``rollout.total_rollout_steps=2`` with 2 samples per step gives one training step, so the trainer
    validates before training and after that step. A local cluster (verl's own ``ray.init``) gets
    enough logical CPUs for verl's actors (10 each) and no dashboard; a job's cluster has its own.
    """
    # actor_rollout_ref.rollout.n (not the launcher's rollout.n) is what the rollouter repeats each prompt by:
    # GRPO groups of 2, which the trainer's rollouts keep whole
    extra = ["rollout.total_rollout_steps=2", "actor_rollout_ref.rollout.n=2"]
    if local_cluster:
        extra += ["ray_kwargs.ray_init.num_cpus=32", "+ray_kwargs.ray_init.include_dashboard=False"]
    return harness.fully_async_overrides(
        root,
        train_path=files.train_path,
        val_path=files.val_path,
        model_path=str(files.tokenizer_dir),
        log_val_generations=k,
        logger="[console,wandb,file]",
        extra_overrides=extra,
    )


# v1 runs verl's real agent-loop, reward-loop and TransferQueue actors on CPU: fewer of them than the
# defaults (8 storage units, 8 reward workers), and the rollout name its agent-loop workers read (the
# server behind it is a stand-in, harness.CpuLLMClient).
V1_OVERRIDES = [
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    "reward.num_workers=1",
    "actor_rollout_ref.rollout.name=vllm",
]


def main_ppo_overrides(root: Path, files: Any, model_dir: Path, k: int, *, use_v1: bool) -> list[str]:
    """``main_ppo``'s hydra overrides: the tiny CPU run, k, the three trackers, one training step.

    ``trainer.total_training_steps=1`` (the 6 train prompts also make one batch of 4): ``fit`` validates
    before training at ``global_steps`` 0 and after the last step at 1 (``trainer.test_freq=1``). verl's
    own local ``ray.init`` gets enough logical CPUs (one per actor: v1 adds TransferQueue's controller and
    storage units, its agent-loop and reward-loop workers) and no dashboard; v1's TransferQueue gets one
    storage unit instead of 8 (one process per unit on a 2-core machine).
    """
    return harness.sync_overrides(
        root,
        train_path=files.train_path,
        val_path=files.val_path,
        model_path=str(model_dir),
        log_val_generations=k,
        use_v1=use_v1,
        logger="[console,wandb,file]",
        extra_overrides=[
            "trainer.total_training_steps=1",
            "actor_rollout_ref.rollout.n=2",  # GRPO groups of 2: the rollouts keep each group whole
            "ray_kwargs.ray_init.num_cpus=32",
            "+ray_kwargs.ray_init.include_dashboard=False",
            *(V1_OVERRIDES if use_v1 else []),
        ],
    )


@dataclass
class Validation:
    """One validation as verl reported it: the trainer's step, the rollouter's ``global_steps`` and its dump."""

    trainer_step: int
    rollouter_global_steps: int
    dumped: list[dict[str, Any]]


@dataclass
class Launch:
    """A finished launch: its exit code, wall time, output and folders."""

    returncode: int
    seconds: float
    output: Path
    root: Path
    wandb_dir: Path

    def text(self) -> str:
        """Everything the launcher (or ``ray job submit``) printed."""
        return self.output.read_text(encoding="utf-8", errors="replace")

    def tail(self, lines: int = 60) -> str:
        """The last lines of the output, for failure messages."""
        return "\n".join(self.text().splitlines()[-lines:])

    def validation_steps(self) -> list[int]:
        """The steps verl's trainer logged each validation's ``val-core/...`` metrics at, in order."""
        logged = harness.read_jsonl(self.root / METRICS_FILE)
        return [line["step"] for line in logged if any(key.startswith("val-core/") for key in line["data"])]

    def training_steps(self) -> list[int]:
        """The steps verl's sync trainers logged training metrics at (``global_steps``), in order, once each."""
        logged = harness.read_jsonl(self.root / METRICS_FILE)
        trained = [line["step"] for line in logged if any(key.startswith(TRAINING_KEYS) for key in line["data"])]
        return list(dict.fromkeys(trained))

    def validations(self) -> list[Validation]:
        """Each validation's trainer step paired with verl's dump of it (both in the order they happened)."""
        dumps = sorted((self.root / "validation_data").glob("*.jsonl"), key=lambda path: int(path.stem))
        steps = self.validation_steps()
        assert len(dumps) == len(steps), f"{len(steps)} validations logged, {len(dumps)} dumped:\n{self.tail()}"
        return [
            Validation(step, int(path.stem), harness.read_jsonl(path)) for step, path in zip(steps, dumps, strict=True)
        ]

    def wandb_run_id(self) -> str:
        """The id of the one offline wandb run (``wandb/offline-run-<time>-<id>``) the trainer made."""
        (run,) = (self.wandb_dir / "wandb").glob("offline-run-*")
        return run.name.rsplit("-", 1)[1]


def _run(args: list[str], env: dict[str, str], cwd: Path, output: Path, timeout_s: float) -> tuple[int, float]:
    """Run ``args`` in a session of its own, output to ``output``; kill the session if it outlives ``timeout_s``."""
    start = time.monotonic()
    with output.open("wb") as log:
        process = subprocess.Popen(args, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            returncode = process.wait()
    return returncode, time.monotonic() - start


def launch_local(
    root: Path, overrides: list[str], env: dict[str, str], timeout_s: float = 600, module: str = LAUNCHER
) -> Launch:
    """``python -m <module> <overrides>`` in ``root``: verl's ``run_ppo`` starts a local Ray cluster.

    ``module`` is the fully-async launcher unless told (``MAIN_PPO``).
    """
    wandb_dir = Path(env["WANDB_DIR"])
    wandb_dir.mkdir(parents=True, exist_ok=True)
    output = root / "launcher.log"
    returncode, seconds = _run([sys.executable, "-m", module, *overrides], env, root, output, timeout_s)
    return Launch(returncode, seconds, output, root, wandb_dir)


@dataclass
class Running:
    """A launch started by ``start_local`` and not yet waited for: its process leads a session of its own."""

    process: subprocess.Popen[bytes]
    started: float
    output: Path
    root: Path
    wandb_dir: Path

    def finish(self, timeout_s: float) -> Launch:
        """Wait for it to exit (its session is killed if it outlives ``timeout_s``); what it left."""
        try:
            returncode = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            returncode = self.process.returncode
        return Launch(returncode, time.monotonic() - self.started, self.output, self.root, self.wandb_dir)

    def kill(self) -> None:
        """SIGKILL its session (verl's driver and the local Ray cluster it started), if it still runs."""
        if self.process.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def start_local(root: Path, overrides: list[str], env: dict[str, str], module: str = LAUNCHER) -> Running:
    """``launch_local`` without waiting: the test acts while verl runs, then calls ``finish`` (or ``kill``)."""
    wandb_dir = Path(env["WANDB_DIR"])
    wandb_dir.mkdir(parents=True, exist_ok=True)
    output = root / "launcher.log"
    with output.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", module, *overrides],
            env=env,
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Running(process, time.monotonic(), output, root, wandb_dir)


def launch_job(
    root: Path,
    head: RayCluster,
    overrides: list[str],
    job_env: dict[str, str],
    cli_env: dict[str, str],
    timeout_s: float = 600,
) -> Launch:
    """``ray job submit --runtime-env-json '{"env_vars": job_env}' -- python -m fully_async_main <overrides>``.

    ``ray job submit`` waits for the job and prints its driver's output (the actors' lines among it).
    """
    wandb_dir = Path(job_env["WANDB_DIR"])
    wandb_dir.mkdir(parents=True, exist_ok=True)
    args = [
        str(RAY),
        "job",
        "submit",
        "--address",
        head.dashboard_address,
        "--runtime-env-json",
        json.dumps({"env_vars": job_env}),
        "--",
        sys.executable,
        "-m",
        LAUNCHER,
        *overrides,
    ]
    output = root / "job-submit.log"
    returncode, seconds = _run(args, cli_env, root, output, timeout_s)
    return Launch(returncode, seconds, output, root, wandb_dir)


# ---------------------------------------------------------------------------------------------------------------------
# What the collector received
# ---------------------------------------------------------------------------------------------------------------------

DEFAULT_SEED = 42  # otel-valgen's default seed
TRAINING_KEYS = ("training/", "actor/")  # what verl's sync trainers log per training step
ROLLOUT_COUNT = 2  # OTEL_VALGEN_ROLLOUT_COUNT in the jobs' environment: k prompts of each training step


def _kind(record: Record) -> str:
    return str(record.attributes.get(contract.KIND, contract.KIND_VALIDATION))  # absent: validation


def expected_bottom_k(dumped: list[dict[str, Any]], k: int, seed: int = DEFAULT_SEED) -> list[str]:
    """Bottom-k over every generation verl dumped, with sample ids derived as docs/verl.md says."""
    ids: list[str] = []
    responses: dict[str, int] = {}
    for row in dumped:
        prompt = xxhash.xxh64_hexdigest(row["input"].encode())
        responses[prompt] = responses.get(prompt, -1) + 1
        ids.append(f"{prompt}/{responses[prompt]}")
    return [sample_id for _, sample_id in bottom_k(((SortKey.of(sample_key(seed, i), i), i) for i in ids), k)]


def generations(collector_file: Path, step: int, kind: str = contract.KIND_VALIDATION) -> list[Record]:
    """The generation records of ``kind`` the collector wrote for ``step``."""
    records = records_of_file(collector_file)
    return [
        r
        for r in records
        if r.event == contract.EVENT_GENERATION and r.attributes[contract.STEP] == step and _kind(r) == kind
    ]


def closed_steps(collector_file: Path, kind: str = contract.KIND_VALIDATION) -> set[int]:
    """The steps the collector wrote a summary of ``kind`` of."""
    records = records_of_file(collector_file)
    return {r.attributes[contract.STEP] for r in records if r.event == contract.EVENT_STEP_SUMMARY and _kind(r) == kind}


def wait_for_steps(
    collector_file: Path, steps: list[int], timeout_s: float = 60, kind: str = contract.KIND_VALIDATION
) -> None:
    """Wait until the collector has closed exactly ``steps`` of ``kind``; fail naming what it received instead."""
    with suppress(AssertionError):
        wait_for(
            lambda: closed_steps(collector_file, kind) == set(steps),
            timeout_s,
            f"the collector's {kind} summaries of {steps}",
        )
    received = Counter((r.event, _kind(r), r.attributes.get(contract.STEP)) for r in records_of_file(collector_file))
    assert closed_steps(collector_file, kind) == set(steps), f"{kind} at {steps}; the collector has {dict(received)}"


def assert_rollouts_sampled(
    collector_file: Path, step: int, n: int, prompts: int, *, cut: bool = False, data_source: bool = True
) -> list[Record]:
    """A training step's rollouts: k of its ``prompts`` prompts, each with all n responses, from the trainer.

    Returns the kept records. The summary counts every response (seen) and the step's prompts.
    ``cut``: verl's own agent loop cut the stand-in's responses at ``rollout.response_length`` (32), with no
    EOS (v1); else they end with EOS (the stand-ins of the other trainers do not cut them). ``data_source``:
    the trainer's batch holds the dataset's ``data_source`` (the sync trainers union it with the generated
    batch; fully-async's rollouter passes on what the stand-in generated, which has none).
    """
    k = min(ROLLOUT_COUNT, prompts)
    kept = generations(collector_file, step, contract.KIND_ROLLOUT)
    by_prompt: dict[str, list[str]] = {}
    for record in kept:
        by_prompt.setdefault(record.attributes[contract.PROMPT_ID], []).append(
            untagged(record.attributes[contract.SAMPLE_ID])
        )
    assert len(by_prompt) == k, by_prompt
    for prompt, sample_ids in by_prompt.items():
        assert sorted(sample_ids) == [f"{prompt}/{i}" for i in range(n)], sample_ids
    for record in kept:
        attributes = record.attributes
        assert attributes[contract.SOURCE] == "trainer"
        assert attributes[contract.SAMPLE_COUNT] == ROLLOUT_COUNT
        assert isinstance(attributes[contract.SCORE], float)
        assert isinstance(attributes[contract.ADVANTAGE], float)
        assert attributes[contract.RESPONSE_LENGTH] == 32 if cut else attributes[contract.RESPONSE_LENGTH] > 0
        assert attributes[contract.TRUNCATED] is cut
        assert attributes.get(contract.DATA_SOURCE) == (harness.DATA_SOURCE if data_source else None)
        assert attributes[contract.EXTRA_PREFIX + "acc"] == attributes[contract.SCORE]  # the reward's extra info
    assert len({r.trace_id for r in kept}) == 1
    (summary,) = [
        r
        for r in records_of_file(collector_file)
        if r.event == contract.EVENT_STEP_SUMMARY and r.attributes[contract.STEP] == step and _kind(r) == "rollout"
    ]
    assert summary.attributes[contract.SEEN] == prompts * n
    assert summary.attributes[contract.PROMPTS_SEEN] == prompts
    assert summary.attributes[contract.PROMPTS_KEPT] == k
    return kept


def assert_validation_sampled(collector_file: Path, validation: Validation, k: int, source: str) -> None:
    """One validation's records: the bottom-k of what verl dumped, from ``source``, one trace, its summary's counts."""
    kept = generations(collector_file, validation.trainer_step)
    assert [untagged(r.attributes[contract.SAMPLE_ID]) for r in kept] == expected_bottom_k(validation.dumped, k)
    assert {r.attributes[contract.SOURCE] for r in kept} == {source}
    assert len({r.trace_id for r in kept}) == 1
    (summary,) = [
        r
        for r in records_of_file(collector_file)
        if r.event == contract.EVENT_STEP_SUMMARY
        and r.attributes[contract.STEP] == validation.trainer_step
        and _kind(r) == contract.KIND_VALIDATION
    ]
    assert summary.attributes[contract.SEEN] == len(validation.dumped)
    assert summary.attributes[contract.KEPT] == min(k, len(validation.dumped))
