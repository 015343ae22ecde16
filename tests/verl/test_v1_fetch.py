"""The v1 hook's two-phase fetch from TransferQueue: what it fetches for which rows, and that the records are the same.

Fast: no Ray. TransferQueue is stood in for by an in-process store with ``kv_batch_get``'s contract
(one row per key, the fields asked for that it has, others left out silently; rows assembled by
verl's own ``list_of_dict_to_tensordict``, nested tensors for rows of unequal lengths), holding rows as
verl 0.9.1's ``AgentLoopWorkerTQ`` writes them and what the trainer writes back. The reference is the
legacy hook (``send_rollout_batch``) on a ``DataProto`` of every field of every row, padded as verl pads
them: the records and the step's end record must be the same.
"""

from __future__ import annotations

import logging
import sys
import types
from typing import Any

import numpy as np
import pytest
import torch

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.integrations import verl_rollouts
from otel_valgen.integrations.verl import _v1_fetch
from otel_valgen.integrations.verl._layout import MESSAGES_COLUMN
from otel_valgen.testing import capture_records
from tests.verl import harness

verl = pytest.importorskip("verl")
tensordict_utils = pytest.importorskip("verl.utils.tensordict_utils")
trainer_base = pytest.importorskip("verl.trainer.ppo.v1.trainer_base")  # before the stand-in replaces transfer_queue

PROMPTS, N, K = 12, 4, 3
LIMIT = 24  # actor_rollout_ref.rollout.response_length
TOKEN_FIELDS = ("rollout_log_probs", "old_log_probs", "ref_log_prob", "rollout_is_weights")
CALL = {"type": "function", "id": "c1", "function": {"name": "calc", "arguments": '{"expression": "2+2"}'}}
KEPT_ONLY = ("responses", "advantages", "reward_model", "ref_log_prob", "rollout_is_weights")


class Store:
    """TransferQueue's ``kv_batch_get`` over rows held in memory; every call noted as (keys, fields)."""

    def __init__(self, rows: dict[str, dict[str, Any]]) -> None:
        self.rows = rows
        self.calls: list[tuple[list[str], list[str]]] = []

    def kv_batch_get(self, keys: list[str], partition_id: str, select_fields: list[str]) -> Any:
        assert partition_id == "train"
        self.calls.append((list(keys), list(select_fields)))
        fields = [name for name in select_fields if name in self.rows[keys[0]]]
        return tensordict_utils.list_of_dict_to_tensordict([{f: self.rows[key][f] for f in fields} for key in keys])

    def kv_batch_put(self, keys: list[str], partition_id: str, fields: Any, tags: Any = None) -> Any:
        """What the trainer writes back (nested tensors, one row per key)."""
        assert partition_id == "train"
        for name in fields.keys():  # noqa: SIM118
            for key, value in zip(keys, fields.get(name).unbind(), strict=True):
                self.rows[key][name] = value
        return Meta(keys=list(keys), tags=tags, partition_id=partition_id)


class Meta(types.SimpleNamespace):
    """A ``KVBatchMeta``: keys, tags, partition."""

    def __len__(self) -> int:
        return len(self.keys)


TURNS = [
    {"role": "assistant", "content": "Call calc.", "tool_calls": [CALL]},
    {"role": "tool", "content": "4", "tool_call_id": "c1"},
    {"role": "assistant", "content": "So 4."},
]


