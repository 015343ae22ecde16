"""The verl rollout hook (``integrations.verl_rollouts``) on verl 0.9.1's real ``DataProto`` and trainer classes.

Fast: one process, no Ray, no trainer run. Batches are built as verl's trainer holds them after
rewards and advantages (left-padded ``prompts``, right-padded ``responses``, ``attention_mask``
over both, ``response_mask`` without a multi-turn tool's tokens, ``advantages`` masked by it,
one ``uid`` per prompt repeated for its responses), with the tests' real byte-level tokenizer (one
token per ASCII character); multimodal rows carry ``multi_modal_inputs`` as verl 0.9.1's agent
loop computes them (a real Qwen2-VL image processor over real PIL images). verl's trainers
running the hooks end to end: tests/verl/.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
import xxhash
from omegaconf import OmegaConf
from PIL import Image
from verl import DataProto
from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.integrations import verl as vg_verl
from otel_valgen.integrations.verl._layout import MESSAGES_COLUMN
from otel_valgen.integrations.verl._v1_fetch import _v1_uids
from otel_valgen.integrations.verl_rollouts import rollout_columns, send_legacy_step, send_rollout_batch
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
    uids: list[str] | None = None,
    chat: bool = False,
) -> DataProto:
    """``rows`` padded as verl pads them, the score on each response's last token, advantages under response_mask.

    ``uids``: each row's ``uid`` (default: one per distinct prompt, as verl repeats a prompt's uid
    for its n rows). ``chat``: the prompt's tokens are the chat template's (special tokens around
    the text), as verl's agent loop tokenizes a prompt.
    """
    size = len(rows)
    if uids is None:
        first = {prompt: index for index, prompt in reversed(list(enumerate(row.prompt for row in rows)))}
        uids = [f"uuid-{first[row.prompt]}" for row in rows]
    prompts = torch.full((size, prompt_width), tokenizer.pad_token_id, dtype=torch.int64)
    responses = torch.full((size, response_width), tokenizer.pad_token_id, dtype=torch.int64)
    prompt_attention = torch.zeros_like(prompts)
    response_attention = torch.zeros_like(responses)
    response_mask = torch.zeros_like(responses)
    for index, row in enumerate(rows):
        tokens = _prompt_tokens(tokenizer, row.prompt, chat)
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
            "uid": np.array(uids, dtype=object),
            **{name: np.array(values, dtype=object) for name, values in (non_tensors or {}).items()},
        },
        meta_info={"reward_extra_keys": reward_extra_keys or []},
    )
    return batch


def _prompt_tokens(tokenizer: Any, prompt: str, chat: bool) -> list[int]:
    if chat:
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
    return list(tokenizer.encode(prompt, add_special_tokens=False))


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


def _log_rollouts_id(text: str) -> str:
    """The prompt id ``vg.log_rollouts`` derives from a text prompt (no prompt_ids)."""
    with capture_records(run_id="oracle", rollout_count=1, progress_interval_s=0) as records:
        vg.log_rollouts([text], ["r"], step=1)
    (attributes,) = _sent(records).values()
    return str(attributes[contract.PROMPT_ID])


def test_a_prompt_id_is_the_xxh64_of_its_decoded_text(tokenizer: Any) -> None:
    """valgen.prompt_id: XXH64 of the text decoded with skip_special_tokens, what log_rollouts derives from it.

    The same under any padding, with or without the chat template's special tokens around it,
    and whatever the uid: hashing the ``input`` of verl's rollout dump gives it.
    """
    prompts = ["What is 1 plus 1?", "Name a prime."]
    for prompt in prompts:
        assert _log_rollouts_id(prompt) == xxhash.xxh64_hexdigest(prompt.encode())
    for width in (24, 40):
        for chat in (False, True):
            batch = make_batch(tokenizer, _grpo(prompts, 2), prompt_width=width, chat=chat)
            with capture_records(run_id="r", rollout_count=64, progress_interval_s=0) as records:
                assert send_rollout_batch(batch, tokenizer, step=1) == 4
            generations = [r for r in records if r["event_name"] == contract.EVENT_GENERATION]
            assert len(generations) == 4
            for generation in generations:
                text = generation["body"][contract.BODY_INPUT]
                assert text in prompts
                assert generation["attributes"][contract.PROMPT_ID] == xxhash.xxh64_hexdigest(text.encode())
                assert generation["attributes"][contract.PROMPT_ID] == _log_rollouts_id(text)
    fresh_uids = make_batch(tokenizer, _grpo(prompts, 2), uids=["a", "a", "b", "b"])
    assert rollout_columns(fresh_uids, tokenizer, None, None)["prompt_ids"] == [
        xxhash.xxh64_hexdigest(prompt.encode()) for prompt in prompts for _ in range(2)
    ]


class CountingTokenizer:
    """The real tokenizer, counting the rows it decodes (``decode`` and ``batch_decode``)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.decoded: list[str] = []

    def decode(self, ids: list[int], **kwargs: Any) -> str:
        text = str(self.tokenizer.decode(ids, **kwargs))
        self.decoded.append(text)
        return text

    def batch_decode(self, rows: list[list[int]], **kwargs: Any) -> list[str]:
        texts = [str(text) for text in self.tokenizer.batch_decode(rows, **kwargs)]
        self.decoded.extend(texts)
        return texts

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tokenizer, name)


