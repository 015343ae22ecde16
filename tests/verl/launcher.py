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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

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


ROLLOUT_DATA_DIR = "rollout_data"  # trainer.rollout_data_dir in the run's folder: verl's own dump of each step


def stand_in_env(root: Path, rollout_count: int) -> dict[str, str]:
    """``test_only_env`` keeping ``rollout_count`` prompts per training step (``OTEL_VALGEN_ROLLOUT_COUNT``)."""
    return {**test_only_env(root), "OTEL_VALGEN_ROLLOUT_COUNT": str(rollout_count)}


def launcher_overrides(
    root: Path, files: Any, k: int, *, local_cluster: bool, prompts: int = 2, n: int = 2, dump: bool = False
) -> list[str]:
    """Verl's hydra overrides: the tiny CPU run, k, the console, wandb and file trackers, one training step.

    The trainer takes ``actor.ppo_mini_batch_size`` x ``async_training.require_batches`` (1) samples (one
    prompt with its n responses each) per step; ``rollout.total_rollout_steps`` = ``prompts`` with a
    mini-batch of ``prompts`` gives one training step of ``prompts`` prompts x ``n`` responses, so the
    trainer validates before training and after that step (the train file needs ``prompts`` rows: the
    rollouter's steps are ``min(total_rollout_steps, rows)``). ``dump``: ``trainer.rollout_data_dir`` is
    ``ROLLOUT_DATA_DIR``, where verl's ``SeparateRayPPOTrainer._fit_dump_data`` writes the step's batch
    as ``{global_steps}.jsonl``. A local cluster (verl's own ``ray.init``) gets enough logical CPUs for
    verl's actors (10 each) and no dashboard; a job's cluster has its own.
    """
    # actor_rollout_ref.rollout.n (not the launcher's rollout.n) is what the rollouter repeats each prompt by:
    # GRPO groups of n, which the trainer's rollouts keep whole
    extra = [
        f"rollout.total_rollout_steps={prompts}",
        f"actor_rollout_ref.rollout.n={n}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}",
        *([f"trainer.rollout_data_dir={root / ROLLOUT_DATA_DIR}"] if dump else []),
    ]
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


