"""verl's training batch as rollout records: ``send_rollout_batch``, the one function the hooks call.

Prompt ids (``valgen.prompt_id``), computed once per GRPO group:

- A group is verl's ``uid`` (``non_tensor_batch["uid"]``, one per prompt, repeated for its n
  rows; v1: the ``<uid>`` of the TransferQueue keys ``<uid>_<session>_<index>``). Its id comes
  from its first row in batch order, whose prompt alone is decoded; every row of the uid gets it.
- The text is ``tokenizer.decode(prompt token ids under the attention mask,
  skip_special_tokens=True)``, as verl's ``trainer.rollout_data_dir`` dump writes ``input``, and
  a text-only prompt's id is what ``vg.log_rollouts`` derives from that text
  (``_records.base_sample_id``): the 16 hex digits of ``XXH64(UTF-8 of the text, seed 0)``. So
  padding, the step and the uid (a fresh one per step) do not change it, a prompt that comes back
  in a later epoch is chosen again, and hashing the dump's ``input`` gives the same id.
- A row with multimodal inputs hashes them after the text: ``XXH64(UTF-8 of the text || M)``,
  seed 0, where M is, for ``multi_modal_data`` then ``multi_modal_inputs`` (``non_tensor_batch``
  columns of one dict per row; verl 0.9.1's agent loop sends ``multi_modal_inputs``: pixel_values,
  image_grid_thw, ... tensors, ``{}`` for a text-only row), when the row's value is not None nor
  empty, ``0x00 || name (ASCII) || 0x00 || D(value)``; a row with neither has the text-only id.
  ``D(v)`` is the 8-byte big-endian ``XXH64`` (seed 0) of ``E(v)``:

  - PIL image: ``"image" 0x00 mode 0x00 "<width>x<height>" 0x00 || tobytes()``;
  - torch tensor or numpy array (not of objects): ``"array" 0x00 dtype 0x00 shape 0x00 || bytes``,
    dtype as numpy names it (``float32``; torch's name without ``torch.``, e.g. ``bfloat16``),
    shape the dimensions joined by ``x`` (``""`` for a scalar), bytes in C order;
  - mapping: ``"map" 0x00 || uint32_be(size)``, then per key in sorted order (keys as text)
    ``UTF-8 of the key || 0x00 || D(value)``;
  - list, tuple, array of objects: ``"list" 0x00 || uint32_be(length) || D(item)...`` (a 0-d
    array of objects: ``E`` of its item);
  - text: ``"str" 0x00 || UTF-8``; bytes: ``"bytes" 0x00 || bytes``; None: ``"none"``;
    anything else (numbers, numpy scalars as their ``.item()``): ``"repr" 0x00 || UTF-8 of repr``.

  Two rows with the same text (the same image placeholder tokens) and other images get other ids.
  The v1 hook does not fetch ``multi_modal_inputs`` from TransferQueue: its ids are of the text.
  In a multi-turn loop whose tools return images, a row's ``multi_modal_inputs`` also hold those,
  so the id is of the group's first row's (then not the same in every epoch).
- Two uids of one batch with the same id (the same prompt twice in a batch) stay two groups: in
  batch order the first keeps the id, the next ones get ``<id>.1``, ``<id>.2``, ...
- Without a ``uid`` column, rows with the same id are one group (a prompt is decoded once per
  distinct token sequence, its media hashed per row).

The prompt texts decoded for the ids are the ``prompts`` column (nothing decoded twice);
responses are a sequence that decodes a row only when it is read, and ``vg.log_rollouts`` reads
only the rows of the k prompts it keeps: a step decodes one prompt per group and at most k·n
responses (none of a row whose agent-loop turns were captured: its output is the turns).

Columns (docs/rollouts.md):

- score: ``token_level_scores`` summed over the response (verl's own dump; ``rm_scores``
  when the batch has no ``token_level_scores``);
- advantage: the mean of ``advantages`` over the response mask (GRPO's advantage is one value
  over the whole response; for GAE it is the per-token mean);
- response length: ``response_mask`` summed, verl's ``response_length`` (else the response part
  of ``attention_mask``); the text is decoded from the response part of ``attention_mask``,
  which also holds a multi-turn tool's tokens;
- truncated: the response part of ``attention_mask`` fills the length limit
  (``max_response_length``, default the width of ``responses``) and its last token is not the
  tokenizer's EOS;
- ground truth ``reward_model["ground_truth"]``, data source ``data_source``, and every key of
  ``reward_extra_info`` (default: the batch's ``meta_info["reward_extra_keys"]``, read from
  ``non_tensor_batch`` as verl's ``extract_reward`` does) as an extra column;
- param version (fully-async): ``non_tensor_batch["max_global_steps"]``, the version that
  finished the response, as verl's own ``trajectory_param_versions`` counts it;
- the agent loop's ``tool_rewards`` and ``turn_scores`` (``non_tensor_batch`` columns of one list
  per row; v1: keys of each row's ``extra_fields``), for the figures over every trajectory; a
  batch without them sends none.
"""

