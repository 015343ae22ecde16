"""User story: a multi-turn tool run logs each kept row as the conversation verl's agent loop held, in every mode.

verl 0.9.1's real entry points run unmodified, as users launch them, with multi-turn configured as users
configure it: ``actor_rollout_ref.rollout.multi_turn.enable=True``, a ``multi_turn.tool_config_path`` yaml
naming a tool (verl's own ``BaseTool`` as ``calc``), the hermes format, and verl's ``tool_agent`` loop
(``ToolAgentLoop``, its hermes ``ToolParser``, its tool calls). Once per mode (``MODES``):

- ``v1``: ``python -m verl.trainer.main_ppo`` (its default v1 trainer, TransferQueue and verl's real
  ``AgentLoopManagerTQ`` workers);
- ``legacy``: the same with ``trainer.use_v1=False`` (``main_ppo_v0.TaskRunner``, ``RayPPOTrainer.fit``,
  verl's real ``AgentLoopManager``);
- ``fully_async``: ``python -m verl.experimental.fully_async_policy.fully_async_main`` (the rollouter
  validates and generates through verl's real ``FullyAsyncAgentLoopManager``; the trainer trains on the
  samples the message queue carries).

In each, verl's agent-loop workers, reward-loop workers and tool run for real; only the LLM server is
stood in for (``harness.CpuLLMClient`` with ``harness.TOOL_CALLS_ENV``: one or two hermes ``<tool_call>``
turns, then an answer), besides the GPU parts of ``harness.REPLACED``. Nothing but the two documented
variables (and ``OTEL_VALGEN_ROLLOUT_COUNT``) is set for otel-valgen.

verl's own record of every trajectory is the messages its ``ToolAgentLoop`` held when it ended
(``AgentData.messages``), which the test-only plugin writes down (``cpu_plugin._on_tool_agent``).
Every kept validation row (before and after the training step) and every kept rollout row of the
step must carry, as GenAI messages, exactly one such trajectory, turn by turn: the prompt's
messages in, each assistant turn's text, tool call (name, arguments) and tool response out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from otel_valgen import contract
from otel_valgen.conversations import to_messages
from tests.e2e import harness as e2e
from tests.support.ray_cluster import ray_env
from tests.verl import harness, launcher
from tests.verl.conftest import VerlFiles

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

K = 4  # trainer.log_val_generations
VAL_PROMPTS = 3  # x val_kwargs.n=2: 6 generations
PROMPTS = 4  # the training step's prompts
N = 2  # actor_rollout_ref.rollout.n
ROLLOUT_K = 2  # OTEL_VALGEN_ROLLOUT_COUNT
RESPONSE_LENGTH = 512  # room for three turns and two tool results (one token per byte)
AGENT_MESSAGES = "agent_messages"  # cpu_plugin.AGENT_MESSAGES_ENV's folder in the run's root
MODES = ("v1", "legacy", "fully_async")  # main_ppo's default, main_ppo with trainer.use_v1=False, fully_async_main
TRAINED_STEP = 1  # the one training step's global_steps (fully-async: the trainer's version after it)


@dataclass
class ToolRun:
    mode: str
    launch: launcher.Launch
    collector: e2e.Collector
    recorded: list[list[dict[str, Any]]]  # verl's AgentData.messages of every trajectory


def _overrides(mode: str, run_root: Path, files: VerlFiles, model_dir: Path, tools: Path) -> list[str]:
    """The mode's hydra overrides for one training step, with multi-turn and the tool as users configure them.

    The legacy trainer and the fully-async rollouter build verl's real agent-loop manager here (v1 always
    does), which needs the rollout's name (the server behind it is ``CpuLLMClient``) and, on this machine,
    one reward-loop worker and two agent-loop workers instead of verl's 8 each.
    """
    if mode == "fully_async":
        base = launcher.launcher_overrides(
            run_root, replace(files, tokenizer_dir=model_dir), K, local_cluster=True, prompts=PROMPTS, n=N, dump=True
        )
    else:
        base = launcher.main_ppo_overrides(
            run_root, files, model_dir, K, use_v1=mode == "v1", prompts=PROMPTS, n=N, dump=True
        )
    longer = {"data.max_response_length", "actor_rollout_ref.rollout.response_length"}
    agent_loop = [
        "actor_rollout_ref.rollout.name=vllm",
        "reward.num_workers=1",
        "actor_rollout_ref.rollout.agent.num_workers=2",
    ]
    return [
        *(item for item in base if item.split("=", 1)[0] not in longer),
        *(f"{name}={RESPONSE_LENGTH}" for name in sorted(longer)),
        *(agent_loop if mode != "v1" else []),  # v1: main_ppo_overrides has them (V1_OVERRIDES, sync_overrides)
        "actor_rollout_ref.rollout.multi_turn.enable=True",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
        "actor_rollout_ref.rollout.multi_turn.format=hermes",
        "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
    ]


@pytest.fixture(scope="module", params=MODES)
def run(
    request: pytest.FixtureRequest, verl_files: VerlFiles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ToolRun]:
    """The collector, then the mode's entry point with a tool, validating before and after one training step."""
    mode: str = request.param
    root = tmp_path_factory.mktemp(f"tool_agent_{mode}")
    model_dir = harness.make_model_dir(root / "model", verl_files.tokenizer)
    train_path, val_path = harness.make_dataset(root / "data", VAL_PROMPTS, n_train=PROMPTS)
    files = replace(verl_files, train_path=train_path, val_path=val_path)
    tools = harness.tool_config(root / "tools.yaml")
    with harness.collector(root) as collector:
        run_root = root / "run"
        (run_root / AGENT_MESSAGES).mkdir(parents=True)
        job_env = {
            **launcher.user_env(collector.http_endpoint),
            **launcher.stand_in_env(run_root, ROLLOUT_K),
            harness.TOOL_CALLS_ENV: "1",
            "VALGEN_TEST_AGENT_MESSAGES": str(run_root / AGENT_MESSAGES),
        }
        overrides = _overrides(mode, run_root, files, model_dir, tools)
        module = launcher.LAUNCHER if mode == "fully_async" else launcher.MAIN_PPO
        launch = launcher.launch_local(run_root, overrides, ray_env(job_env), module=module)
        print(f"tool agent, {mode}: {module} ran {launch.seconds:.1f}s, exit code {launch.returncode}")
        assert launch.returncode == 0, launch.tail()
        recorded = [
            json.loads(line)
            for path in sorted((run_root / AGENT_MESSAGES).glob("*.jsonl"))
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        yield ToolRun(mode, launch, collector, recorded)


def _trajectories(recorded: list[list[dict[str, Any]]]) -> list[tuple[list[Any], list[Any]]]:
    """The recorded trajectories as GenAI messages: (prompt, generated), split at the first assistant turn."""
    split = []
    for messages in recorded:
        first = next(i for i, message in enumerate(messages) if message["role"] == "assistant")
        split.append((to_messages(messages[:first]).messages, to_messages(messages[first:]).messages))
    return split


def _assert_rows_are_verls_trajectories(run: ToolRun, step: int, kind: str, expected_rows: int) -> None:
    """Each kept row's messages are one of verl's recorded trajectories, turn by turn (each used once)."""
    unmatched = _trajectories(run.recorded)
    kept = launcher.kept_rows(run.collector.file_path, step, kind)
    assert len(kept) == expected_rows, (step, kind, len(kept))
    for attributes, body in kept:
        mine = (attributes[contract.GEN_AI_INPUT_MESSAGES], attributes[contract.GEN_AI_OUTPUT_MESSAGES])
        assert mine in unmatched, f"{kind} row at {step}: {mine} is none of verl's trajectories"
        unmatched.remove(mine)
        output = mine[1]
        roles = [message["role"] for message in output]
        question = int(mine[0][-1]["parts"][0]["content"].split(":")[0].removeprefix("question "))
        calls = harness.tool_calls_wanted(question)
        assert roles == ["assistant", "tool"] * calls + ["assistant"], roles
        for turn in range(calls):
            (text, call) = output[2 * turn]["parts"]
            assert text["type"] == "text", text
            assert text["content"].startswith("Let me compute ("), text
            assert (call["type"], call["name"]) == ("tool_call", harness.TOOL_NAME)
            assert call["arguments"] == {"expression": f"{question}+{question}", "call": turn}
            (response,) = output[2 * turn + 1]["parts"]
            assert (response["type"], response["response"]) == ("tool_call_response", "Updated the tool state.")
        assert "#### " in output[-1]["parts"][0]["content"]
        assert f"→ {harness.TOOL_NAME}(" in body[contract.BODY_OUTPUT]  # the readable body shows the call


def test_kept_validation_rows_carry_verls_conversations(run: ToolRun) -> None:
    """Every validation's k kept rows are verl's trajectories turn by turn, tool calls and results included.

    The sync trainers validate at global_steps 0 and 1; the fully-async rollouter at the trainer's versions,
    from 0 (before training) to the version after the step (at least two validations).
    """
    steps = sorted(set(run.launch.validation_steps()))
    if run.mode == "fully_async":
        assert steps[0] == 0, steps
        assert steps[-1] >= TRAINED_STEP, steps
    else:
        assert steps == [0, TRAINED_STEP], steps
    launcher.wait_for_steps(run.collector.file_path, steps)
    for step in steps:
        _assert_rows_are_verls_trajectories(run, step, contract.KIND_VALIDATION, K)


def test_kept_rollout_rows_carry_verls_conversations(run: ToolRun) -> None:
    """The training step's kept GRPO groups are verl's trajectories turn by turn."""
    if run.mode != "fully_async":  # the fully-async trainer logs no training metrics of the sync trainers' keys
        assert run.launch.training_steps() == [TRAINED_STEP]
    launcher.wait_for_steps(run.collector.file_path, [TRAINED_STEP], kind=contract.KIND_ROLLOUT)
    _assert_rows_are_verls_trajectories(run, TRAINED_STEP, contract.KIND_ROLLOUT, ROLLOUT_K * N)