def test_a_uid_is_one_group_and_the_same_prompt_under_two_uids_is_two(tokenizer: Any) -> None:
    """Rows of one uid share the id of its first row; a later uid with an id taken in the batch gets <id>.1, <id>.2.

    The rows are interleaved as verl's balance_batch may leave them; one prompt is decoded per uid.
    """
    rows = [
        Row("Q one?", answer("a0")),  # uid A
        Row("Q one?", answer("b0")),  # uid B: the same prompt again in the batch
        Row("Q one?", answer("a1")),
        Row("Q two?", answer("c0")),  # uid C
        Row("Q one?", answer("b1")),
        Row("Q one?", answer("d0")),  # uid D: a third time
        Row("Q two?", answer("c1")),
        Row("Q three?", answer("e0")),  # uid E: a multi-output loop's rows of one uid, other prompts
        Row("Q three, again?", answer("e1")),
    ]
    uids = ["A", "B", "A", "C", "B", "D", "C", "E", "E"]
    counting = CountingTokenizer(tokenizer)
    columns = rollout_columns(make_batch(tokenizer, rows, uids=uids), counting, None, None)
    prompts_decoded = [text for text in counting.decoded if text.startswith("Q ")]  # (rows likely kept: responses)
    assert prompts_decoded == ["Q one?", "Q one?", "Q two?", "Q one?", "Q three?"]  # one decode per uid
    one, two, three = (xxhash.xxh64_hexdigest(text.encode()) for text in ("Q one?", "Q two?", "Q three?"))
    by_uid = {"A": one, "B": f"{one}.1", "C": two, "D": f"{one}.2", "E": three}
    assert columns["prompt_ids"] == [by_uid[uid] for uid in uids]
    assert list(columns["prompts"]) == ["Q one?"] * 3 + ["Q two?"] + ["Q one?"] * 2 + ["Q two?"] + ["Q three?"] * 2
    assert len([text for text in counting.decoded if text.startswith("Q ")]) == 5  # reading the prompts: no decode
    sent = _send(make_batch(tokenizer, rows, uids=uids), tokenizer, step=3)
    groups: dict[str, list[str]] = {}
    for text, attributes in sent.items():
        groups.setdefault(attributes[contract.PROMPT_ID], []).append(text)
    assert {pid: sorted(texts) for pid, texts in groups.items()} == {
        one: ["a0", "a1"],
        f"{one}.1": ["b0", "b1"],
        f"{one}.2": ["d0"],
        two: ["c0", "c1"],
        three: ["e0", "e1"],
    }