from __future__ import annotations

import logging
import re
import struct
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import TYPE_CHECKING, Any, Final, NamedTuple, overload

import numpy as np
import xxhash

import otel_valgen as vg
from otel_valgen import _process
from otel_valgen._records import _utf8, base_sample_id

if TYPE_CHECKING:
    from verl import DataProto

__all__ = ["rollouts_on", "send_rollout_batch"]

_logger = logging.getLogger("otel_valgen")

PARAM_VERSION_KEY = "max_global_steps"
"""The fully-async batch's per-response parameter version (``min_global_steps``: where a partial rollout began)."""

UID_KEY: Final = "uid"
"""verl's group column: one uuid per prompt of the step, repeated for its n responses."""

MEDIA_KEYS: Final = ("multi_modal_data", "multi_modal_inputs")
"""The ``non_tensor_batch`` columns a prompt id also covers, in this order (one dict per row)."""

ROW_BLOCK: Final = 64
"""Rows of the batch's masks read at a time: their copies stay a few MiB whatever the batch's size."""


def rollouts_on() -> bool:
    """Whether rollouts are on (``OTEL_VALGEN_ROLLOUT_COUNT`` > 0): nothing else is read when they are off."""
    emitter = _process.active_emitter()
    return emitter is not None and emitter.settings.rollout_count > 0


def send_rollout_batch(
    batch: DataProto,
    tokenizer: Any,
    *,
    step: int,
    reward_extra_info: Mapping[str, Any] | None = None,
    max_response_length: int | None = None,
    source: str | None = None,
) -> int:
    """Send one trainer step's batch (one row per response) as rollouts; returns what ``log_rollouts`` returns.

    Off (0, no tensor work) unless rollouts are on. Never raises: a failure is counted in
    ``stats()`` and warned about.
    """
    try:
        if not rollouts_on():
            return 0
        columns = rollout_columns(batch, tokenizer, reward_extra_info, max_response_length)
    except Exception as error:
        _process.counters.failed("reading verl's rollout batch", error, _rows(batch))
        return 0
    return vg.log_rollouts(step=step, source=source, **columns)


def _rows(batch: Any) -> int:
    try:
        return len(batch)
    except Exception:
        return 0


def _has(tensors: Any, name: str) -> bool:
    """Whether a TensorDict has ``name`` (TensorDict refuses ``in`` itself)."""
    return name in tensors.keys()  # noqa: SIM118


def _numpy(tensor: Any) -> np.ndarray:
    """A CPU numpy view of a torch tensor (or an array as it is)."""
    detach = getattr(tensor, "detach", None)
    return tensor.detach().cpu().numpy() if callable(detach) else np.asarray(tensor)


