"""Conversations: chat messages logged as inputs and outputs reach the records as GenAI messages.

The rules pinned here: the GenAI form of each chat-format field; the id of a message prompt (the
shared key vectors, which the Go processor reads too); the cuts (each text on its own, a record's
budget cutting only the longest); the treatment of bad input, counted and never raised; and that
structure changes no sampling choice.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.conversations import fit, is_conversation, prompt_text, render, to_messages
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from otel_valgen.testing import capture_records

VECTORS = Path(__file__).resolve().parent.parent / "testdata" / "sampling" / "key_vectors.json"
CALC = {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "2+2", "exact": true}'}}


def _generations(captured: Any) -> list[dict[str, Any]]:
    return [r for r in captured if r["event_name"] == contract.EVENT_GENERATION]


def test_message_prompt_ids_match_the_shared_vectors() -> None:
    """Every spelling of a vector's prompt gives its canonical text, its id and its first response's key."""
    vectors = json.loads(VECTORS.read_text(encoding="utf-8"))["message_prompts"]
    assert len(vectors) >= 4
    for vector in vectors:
        for spelling in vector["spellings"]:
            assert prompt_text(spelling) == vector["canonical"], vector["name"]
        assert xxhash.xxh64_hexdigest(vector["canonical"].encode()) == vector["base"]
        assert sample_key(int(vector["seed"]), vector["sample_id"]) == int(vector["sample_key"])
        with capture_records(run_id="ids", count=4, seed=int(vector["seed"])) as captured:
            vg.log_generations([vector["spellings"][-1]], ["answer"], step=1)
        (record,) = _generations(captured)
        assert untagged(record["attributes"][contract.SAMPLE_ID]) == vector["sample_id"]
        assert record["attributes"][contract.SAMPLE_KEY] == int(vector["sample_key"])


def test_the_same_messages_give_the_same_id_at_every_step() -> None:
    """A message prompt's id depends on its messages only: two steps, two calls, one id."""
    prompt = [{"role": "user", "content": "hi"}]
    with capture_records(run_id="ids", count=4) as captured:
        vg.log_generations([prompt], ["a"], step=1)
        vg.log_generations([[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]], ["b"], step=2)
    ids = [untagged(r["attributes"][contract.SAMPLE_ID]) for r in _generations(captured)]
    assert ids[0] == ids[1]
    assert ids[0] == xxhash.xxh64_hexdigest(b'[{"parts":[{"content":"hi","type":"text"}],"role":"user"}]') + "/0"


def test_a_trajectory_is_sent_as_genai_messages_with_a_readable_body() -> None:
    """Roles, text, reasoning, tool calls (arguments as a map) and tool results, in order; the body renders them."""
    prompt = [{"role": "system", "content": "calc"}, {"role": "user", "content": "2+2?"}]
    turns = [
        {"role": "assistant", "content": "use tool", "reasoning_content": "think", "tool_calls": [CALC]},
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
        {"role": "assistant", "content": "So 4."},
    ]
    with capture_records(run_id="conv", count=4) as captured:
        assert vg.log_generations([prompt, "plain prompt"], [turns, "plain answer"], [1.0, 0.0], step=1) == 2
    records = {r["body"]["output"]: r for r in _generations(captured)}
    plain = records["plain answer"]
    assert contract.GEN_AI_INPUT_MESSAGES not in plain["attributes"]
    assert contract.GEN_AI_OUTPUT_MESSAGES not in plain["attributes"]
    (record,) = [r for key, r in records.items() if key != "plain answer"]
    as_lists = json.loads(json.dumps(record["attributes"][contract.GEN_AI_OUTPUT_MESSAGES]))
    assert as_lists == [
        {
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "content": "think"},
                {"type": "text", "content": "use tool"},
                {"type": "tool_call", "id": "c1", "name": "calc", "arguments": {"expr": "2+2", "exact": True}},
            ],
        },
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "4"}]},
        {"role": "assistant", "parts": [{"type": "text", "content": "So 4."}]},
    ]
    assert record["body"]["input"] == "[system] calc\n[user] 2+2?"
    assert record["body"]["output"] == (
        '[assistant] (thinking) think\nuse tool\n→ calc({"expr": "2+2", "exact": true}) #c1\n'
        "[tool #c1] 4\n[assistant] So 4."
    )


def test_media_travel_as_typed_references_never_their_bytes() -> None:
    """An image URL is a uri part; inline data keeps its type and size only."""
    inline = "data:image/png;base64," + "A" * 5000
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}},
                {"type": "image_url", "image_url": {"url": inline}},
                {"type": "text", "text": "What is it?"},
            ],
        }
    ]
    (message,) = to_messages(messages).messages
    assert message["parts"][0] == {"type": "uri", "modality": "image", "uri": "https://example.org/cat.png"}
    assert message["parts"][1] == {"type": "uri", "modality": "image", "mime_type": "image/png", "omitted_bytes": 5022}
    assert "AAAA" not in json.dumps(message)


