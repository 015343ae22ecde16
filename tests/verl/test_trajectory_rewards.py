"""verl's per-trajectory rewards (``tool_rewards``, ``turn_scores``) into the figures over every trajectory.

Fast: one process, no Ray, verl 0.9.1's real classes. The batch columns are made by verl's own
``AgentLoopWorker._postprocess`` (each output's ``extra_fields`` key a ``non_tensor_batch`` column of
one value per row, None where an output has no such key), and v1's TransferQueue rows by
``AgentLoopOutput.as_dict`` (the row's ``extra_fields``). The rows are then read as the hooks read
them: a training batch through ``send_rollout_batch``, a legacy validation batch through the tally
``extract_reward`` feeds, a v1 validation through the TransferQueue reads ``_validate`` makes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopMetrics,
    AgentLoopOutput,
    AgentLoopWorker,
    _InternalAgentLoopOutput,
)

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.integrations import verl as vg_verl
from otel_valgen.integrations.verl import _rows
from otel_valgen.integrations.verl._layout import MESSAGES_COLUMN, REWARD_COLUMNS
from otel_valgen.integrations.verl._v1_fetch import _v1_reward_lists
from otel_valgen.integrations.verl_rollouts import send_rollout_batch
from otel_valgen.testing import capture_records
from tests.test_verl_rollouts import Row, answer, make_batch
from tests.verl import harness

assert vg_verl.install()

PROMPT = [{"role": "user", "content": "What is 2+2?"}]
CALL = {"type": "function", "id": "c1", "function": {"name": "calc", "arguments": '{"expression": "2+2"}'}}
TURNS = [
    {"role": "assistant", "content": "Call calc.", "tool_calls": [CALL]},
    {"role": "tool", "content": "4", "tool_call_id": "c1"},
    {"role": "assistant", "content": "So 4."},
]
TOOL_PIECES = (("Call calc.", True), (" [tool: 4]", False), (" So 4.", True))

# What each agent loop leaves in extra_fields: ToolAgentLoop (tool rewards from execute, turn scores
# empty in verl 0.9.1), an agent loop of one's own that scores turns, the single-turn loop ([] and []),
# and an agent loop that sets neither key (verl's _postprocess then puts None).
EXTRA_FIELDS: list[dict[str, Any]] = [
    {"tool_rewards": [1.0, 0.0], "turn_scores": []},
    {"tool_rewards": [-0.5], "turn_scores": [0.25, 1.0]},
    {"tool_rewards": [], "turn_scores": []},
    {},
]
EXPECTED = {
    "tool_rewards.trajectories": 2,
    "tool_rewards.count": 3,
    "tool_rewards.sum": 0.5,
    "tool_rewards.min": -0.5,
    "tool_rewards.max": 1.0,
    "turn_scores.trajectories": 1,
    "turn_scores.count": 2,
    "turn_scores.sum": 1.25,
    "turn_scores.min": 0.25,
    "turn_scores.max": 1.0,
    "turn_scores.last.sum": 1.0,
}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tests' byte-level tokenizer."""
    return harness.make_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def _rewards_of(figures: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in figures.items() if key.startswith(("tool_rewards.", "turn_scores."))}


def _verl_columns() -> dict[str, np.ndarray]:
    """The ``non_tensor_batch`` verl's ``_postprocess`` makes of four outputs with ``EXTRA_FIELDS``."""
    worker = object.__new__(AgentLoopWorker)  # verl's class; only what _postprocess reads is set
    worker.reward_loop_worker_handles = None
    outputs = []
    for index, extra in enumerate(EXTRA_FIELDS):
        tokens = torch.ones((1, 4), dtype=torch.int64)
        outputs.append(
            _InternalAgentLoopOutput(
                prompt_ids=tokens[:, :2],
                response_ids=tokens[:, 2:],
                input_ids=tokens,
                position_ids=torch.arange(4)[None, :],
                response_mask=torch.ones((1, 2), dtype=torch.int64),
                attention_mask=tokens,
                num_turns=4 if index < 2 else 2,
                metrics=AgentLoopMetrics(),
                extra_fields={
                    **extra,
                    "raw_prompt": PROMPT,
                    MESSAGES_COLUMN: TURNS if index < 2 else None,
                },
            )
        )
    batch = worker._postprocess(outputs)
    return {
        name: batch.non_tensor_batch[name] for name in (*REWARD_COLUMNS, "raw_prompt", MESSAGES_COLUMN, "__num_turns__")
    }


def _batch(tokenizer: Any) -> Any:
    rows = [Row(f"Question {i}?", TOOL_PIECES if i < 2 else answer(f"It is {i}.")) for i in range(4)]
    batch = make_batch(tokenizer, rows, response_width=32)
    batch.non_tensor_batch.update(_verl_columns())
    return batch