def rollout_columns(
    batch: DataProto, tokenizer: Any, reward_extra_info: Mapping[str, Any] | None, max_response_length: int | None
) -> dict[str, Any]:
    """The keyword arguments of ``vg.log_rollouts`` for ``batch`` (texts decoded lazily)."""
    tensors = batch.batch
    responses = _numpy(tensors["responses"])
    prompts = _numpy(tensors["prompts"])
    prompt_mask = _numpy(tensors["attention_mask"])[:, : prompts.shape[1]]
    rows = _row_figures(tensors, prompts.shape[1], advantages=True)
    non_tensor = batch.non_tensor_batch
    prompt_ids, prompt_texts = prompt_groups(prompts, prompt_mask, non_tensor, tokenizer)
    decode = _response_decoder(responses, rows.spans, tokenizer)
    inputs, outputs = _conversations(non_tensor, prompt_texts, decode, rows.gaps)
    return {
        "prompts": inputs,
        "responses": outputs,
        "rewards": _scores(tensors),
        "prompt_ids": prompt_ids,
        "advantages": rows.advantages,
        "response_lengths": rows.lengths,
        "truncated": _truncated(responses, rows.spans, max_response_length or responses.shape[1], tokenizer),
        "param_versions": _column(non_tensor, PARAM_VERSION_KEY),
        "ground_truths": _ground_truths(non_tensor.get("reward_model")),
        "data_sources": _column(non_tensor, "data_source"),
        "extra": _extra(batch, reward_extra_info),
        **_reward_lists(non_tensor),
    }


