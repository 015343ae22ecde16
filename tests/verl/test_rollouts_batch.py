"""verl's training batch as rollout records: ``send_rollout_batch`` on verl 0.9.1's real ``DataProto``.

The batch is built as verl's trainer holds it after rewards and advantages (left-padded
``prompts``, right-padded ``responses``, ``attention_mask`` over both, ``response_mask``,
``token_level_scores``, ``advantages``; ``uid``, ``data_source``, ``reward_model`` and the reward's
extra columns in ``non_tensor_batch``), with a real byte-level tokenizer, and read back from
otel-valgen's in-memory exporter.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import xxhash

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.integrations.verl_rollouts import rollout_columns, send_rollout_batch
from otel_valgen.sampling import SortKey, group_view, sample_key, split_sample_id, untagged
from otel_valgen.testing import capture_records
from tests.verl import harness

verl = pytest.importorskip("verl")
DataProto = verl.DataProto
RayPPOTrainer = pytest.importorskip("verl.trainer.ppo.ray_trainer").RayPPOTrainer

SEED = 7
N = 4  # responses per prompt (rollout.n)


class CountingTokenizer:
    """The real tokenizer, counting the rows it decodes (what the hook must not do for unkept rows)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.decoded: list[list[int]] = []

    def decode(self, ids: list[int], **kwargs: Any) -> str:
        self.decoded.append(list(ids))
        return str(self.tokenizer.decode(ids, **kwargs))

    def batch_decode(self, rows: list[list[int]], **kwargs: Any) -> list[str]:
        self.decoded.extend(list(ids) for ids in rows)
        return list(self.tokenizer.batch_decode(rows, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tokenizer, name)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The test harness's byte-level tokenizer (a real ``PreTrainedTokenizerFast``)."""
    return harness.make_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def _answer(p: int, i: int) -> str:
    return f"answer {p}.{i}" + "!" * (i * 3)


def make_batch(
    tokenizer: Any,
    prompts: list[str],
    *,
    n: int = N,
    prompt_width: int = 40,
    response_width: int = 20,
    scores: list[float] | None = None,
    eos_last: bool = False,
    chat: bool = False,
) -> DataProto:
    """A GRPO batch of ``prompts`` x n responses, padded as verl pads it; response i of prompt p is ``_answer``.

    ``chat``: each prompt tokenized through the chat template (special tokens around it), as verl's agent loop does.
    """
    rows = [(p, i) for p in range(len(prompts)) for i in range(n)]
    pad = tokenizer.pad_token_id
    prompt_ids = torch.full((len(rows), prompt_width), pad, dtype=torch.int64)
    response_ids = torch.full((len(rows), response_width), pad, dtype=torch.int64)
    prompt_mask = torch.zeros_like(prompt_ids)
    response_mask = torch.zeros_like(response_ids)
    for row, (p, i) in enumerate(rows):
        text = prompts[p]
        if chat:
            message = [{"role": "user", "content": text}]
            text = tokenizer.apply_chat_template(message, add_generation_prompt=True, tokenize=False)
        tokens = tokenizer.encode(text, add_special_tokens=False)
        prompt_ids[row, prompt_width - len(tokens) :] = torch.tensor(tokens)  # left padding
        prompt_mask[row, prompt_width - len(tokens) :] = 1
        answer = tokenizer.encode(_answer(p, i), add_special_tokens=False)[:response_width]
        if eos_last and len(answer) == response_width:
            answer[-1] = tokenizer.eos_token_id
        response_ids[row, : len(answer)] = torch.tensor(answer)  # right padding
        response_mask[row, : len(answer)] = 1
    lengths = response_mask.sum(-1)
    token_scores = torch.zeros((len(rows), response_width))
    values = scores if scores is not None else [float(p + i / 10) for p, i in rows]
    token_scores[torch.arange(len(rows)), lengths - 1] = torch.tensor(values)  # verl puts the score on the last token
    advantages = torch.tensor([float(i) - (n - 1) / 2 for _, i in rows])[:, None] * response_mask
    return DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": response_ids,
            "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
            "attention_mask": torch.cat([prompt_mask, response_mask], dim=1),
            "response_mask": response_mask,
            "token_level_scores": token_scores,
            "token_level_rewards": token_scores,
            "advantages": advantages.float(),
        },
        non_tensors={
            "uid": np.array([f"uuid-{p}" for p, _ in rows], dtype=object),
            "data_source": np.array(["openai/gsm8k" if p % 2 else "math" for p, _ in rows], dtype=object),
            "reward_model": np.array([{"ground_truth": f"gt{p}", "style": "rule"} for p, _ in rows], dtype=object),
            "acc": np.array([float(i % 2) for _, i in rows]),
            "pred": np.array([f"pred{i}" for _, i in rows], dtype=object),
            "max_global_steps": np.array([3 + p % 2 for p, _ in rows]),
        },
        meta_info={"reward_extra_keys": ["acc", "pred"]},
    )