def test_without_uids_rows_are_grouped_by_their_id(tokenizer: Any) -> None:
    """No uid column: rows with the same prompt are one group, decoded once per distinct token sequence."""
    batch = make_batch(tokenizer, _grpo(["Q one?", "Q two?"], 3) + _grpo(["Q one?"], 1))
    batch.non_tensor_batch.pop("uid")
    counting = CountingTokenizer(tokenizer)
    ids = rollout_columns(batch, counting, None, None)["prompt_ids"]
    one, two = (xxhash.xxh64_hexdigest(text.encode()) for text in ("Q one?", "Q two?"))
    assert ids == [one] * 3 + [two] * 3 + [one]
    assert [text for text in counting.decoded if text.startswith("Q ")] == ["Q one?", "Q two?"]  # responses too


def test_v1_rows_are_grouped_by_the_uid_of_their_transfer_queue_key() -> None:
    """v1 keys are <uid>_<session>_<index> (verl's agent_loop_tq): the uid is the group; other keys give no uid."""
    keys = ["3f2a-uid_0_0", "3f2a-uid_1_0", "3f2a-uid_1_1", "b7_x_0_0"]
    assert _v1_uids(keys) == ["3f2a-uid", "3f2a-uid", "3f2a-uid", "b7_x"]
    assert _v1_uids(["3f2a-uid_0_0", "plain-key"]) is None


# -- multimodal prompts: verl 0.9.1's multi_modal_inputs (and multi_modal_data) ------------------------

VISION_PROMPT = "<|vision_start|><|image_pad|><|vision_end|>What is in the picture?"


def _image(color: tuple[int, int, int], size: int = 56) -> Image.Image:
    """A real RGB PIL image, one colour with a marked corner."""
    image = Image.new("RGB", (size, size), color)
    image.putpixel((0, 0), (255 - color[0], 7, 9))
    return image


def _vision_inputs(images: list[Image.Image]) -> dict[str, torch.Tensor]:
    """``multi_modal_inputs`` of a row as verl 0.9.1's ``AgentLoopWorker._compute_multi_modal_inputs`` returns them.

    The processor's outputs without input_ids and attention_mask, as tensors, plus
    ``images_seqlens`` from ``image_grid_thw``; computed with a real Qwen2-VL image processor.
    """
    from transformers import Qwen2VLImageProcessorPil

    processor = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=112 * 112)
    inputs = dict(processor(images=images, return_tensors="pt"))
    grid = inputs["image_grid_thw"]
    inputs["images_seqlens"] = torch.repeat_interleave(grid[:, 1] * grid[:, 2], grid[:, 0])
    return inputs


def _oracle_digest_of_tensors(inputs: dict[str, torch.Tensor]) -> bytes:
    """D(multi_modal_inputs) as docs/rollouts.md spells it, for a dict of tensors."""
    encoded = b"map\x00" + struct.pack(">I", len(inputs))
    for key in sorted(inputs):
        array = inputs[key].numpy()
        header = f"array\x00{array.dtype.name}\x00{'x'.join(map(str, array.shape))}\x00".encode()
        encoded += key.encode() + b"\x00" + xxhash.xxh64_digest(header + array.tobytes())
    return xxhash.xxh64_digest(encoded)


