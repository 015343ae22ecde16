"""The verl rollout hook (``integrations.verl_rollouts``) on verl 0.9.1's real ``DataProto`` and trainer classes.

Fast: one process, no Ray, no trainer run. Batches are built as verl's trainer holds them after
rewards and advantages (left-padded ``prompts``, right-padded ``responses``, ``attention_mask``
over both, ``response_mask`` without a multi-turn tool's tokens, ``advantages`` masked by it),
with the tests' real byte-level tokenizer (one token per ASCII character). verl's trainers
running the hooks end to end: tests/verl/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
import xxhash
from omegaconf import OmegaConf
from verl import DataProto
from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.integrations import verl as vg_verl
from otel_valgen.integrations.verl_rollouts import send_legacy_step, send_rollout_batch
from otel_valgen.testing import capture_records
from tests.verl import harness

assert vg_verl.install()  # what otel-valgen's Ray setup hook does in every worker


@dataclass(frozen=True)
class Row:
    """One response of a batch: its prompt, and its pieces (text, whether the model wrote it, not a tool)."""

    prompt: str
    pieces: tuple[tuple[str, bool], ...]
    advantage: float = 0.0
    score: float = 0.0
    eos: bool = False  # the last token is the tokenizer's EOS

    @property
    def text(self) -> str:
        """The response as decoded: every piece, a tool's too."""
        return "".join(text for text, _ in self.pieces)


def answer(text: str) -> tuple[tuple[str, bool], ...]:
    """The pieces of a response the model wrote whole."""
    return ((text, True),)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tests' byte-level tokenizer (a real ``PreTrainedTokenizerFast``)."""
    return harness.make_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def make_batch(
    tokenizer: Any,
    rows: list[Row],
    *,
    prompt_width: int = 40,
    response_width: int = 24,
    rm_scores: list[float] | None = None,
    non_tensors: dict[str, list[Any]] | None = None,
    reward_extra_keys: list[str] | None = None,
) -> DataProto:
    """``rows`` padded as verl pads them, the score on each response's last token, advantages under response_mask."""
    size = len(rows)
    prompts = torch.full((size, prompt_width), tokenizer.pad_token_id, dtype=torch.int64)
    responses = torch.full((size, response_width), tokenizer.pad_token_id, dtype=torch.int64)
    prompt_attention = torch.zeros_like(prompts)
    response_attention = torch.zeros_like(responses)
    response_mask = torch.zeros_like(responses)
    for index, row in enumerate(rows):
        tokens = tokenizer.encode(row.prompt, add_special_tokens=False)
        prompts[index, prompt_width - len(tokens) :] = torch.tensor(tokens)
        prompt_attention[index, prompt_width - len(tokens) :] = 1
        at = 0
        for text, own in row.pieces:
            piece = tokenizer.encode(text, add_special_tokens=False)
            responses[index, at : at + len(piece)] = torch.tensor(piece)
            response_mask[index, at : at + len(piece)] = int(own)
            at += len(piece)
        if row.eos:
            responses[index, at - 1] = tokenizer.eos_token_id
        response_attention[index, :at] = 1
    lengths = response_attention.sum(-1)
    scores = torch.zeros((size, response_width))
    scores[torch.arange(size), lengths - 1] = torch.tensor([row.score for row in rows])
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": torch.cat([prompt_attention, response_attention], dim=1),
        "response_mask": response_mask,
        "token_level_scores": scores,
        "advantages": torch.tensor([row.advantage for row in rows])[:, None] * response_mask,
    }
    if rm_scores is not None:
        tensors["rm_scores"] = torch.zeros((size, response_width))
        tensors["rm_scores"][torch.arange(size), lengths - 1] = torch.tensor(rm_scores)
    batch: DataProto = DataProto.from_dict(
        tensors=tensors,
        non_tensors={
            "uid": np.array([f"uuid-{index}" for index in range(size)], dtype=object),
            **{name: np.array(values, dtype=object) for name, values in (non_tensors or {}).items()},
        },
        meta_info={"reward_extra_keys": reward_extra_keys or []},
    )
    return batch


def _sent(records: Any) -> dict[str, dict[str, Any]]:
    """The generation records by response text."""
    return {
        r["body"][contract.BODY_OUTPUT]: r["attributes"]
        for r in records
        if r["event_name"] == contract.EVENT_GENERATION
    }


def _send(batch: DataProto, tokenizer: Any, **kwargs: Any) -> dict[str, dict[str, Any]]:
    """Every response of ``batch`` as sent (k large enough to keep all its prompts)."""
    with capture_records(run_id="r", rollout_count=64, progress_interval_s=0) as records:
        assert send_rollout_batch(batch, tokenizer, **kwargs) == len(batch)
    return _sent(records)


def _grpo(prompts: list[str], n: int) -> list[Row]:
    return [
        Row(prompt, answer(f"answer {p}.{i}"), advantage=i - (n - 1) / 2, score=p + i / 10)
        for p, prompt in enumerate(prompts)
        for i in range(n)
    ]