def _reward_lists(non_tensor: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The batch's per-trajectory reward columns (``_layout.REWARD_COLUMNS``) it has, one list per row."""
    from otel_valgen.integrations.verl._layout import REWARD_COLUMNS  # the package imports this module

    found = {}
    for name in REWARD_COLUMNS:
        values = non_tensor.get(name)
        if values is not None:
            found[name] = _values_list(values)
    return found


def response_sizes(batch: DataProto, tokenizer: Any, max_response_length: int | None) -> tuple[list[int], list[bool]]:
    """Each response's length in tokens and whether it was cut at the length limit, as ``rollout_columns`` has them."""
    tensors = batch.batch
    responses = _numpy(tensors["responses"])
    rows = _row_figures(tensors, _numpy(tensors["prompts"]).shape[1], advantages=False)
    return rows.lengths, _truncated(responses, rows.spans, max_response_length or responses.shape[1], tokenizer)


def response_gaps(batch: DataProto) -> list[bool] | None:
    """Per row, whether ``response_mask`` leaves out tokens inside the response (a tool's); None without one."""
    tensors = batch.batch
    return _row_figures(tensors, _numpy(tensors["prompts"]).shape[1], advantages=False).gaps


class _RowFigures(NamedTuple):
    """What the hook reads of each row's masks and advantages (``_row_figures``)."""

    spans: np.ndarray  # the response part's tokens under the attention mask (right-padded)
    lengths: list[int]  # ``response_mask`` summed (it leaves out a multi-turn tool's tokens), else the span
    gaps: list[bool] | None  # a token of the span that ``response_mask`` leaves out; None without one
    advantages: list[float | None] | None  # the mean advantage over the response's tokens; None for an empty one


def _row_figures(tensors: Any, prompt_width: int, *, advantages: bool) -> _RowFigures:
    """Each row's ``_RowFigures``, read ``ROW_BLOCK`` rows at a time (each row's figures are its own).

    ``advantages``: whether to read them (None in the result otherwise, or without ``advantages``).
    """
    from otel_valgen.integrations.verl._conversations import response_gaps as response_gaps_of

    attention = _numpy(tensors["attention_mask"])
    response_mask = _numpy(tensors["response_mask"]) if _has(tensors, "response_mask") else None
    values = _numpy(tensors["advantages"]) if advantages and _has(tensors, "advantages") else None
    width = _numpy(tensors["responses"]).shape[1]
    spans, lengths, gaps, means = [], [], [], []
    for start in range(0, len(attention), ROW_BLOCK):
        end = start + ROW_BLOCK
        span = attention[start:end, prompt_width:].astype(bool).sum(axis=1)
        spans.append(span)
        if response_mask is None:
            mask = _mask(span, width)
            lengths += [int(length) for length in span]
        else:
            mask = response_mask[start:end].astype(bool)
            lengths += [int(length) for length in mask.sum(axis=1)]
            gaps += response_gaps_of(mask, span) or []
        if values is not None:
            means += _advantages(values[start:end], mask)
    return _RowFigures(
        np.concatenate(spans) if spans else np.zeros(0, dtype=np.int64),
        lengths,
        gaps if response_mask is not None else None,
        means if values is not None else None,
    )


def prompt_groups(
    prompts: np.ndarray, mask: np.ndarray, non_tensor: Mapping[str, Any], tokenizer: Any
) -> tuple[list[str], list[str]]:
    """Each row's prompt id and prompt text: one decode (and media digest) per ``uid``, from its first row.

    A later uid whose id an earlier uid of the batch has gets ``<id>.<j>`` (j = 1, 2, ... in
    batch order). Without a ``uid`` column, rows are grouped by their id.
    """
    media = [non_tensor.get(name) for name in MEDIA_KEYS]
    uid_column = non_tensor.get(UID_KEY)
    # One decode per uid (its first row), else per distinct token sequence, by batch_decode
    # (the tokenizer's own decode of each row, with less overhead per row).
    if uid_column is not None:
        groups: list[Any] = _values_list(uid_column)
    else:
        groups = [np.ascontiguousarray(_kept(prompts, mask, i), dtype=np.int64).tobytes() for i in range(len(prompts))]
    first: dict[Any, int] = {}
    for row, group in enumerate(groups):
        first.setdefault(group, row)
    firsts = list(first.values())
    decoded = [  # ROW_BLOCK rows at a time: the token lists handed to the tokenizer stay small
        text
        for start in range(0, len(firsts), ROW_BLOCK)
        for text in tokenizer.batch_decode(
            [_kept(prompts, mask, row).tolist() for row in firsts[start : start + ROW_BLOCK]], skip_special_tokens=True
        )
    ]
    texts = {group: str(text) for group, text in zip(first, decoded, strict=True)}
    if uid_column is None:  # each row's id covers its own media
        return [prompt_id(texts[group], _media_bytes(media, row)) for row, group in enumerate(groups)], [
            texts[group] for group in groups
        ]
    ids: dict[Any, str] = {}
    repeats: dict[str, int] = {}  # id -> how many earlier uids of the batch have it
    for group, row in first.items():
        base = prompt_id(texts[group], _media_bytes(media, row))
        seen = repeats.get(base, 0)
        repeats[base] = seen + 1
        ids[group] = f"{base}.{seen}" if seen else base
    return [ids[group] for group in groups], [texts[group] for group in groups]


def _kept(tokens: np.ndarray, mask: np.ndarray, row: int) -> np.ndarray:
    """Row ``row``'s tokens under ``mask`` (any nonzero value; a row converted at a time, not the whole mask)."""
    return tokens[row][mask[row].astype(bool, copy=False)]  # type: ignore[no-any-return]


def _values_list(column: Any) -> list[Any]:
    tolist = getattr(column, "tolist", None)
    return list(tolist()) if callable(tolist) else list(column)


def prompt_id(text: str, media: bytes = b"") -> str:
    """The id of a prompt: ``log_rollouts``' id of its text, else the XXH64 of the text's UTF-8 and ``media``."""
    if not media:
        return base_sample_id(None, text)
    return xxhash.xxh64_hexdigest(_utf8(text) + media)


def _media_bytes(columns: list[Any], row: int) -> bytes:
    """``M`` of the module docstring for ``row``: each media column's name and digest, when the row has a value."""
    parts = []
    for name, column in zip(MEDIA_KEYS, columns, strict=True):
        value = column[row] if column is not None else None
        if value is None or (isinstance(value, Mapping | list | tuple) and not value):
            continue
        parts.append(b"\x00" + name.encode() + b"\x00" + media_digest(value))
    return b"".join(parts)


def media_digest(value: Any) -> bytes:
    """``D(value)``: the 8-byte big-endian XXH64 of ``E(value)`` (module docstring)."""
    hasher = xxhash.xxh64()
    _encode(hasher, value)
    return hasher.digest()


def _is_image(value: Any) -> bool:
    """A PIL image (duck-typed: PIL is only imported by those who have images)."""
    return all(hasattr(value, name) for name in ("mode", "size", "tobytes", "getbands"))


def _encode(hasher: Any, value: Any) -> None:
    """Feed ``E(value)`` to ``hasher``."""
    if _is_image(value):
        width, height = value.size
        hasher.update(f"image\x00{value.mode}\x00{width}x{height}\x00".encode())
        hasher.update(value.tobytes())
        return
    if callable(getattr(value, "detach", None)) and hasattr(value, "dtype"):  # a torch tensor
        tensor = value.detach().cpu().contiguous()
        dtype = str(tensor.dtype).removeprefix("torch.")
        _array_header(hasher, dtype, tuple(tensor.shape))
        import torch

        hasher.update(tensor.reshape(-1).view(torch.uint8).numpy())
        return
    if isinstance(value, np.ndarray) and value.dtype != object:
        array = np.ascontiguousarray(value)
        _array_header(hasher, array.dtype.name, value.shape)
        hasher.update(array.view(np.uint8).reshape(-1) if array.size else b"")
        return
    if isinstance(value, Mapping):
        items = sorted(((str(key), item) for key, item in value.items()), key=lambda pair: pair[0])
        hasher.update(b"map\x00" + struct.pack(">I", len(items)))
        for key, item in items:
            hasher.update(key.encode("utf-8", "surrogatepass") + b"\x00" + media_digest(item))
        return
    if isinstance(value, np.ndarray) and value.ndim == 0:  # an object scalar
        _encode(hasher, value.item())
        return
    if isinstance(value, list | tuple | np.ndarray):
        hasher.update(b"list\x00" + struct.pack(">I", len(value)))
        for item in value:
            hasher.update(media_digest(item))
        return
    if isinstance(value, str):
        hasher.update(b"str\x00" + value.encode("utf-8", "surrogatepass"))
    elif isinstance(value, bytes | bytearray | memoryview):
        hasher.update(b"bytes\x00" + bytes(value))
    elif value is None:
        hasher.update(b"none")
    else:
        plain = value.item() if isinstance(value, np.generic) else value
        hasher.update(b"repr\x00" + repr(plain).encode("utf-8", "surrogatepass"))


def _array_header(hasher: Any, dtype: str, shape: tuple[int, ...]) -> None:
    hasher.update(f"array\x00{dtype}\x00{'x'.join(map(str, shape))}\x00".encode())


def _mask(lengths: np.ndarray, width: int) -> np.ndarray:
    """The mask of each row's first ``lengths`` tokens."""
    return np.arange(width)[None, :] < lengths[:, None]  # type: ignore[no-any-return]


class LazyTexts(Sequence[str]):
    """``size`` texts, row i decoded by ``decode(i)`` only when it is read."""

    def __init__(self, size: int, decode: Callable[[int], str]) -> None:
        self._size = size
        self._decode = decode

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._size))]
        if not -self._size <= index < self._size:
            raise IndexError(index)
        return self._decode(index % self._size)


