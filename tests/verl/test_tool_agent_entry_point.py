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

The same runs carry the tokens (one launch per mode serves both stories): the settings a user turns on
to watch the training-inference mismatch are on (``TOKEN_SETTINGS``:
``actor_rollout_ref.rollout.calculate_log_probs=True`` and ``algorithm.rollout_correction`` in decoupled
mode with per-token importance weights, ``rollout_is=token``, and a rejection that masks tokens,
``rollout_rs=token_k3`` at 0.5). The stand-in LLM server's log-probability of a digit token is -1
(``harness.rollout_log_prob``), of any other 0, while the trainer's stand-in gives every token 0; verl's
correction rejects the digits (k3 = e - 2 > 0.5). verl's own tensors are what a test-only probe recorded
where verl corrected the batch (``cpu_plugin``, ``VALGEN_TEST_CORRECTIONS``): each row's ids, rollout and
trainer log-probs, response mask before and after the correction, and importance weights. Each kept
rollout record must carry exactly those, token by token (the masked tokens exactly those verl took out
of the mask, the model's tokens exactly the mask before; a tool's tokens are not the model's), and the
step summary's mismatch figures must be those of every row of the batch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from otel_valgen import contract, tokens
from otel_valgen.conversations import to_messages
from otel_valgen.trajectories import merge
from tests.e2e import harness as e2e
from tests.support.ray_cluster import ray_env
from tests.verl import cpu_plugin, harness, launcher
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
CORRECTIONS = "corrections"  # cpu_plugin.CORRECTIONS_ENV's folder in the run's root
TOOL_RESPONSE = "Updated the tool state."  # what verl's BaseTool answers: tokens that are not the model's
TOKEN_SETTINGS = [
    "actor_rollout_ref.rollout.calculate_log_probs=True",
    "algorithm.rollout_correction.bypass_mode=False",  # fully-async's default is bypass mode
    "algorithm.rollout_correction.rollout_is=token",
    "algorithm.rollout_correction.rollout_rs=token_k3",
    "algorithm.rollout_correction.rollout_rs_threshold=0.5",
]


@dataclass
class ToolRun:
    mode: str
    launch: launcher.Launch
    collector: e2e.Collector
    recorded: list[list[dict[str, Any]]]  # verl's AgentData.messages of every trajectory
    corrected: list[dict[str, Any]]  # what the probe recorded: every row of every batch verl corrected
    tokenizer: Any


@pytest.fixture(scope="module", params=MODES)
def run(
    request: pytest.FixtureRequest, verl_files: VerlFiles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ToolRun]:
    """The collector, then the mode's entry point (a tool, the correction on): validations around one training step."""
    mode: str = request.param
    root = tmp_path_factory.mktemp(f"tool_agent_{mode}")
    model_dir = harness.make_model_dir(root / "model", verl_files.tokenizer)
    train_path, val_path = harness.make_dataset(root / "data", VAL_PROMPTS, n_train=PROMPTS)
    files = replace(verl_files, train_path=train_path, val_path=val_path)
    tools = harness.tool_config(root / "tools.yaml")
    with harness.collector(root) as collector:
        run_root = root / "run"
        (run_root / AGENT_MESSAGES).mkdir(parents=True)
        (run_root / CORRECTIONS).mkdir()
        job_env = {
            **launcher.user_env(collector.http_endpoint),
            **launcher.stand_in_env(run_root, ROLLOUT_K),
            harness.TOOL_CALLS_ENV: "1",
            "VALGEN_TEST_AGENT_MESSAGES": str(run_root / AGENT_MESSAGES),
            cpu_plugin.CORRECTIONS_ENV: str(run_root / CORRECTIONS),
        }
        overrides = launcher.tool_agent_overrides(
            mode, run_root, files, model_dir, tools, K, prompts=PROMPTS, n=N, response_length=RESPONSE_LENGTH
        )
        module = launcher.LAUNCHER if mode == "fully_async" else launcher.MAIN_PPO
        launch = launcher.launch_local(run_root, [*overrides, *TOKEN_SETTINGS], ray_env(job_env), module=module)
        print(f"tool agent, {mode}: {module} ran {launch.seconds:.1f}s, exit code {launch.returncode}")
        assert launch.returncode == 0, launch.tail()
        recorded = _jsonl(run_root / AGENT_MESSAGES)
        yield ToolRun(mode, launch, collector, recorded, _jsonl(run_root / CORRECTIONS), verl_files.tokenizer)


def _jsonl(folder: Path) -> list[Any]:
    """Every line a probe wrote in ``folder``, parsed."""
    return [
        json.loads(line)
        for path in sorted(folder.glob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


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
            assert (response["type"], response["response"]) == ("tool_call_response", TOOL_RESPONSE)
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


def _verls_row(run: ToolRun, ids: list[int]) -> dict[str, Any]:
    """The row of the corrected batch with these response ids (rows with the same ids hold the same values)."""
    found = [row for row in run.corrected if row["ids"] == ids]
    assert found, f"no row verl corrected has the ids {ids}"
    return found[0]


def _floats(values: list[float] | None) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).astype(np.float64)


def test_kept_rows_carry_verls_tensors_token_by_token(run: ToolRun) -> None:
    """Each kept response's tokens are verl's: ids, log-probs, weights, the model's and the masked tokens."""
    assert len(run.corrected) == PROMPTS * N, len(run.corrected)  # one training step, each row corrected once
    launcher.wait_for_steps(run.collector.file_path, [TRAINED_STEP], kind=contract.KIND_ROLLOUT)
    kept = launcher.generations(run.collector.file_path, TRAINED_STEP, contract.KIND_ROLLOUT)
    assert len(kept) == ROLLOUT_K * N
    masked_anywhere = 0
    for record in kept:
        got = tokens.decode(record.attributes[contract.TOKENS])
        assert got.ids is not None
        assert got.pieces is not None
        row = _verls_row(run, got.ids.tolist())
        assert got.count == len(row["ids"])
        assert got.cut_count == 0
        assert np.array_equal(got.floats[tokens.ROLLOUT], _floats(row["rollout"]))
        assert np.array_equal(got.floats[tokens.TRAINER], _floats(row["trainer"]))
        assert np.array_equal(got.floats[tokens.WEIGHT], _floats(row["weight"]))
        assert tokens.REFERENCE not in got.floats  # no reference policy in these runs: said, not sent
        before, after = np.asarray(row["before"], dtype=bool), np.asarray(row["after"], dtype=bool)
        assert np.array_equal(got.masks[tokens.MODEL], before)
        assert np.array_equal(got.masks[tokens.MASKED], before & ~after)
        masked_anywhere += int(got.masks[tokens.MASKED].sum())
        # the response length counts the model's tokens, those the correction masked too
        assert record.attributes[contract.RESPONSE_LENGTH] == int(before.sum())
        text = run.tokenizer.decode(row["ids"], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        assert "".join(got.pieces) == text
        assert TOOL_RESPONSE in "".join(p for p, mine in zip(got.pieces, before, strict=True) if not mine)
        assert TOOL_RESPONSE not in "".join(p for p, mine in zip(got.pieces, before, strict=True) if mine)
    assert masked_anywhere > 0, "verl's correction masked none of the kept tokens"
    assert "sent without their 'reference' tokens" in run.launch.text()


def test_the_summarys_mismatch_figures_are_every_responses(run: ToolRun) -> None:
    """The step summary's ``valgen.mismatch`` equals the figures of every row verl corrected, computed at once."""
    launcher.wait_for_steps(run.collector.file_path, [TRAINED_STEP], kind=contract.KIND_ROLLOUT)
    width = max(len(row["ids"]) for row in run.corrected)

    def matrix(name: str, dtype: Any) -> np.ndarray:
        out = np.zeros((len(run.corrected), width), dtype=dtype)
        for index, row in enumerate(run.corrected):
            out[index, : len(row[name])] = row[name]
        return out

    before, after = matrix("before", bool), matrix("after", bool)
    columns = {
        tokens.ROLLOUT: matrix("rollout", np.float32),
        tokens.TRAINER: matrix("trainer", np.float32),
        tokens.MODEL: before,
        tokens.MASKED: before & ~after,
    }
    whole = tokens.MismatchFigures()
    for row, figures in zip(run.corrected, tokens.batch_figures(columns), strict=True):
        assert figures is not None
        whole.add(figures, row["data_source"])
    (summary,) = [
        r.attributes
        for r in e2e.records_of_file(run.collector.file_path)
        if r.event == contract.EVENT_STEP_SUMMARY
        and r.attributes.get(contract.KIND) == contract.KIND_ROLLOUT
        and r.attributes[contract.STEP] == TRAINED_STEP
    ]
    assert summary[contract.MISMATCH]["count"] == PROMPTS * N
    assert summary[contract.MISMATCH]["masked.max"] > 0
    _same(summary[contract.MISMATCH], tokens.summary(merge([whole.attribute()])))


def _same(got: Any, want: Any, key: str = "") -> None:
    """Equal figures: floats to rounding (sums in another order), counts and keys exactly."""
    if isinstance(want, dict):
        assert isinstance(got, dict), key
        assert got.keys() == want.keys(), key
        for name, value in want.items():
            _same(got[name], value, name)
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-9), key
    else:
        assert got == want, key


def test_the_v1_hook_reads_the_rows_verls_trainer_held(run: ToolRun) -> None:
    """v1: the rollout hook read the step's rows where verl's own trainer held them (``verl._v1_capture``).

    Its fallback, fetching them from TransferQueue, is counted and warned about at its first step.
    """
    if run.mode != "v1":
        pytest.skip("the v1 trainer's hook only")
    assert "fetched from TransferQueue instead" not in run.launch.text()