def main_ppo_overrides(
    root: Path,
    files: Any,
    model_dir: Path,
    k: int,
    *,
    use_v1: bool,
    prompts: int = 4,
    n: int = 2,
    dump: bool = False,
) -> list[str]:
    """``main_ppo``'s hydra overrides: the tiny CPU run, k, the three trackers, one training step.

    ``trainer.total_training_steps=1``, ``data.train_batch_size`` = ``prompts`` (the train file needs at
    least that many rows; the conftest's 6 make one batch of the default 4), ``rollout.n`` = ``n``:
    ``fit`` validates before training at ``global_steps`` 0 and after the last step at 1
    (``trainer.test_freq=1``). ``dump``: ``trainer.rollout_data_dir`` is ``ROLLOUT_DATA_DIR``, where both
    trainers write the step's batch as ``{global_steps}.jsonl`` (legacy: ``RayPPOTrainer._log_rollout_data``
    after ``_update_actor``; v1: ``PPOTrainer._log_rollout_data``, fetched from TransferQueue after
    ``_compute_metrics``). verl's own local ``ray.init`` gets enough logical CPUs (one per actor: v1 adds
    TransferQueue's controller and storage units, its agent-loop and reward-loop workers) and no
    dashboard; v1's TransferQueue gets one storage unit instead of 8 (one process per unit on a 2-core
    machine).
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
            f"data.train_batch_size={prompts}",
            f"actor_rollout_ref.rollout.n={n}",  # GRPO groups of n: the rollouts keep each group whole
            *([f"trainer.rollout_data_dir={root / ROLLOUT_DATA_DIR}"] if dump else []),
            "ray_kwargs.ray_init.num_cpus=32",
            "+ray_kwargs.ray_init.include_dashboard=False",
            *(V1_OVERRIDES if use_v1 else []),
        ],
    )


def tool_agent_overrides(
    mode: str,
    root: Path,
    files: Any,
    model_dir: Path,
    tools: Path,
    k: int,
    *,
    prompts: int,
    n: int,
    response_length: int,
) -> list[str]:
    """The hydra overrides of one training step of ``mode`` with multi-turn and a tool, as users configure them.

    ``mode``: ``v1`` or ``legacy`` (``main_ppo``), ``fully_async`` (``fully_async_main``); ``tools``: a
    ``harness.tool_config`` yaml. Multi-turn on, verl's ``tool_agent`` loop, the hermes format; responses
    up to ``response_length`` tokens. The legacy trainer and the fully-async rollouter build verl's real
    agent-loop manager here (v1 always does), which needs the rollout's name (the server behind it is
    ``harness.CpuLLMClient``) and, on this machine, one reward-loop worker and two agent-loop workers
    instead of verl's 8 each. ``trainer.rollout_data_dir`` is set (verl dumps the step).
    """
    if mode == "fully_async":
        base = launcher_overrides(
            root, replace(files, tokenizer_dir=model_dir), k, local_cluster=True, prompts=prompts, n=n, dump=True
        )
    else:
        base = main_ppo_overrides(root, files, model_dir, k, use_v1=mode == "v1", prompts=prompts, n=n, dump=True)
    longer = {"data.max_response_length", "actor_rollout_ref.rollout.response_length"}
    agent_loop = [
        "actor_rollout_ref.rollout.name=vllm",
        "reward.num_workers=1",
        "actor_rollout_ref.rollout.agent.num_workers=2",
    ]
    return [
        *(item for item in base if item.split("=", 1)[0] not in longer),
        *(f"{name}={response_length}" for name in sorted(longer)),
        *(agent_loop if mode != "v1" else []),  # v1: main_ppo_overrides has them (V1_OVERRIDES, sync_overrides)
        "actor_rollout_ref.rollout.multi_turn.enable=True",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
        "actor_rollout_ref.rollout.multi_turn.format=hermes",
        "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
    ]


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

    def rollout_dump(self, global_steps: int) -> list[dict[str, Any]]:
        """The dump verl itself wrote of a training step (``trainer.rollout_data_dir``): one JSON line per response.

        Each line holds ``input`` (the prompt decoded with ``skip_special_tokens=True``), ``output``,
        ``gts``, ``score``, ``step`` and the reward's extra columns (v1: ``uid``, the TransferQueue key).
        """
        path = self.root / ROLLOUT_DATA_DIR / f"{global_steps}.jsonl"
        assert path.is_file(), f"verl dumped no rollouts at {path}:\n{self.tail()}"
        return harness.read_jsonl(path)

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


def dumped_ids(dumped: list[dict[str, Any]]) -> list[str]:
    """The sample id of each generation verl dumped, derived as docs/verl.md says."""
    ids: list[str] = []
    responses: dict[str, int] = {}
    for row in dumped:
        prompt = xxhash.xxh64_hexdigest(row["input"].encode())
        responses[prompt] = responses.get(prompt, -1) + 1
        ids.append(f"{prompt}/{responses[prompt]}")
    return ids


def expected_bottom_k(dumped: list[dict[str, Any]], k: int, seed: int = DEFAULT_SEED) -> list[str]:
    """Bottom-k over every generation verl dumped, with sample ids derived as docs/verl.md says."""
    ids = dumped_ids(dumped)
    return [sample_id for _, sample_id in bottom_k(((SortKey.of(sample_key(seed, i), i), i) for i in ids), k)]


DUMP_NOT_IN_ROW: Final = frozenset({"step", "reward", "uid"})
"""verl's dump columns a row does not repeat: the step is the record's, ``reward`` the score, ``uid`` v1's key."""
DUMP_OWN_COLUMNS: Final = DUMP_NOT_IN_ROW | {"input", "output", "gts", "score"}
"""verl's dump columns that are not ``reward_extra_info``'s."""


def _texts(messages: list[dict[str, Any]]) -> str:
    parts = [part for message in messages for part in message["parts"]]
    return "".join(part.get("content", "") for part in parts if part["type"] == "text")


def row_texts(attributes: dict[str, Any], body: dict[str, Any]) -> tuple[str, str]:
    """A kept row's prompt and response as verl's dumps write them (``input``, ``output``).

    A row of verl's agent loop is a conversation (docs/verl.md): its prompt is the text of its prompt
    messages (``make_tokenizer``'s chat template only adds special tokens, which the dump's decode drops),
    a single-turn response the text of its one assistant message. A row without messages: its body.
    """
    inputs, outputs = attributes.get(contract.GEN_AI_INPUT_MESSAGES), attributes.get(contract.GEN_AI_OUTPUT_MESSAGES)
    return (
        _texts(inputs) if inputs is not None else body[contract.BODY_INPUT],
        _texts(outputs) if outputs is not None else body[contract.BODY_OUTPUT],
    )


def assert_conversation(attributes: dict[str, Any]) -> None:
    """A single-turn agent-loop row: the prompt's user message in, one assistant message out."""
    assert [m["role"] for m in attributes[contract.GEN_AI_INPUT_MESSAGES]] == ["user"], attributes
    assert [m["role"] for m in attributes[contract.GEN_AI_OUTPUT_MESSAGES]] == ["assistant"], attributes