def _conversations(
    non_tensor: Mapping[str, Any], prompt_texts: list[str], decode: Callable[[int], str], gaps: list[bool] | None
) -> tuple[Sequence[Any], Sequence[Any]]:
    """Each row's prompt messages and turns (``verl._conversations``), else its texts; rows made when read.

    A row with captured turns decodes no response text: its output is the turns.
    """
    import otel_valgen.integrations.verl._conversations as chats

    rows = chats.from_columns(non_tensor, len(prompt_texts), gaps)
    if rows is None:
        return prompt_texts, LazyTexts(len(prompt_texts), decode)
    return (
        chats.Lazy(len(prompt_texts), lambda row: rows.input(row, prompt_texts[row])),
        chats.Lazy(len(prompt_texts), lambda row: rows.output_of(row, lambda: decode(row)), rows.figure_output),
    )


def _response_decoder(responses: np.ndarray, lengths: np.ndarray, tokenizer: Any) -> Callable[[int], str]:
    def decode(index: int) -> str:
        return str(tokenizer.decode(responses[index][: lengths[index]].tolist(), skip_special_tokens=True))

    return decode


def _scores(tensors: Any) -> list[float] | None:
    for name in ("token_level_scores", "rm_scores"):
        if _has(tensors, name):
            return _numpy(tensors[name]).sum(axis=1, dtype=np.float64).tolist()  # type: ignore[no-any-return]
    return None