def test_a_prompt_id_is_the_xxh64_of_its_token_ids_as_int64(tokenizer: Any) -> None:
    """valgen.prompt_id: XXH64 of the prompt's unpadded token ids as int64 bytes, whatever the padding and uid."""
    prompts = ["What is 1 plus 1?", "Name a prime."]
    expected = {
        prompt: xxhash.xxh64_hexdigest(
            np.array(tokenizer.encode(prompt, add_special_tokens=False), dtype=np.int64).tobytes()
        )
        for prompt in prompts
    }
    for width in (24, 40):
        sent = _send(make_batch(tokenizer, _grpo(prompts, 2), prompt_width=width), tokenizer, step=1)
        assert len(sent) == 4
        for p, prompt in enumerate(prompts):
            for i in range(2):
                assert sent[f"answer {p}.{i}"][contract.PROMPT_ID] == expected[prompt]


def test_a_multi_turn_response_keeps_the_tools_text_out_of_length_and_advantage(tokenizer: Any) -> None:
    """The text holds a tool's tokens; the length counts the model's (response_mask), the advantage is their mean."""
    pieces = (("Call calc.", True), (" [tool: 4]", False), (" So 4.", True))
    rows = [Row("What is 2+2?", pieces, advantage=1.5), Row("What is 2+2?", answer("It is 5."), advantage=-0.5)]
    sent = _send(make_batch(tokenizer, rows, response_width=32), tokenizer, step=2)
    multi, plain = sent["Call calc. [tool: 4] So 4."], sent["It is 5."]
    assert multi[contract.RESPONSE_LENGTH] == len("Call calc.") + len(" So 4.")
    assert multi[contract.ADVANTAGE] == pytest.approx(1.5)
    assert (plain[contract.RESPONSE_LENGTH], plain[contract.ADVANTAGE]) == (len("It is 5."), pytest.approx(-0.5))


def test_the_score_is_token_level_scores_summed_else_rm_scores(tokenizer: Any) -> None:
    """The score is token_level_scores summed, as verl's dump; a batch without them (v1) scores with rm_scores."""
    rows = _grpo(["Q one?"], 2)
    both = make_batch(tokenizer, rows, rm_scores=[9.0, 8.0])
    scores = [_send(both, tokenizer, step=1)[f"answer 0.{i}"][contract.SCORE] for i in range(2)]
    assert scores == pytest.approx([0.0, 0.1])
    only_rm = make_batch(tokenizer, rows, rm_scores=[9.0, 8.0])
    only_rm.batch.pop("token_level_scores")
    assert [_send(only_rm, tokenizer, step=1)[f"answer 0.{i}"][contract.SCORE] for i in range(2)] == [9.0, 8.0]


def test_truncated_fills_the_length_limit_without_eos(tokenizer: Any) -> None:
    """Truncated: the response fills max_response_length (default the width of responses) and does not end on EOS."""
    rows = [
        Row("Q?", answer("a" * 12)),  # fills a limit of 12
        Row("Q?", answer("b" * 12), eos=True),  # fills it, but ended by the model
        Row("Q?", answer("c" * 8)),  # shorter
        Row("Q?", answer("d" * 24)),  # fills the width
    ]
    batch = make_batch(tokenizer, rows, response_width=24)
    limited = _send(batch, tokenizer, step=1, max_response_length=12)
    assert [limited[text][contract.TRUNCATED] for text in ("a" * 12, "b" * 11, "c" * 8, "d" * 24)] == [
        True,
        False,
        False,
        True,
    ]
    default = _send(batch, tokenizer, step=1)
    assert [default[text][contract.TRUNCATED] for text in ("a" * 12, "b" * 11, "c" * 8, "d" * 24)] == [
        False,
        False,
        False,
        True,
    ]


def test_the_param_version_is_the_one_that_finished_the_response(tokenizer: Any) -> None:
    """valgen.param_version is max_global_steps, not min_global_steps (where a partial rollout began)."""
    rows = _grpo(["Q one?", "Q two?"], 2)
    batch = make_batch(
        tokenizer, rows, non_tensors={"max_global_steps": [5, 5, 6, 6], "min_global_steps": [3, 4, 4, 6]}
    )
    sent = _send(batch, tokenizer, step=7)
    assert [sent[f"answer {p}.{i}"][contract.PARAM_VERSION] for p in range(2) for i in range(2)] == [5, 5, 6, 6]


