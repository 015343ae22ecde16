"""User story: agentic trajectories from two processes reach the collector's outputs whole, as conversations.

Two training processes, started together by one shell script with only the variables the README
names, log 240 multi-turn, tool-calling trajectories of one validation step as chat messages
(OpenAI format: system and user prompt; assistant turns with tool calls, tool results, reasoning,
a final answer). Through the built collector, the step keeps exactly the k the sampling rule picks
from the message prompts' ids, and each kept record carries its conversation as GenAI messages
(arrays of maps) equal to what was logged; the one 300 KB tool result among them is cut head and
tail, every other text is whole. The body's texts are the readable rendering,
``otel-valgen show --format json`` gives the messages back, and the summary gives the figures
over all 240 trajectories (turns, tool calls per tool).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import xxhash

from otel_valgen import contract
from otel_valgen.conversations import prompt_text
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from tests.e2e.agentic_job import BIG_RESULT_CHARS, trajectory
from tests.e2e.conftest import StartCollector
from tests.e2e.harness import REPO, Record, StandIn, records_of_file, wait_for
from tests.support.process import run_in_a_terminal, run_show

RUN_ID = "agentic"
STEP = 3
K = 8
SEED = 42
PER_PROCESS = 120
JOB = f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).with_name('agentic_job.py')))}"


def _genai(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GenAI form of the job's OpenAI-format messages, as docs/architecture.md maps them."""
    converted = []
    for message in messages:
        parts: list[dict[str, Any]] = []
        if message.get("reasoning_content"):
            parts.append({"type": "reasoning", "content": message["reasoning_content"]})
        if message["role"] == "tool":
            parts.append({"type": "tool_call_response", "id": message["tool_call_id"], "response": message["content"]})
        elif message.get("content"):
            parts.append({"type": "text", "content": message["content"]})
        for call in message.get("tool_calls", []):
            arguments = call["function"]["arguments"]
            parts.append(
                {
                    "type": "tool_call",
                    "id": call["id"],
                    "name": call["function"]["name"],
                    "arguments": json.loads(arguments) if isinstance(arguments, str) else arguments,
                }
            )
        converted.append({"role": message["role"], "parts": parts})
    return converted


def _prompt_id(index: int) -> str:
    return xxhash.xxh64_hexdigest(prompt_text(trajectory(index)[0]).encode())


def _kept(records: list[Record]) -> list[Record]:
    kept = [r for r in records if r.event == contract.EVENT_GENERATION and contract.RANK in r.attributes]
    return sorted(kept, key=lambda r: r.attributes[contract.RANK])