def test_the_same_text_with_other_images_is_two_prompts(tokenizer: Any) -> None:
    """Two uids with the same tokens (image placeholders) and other images: two prompts, each with its n responses.

    The id is XXH64(text || 0x00 multi_modal_inputs 0x00 D(inputs)); the same image again is the
    same prompt (a second uid gets .1); a text-only row's ``{}`` leaves the text's id.
    """
    red, blue = _image((200, 0, 0)), _image((0, 0, 200))
    rows = [Row(VISION_PROMPT, answer(f"r{u}.{i}")) for u in range(3) for i in range(2)]
    images = [red, red, blue, blue, red, red]
    inputs = [_vision_inputs([image]) for image in images]
    batch = make_batch(
        tokenizer,
        rows,
        prompt_width=80,
        uids=["u0", "u0", "u1", "u1", "u2", "u2"],
        non_tensors={"multi_modal_inputs": inputs},
    )
    sent = _send(batch, tokenizer, step=1)
    assert len(sent) == 6
    text = xxhash.xxh64_hexdigest(VISION_PROMPT.encode())
    with_red = xxhash.xxh64_hexdigest(
        VISION_PROMPT.encode() + b"\x00multi_modal_inputs\x00" + _oracle_digest_of_tensors(inputs[0])
    )
    with_blue = xxhash.xxh64_hexdigest(
        VISION_PROMPT.encode() + b"\x00multi_modal_inputs\x00" + _oracle_digest_of_tensors(inputs[2])
    )
    assert len({with_red, with_blue, text}) == 3
    assert [sent[f"r{u}.{i}"][contract.PROMPT_ID] for u in range(3) for i in range(2)] == [
        with_red,
        with_red,
        with_blue,
        with_blue,
        f"{with_red}.1",
        f"{with_red}.1",
    ]
    text_only = make_batch(tokenizer, rows[:2], prompt_width=80, non_tensors={"multi_modal_inputs": [{}, {}]})
    assert rollout_columns(text_only, tokenizer, None, None)["prompt_ids"] == [text, text]


def test_multi_modal_data_images_count_too(tokenizer: Any) -> None:
    """multi_modal_data (a dict per row, {"images": [PIL images]}) is hashed too, images by mode, size and pixels."""
    rows = [Row(VISION_PROMPT, answer(f"r{u}")) for u in range(4)]
    red = _image((200, 0, 0))
    data = [
        {"images": [red]},
        {"images": [_image((200, 0, 0))]},  # equal pixels: the same prompt
        {"images": [red.convert("RGBA")]},  # another mode
        {"images": [_image((200, 0, 0), size=28)]},  # another size
    ]
    batch = make_batch(
        tokenizer, rows, prompt_width=80, uids=["a", "b", "c", "d"], non_tensors={"multi_modal_data": data}
    )
    ids = rollout_columns(batch, tokenizer, None, None)["prompt_ids"]
    assert ids[1] == f"{ids[0]}.1"
    assert len(set(ids)) == 4
    assert ids[0] != xxhash.xxh64_hexdigest(VISION_PROMPT.encode())
    both = make_batch(
        tokenizer,
        rows[:1],
        prompt_width=80,
        non_tensors={"multi_modal_data": data[:1], "multi_modal_inputs": [_vision_inputs([red])]},
    )
    assert rollout_columns(both, tokenizer, None, None)["prompt_ids"][0] not in ids


def test_a_multi_turn_response_keeps_the_tools_text_out_of_length_and_advantage(tokenizer: Any) -> None:
    """The length counts the model's tokens (response_mask), the advantage is their mean; the turns are messages.

    Without the agent loop's columns (``raw_prompt``, its turns) the text holds a tool's tokens, as before;
    with them (``integrations.verl._agent_loop``) the output is the turns (tests/verl/test_conversation_rows.py).
    """
    pieces = (("Call calc.", True), (" [tool: 4]", False), (" So 4.", True))
    rows = [Row("What is 2+2?", pieces, advantage=1.5), Row("What is 2+2?", answer("It is 5."), advantage=-0.5)]
    sent = _send(make_batch(tokenizer, rows, response_width=32), tokenizer, step=2)
    multi, plain = sent["Call calc. [tool: 4] So 4."], sent["It is 5."]
    assert multi[contract.RESPONSE_LENGTH] == len("Call calc.") + len(" So 4.")
    assert multi[contract.ADVANTAGE] == pytest.approx(1.5)
    assert (plain[contract.RESPONSE_LENGTH], plain[contract.ADVANTAGE]) == (len("It is 5."), pytest.approx(-0.5))
    prompt = [{"role": "user", "content": "What is 2+2?"}]
    turns = [
        {"role": "assistant", "content": "Call calc."},
        {"role": "tool", "content": "4"},
        {"role": "assistant", "content": "So 4."},
    ]
    columns = {"raw_prompt": [prompt, prompt], MESSAGES_COLUMN: [turns, None]}
    chats = _send(make_batch(tokenizer, rows, response_width=32, non_tensors=columns), tokenizer, step=2)
    multi, plain = chats["[assistant] Call calc.\n[tool] 4\n[assistant] So 4."], chats["[assistant] It is 5."]
    assert multi[contract.RESPONSE_LENGTH] == len("Call calc.") + len(" So 4.")
    assert [m["role"] for m in multi[contract.GEN_AI_OUTPUT_MESSAGES]] == ["assistant", "tool", "assistant"]
    assert plain[contract.PROMPT_ID] == multi[contract.PROMPT_ID] == _log_rollouts_id("What is 2+2?")


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