def _rows(
    tokenizer: Any, seed: int = 0, *, chat: bool = False
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """PROMPTS x N rows as the agent loop and trainer leave them, and their tags (the batch's order).

    ``chat``: with the prompt's messages and turn counts; session 2's rows are multi-turn with
    their turns captured (``MESSAGES_COLUMN``) and a tool reward.
    """
    rng = np.random.default_rng(seed)
    rows: dict[str, dict[str, Any]] = {}
    tags = []
    for p in range(PROMPTS):
        prompt = torch.tensor(tokenizer.encode(f"Question {p}: what is {p} + {p}?"), dtype=torch.int64)
        for session in range(N):
            length = int(rng.integers(1, LIMIT + 1))
            ids = torch.tensor(rng.integers(40, 120, size=length), dtype=torch.int64)
            ended = length < LIMIT or session == 0  # a response at the limit may still end on EOS
            if ended:
                ids[-1] = tokenizer.eos_token_id
            mask = torch.ones(length, dtype=torch.int64)
            if session == 2 and length > 4:
                mask[1:3] = 0  # a tool's tokens
            rollout = torch.tensor(-rng.random(length), dtype=torch.float32)
            score = torch.zeros(length)
            score[-1] = float(session % 2)
            rows[f"uid{p}_{session}_0"] = {
                "prompts": prompt,
                "responses": ids,
                "response_mask": mask,
                "rm_scores": score,
                "rollout_log_probs": rollout,
                "old_log_probs": rollout + torch.tensor(rng.normal(0, 0.05, length), dtype=torch.float32),
                "ref_log_prob": rollout - 0.1,
                "rollout_is_weights": torch.ones(length),
                "advantages": torch.full((length,), float(session) - 1.5),
                "reward_model": {"ground_truth": str(2 * p), "style": "rule"},
                "data_source": f"source{p % 2}",
                "uid": f"uid{p}",  # the dataset row's columns come with it (verl's agent loop)
                "extra_fields": {"reward_extra_info": {"acc": float(session % 2), "note": f"n{p}"}},
            }
            if chat:
                row = rows[f"uid{p}_{session}_0"]
                row["raw_prompt"] = [{"role": "user", "content": f"Question {p}: what is {p} + {p}?"}]
                row["num_turns"] = 4 if session == 2 else 2
                if session == 2:
                    row["extra_fields"].update({MESSAGES_COLUMN: TURNS, "tool_rewards": [float(p % 3)]})
            tags.append({"status": "success", "response_len": length, "max_global_steps": p % 3})
    return rows, tags


def _reference(rows: dict[str, dict[str, Any]], tags: list[dict[str, Any]], trainer: Any) -> int:
    """The legacy hook on every field of every row (padding rows left out), padded as verl pads them."""
    from verl import DataProto

    keys = [key for key, tag in zip(rows, tags, strict=True) if not tag.get("is_padding")]
    chosen = [rows[key] for key in keys]

    def padded(name: str, left: bool = False) -> torch.Tensor:
        width = max(len(row[name]) for row in chosen)
        out = torch.zeros(len(chosen), width, dtype=chosen[0][name].dtype)
        for index, row in enumerate(chosen):
            values = row[name]
            if left:
                out[index, width - len(values) :] = values
            else:
                out[index, : len(values)] = values
        return out

    prompts, responses = padded("prompts", left=True), padded("responses")
    prompt_mask = torch.stack([torch.arange(prompts.shape[1]) >= prompts.shape[1] - len(r["prompts"]) for r in chosen])
    response_span = torch.stack([torch.arange(responses.shape[1]) < len(r["responses"]) for r in chosen])
    infos = [row["extra_fields"]["reward_extra_info"] for row in chosen]
    data = DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "attention_mask": torch.cat([prompt_mask, response_span], dim=1).long(),
            "token_level_scores": padded("rm_scores"),
            "response_mask": padded("response_mask"),
            "advantages": padded("advantages"),
            **{name: padded(name) for name in TOKEN_FIELDS},
        },
        non_tensors={
            "uid": np.array([key.split("_")[0] for key in keys], dtype=object),
            "data_source": np.array([row["data_source"] for row in chosen], dtype=object),
            "reward_model": np.array([row["reward_model"] for row in chosen], dtype=object),
            verl_rollouts.PARAM_VERSION_KEY: np.array(
                [tag["max_global_steps"] for tag in tags if not tag.get("is_padding")], dtype=object
            ),
            **{name: np.array([info[name] for info in infos], dtype=object) for name in ("acc", "note")},
            **_chat_columns(chosen),
        },
        meta_info={"reward_extra_keys": ["acc", "note"]},
    )
    from otel_valgen.integrations.verl._tokens import trainer_batch

    with trainer_batch(trainer, keys):
        return verl_rollouts.send_rollout_batch(
            data, trainer.tokenizer, step=5, max_response_length=LIMIT, source="trainer"
        )