@pytest.mark.timeout(240)
def test_two_processes_keep_k_trajectories_whole_as_conversations(
    start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn, tmp_path: Path
) -> None:
    """The k kept are the rule's k of the message prompts; each carries its conversation; only 300 KB is cut."""
    every = range(2 * PER_PROCESS)
    ids = {f"{_prompt_id(i)}/0": i for i in every}
    assert len(ids) == len(every), "every prompt has an id of its own"
    expected = [sid for _, sid in bottom_k(((SortKey.of(sample_key(SEED, sid), sid), sid) for sid in ids), K)]
    big = ids[expected[K // 2]]  # a kept trajectory gets the 300 KB tool result
    collector = start_collector(
        "collector",
        ["collector.yaml"],
        {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
            "VALGEN_DECISION_WAIT": "3s",
        },
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.http_endpoint}",
        "OTEL_VALGEN_RUN_ID": RUN_ID,
        "OTEL_VALGEN_COUNT": str(K),
    }
    common = f"{JOB} --step {STEP} --count {PER_PROCESS} --big {big}"
    run_in_a_terminal(
        f"{common} --source rollouter --first 0 & {common} --source trainer --first {PER_PROCESS} & wait", env
    )

    def summarized() -> bool:
        return any(r.event == contract.EVENT_STEP_SUMMARY for r in records_of_file(collector.file_path))

    wait_for(summarized, 60, "the step summary in the collector's file")
    records = records_of_file(collector.file_path)
    (summary,) = [r.attributes for r in records if r.event == contract.EVENT_STEP_SUMMARY]
    assert (summary[contract.SEEN], summary[contract.CLOSED_REASON]) == (2 * PER_PROCESS, "complete")
    # Figures over every trajectory of both processes (3 assistant turns and 2 calc calls each), not the kept.
    figures = summary[contract.TRAJECTORIES]
    assert (figures["count"], figures["turns.sum"], figures["turns.max"]) == (240, 720, 3)
    assert (figures["tool_calls.by_name"], figures["turns.mean"], figures["turn_limit.share"]) == (
        {"calc": 480},
        3.0,
        0.0,
    )
    # The rewards, merged by the collector: the trainer's tool rewards go down to -1 (.min the smallest).
    rewards = {key: value for key, value in figures.items() if key.startswith(("tool_rewards.", "turn_scores."))}
    assert rewards == {
        "tool_rewards.trajectories": 240,
        "tool_rewards.count": 480,
        "tool_rewards.sum": 240 * 0.5 + 180 * 0.25 - 60 * 1.0,
        "tool_rewards.min": -1.0,
        "tool_rewards.max": 0.5,
        "tool_rewards.mean": 105.0 / 480,
        "tool_rewards.per_trajectory": 105.0 / 240,
        "turn_scores.trajectories": 60,
        "turn_scores.count": 120,
        "turn_scores.sum": 60 * 1.25,
        "turn_scores.min": 0.25,
        "turn_scores.max": 1.0,
        "turn_scores.last.sum": 60.0,
        "turn_scores.mean": 0.625,
        "turn_scores.per_trajectory": 1.25,
        "turn_scores.last.mean": 1.0,
    }
    kept = _kept(records)
    assert [untagged(r.attributes[contract.SAMPLE_ID]) for r in kept] == expected

    for record in kept:
        index = ids[untagged(record.attributes[contract.SAMPLE_ID])]
        prompt, turns, _ = trajectory(index, big=index == big)
        assert record.attributes[contract.GEN_AI_INPUT_MESSAGES] == _genai(prompt)
        got = record.attributes[contract.GEN_AI_OUTPUT_MESSAGES]
        want = _genai(turns)
        if index == big:
            response = got[1]["parts"][0]
            text = response["response"]
            assert response["original_length"] == BIG_RESULT_CHARS + len(str(index * 7))
            assert len(text.encode()) <= 64 * 1024
            assert text.startswith("r" * 1000)
            assert text.endswith("s" * 1000)
            assert "characters omitted]" in text
            want[1]["parts"][0] = response
        assert got == want, f"trajectory {index}"
        body = record.body
        assert body["input"].startswith("[system] You are a careful calculator.")
        assert f'→ calc({{"expr": "{index}*7"}}) #call_{index}_0' in body["output"]
        assert body["output"].endswith(f"[assistant] The answer is {index * 7 + index % 5}.")

    # Loki's stand-in gets the same structured messages.
    wait_for(lambda: len(_kept(loki_stand_in.records())) == K, 30, "the kept records at Loki")
    for at_loki, in_file in zip(_kept(loki_stand_in.records()), kept, strict=True):
        assert (
            at_loki.attributes[contract.GEN_AI_OUTPUT_MESSAGES] == in_file.attributes[contract.GEN_AI_OUTPUT_MESSAGES]
        )

    # show gives the messages back.
    (shown,) = [json.loads(line) for line in run_show(collector.file_path, "json").splitlines()]
    for generation, record in zip(shown["generations"], kept, strict=True):
        assert generation["input_messages"] == record.attributes[contract.GEN_AI_INPUT_MESSAGES]
        assert generation["output_messages"] == record.attributes[contract.GEN_AI_OUTPUT_MESSAGES]