def test_verls_postprocess_gives_one_list_per_row_and_none_without_the_key() -> None:
    """The columns the hooks read, as verl 0.9.1 makes them."""
    columns = _verl_columns()
    assert columns["tool_rewards"].dtype == object
    assert columns["tool_rewards"].tolist() == [[1.0, 0.0], [-0.5], [], None]
    assert columns["turn_scores"].tolist() == [[], [0.25, 1.0], [], None]


def test_a_training_batch_sends_its_reward_figures(tokenizer: Any) -> None:
    """``send_rollout_batch`` (every trainer's rollout hook) counts every row's rewards, kept or not."""
    with capture_records(run_id="r", rollout_count=1, progress_interval_s=0) as records:
        assert send_rollout_batch(_batch(tokenizer), tokenizer, step=3) == 4
    (end,) = [r for r in records if r["event_name"] == contract.EVENT_VALIDATION_END]
    figures = end["attributes"][contract.TRAJECTORIES]
    assert figures["count"] == 4
    assert _rewards_of(figures) == EXPECTED
    assert vg.stats().get("trajectory_rewards_invalid", 0) == 0


def test_a_training_batch_without_the_columns_sends_no_reward_figures(tokenizer: Any) -> None:
    """Another verl, another agent loop: no column, no figure (not zeros)."""
    batch = _batch(tokenizer)
    for name in REWARD_COLUMNS:
        del batch.non_tensor_batch[name]
    with capture_records(run_id="r", rollout_count=1, progress_interval_s=0) as records:
        send_rollout_batch(batch, tokenizer, step=3)
    (end,) = [r for r in records if r["event_name"] == contract.EVENT_VALIDATION_END]
    assert _rewards_of(end["attributes"][contract.TRAJECTORIES]) == {}


def test_legacy_validation_batches_are_tallied_into_the_rows(tokenizer: Any) -> None:
    """Each batch ``_validate`` hands ``extract_reward`` adds its rows' rewards, in generation order."""
    tallies = _rows.Tallies(tokenizer, None)
    token = _rows._tallies.set(tallies)
    try:
        reward = _rows._TallyingReward(lambda batch: None)
        batch = _batch(tokenizer)
        reward(batch[:3])  # two validation batches
        reward(batch[3:])
        found = _rows._rewards({}, 4)
    finally:
        _rows._tallies.reset(token)
    assert found == {"tool_rewards": [[1.0, 0.0], [-0.5], [], None], "turn_scores": [[], [0.25, 1.0], [], None]}
    rows = [Row(f"Question {i}?", answer("4")) for i in range(4)]
    with capture_records(run_id="r", count=1) as records:
        vg.log_generations([r.prompt for r in rows], [TURNS] * 4, step=1, **found)
    (end,) = [r for r in records if r["event_name"] == contract.EVENT_VALIDATION_END]
    assert _rewards_of(end["attributes"][contract.TRAJECTORIES]) == EXPECTED


class _Store:
    """A TransferQueue client holding v1 rows made by verl's ``AgentLoopOutput.as_dict``."""

    def __init__(self, rows: dict[str, dict[str, Any]]) -> None:
        self.rows = rows

    def kv_batch_get(self, keys: list[str], partition_id: str, select_fields: list[str]) -> dict[str, Any]:
        return {field: [self.rows[key].get(field) for key in keys] for field in select_fields}


def test_v1_validation_reads_the_rewards_of_each_sessions_final_output() -> None:
    """v1 ``_validate`` fetches the final outputs' ``extra_fields``: their rewards are kept by key."""
    keys = [f"uid{i}_0_0" for i in range(4)]
    rows = {}
    for key, extra in zip(keys, EXTRA_FIELDS, strict=True):
        output = AgentLoopOutput(
            prompt_ids=[1], response_ids=[2], response_mask=[1], metrics=AgentLoopMetrics(), extra_fields=dict(extra)
        )
        rows[key] = output.as_dict()
    assert _v1_reward_lists([rows[key]["extra_fields"] for key in keys])["turn_scores"].tolist() == [
        [],
        [0.25, 1.0],
        [],
        None,
    ]
    tallies = _rows.Tallies(None, None)
    token = _rows._tallies.set(tallies)
    try:
        store = _rows._TallyingStore(_Store(rows))
        store.kv_batch_get(keys=keys[::-1], partition_id="val", select_fields=["extra_fields"])
        frame = {"dump_all_keys": keys, "session_to_sample_idx": {f"uid{i}_0": i for i in range(4)}}
        found = _rows._rewards(frame, 4)
    finally:
        _rows._tallies.reset(token)
    assert found == {"tool_rewards": [[1.0, 0.0], [-0.5], [], None], "turn_scores": [[], [0.25, 1.0], [], None]}