def _advantages(advantages: np.ndarray, response_mask: np.ndarray) -> list[float | None]:
    """The mean advantage over each response's tokens; None for an empty response."""
    counts = response_mask.sum(axis=1)
    sums = np.asarray(np.sum(advantages, axis=1, where=response_mask, dtype=np.float64))
    return [float(total / count) if count else None for total, count in zip(sums, counts, strict=True)]


def _eos_ids(tokenizer: Any) -> set[int]:
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        return {eos}
    return {token for token in eos if isinstance(token, int)} if isinstance(eos, list | tuple) else set()


def cut_at_limit(length: int, last_token: int | None, limit: int | None, eos: set[int]) -> bool:
    """Whether a response of ``length`` tokens ending on ``last_token`` was cut: it fills ``limit`` without EOS."""
    return limit is not None and length >= limit and last_token not in eos


def _truncated(responses: np.ndarray, lengths: np.ndarray, limit: int, tokenizer: Any) -> list[bool]:
    """Whether each response fills ``limit`` tokens without ending on EOS (``cut_at_limit``)."""
    eos = _eos_ids(tokenizer)
    rows = np.arange(len(responses))
    last = responses[rows, np.clip(lengths - 1, 0, None)] if responses.shape[1] else np.zeros(len(responses))
    return [cut_at_limit(int(length), int(token), limit, eos) for length, token in zip(lengths, last, strict=True)]


def _column(non_tensor: Mapping[str, Any], name: str) -> list[Any] | None:
    values = non_tensor.get(name)
    return None if values is None else list(np.asarray(values).tolist())


def _ground_truths(reward_model: Any) -> list[Any] | None:
    if reward_model is None:
        return None
    return [item.get("ground_truth") if isinstance(item, Mapping) else None for item in reward_model]