def assert_rows_equal_dump(collector_file: Path, validation: Validation, cut_at_limit: bool = False) -> None:
    """Each kept row equals verl's own ``validation_data_dir`` row of the same prompt and response, field by field.

    Input, output, score, ground truth (``gts``) and every ``reward_extra_info`` column of verl's dump;
    the data source is the dataset's (verl's dump has none). The response length and ``truncated`` follow
    from the dumped output: ``harness.make_tokenizer``'s tokens are the text's UTF-8 bytes, and every
    stand-in ends its response with EOS, which decoding drops. With ``cut_at_limit`` (v1: verl's own agent
    loop cuts each response at ``RESPONSE_LIMIT`` tokens) an output of ``RESPONSE_LIMIT`` tokens lost its
    EOS to the cut; any other response is whole, EOS counted (the other stand-ins return it as they made it).
    A row is found by its input and output (v1 dumps a prompt's responses in another order than it logs
    them), and each dumped row matches one kept row at most.
    """
    unmatched = list(validation.dumped)
    kept = kept_rows(collector_file, validation.trainer_step, contract.KIND_VALIDATION)
    assert kept
    for attributes, body in kept:
        assert_conversation(attributes)
        text_in, text_out = row_texts(attributes, body)
        mine = {
            "input": text_in,
            "output": text_out,
            "score": attributes[contract.SCORE],
            "gts": body.get(contract.BODY_GROUND_TRUTH),
            **{
                name.removeprefix(contract.EXTRA_PREFIX): value
                for name, value in attributes.items()
                if name.startswith(contract.EXTRA_PREFIX)
            },
        }
        dumped = [{name: value for name, value in row.items() if name not in DUMP_NOT_IN_ROW} for row in unmatched]
        assert mine in dumped, f"kept row {mine} is none of verl's dumped rows {dumped}"
        del unmatched[dumped.index(mine)]
        assert attributes.get(contract.DATA_SOURCE) == harness.DATA_SOURCE
        assert len(mine) > 4, mine  # the stand-in reward's "acc" column came too
        tokens = len(mine["output"].encode("utf-8"))
        cut = cut_at_limit and tokens >= harness.RESPONSE_LIMIT
        expected = (harness.RESPONSE_LIMIT, True) if cut else (tokens + 1, False)
        assert (attributes[contract.RESPONSE_LENGTH], attributes[contract.TRUNCATED]) == expected, attributes


def expected_rollout_prompts(dumped: list[dict[str, Any]], k: int, seed: int = DEFAULT_SEED) -> dict[str, Counter[str]]:
    """The k prompts a step keeps, from verl's dump of the step, each with its responses' outputs (a multiset).

    The oracle of the rule, written apart from otel_valgen's selection: a text-only prompt's id is the
    XXH64 (hex) of its text, the ``input`` verl dumps (decoded with ``skip_special_tokens=True``); its key
    is ``sample_key(seed, prompt id)``; the step keeps the k prompts with the smallest (key, id), each
    with every response the dump holds for it.
    """
    outputs: dict[str, Counter[str]] = {}
    for row in dumped:
        prompt_id = xxhash.xxh64_hexdigest(row["input"].encode())
        outputs.setdefault(prompt_id, Counter())[row["output"]] += 1
    chosen = sorted(outputs, key=lambda prompt_id: (sample_key(seed, prompt_id), prompt_id))[:k]
    return {prompt_id: outputs[prompt_id] for prompt_id in chosen}


def _otlp_value(value: dict[str, Any]) -> Any:
    """An OTLP/JSON ``AnyValue``: the scalar kinds, arrays and key-value lists (a record's body)."""
    if "kvlistValue" in value:
        return {item["key"]: _otlp_value(item.get("value", {})) for item in value["kvlistValue"].get("values", [])}
    if "arrayValue" in value:
        return [_otlp_value(item) for item in value["arrayValue"].get("values", [])]
    for name, convert in (("stringValue", str), ("intValue", int), ("doubleValue", float), ("boolValue", bool)):
        if name in value:
            return convert(value[name])
    return None


