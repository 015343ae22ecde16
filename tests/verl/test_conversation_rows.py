"""verl rows as conversations, on verl 0.9.1's real classes: the capture in the agent loop, the rows read back.

Fast: one process, no Ray. The capture runs verl's real ``AgentLoopWorker._compute_score`` (hooked by
``install()``) over verl's real ``AgentData`` and ``AgentLoopOutput``, holding the messages as
``ToolAgentLoop`` appends them; the rows are verl's real ``DataProto`` batches
(``tests/test_verl_rollouts.make_batch``) through ``send_rollout_batch``. The whole path through verl's
own ``ToolAgentLoop`` and launcher: ``test_tool_agent_entry_point.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput, AgentLoopWorker
from verl.experimental.agent_loop.tool_agent_loop import AgentData

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.conversations import to_messages
from otel_valgen.integrations import verl as vg_verl
from otel_valgen.integrations.verl import _agent_loop, _conversations
from otel_valgen.integrations.verl._layout import MESSAGES_COLUMN
from otel_valgen.integrations.verl_rollouts import prompt_id, send_rollout_batch
from otel_valgen.testing import capture_records
from tests.test_verl_rollouts import Row, answer, make_batch
from tests.verl import harness
from tests.verl.test_rollouts_batch import CountingTokenizer

assert vg_verl.install()

PROMPT = [{"role": "system", "content": "Use calc."}, {"role": "user", "content": "What is 2+2?"}]
CALL = {"type": "function", "id": "c1", "function": {"name": "calc", "arguments": '{"expression": "2+2"}'}}
TURNS = [
    {"role": "assistant", "content": "Call calc.", "tool_calls": [CALL]},
    {"role": "tool", "content": "4", "tool_call_id": "c1"},
    {"role": "assistant", "content": "So 4."},
]
TOOL_PIECES = (("Call calc.", True), (" [tool: 4]", False), (" So 4.", True))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tests' byte-level tokenizer."""
    return harness.make_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def _agent_data(messages: list[dict[str, Any]]) -> AgentData:
    return AgentData(
        messages=messages,
        image_data=None,  # type: ignore[arg-type]
        video_data=None,  # type: ignore[arg-type]
        audio_data=None,
        mm_processor_kwargs=None,
        metrics={},
        request_id="r",
        tools_kwargs={},
    )


def _capture(tokenizer: Any, *, validate: bool, unparsed: list[int] | None = None) -> AgentLoopOutput:
    """One trajectory as verl's worker ends it: the loop's AgentData, then verl's real ``_compute_score``."""
    worker = object.__new__(AgentLoopWorker)  # verl's class; only what _compute_score reads is set
    worker.reward_loop_worker_handles = None
    worker.tokenizer = tokenizer
    output = AgentLoopOutput(prompt_ids=[1], response_ids=[2], response_mask=[1], metrics=AgentLoopMetrics())

    async def trajectory() -> None:
        token = _agent_loop._capturing.set(_agent_loop.wanted({"validate": validate}))
        try:
            state = _agent_data(list(PROMPT))  # ToolAgentLoop.run: list(kwargs["raw_prompt"])
            state.messages.extend(TURNS)
            state.assistant_turns = 2
            if unparsed is not None:  # a third generation, verl stopped before parsing it
                state.assistant_turns, state.response_ids = 3, unparsed
            await worker._compute_score([output], kwargs={"raw_prompt": PROMPT})
        finally:
            _agent_loop._capturing.reset(token)

    asyncio.run(trajectory())
    return output


def test_the_agent_loop_worker_adds_the_turns_after_verls_scoring(tokenizer: Any) -> None:
    """The generated messages ride in extra_fields (so a batch column); the prompt's stay in raw_prompt."""
    output = _capture(tokenizer, validate=True)
    assert output.extra_fields[MESSAGES_COLUMN] == TURNS
    unparsed = [*tokenizer.encode("Then", add_special_tokens=False), tokenizer.eos_token_id]
    cut = _capture(tokenizer, validate=True, unparsed=unparsed)
    assert cut.extra_fields[MESSAGES_COLUMN] == [*TURNS, {"role": "assistant", "content": "Then<|endoftext|>"}]