def _extra(batch: Any, reward_extra_info: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``reward_extra_info``, else the batch's ``reward_extra_keys`` columns; empty ones left out."""
    if reward_extra_info is None:
        keys = batch.meta_info.get("reward_extra_keys") or ()
        reward_extra_info = {key: batch.non_tensor_batch[key] for key in keys if key in batch.non_tensor_batch}
    filled = {
        name: values
        for name, values in reward_extra_info.items()
        if not isinstance(values, Sized) or len(values)  # verl's reward_extra_info allows empty columns
    }
    return filled or None


# -- the trainers' hook points (patched by integrations.verl.install) -----------------------------


def max_response_length(trainer: Any) -> int | None:
    """Verl's response length limit (``rollout.response_length``, else ``data.max_response_length``)."""
    for path in (("actor_rollout_ref", "rollout", "response_length"), ("data", "max_response_length")):
        value: Any = getattr(trainer, "config", None)
        for name in path:
            try:
                value = value.get(name) if value is not None else None
            except Exception:
                value = None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def send_legacy_step(trainer: Any, batch: DataProto) -> int:
    """``RayPPOTrainer._update_actor``'s batch: the step's final batch (rewards, advantages), at ``global_steps``.

    ``fit`` puts the reward's extra columns into ``non_tensor_batch`` under
    ``meta_info["reward_extra_keys"]`` before computing advantages, so they come with the batch.
    """
    return send_rollout_batch(
        batch,
        trainer.tokenizer,
        step=trainer.global_steps,
        max_response_length=max_response_length(trainer),
        source="trainer",
    )


def separation_step(trainer: Any) -> int:
    """The step of a batch that ``_fit_dump_data`` sees: the fully-async trainer's version its update leads to.

    verl logs a sync cycle's training metrics, and validates, at ``current_param_version``, which
    ``_fit_update_local_step`` raises on the cycle's last local step (``local_trigger_step``
    back to 1), before ``_fit_dump_data``; an earlier local step's batch belongs to the version
    the cycle ends at, one more. Without a version (a separation trainer that is not
    fully-async): ``global_steps``.
    """
    version = getattr(trainer, "__dict__", {}).get("current_param_version")
    if isinstance(version, int):
        return version if getattr(trainer, "local_trigger_step", 1) == 1 else version + 1
    return int(trainer.global_steps)


def send_separation_step(trainer: Any, batch: DataProto) -> int:
    """``SeparateRayPPOTrainer._fit_dump_data``'s batch (the fully-async trainer's), with its param versions."""
    extra = getattr(trainer, "reward_extra_infos_dict", None)
    return send_rollout_batch(
        batch,
        trainer.tokenizer,
        step=separation_step(trainer),
        reward_extra_info=extra or None,  # empty: the batch's reward_extra_keys
        max_response_length=max_response_length(trainer),
        source="trainer",
    )


V1_FIELDS: Final = (
    "prompts",
    "responses",
    "response_mask",
    "rm_scores",
    "advantages",
    "reward_model",
    "data_source",
    "extra_fields",
)
"""What the v1 hook fetches from TransferQueue (verl's ``_log_rollout_data`` fetches a subset)."""

V1_CONVERSATION_FIELDS: Final = ("raw_prompt", "num_turns")
"""Fetched apart (a verl without them still sends its rows, as text): the prompt's messages, the turns."""


def send_v1_step(trainer: Any, batch: Any, global_steps: int) -> int:
    """The v1 ``PPOTrainer._compute_metrics``'s batch (a ``KVBatchMeta``), fetched from TransferQueue.

    Fetches only ``V1_FIELDS``, and only when rollouts are on; padding rows (``tags`` with
    ``is_padding``) are left out; the param version is the tags' ``max_global_steps``.
    """
    if not rollouts_on():
        return 0
    try:
        data = _v1_batch(batch)
    except Exception as error:
        _process.counters.failed("fetching the v1 rollout batch from TransferQueue", error, _rows(batch.keys))
        return 0
    return send_rollout_batch(
        data, trainer.tokenizer, step=global_steps, max_response_length=max_response_length(trainer), source="trainer"
    )


def _v1_batch(batch: Any) -> DataProto:
    """A ``DataProto`` of the v1 batch's rows, padded as verl's legacy trainer holds them."""
    import torch
    import transfer_queue as tq  # type: ignore[import-untyped]
    from verl import DataProto

    fetched = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=list(V1_FIELDS))
    chats = _v1_conversation_fields(tq, batch)
    present = set(fetched.keys())
    prompts, prompt_lengths = _padded(fetched["prompts"], None)
    responses, response_lengths = _padded(fetched["responses"], None)
    width = responses.shape[1]
    tensors: dict[str, Any] = {
        "prompts": prompts,
        "responses": responses,
        "attention_mask": torch.cat(
            [_lengths_mask(prompt_lengths, prompts.shape[1]), _lengths_mask(response_lengths, width)], dim=1
        ),
    }
    for name, target in (
        ("response_mask", "response_mask"),
        ("rm_scores", "token_level_scores"),
        ("advantages", "advantages"),
    ):
        if name in present:
            tensors[target] = _padded(fetched[name], width)[0]
    non_tensors: dict[str, Any] = {
        PARAM_VERSION_KEY: np.array([tag.get(PARAM_VERSION_KEY) for tag in batch.tags], dtype=object)
    }
    uids = _v1_uids(batch.keys)
    if uids is not None:
        non_tensors[UID_KEY] = np.array(uids, dtype=object)
    for name in ("reward_model", "data_source"):
        if name in present:
            non_tensors[name] = _objects(_values(fetched[name]))
    non_tensors.update(chats)
    extra_keys: list[str] = []
    if "extra_fields" in present:
        extra_fields = _values(fetched["extra_fields"])
        from otel_valgen.integrations.verl._layout import MESSAGES_COLUMN  # the package imports this module

        non_tensors[MESSAGES_COLUMN] = _objects([_messages(row) for row in extra_fields])
        non_tensors.update(_v1_reward_lists(extra_fields))
        infos = [_reward_extra_info(row) for row in extra_fields]
        extra_keys = list(dict.fromkeys(key for info in infos for key in info))
        for key in extra_keys:
            non_tensors[key] = np.array([info.get(key) for info in infos], dtype=object)
    whole = DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info={"reward_extra_keys": extra_keys})
    keep = [index for index, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
    return whole if len(keep) == len(whole) else whole.select_idxs(np.array(keep, dtype=np.int64))  # type: ignore[no-any-return]


_V1_KEY: Final = re.compile(r"(.+)_\d+_\d+")


def _v1_uids(keys: Sequence[Any]) -> list[str] | None:
    """The uid of each v1 row, from its TransferQueue key ``<uid>_<session>_<index>``; None if a key is not one."""
    uids = []
    for key in keys:
        match = _V1_KEY.fullmatch(key) if isinstance(key, str) else None
        if match is None:
            return None
        uids.append(match.group(1))
    return uids


def _padded(value: Any, width: int | None) -> tuple[Any, Any]:
    """A TransferQueue field as a right-padded tensor ``width`` wide (default its longest row), and its row lengths."""
    import torch

    if getattr(value, "is_nested", False):
        lengths = value.offsets().diff()
        padded = value.to_padded_tensor(padding=0)
    else:
        padded = value
        lengths = torch.full((value.shape[0],), value.shape[1])
    if width is not None and padded.shape[1] != width:
        padded = (
            torch.nn.functional.pad(padded, (0, width - padded.shape[1]))
            if padded.shape[1] < width
            else padded[:, :width]
        )
    return padded, lengths


def _values(field: Any) -> list[Any]:
    """A non-tensor TransferQueue field's values (a ``NonTensorStack``, or the list tensordict gives for one)."""
    tolist = getattr(field, "tolist", None)
    return list(tolist()) if callable(tolist) else list(field)


def _lengths_mask(lengths: Any, width: int) -> Any:
    import torch

    return (torch.arange(width)[None, :] < lengths[:, None]).long()


def _v1_conversation_fields(tq: Any, batch: Any) -> dict[str, np.ndarray]:
    """``V1_CONVERSATION_FIELDS`` of the batch's rows; none when TransferQueue has not them (rows sent as text)."""
    try:
        fetched = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=list(V1_CONVERSATION_FIELDS)
        )
        return {name: _objects(_values(fetched[name])) for name in V1_CONVERSATION_FIELDS if _has(fetched, name)}
    except Exception:
        _logger.debug("otel_valgen: no conversation fields in TransferQueue", exc_info=True)
        return {}