def kept_rows(collector_file: Path, step: int, kind: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The kept generation records of ``kind`` at ``step`` as the collector wrote them: (attributes, body) each.

    Read from the file exporter's OTLP/JSON lines directly (``Record`` has no body).
    """
    rows = []
    lines = collector_file.read_text(encoding="utf-8").split("\n") if collector_file.exists() else []
    for line in filter(str.strip, lines[:-1]):  # the last, without its newline, is still being written
        for resource_logs in json.loads(line).get("resourceLogs", []):
            for scope_logs in resource_logs.get("scopeLogs", []):
                for log in scope_logs.get("logRecords", []):
                    attributes = {a["key"]: _otlp_value(a.get("value", {})) for a in log.get("attributes", [])}
                    if (
                        log.get("eventName") == contract.EVENT_GENERATION
                        and attributes.get(contract.KIND, contract.KIND_VALIDATION) == kind
                        and attributes.get(contract.STEP) == step
                    ):
                        rows.append((attributes, _otlp_value(log.get("body", {}))))
    return rows


def rollout_outputs(collector_file: Path, step: int) -> dict[str, Counter[str]]:
    """The kept rollout records of ``step`` as the collector wrote them: prompt id -> its outputs (a multiset)."""
    kept: dict[str, Counter[str]] = {}
    for attributes, body in kept_rows(collector_file, step, contract.KIND_ROLLOUT):
        assert_conversation(attributes)
        kept.setdefault(attributes[contract.PROMPT_ID], Counter())[row_texts(attributes, body)[1]] += 1
    return kept


def assert_rollouts_match_dump(collector_file: Path, launch: Launch, step: int, prompts: int, n: int, k: int) -> None:
    """The kept prompts of ``step`` are exactly the oracle's bottom-k of verl's dump, each with all its outputs.

    The dump must hold the whole step: ``prompts`` x ``n`` rows of ``step``, ``prompts`` distinct inputs.
    """
    wait_for_steps(collector_file, [step], kind=contract.KIND_ROLLOUT)
    dumped = launch.rollout_dump(step)
    assert len(dumped) == prompts * n, len(dumped)
    assert {row["step"] for row in dumped} == {step}
    assert len({row["input"] for row in dumped}) == prompts
    expected = expected_rollout_prompts(dumped, k)
    kept = rollout_outputs(collector_file, step)
    assert sorted(kept) == sorted(expected), f"kept {sorted(kept)}, the dump's bottom-{k} {sorted(expected)}"
    for prompt_id, outputs in expected.items():
        assert kept[prompt_id] == outputs, f"prompt {prompt_id}: kept {kept[prompt_id]}, dumped {outputs}"


def generations(collector_file: Path, step: int, kind: str = contract.KIND_VALIDATION) -> list[Record]:
    """The generation records of ``kind`` the collector wrote for ``step``."""
    records = records_of_file(collector_file)
    return [
        r
        for r in records
        if r.event == contract.EVENT_GENERATION and r.attributes[contract.STEP] == step and _kind(r) == kind
    ]


def validation_summary(collector_file: Path, step: int) -> dict[str, Any]:
    """The attributes of the one validation summary the collector wrote for ``step``."""
    (summary,) = [
        r
        for r in records_of_file(collector_file)
        if r.event == contract.EVENT_STEP_SUMMARY
        and r.attributes[contract.STEP] == step
        and _kind(r) == contract.KIND_VALIDATION
    ]
    return summary.attributes


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
    collector_file: Path,
    step: int,
    n: int,
    prompts: int,
    *,
    cut: bool = False,
    data_source: bool = True,
    count: int | None = None,
) -> list[Record]:
    """A training step's rollouts: k of its ``prompts`` prompts, each with all n responses, from the trainer.

    k is ``min(count, prompts)``; ``count`` is the jobs' ``OTEL_VALGEN_ROLLOUT_COUNT`` (default ``ROLLOUT_COUNT``,
    ``test_only_env``'s; ``stand_in_env`` sets another).

    Returns the kept records. The summary counts every response (seen) and the step's prompts.
    ``cut``: verl's own agent loop cut the stand-in's responses at ``rollout.response_length`` (32), with no
    EOS (v1); else they end with EOS (the stand-ins of the other trainers do not cut them). ``data_source``:
    the trainer's batch holds the dataset's ``data_source`` (the sync trainers union it with the generated
    batch; fully-async's rollouter passes on what the stand-in generated, which has none).
    """
    count = ROLLOUT_COUNT if count is None else count
    k = min(count, prompts)
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
        assert attributes[contract.SAMPLE_COUNT] == count
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


def assert_validation_sampled(
    collector_file: Path, validation: Validation, k: int, source: str, cut_at_limit: bool = False
) -> None:
    """One validation's records: the bottom-k of what verl dumped, from ``source``, one trace, its summary's counts.

    Each kept row equals verl's own dumped row (``assert_rows_equal_dump``).
    """
    assert_rows_equal_dump(collector_file, validation, cut_at_limit)
    kept = generations(collector_file, validation.trainer_step)
    assert [untagged(r.attributes[contract.SAMPLE_ID]) for r in kept] == expected_bottom_k(validation.dumped, k)
    assert {r.attributes[contract.SOURCE] for r in kept} == {source}
    assert len({r.trace_id for r in kept}) == 1
    summary = validation_summary(collector_file, validation.trainer_step)
    assert summary[contract.SEEN] == len(validation.dumped)
    assert summary[contract.KEPT] == min(k, len(validation.dumped))