def _generations(records: Any) -> list[dict[str, Any]]:
    return [r for r in records if r["event_name"] == contract.EVENT_GENERATION]


PROMPTS = [f"What is {p} plus {p}?" for p in range(8)]


def test_k_prompts_with_all_n_responses_and_their_columns(tokenizer: Any) -> None:
    """Exactly k prompts, each with all n responses, the group view of the prompt ids; every column as defined."""
    counting = CountingTokenizer(tokenizer)
    batch = make_batch(tokenizer, PROMPTS, response_width=16)
    ids = rollout_columns(batch, tokenizer, None, None)["prompt_ids"]
    with capture_records(run_id="r", rollout_count=2, seed=SEED, progress_interval_s=0) as records:
        assert send_rollout_batch(batch, counting, step=5, source="trainer") == len(PROMPTS) * N
    sent = _generations(records)
    assert len(sent) == 2 * N
    lanes = [i for _ in PROMPTS for i in range(N)]
    sample_ids = [f"{pid}/{lane}" for pid, lane in zip(ids, lanes, strict=True)]
    items = [
        (SortKey.of(sample_key(SEED, pid), pid), SortKey.of(sample_key(SEED, sid), sid), sid)
        for pid, sid in zip(ids, sample_ids, strict=True)
    ]
    expected = sorted(sid for _, _, sid in group_view(items, 2))
    assert sorted(untagged(g["attributes"][contract.SAMPLE_ID]) for g in sent) == expected
    for g in sent:
        attributes, body = g["attributes"], g["body"]
        p = PROMPTS.index(body[contract.BODY_INPUT])
        i = split_sample_id(attributes[contract.SAMPLE_ID])[1] - 1
        answer = _answer(p, i)
        assert attributes[contract.KIND] == contract.KIND_ROLLOUT
        assert attributes[contract.STEP] == 5
        assert attributes[contract.SOURCE] == "trainer"
        assert body[contract.BODY_OUTPUT] == answer[:16]
        assert body[contract.BODY_GROUND_TRUTH] == f"gt{p}"
        assert attributes[contract.SCORE] == pytest.approx(p + i / 10)
        assert attributes[contract.DATA_SOURCE] == ("openai/gsm8k" if p % 2 else "math")
        assert attributes[contract.ADVANTAGE] == pytest.approx(i - (N - 1) / 2)
        assert attributes[contract.RESPONSE_LENGTH] == min(len(answer), 16)
        assert attributes[contract.TRUNCATED] == (len(answer) >= 16)
        assert attributes[contract.PARAM_VERSION] == 3 + p % 2
        assert attributes[contract.EXTRA_PREFIX + "acc"] == float(i % 2)
        assert attributes[contract.EXTRA_PREFIX + "pred"] == f"pred{i}"
        assert "uid" not in str(attributes)  # verl's per-step uid is no column and no id
    # one prompt decoded per uid (for its id), and only the kept k·n responses
    assert len(counting.decoded) == len(PROMPTS) + 2 * N


def test_a_response_that_ends_on_eos_at_the_limit_is_not_truncated(tokenizer: Any) -> None:
    """Filling the length limit is truncation unless the last token is EOS; a shorter response never is."""
    batch = make_batch(tokenizer, PROMPTS[:1], response_width=10, eos_last=True)
    columns = rollout_columns(batch, tokenizer, None, None)
    assert columns["truncated"] == [False] * N
    assert rollout_columns(batch, tokenizer, None, 64)["truncated"] == [False] * N
    plain = make_batch(tokenizer, PROMPTS[:1], response_width=10)
    assert rollout_columns(plain, tokenizer, None, None)["truncated"] == [True] * N


def test_prompt_id_depends_on_the_prompt_text_only(tokenizer: Any) -> None:
    """The same prompt text gives the same id under other padding, at another step, with other uids."""
    narrow = rollout_columns(make_batch(tokenizer, PROMPTS[:3]), tokenizer, None, None)["prompt_ids"]
    wide = rollout_columns(make_batch(tokenizer, PROMPTS[2::-1], prompt_width=64), tokenizer, None, None)["prompt_ids"]
    assert len(set(narrow)) == 3
    assert narrow[:N] == [narrow[0]] * N  # the n responses of a prompt share its id
    assert narrow[0] == wide[-1]
    assert narrow[-1] == wide[0]
    with capture_records(run_id="r", rollout_count=8, seed=SEED, progress_interval_s=0) as records:
        send_rollout_batch(make_batch(tokenizer, PROMPTS[:3]), tokenizer, step=1)
        send_rollout_batch(make_batch(tokenizer, PROMPTS[:3], prompt_width=50), tokenizer, step=2)
    by_step: dict[int, set[str]] = {}
    for g in _generations(records):
        by_step.setdefault(g["attributes"][contract.STEP], set()).add(g["attributes"][contract.PROMPT_ID])
    assert by_step[1] == by_step[2] == set(narrow)