def _chat_columns(chosen: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """The conversation columns of the legacy batch (as verl's agent loop and ``_agent_loop`` leave them)."""
    if "raw_prompt" not in chosen[0]:
        return {}

    def objects(values: list[Any]) -> np.ndarray:
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array

    extras = [row["extra_fields"] for row in chosen]
    return {
        "raw_prompt": objects([row["raw_prompt"] for row in chosen]),
        "__num_turns__": np.array([row["num_turns"] for row in chosen], dtype=np.int32),
        MESSAGES_COLUMN: objects([extra.get(MESSAGES_COLUMN) for extra in extras]),
        "tool_rewards": objects([extra.get("tool_rewards") for extra in extras]),
    }


def _snapshot(records: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Kept records by sample id (without the call's tag), and the other records' attributes."""
    kept, others = {}, []
    for record in records:
        attributes = dict(record["attributes"])
        if record["event_name"] != contract.EVENT_GENERATION:
            others.append(attributes)
            continue
        sample_id = attributes.pop(contract.SAMPLE_ID).split("@")[0]
        attributes.pop(contract.SAMPLE_KEY)  # of the sample id with its tag
        kept[sample_id] = (record["body"], attributes)
    return kept, others


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tests' byte-level tokenizer."""
    return harness.make_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture
def trainer(tokenizer: Any) -> Any:
    """What ``send_v1_step`` reads of v1's trainer: its tokenizer and config."""
    from omegaconf import OmegaConf

    return types.SimpleNamespace(
        tokenizer=tokenizer,
        config=OmegaConf.create({"actor_rollout_ref": {"rollout": {"response_length": LIMIT}}}),
    )


@pytest.fixture(params=[False, True], ids=["text", "chat"])
def store(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tokenizer: Any
) -> tuple[Store, list[dict[str, Any]]]:
    """The stand-in TransferQueue, imported as ``transfer_queue``, and the rows' tags (text rows, chat rows)."""
    rows, tags = _rows(tokenizer, chat=request.param)
    fake = Store(rows)
    monkeypatch.setitem(sys.modules, "transfer_queue", fake)
    return fake, tags


class Sent(types.SimpleNamespace):
    """What the v1 hook sent, what the reference sent (``_snapshot``), how many rows, and the hook's fetches."""


def _both(store: Store, tags: list[dict[str, Any]], trainer: Any, **settings: Any) -> Sent:
    meta = Meta(keys=list(store.rows), tags=tags, partition_id="train")
    with capture_records(run_id="r", rollout_count=K, progress_interval_s=0, **settings) as records:
        sent = _v1_fetch.send_v1_step(trainer, meta, 5)
    two_phase, calls = _snapshot(records), list(store.calls)
    with capture_records(run_id="r", rollout_count=K, progress_interval_s=0, **settings) as records:
        assert _reference(store.rows, tags, trainer) == sent
    return Sent(two_phase=two_phase, reference=_snapshot(records), rows=sent, calls=calls)


def _kept_fetches(calls: list[tuple[list[str], list[str]]]) -> list[list[str]]:
    """The keys of each fetch of the kept rows' fields (not the first call, which asks one row for every field)."""
    return [keys for keys, fields in calls[1:] if "advantages" in fields]


def test_the_records_are_those_of_every_field_of_every_row(store: Any, trainer: Any) -> None:
    """Same kept records (texts, ids, columns, tokens) and the same end record (scores, mismatch figures)."""
    fake, tags = store
    sent = _both(fake, tags, trainer)
    assert sent.rows == PROMPTS * N
    assert len(sent.two_phase[0]) == K * N
    assert all(contract.TOKENS in attributes for _, attributes in sent.two_phase[0].values())
    assert any(contract.MISMATCH in attributes for attributes in sent.two_phase[1])
    if "raw_prompt" in next(iter(fake.rows.values())):  # every row's turns are counted
        assert any(contract.TRAJECTORIES in attributes for attributes in sent.two_phase[1])
    assert sent.two_phase == sent.reference


def test_every_row_is_fetched_only_for_the_keys_and_the_step_figures(store: Any, trainer: Any) -> None:
    """Texts' ids, advantages, ground truths and the kept-only per-token fields: for the kept prompts' rows only."""
    fake, tags = store
    calls = _both(fake, tags, trainer).calls
    every = [fields for keys, fields in calls[1:] if len(keys) == PROMPTS * N]
    assert len(every) == 1
    assert not set(every[0]) & {*KEPT_ONLY, "prompts"}
    assert {"rm_scores", "extra_fields", "response_mask", "rollout_log_probs", "old_log_probs"} <= set(every[0])
    prompt_rows = [keys for keys, fields in calls[1:] if "prompts" in fields]
    assert prompt_rows == [[f"uid{p}_0_0" for p in range(PROMPTS)]]  # one row per uid
    kept = _kept_fetches(calls)
    assert len(kept) == 1  # the guessed k prompts' rows, in one call
    assert len(kept[0]) == K * N
    limit_rows = [keys for keys, fields in calls[1:] if fields == ["responses"]]
    assert all(len(fake.rows[key]["responses"]) >= LIMIT and key not in kept[0] for keys in limit_rows for key in keys)


def test_a_row_outside_the_guess_is_fetched_with_its_prompts_rows_when_read(
    store: Any, trainer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no guess every kept prompt's rows are fetched when first read, one call each; the records do not change."""
    fake, tags = store
    monkeypatch.setattr(_v1_fetch, "_likely_kept", lambda ids, sources: set())
    sent = _both(fake, tags, trainer)
    assert sent.two_phase == sent.reference
    assert [len(keys) for keys in _kept_fetches(sent.calls)] == [N] * K


def test_k_per_data_source_and_padding_rows(store: Any, trainer: Any) -> None:
    """Padding rows are left out; with k per data source the guess covers each data source's k."""
    fake, tags = store
    for index in range(0, len(tags), 5):
        tags[index]["is_padding"] = True
    sent = _both(fake, tags, trainer, sample_by="data_source")
    assert sent.rows == PROMPTS * N - len(range(0, len(tags), 5))
    assert sent.two_phase == sent.reference
    assert len(sent.two_phase[0]) > K * N - N  # both data sources' k prompts (less their padding rows)
    assert len(_kept_fetches(sent.calls)) == 1  # in one call: none fetched when read


# -- the rows v1's trainer held (verl._v1_capture) ---------------------------------------------------------

METRIC_FIELDS = (
    "prompts",
    "responses",
    "response_mask",
    "values",
    "advantages",
    "returns",
    "rm_scores",
    "token_level_rewards",
    "num_turns",
)  # what v1's _compute_metrics fetches of every row
HELD = (
    "prompts",
    "responses",
    "response_mask",
    "rm_scores",
    "num_turns",
    "advantages",
    "rollout_log_probs",
    "old_log_probs",
    "ref_log_prob",
    "rollout_is_weights",
)


@pytest.fixture
def corrected(trainer: Any) -> Any:
    """The trainer with GRPO over N responses and the rollout correction's per-token weights (decoupled mode)."""
    from omegaconf import OmegaConf

    trainer.config = OmegaConf.merge(
        trainer.config,
        {
            "actor_rollout_ref": {"rollout": {"n": N}},
            "algorithm": harness.GRPO_CORRECTED,
        },
    )
    return trainer


def _trainer_step(store: Store, meta: Meta, trainer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """What v1's trainer does before the hook, on the stand-in store.

    verl's real ``_compute_advantage`` (watched as ``install()`` leaves it), then ``_compute_metrics``'
    fetch of every row (its module function, watched).
    """
    from otel_valgen.integrations.verl import _correction, _v1_capture

    assert not _v1_capture.watch(trainer_base)
    assert _correction.watch(trainer_base) is None
    monkeypatch.setattr(trainer_base, "tq", store)
    vars(trainer_base.PPOTrainer)["_compute_advantage"](trainer, meta, {})
    trainer_base.get_metric_data_with_optional_routed_experts(
        keys=meta.keys,
        partition_id="train",
        fields=list(METRIC_FIELDS),
        moe_lb_metrics_interval=0,
        global_steps=5,
        accumulator=None,
        kv_batch_get=store.kv_batch_get,
    )


def _held_step(
    fake: Store, tags: list[dict[str, Any]], trainer: Any, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, list[tuple[list[str], list[str]]]]:
    """The hook's records after the trainer's step (its rows held) and the hook's fetches.

    The records are checked to be those of every field of every row, with nothing counted as fetched instead.
    """
    from otel_valgen.integrations.verl import _correction

    meta = Meta(keys=list(fake.rows), tags=tags, partition_id="train")
    with capture_records(run_id="r", rollout_count=K, progress_interval_s=0) as records:
        _trainer_step(fake, meta, trainer, monkeypatch)
        held_corrections = list(_correction._kept)
        fake.calls.clear()
        sent = _v1_fetch.send_v1_step(trainer, meta, 5)
        fetched_instead = vg.stats().get(_v1_fetch.FETCHED_INSTEAD, 0)
    held = _snapshot(records)
    calls = list(fake.calls)
    _correction._kept[:] = held_corrections  # the reference takes the same mask before the correction
    with capture_records(run_id="r", rollout_count=K, progress_interval_s=0) as records:
        assert _reference(fake.rows, tags, trainer) == sent == PROMPTS * N
    assert held == _snapshot(records)
    assert fetched_instead == 0
    return held, calls


def test_rows_the_trainer_held_are_not_fetched(
    store: Any, corrected: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """After verl's own _compute_advantage and _compute_metrics' fetch, the hook fetches only what they did not hold.

    The records are those of every field of every row; the hook asks TransferQueue for no field the trainer
    held, and for every row only ``extra_fields``; nothing is counted as fetched instead.
    """
    fake, tags = store
    held, calls = _held_step(fake, tags, corrected, monkeypatch)
    assert all(contract.TOKENS in attributes for _, attributes in held[0].values())
    assert not {name for _, fields in calls for name in fields} & set(HELD)
    every = [fields for keys, fields in calls if len(keys) == PROMPTS * N]
    assert every == [["extra_fields"]]
    assert "fetched from TransferQueue instead" not in caplog.text


def test_single_turn_rows_fetch_extra_fields_for_the_rows_read_only(
    store: Any, corrected: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One turn in every row and nothing captured in the probe row: ``extra_fields`` only for the rows read.

    The records are still those of every field of every row (their ``valgen.extra.*`` from
    ``reward_extra_info`` too), and so are the step's end records with the figures over every trajectory.
    """
    fake, tags = store
    chat = all("num_turns" in row for row in fake.rows.values())
    for row in fake.rows.values():
        for name in (MESSAGES_COLUMN, "tool_rewards"):
            row["extra_fields"].pop(name, None)
        if chat:
            row["num_turns"] = 2
    held, calls = _held_step(fake, tags, corrected, monkeypatch)
    assert all("valgen.extra.acc" in attributes for _, attributes in held[0].values())
    every = [fields for keys, fields in calls if len(keys) == PROMPTS * N]
    read = [(keys, fields) for keys, fields in calls if "extra_fields" in fields and len(keys) not in (1, PROMPTS * N)]
    if chat:  # num_turns of every row says one turn
        assert every == []
        assert read
        assert all(len(keys) < PROMPTS * N for keys, _ in read)
    else:  # no turn counts: every row's extra_fields, as before
        assert every == [["extra_fields"]]


def test_rows_not_held_are_fetched_counted_and_warned_once(
    store: Any, trainer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing held (no trainer step before it): the hook fetches every field, counted each step, said once."""
    fake, tags = store
    meta = Meta(keys=list(fake.rows), tags=tags, partition_id="train")
    _v1_fetch._warned.clear()
    with (
        caplog.at_level(logging.DEBUG, logger="otel_valgen"),
        capture_records(run_id="r", rollout_count=K, progress_interval_s=0),
    ):
        assert _v1_fetch.send_v1_step(trainer, meta, 5) == PROMPTS * N
        assert _v1_fetch.send_v1_step(trainer, meta, 6) == PROMPTS * N
        assert vg.stats()[_v1_fetch.FETCHED_INSTEAD] == 2
    warned = [r for r in caplog.records if "fetched from TransferQueue instead" in r.getMessage()]
    assert [r.levelno for r in warned] == [logging.WARNING, logging.DEBUG]
    assert "PPOTrainer._compute_advantage" in warned[0].getMessage()