def _objects(values: list[Any]) -> np.ndarray:
    """A 1-d object array of ``values`` (numpy would make lists of messages a 2-d array)."""
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def _messages(row: Any) -> Any:
    """The captured messages of one row's ``extra_fields`` (``integrations.verl._agent_loop``)."""
    from otel_valgen.integrations.verl._layout import MESSAGES_COLUMN  # the package imports this module

    return row.get(MESSAGES_COLUMN) if isinstance(row, Mapping) else None


def _v1_reward_lists(extra_fields: list[Any]) -> dict[str, np.ndarray]:
    """The ``REWARD_COLUMNS`` of the rows' ``extra_fields``, for those a row has (None in the others)."""
    from otel_valgen.integrations.verl._layout import REWARD_COLUMNS  # the package imports this module

    found = {}
    for name in REWARD_COLUMNS:
        values = [row.get(name) if isinstance(row, Mapping) else None for row in extra_fields]
        if any(value is not None for value in values):
            found[name] = _objects(values)
    return found


def _reward_extra_info(row: Any) -> Mapping[str, Any]:
    """The ``reward_extra_info`` of one row's ``extra_fields`` (v1 keeps the reward's extra columns there)."""
    info = row.get("reward_extra_info") if isinstance(row, Mapping) else None
    return info if isinstance(info, Mapping) else {}