def test_decodes_one_prompt_per_uid_and_only_the_kept_responses(tokenizer: Any) -> None:
    """Of 8 prompts x 4 responses with k = 3: each prompt decoded once (its id), and only the 12 kept responses."""
    counting = CountingTokenizer(tokenizer)
    with capture_records(run_id="r", rollout_count=3, seed=SEED, progress_interval_s=0) as records:
        send_rollout_batch(make_batch(tokenizer, PROMPTS), counting, step=1)
    assert len(_generations(records)) == 3 * N
    texts = {tokenizer.decode(ids, skip_special_tokens=True) for ids in counting.decoded}
    assert len(counting.decoded) == len(PROMPTS) + 3 * N
    assert {g["body"][contract.BODY_INPUT] for g in _generations(records)} <= texts


class _Dumper(RayPPOTrainer):  # type: ignore[misc]
    """verl's legacy trainer with only what its own ``_log_rollout_data`` (``trainer.rollout_data_dir``) needs."""

    def __init__(self, tokenizer: Any, global_steps: int) -> None:
        self.tokenizer = tokenizer
        self.global_steps = global_steps
        self._init_dump_executor()


def test_hashing_verls_own_dump_input_gives_the_prompt_id(tokenizer: Any, tmp_path: Path) -> None:
    """An oracle: the XXH64 of each ``input`` of verl's rollout JSONL dump is the prompt id its row is sent with."""
    batch = make_batch(tokenizer, PROMPTS[:3], chat=True)
    dumper = _Dumper(tokenizer, global_steps=4)
    dumper._log_rollout_data(batch, {}, {}, str(tmp_path))
    dumper._shutdown_dump_executor()
    lines = [json.loads(line) for line in (tmp_path / "4.jsonl").read_text().splitlines()]
    assert [line["input"] for line in lines] == [prompt for prompt in PROMPTS[:3] for _ in range(N)]
    dumped = [xxhash.xxh64_hexdigest(line["input"].encode()) for line in lines]
    assert rollout_columns(batch, tokenizer, None, None)["prompt_ids"] == dumped
    with capture_records(run_id="r", rollout_count=8, seed=SEED, progress_interval_s=0) as records:
        send_rollout_batch(batch, tokenizer, step=4)
    assert {g["attributes"][contract.PROMPT_ID] for g in _generations(records)} == set(dumped)


class Untouchable:
    """A batch any read of which fails the test: rollouts off must not look at it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"read {name} of the batch while rollouts are off")

    def __len__(self) -> int:
        raise AssertionError("read the batch's length while rollouts are off")


def test_off_by_default_reads_nothing(tokenizer: Any) -> None:
    """Without OTEL_VALGEN_ROLLOUT_COUNT nothing of the batch is read, decoded or counted."""
    counting = CountingTokenizer(tokenizer)
    with capture_records(run_id="r", progress_interval_s=0) as records:
        assert send_rollout_batch(Untouchable(), counting, step=1) == 0  # type: ignore[arg-type]
        assert send_rollout_batch(make_batch(tokenizer, PROMPTS), counting, step=1) == 0
    assert list(records) == []
    assert counting.decoded == []
    assert vg.stats()["internal_errors"] == 0
    assert vg.stats()["generations_seen"] == 0


def test_bad_values_are_counted_not_raised(tokenizer: Any) -> None:
    """NaN scores are sent without a score and counted; a batch missing a tensor is counted, never raised."""
    scores = [math.nan] * (2 * N)
    with capture_records(run_id="r", rollout_count=2, seed=SEED, progress_interval_s=0) as records:
        assert send_rollout_batch(make_batch(tokenizer, PROMPTS[:2], scores=scores), tokenizer, step=1) == 2 * N
        broken = make_batch(tokenizer, PROMPTS[:2])
        broken.batch.pop("responses")
        assert send_rollout_batch(broken, tokenizer, step=2) == 0
    sent = _generations(records)
    assert len(sent) == 2 * N
    assert all(contract.SCORE not in g["attributes"] for g in sent)
    assert vg.stats()["invalid_scores"] == 2 * N
    assert vg.stats()["internal_errors"] == 1


def test_reward_extra_info_given_wins_and_empty_columns_are_left_out(tokenizer: Any) -> None:
    """An explicit reward_extra_info replaces the batch's reward_extra_keys; columns of length 0 are skipped."""
    batch = make_batch(tokenizer, PROMPTS[:2])
    columns = rollout_columns(batch, tokenizer, {"format": [1] * (2 * N), "empty": []}, None)
    assert set(columns["extra"]) == {"format"}
    assert set(rollout_columns(batch, tokenizer, None, None)["extra"]) == {"acc", "pred"}


def test_the_tokenizer_directory_is_real(tmp_path: Path, tokenizer: Any) -> None:
    """The tokenizer decodes what it encodes (the texts asserted above come from it)."""
    assert tokenizer.decode(tokenizer.encode("What is 1 plus 1?", add_special_tokens=False)) == "What is 1 plus 1?"