def _at_step(cls: type, **state: Any) -> Any:
    """An instance of verl's own trainer class with only ``state`` set (its ``__init__`` builds workers)."""
    trainer = cls.__new__(cls)
    vars(trainer).update(state)
    return trainer


def _legacy_trainer(tokenizer: Any, global_steps: int) -> Any:
    """The legacy trainer (verl's own class) at a step, without building its workers."""
    return _at_step(
        RayPPOTrainer,
        tokenizer=tokenizer,
        global_steps=global_steps,
        config=OmegaConf.create(
            {"actor_rollout_ref": {"rollout": {"response_length": 12}}, "data": {"max_response_length": 20}}
        ),
    )


def test_the_legacy_trainer_sends_at_global_steps_with_the_rollouts_length_limit(tokenizer: Any) -> None:
    """RayPPOTrainer's batch: at global_steps, source trainer; the limit is rollout.response_length first."""
    rows = [Row("Q?", answer("a" * 12)), Row("Q?", answer("b" * 16))]
    with capture_records(run_id="r", rollout_count=8, progress_interval_s=0) as records:
        assert send_legacy_step(_legacy_trainer(tokenizer, 17), make_batch(tokenizer, rows)) == 2
    sent = _sent(records)
    assert {attributes[contract.STEP] for attributes in sent.values()} == {17}
    assert {attributes[contract.SOURCE] for attributes in sent.values()} == {"trainer"}
    assert (sent["a" * 12][contract.TRUNCATED], sent["b" * 16][contract.TRUNCATED]) == (True, True)


def _fully_async_trainer(tokenizer: Any, version: int, local_step: int, extra: dict[str, list[Any]]) -> Any:
    """The fully-async trainer (verl's own class, as its Ray actor runs it) in a sync cycle, no actors."""
    return _at_step(
        FullyAsyncTrainer.__ray_metadata__.modified_class,
        tokenizer=tokenizer,
        config=OmegaConf.create({"trainer": {"rollout_data_dir": None}}),
        global_steps=1000,  # not the step of a fully-async trainer's rollouts
        timing_raw={},
        reward_extra_infos_dict=extra,
        local_trigger_step=local_step,
        current_param_version=version,
    )


@pytest.mark.parametrize(("local_step", "step"), [(1, 4), (2, 5), (3, 5)])
def test_the_fully_async_trainer_sends_at_the_version_its_update_leads_to(
    tokenizer: Any, local_step: int, step: int
) -> None:
    """Through verl's _fit_dump_data: the cycle's last local step (1) at current_param_version, earlier ones at +1."""
    trainer = _fully_async_trainer(tokenizer, version=4, local_step=local_step, extra={"format": [1.0, 0.0]})
    batch = make_batch(tokenizer, _grpo(["Q one?"], 2), non_tensors={"acc": [0.5, 0.5]}, reward_extra_keys=["acc"])
    with capture_records(run_id="r", rollout_count=8, progress_interval_s=0) as records:
        trainer._fit_dump_data(batch)
    sent = _sent(records)
    assert len(sent) == 2
    assert {attributes[contract.STEP] for attributes in sent.values()} == {step}
    assert [sent[f"answer 0.{i}"].get(contract.EXTRA_PREFIX + "format") for i in range(2)] == [1.0, 0.0]
    assert all(contract.EXTRA_PREFIX + "acc" not in attributes for attributes in sent.values())