def test_a_huge_tool_result_is_cut_head_and_tail_and_the_rest_stays_whole() -> None:
    """Each text is cut on its own to max_field_bytes: the 300 KB result only, marked with its length."""
    turns = [
        {"role": "assistant", "content": "look", "tool_calls": [CALC]},
        {"role": "tool", "tool_call_id": "c1", "content": "h" * 150_000 + "t" * 150_000},
        {"role": "assistant", "content": "done " * 100},
    ]
    with capture_records(run_id="cut", count=4, max_field_bytes=4096) as captured:
        vg.log_generations(["q"], [turns], step=1)
    (record,) = _generations(captured)
    messages = record["attributes"][contract.GEN_AI_OUTPUT_MESSAGES]
    cut = messages[1]["parts"][0]
    assert cut["original_length"] == 300_000
    assert len(cut["response"].encode()) <= 4096
    assert cut["response"].startswith("h" * 1000)
    assert cut["response"].endswith("t" * 1000)
    assert messages[2]["parts"][0]["content"] == "done " * 100
    assert "original_length" not in messages[2]["parts"][0]
    assert vg.stats()["truncated_fields"] >= 1


def test_a_record_budget_cuts_only_the_longest_texts() -> None:
    """40 turns of 5 KB and a few short ones over a 64 KiB budget: the short stay whole, the total fits."""
    turns = [{"role": "assistant", "content": f"{i} " + "x" * 5000} for i in range(40)]
    turns += [{"role": "tool", "tool_call_id": str(i), "content": f"ok {i}"} for i in range(5)]
    converted = to_messages(turns)
    assert fit([converted.messages], part_limit=65536, budget=65536) == 40
    texts = [p.get("content", p.get("response")) for m in converted.messages for p in m["parts"]]
    assert sum(len(t.encode()) for t in texts) <= 65536
    assert texts[-5:] == [f"ok {i}" for i in range(5)]
    assert all(t.startswith(f"{i} xx") for i, t in enumerate(texts[:40]))


@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        (["not a map", {"role": "user", "content": "x"}], "message_not_a_map"),
        ([{"content": "who am I"}], "message_without_role"),
        ([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{not json"}}]}], None),
        ([{"role": "tool", "tool_call_id": "a", "content": {"rows": [1, 2]}}], "tool_response_not_text"),
        ([{"role": "user", "content": [{"type": "hologram", "depth": 3}]}], "unknown_part"),
        ([{"role": "tool", "tool_call_id": "a", "content": b"\xff\xfeok"}], None),
    ],
)
def test_bad_messages_are_repaired_counted_and_never_raise(
    messages: list[Any], reason: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    """Each documented bad input becomes a valid record, with a counted, logged repair."""
    with caplog.at_level(logging.WARNING, logger="otel_valgen"), capture_records(run_id="bad", count=4) as captured:
        assert vg.log_generations(["q"], [messages], step=1) == 1
        stats = vg.stats()
    (record,) = _generations(captured)
    assert record["attributes"][contract.GEN_AI_OUTPUT_MESSAGES]
    if reason is not None:
        assert stats["messages_repaired"] >= 1
        assert reason in caplog.text
    elif b"\xff" in repr(messages).encode() or "\\xff" in repr(messages):
        assert record["attributes"][contract.REPLACED_CHARS] == 2
    else:  # arguments that are not JSON: sent as their text
        assert record["attributes"][contract.GEN_AI_OUTPUT_MESSAGES][0]["parts"][0]["arguments"] == "{not json"
        assert stats["messages_repaired"] == 1
        assert "tool_arguments_not_json" in caplog.text


def test_numpy_message_columns_are_conversations() -> None:
    """Verl keeps raw_prompt as a numpy object array: it is a conversation, and its id is its messages'."""
    messages = [{"role": "user", "content": "hi"}]
    column = np.empty(1, dtype=object)
    column[0] = messages[0]
    assert is_conversation(column)
    assert prompt_text(column) == prompt_text(messages)
    assert not is_conversation("text")
    assert not is_conversation([])
    assert not is_conversation([1, 2])


def test_structure_changes_no_sampling_choice() -> None:
    """240 message prompts keep exactly the k whose ids (hashes of their messages) the bottom-k picks."""
    prompts = [[{"role": "system", "content": "calc"}, {"role": "user", "content": f"{i} * 3"}] for i in range(240)]
    turns = [[{"role": "assistant", "content": f"{3 * i}"}] for i in range(240)]
    with capture_records(run_id="pick", count=8, seed=7) as captured, vg.validation(step=1):
        for start in range(0, 240, 50):
            vg.log_generations(prompts[start : start + 50], turns[start : start + 50])
    ids = [xxhash.xxh64_hexdigest(prompt_text(p).encode()) + "/0" for p in prompts]
    expected = {sid for _, sid in bottom_k(((SortKey.of(sample_key(7, sid), sid), sid) for sid in ids), 8)}
    assert {untagged(r["attributes"][contract.SAMPLE_ID]) for r in _generations(captured)} == expected


def test_rollout_prompts_given_as_messages_get_their_messages_id() -> None:
    """log_rollouts: a message prompt without a prompt id is keyed by its messages; responses carry their turns."""
    prompt = [{"role": "user", "content": "roll"}]
    with capture_records(run_id="roll", rollout_count=4) as captured:
        vg.log_rollouts([prompt, prompt], [[{"role": "assistant", "content": "a"}], "b"], [1.0, 0.0], step=1)
    records = _generations(captured)
    assert {r["attributes"][contract.PROMPT_ID] for r in records} == {
        xxhash.xxh64_hexdigest(prompt_text(prompt).encode())
    }
    with_turns = [r for r in records if contract.GEN_AI_OUTPUT_MESSAGES in r["attributes"]]
    assert len(with_turns) == 1
    assert render(to_messages(prompt).messages) == "[user] roll"