def test_ground_truth_data_source_and_the_rewards_extra_columns(tokenizer: Any) -> None:
    """reward_model's ground_truth, data_source, and the batch's reward_extra_keys columns; a given info wins."""
    rows = _grpo(["Q one?", "Q two?"], 2)
    batch = make_batch(
        tokenizer,
        rows,
        non_tensors={
            "reward_model": [{"ground_truth": f"gt{p}", "style": "rule"} for p in (0, 0, 1, 1)],
            "data_source": ["math", "math", "gsm8k", "gsm8k"],
            "acc": [1.0, 0.0, 1.0, 0.0],
        },
        reward_extra_keys=["acc"],
    )
    with capture_records(run_id="r", rollout_count=64, progress_interval_s=0) as records:
        send_rollout_batch(batch, tokenizer, step=1)
    by_text = {r["body"][contract.BODY_OUTPUT]: r for r in records if r["event_name"] == contract.EVENT_GENERATION}
    for p, i in ((0, 0), (0, 1), (1, 0), (1, 1)):
        record = by_text[f"answer {p}.{i}"]
        assert record["body"][contract.BODY_GROUND_TRUTH] == f"gt{p}"
        assert record["attributes"][contract.DATA_SOURCE] == ("math", "gsm8k")[p]
        assert record["attributes"][contract.EXTRA_PREFIX + "acc"] == float(1 - i)
    given = _send(batch, tokenizer, step=1, reward_extra_info={"format": [2.0] * 4, "empty": []})
    assert {name for attributes in given.values() for name in attributes if name.startswith(contract.EXTRA_PREFIX)} == {
        contract.EXTRA_PREFIX + "format"
    }


class _Unread:
    """A batch that records every read of it (nothing must read it while rollouts are off)."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.reads.append(name)
        raise AttributeError(name)

    def __len__(self) -> int:
        self.reads.append("len")
        return 0


def test_rollouts_off_read_nothing_of_the_batch(tokenizer: Any) -> None:
    """Without OTEL_VALGEN_ROLLOUT_COUNT the hook returns at once: no tensor read, nothing counted."""
    batch = _Unread()
    with capture_records(run_id="r", progress_interval_s=0) as records:
        assert send_rollout_batch(batch, tokenizer, step=1) == 0  # type: ignore[arg-type]
    assert batch.reads == []
    assert list(records) == []
    assert vg.stats()["internal_errors"] == 0


class _LegacyTrainer(RayPPOTrainer):
    """verl's legacy trainer at a step, without building its workers."""

    def __init__(self, tokenizer: Any, global_steps: int) -> None:
        self.tokenizer = tokenizer
        self.global_steps = global_steps
        self.config = OmegaConf.create(
            {"actor_rollout_ref": {"rollout": {"response_length": 12}}, "data": {"max_response_length": 20}}
        )


def test_the_legacy_trainer_sends_at_global_steps_with_the_rollouts_length_limit(tokenizer: Any) -> None:
    """RayPPOTrainer's batch: at global_steps, source trainer; the limit is rollout.response_length first."""
    rows = [Row("Q?", answer("a" * 12)), Row("Q?", answer("b" * 16))]
    with capture_records(run_id="r", rollout_count=8, progress_interval_s=0) as records:
        assert send_legacy_step(_LegacyTrainer(tokenizer, 17), make_batch(tokenizer, rows)) == 2
    sent = _sent(records)
    assert {attributes[contract.STEP] for attributes in sent.values()} == {17}
    assert {attributes[contract.SOURCE] for attributes in sent.values()} == {"trainer"}
    assert (sent["a" * 12][contract.TRUNCATED], sent["b" * 16][contract.TRUNCATED]) == (True, True)


class _FullyAsyncTrainer(FullyAsyncTrainer.__ray_metadata__.modified_class):  # type: ignore[name-defined,misc]
    """verl's fully-async trainer as its Ray actor runs it, in a sync cycle, without its actors and workers."""

    def __init__(self, tokenizer: Any, version: int, local_step: int, extra: dict[str, list[Any]]) -> None:
        self.tokenizer = tokenizer
        self.config = OmegaConf.create({"trainer": {"rollout_data_dir": None}})
        self.global_steps = 1000  # not the step of a fully-async trainer's rollouts
        self.timing_raw: dict[str, float] = {}
        self.reward_extra_infos_dict = extra
        self.local_trigger_step = local_step
        self.current_param_version = version


@pytest.mark.parametrize(("local_step", "step"), [(1, 4), (2, 5), (3, 5)])
def test_the_fully_async_trainer_sends_at_the_version_its_update_leads_to(
    tokenizer: Any, local_step: int, step: int
) -> None:
    """Through verl's _fit_dump_data: the cycle's last local step (1) at current_param_version, earlier ones at +1."""
    trainer = _FullyAsyncTrainer(tokenizer, version=4, local_step=local_step, extra={"format": [1.0, 0.0]})
    batch = make_batch(tokenizer, _grpo(["Q one?"], 2), non_tensors={"acc": [0.5, 0.5]}, reward_extra_keys=["acc"])
    with capture_records(run_id="r", rollout_count=8, progress_interval_s=0) as records:
        trainer._fit_dump_data(batch)
    sent = _sent(records)
    assert len(sent) == 2
    assert {attributes[contract.STEP] for attributes in sent.values()} == {step}
    assert [sent[f"answer 0.{i}"].get(contract.EXTRA_PREFIX + "format") for i in range(2)] == [1.0, 0.0]
    assert all(contract.EXTRA_PREFIX + "acc" not in attributes for attributes in sent.values())