def test_training_trajectories_are_captured_only_with_rollouts_on(
    tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training rows carry nothing extra unless OTEL_VALGEN_ROLLOUT_COUNT asks for rollouts."""
    monkeypatch.delenv("OTEL_VALGEN_ROLLOUT_COUNT", raising=False)
    assert MESSAGES_COLUMN not in _capture(tokenizer, validate=False).extra_fields
    monkeypatch.setenv("OTEL_VALGEN_ROLLOUT_COUNT", "2")
    assert _capture(tokenizer, validate=False).extra_fields[MESSAGES_COLUMN] == TURNS


def _records(tokenizer: Any, rows: list[Row], columns: dict[str, list[Any]]) -> list[dict[str, Any]]:
    batch = make_batch(tokenizer, rows, response_width=32, non_tensors=columns)
    with capture_records(run_id="r", rollout_count=8, progress_interval_s=0) as records:
        assert send_rollout_batch(batch, tokenizer, step=3) == len(rows)
    # tuples of the SDK's attribute values as lists, as on the wire (the packed tokens' bytes as hex)
    return [
        json.loads(json.dumps(r, default=bytes.hex)) for r in records if r["event_name"] == contract.EVENT_GENERATION
    ]


def test_a_tool_row_is_sent_as_its_turns_and_a_single_turn_row_as_one_assistant_message(tokenizer: Any) -> None:
    """Input: the prompt's messages; output: the captured turns, else (single turn) the decoded response."""
    rows = [Row("What is 2+2?", TOOL_PIECES), Row("What is 2+2?", answer("It is 5."))]
    records = _records(
        tokenizer, rows, {"raw_prompt": [PROMPT, PROMPT], MESSAGES_COLUMN: [TURNS, None], "__num_turns__": [4, 2]}
    )
    by_output = {len(r["attributes"][contract.GEN_AI_OUTPUT_MESSAGES]): r for r in records}
    tool, single = by_output[3], by_output[1]
    for record in records:
        assert record["attributes"][contract.GEN_AI_INPUT_MESSAGES] == to_messages(PROMPT).messages
    assert tool["attributes"][contract.GEN_AI_OUTPUT_MESSAGES] == to_messages(TURNS).messages
    assert "→ calc(" in tool["body"][contract.BODY_OUTPUT]
    assert "[tool #c1] 4" in tool["body"][contract.BODY_OUTPUT]
    assert tool["attributes"][contract.RESPONSE_LENGTH] == len("Call calc.") + len(" So 4.")  # the model's tokens
    assert (
        single["attributes"][contract.GEN_AI_OUTPUT_MESSAGES]
        == to_messages([{"role": "assistant", "content": "It is 5."}]).messages
    )
    # the prompt id stays the decoded text's, as without conversations
    assert {r["attributes"][contract.PROMPT_ID] for r in records} == {prompt_id("What is 2+2?")}


def test_a_multi_turn_row_without_its_turns_is_text_counted_and_warned_once(
    tokenizer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """No captured turns (another agent loop, another verl): the flat text, as before; counted, one WARNING."""
    _conversations._warned.discard("turns")
    rows = [Row("What is 2+2?", TOOL_PIECES)]
    with caplog.at_level(logging.WARNING, logger="otel_valgen"):
        for _ in range(2):  # the multi-turn row is told by its response_mask: no turn count in the batch
            (record,) = _records(tokenizer, rows, {"raw_prompt": [PROMPT]})
            assert record["body"][contract.BODY_OUTPUT] == "Call calc. [tool: 4] So 4."
            assert contract.GEN_AI_OUTPUT_MESSAGES not in record["attributes"]
            assert record["attributes"][contract.GEN_AI_INPUT_MESSAGES] == to_messages(PROMPT).messages
            assert vg.stats()["verl_row_columns_missing"] >= 1
    warnings = [r for r in caplog.records if "multi-turn rows' turns" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]


def test_a_batch_without_prompt_messages_is_sent_as_text(tokenizer: Any) -> None:
    """No raw_prompt column: every row as text, counted."""
    (record,) = _records(tokenizer, [Row("What is 2+2?", answer("It is 4."))], {})
    assert (record["body"][contract.BODY_INPUT], record["body"][contract.BODY_OUTPUT]) == ("What is 2+2?", "It is 4.")
    assert contract.GEN_AI_INPUT_MESSAGES not in record["attributes"]
    assert vg.stats()["verl_row_columns_missing"] >= 1


def test_every_rollout_trajectory_is_counted_without_decoding_the_rows_not_kept(tokenizer: Any) -> None:
    """The end record's figures count all 6 rows (turns, tool calls) while only the kept row's response is decoded."""
    rows = [Row(f"Question {i}?", TOOL_PIECES if i % 2 else answer(f"It is {i}.")) for i in range(6)]
    captured = [TURNS if i % 2 else None for i in range(6)]
    batch = make_batch(
        tokenizer,
        rows,
        response_width=32,
        non_tensors={"raw_prompt": [PROMPT] * 6, MESSAGES_COLUMN: captured, "__num_turns__": [2, 4] * 3},
    )
    counting = CountingTokenizer(tokenizer)
    with capture_records(run_id="r", rollout_count=1, progress_interval_s=0) as records:
        assert send_rollout_batch(batch, counting, step=3) == 6
    (end,) = [r for r in records if r["event_name"] == contract.EVENT_VALIDATION_END]
    figures = end["attributes"][contract.TRAJECTORIES]
    assert (figures["count"], figures["turns.sum"], figures["tool_calls.by_name"]) == (6, 3 * 2 + 3 * 1, {"calc": 3})
    kept = [r for r in records if r["event_name"] == contract.EVENT_GENERATION]
    assert len(kept) == 1
    # one prompt decoded per uid (for its id), and the kept row's response only
    assert len(counting.decoded) == 6 + 1
