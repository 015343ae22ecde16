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
  of ``attention_mask``), the mask before verl's rollout correction when it ran (``verl._correction``:
  the tokens it rejected are still the model's); the text is decoded from the response part of
  ``attention_mask``, which also holds a multi-turn tool's tokens;
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
  batch without them sends none;
- per-token data (``log_rollouts``' ``tokens``): ``verl._tokens``.

The v1 trainer's rows are in TransferQueue, where a fetch costs per row and per field, so
``send_v1_step`` fetches each field for the rows that need it (``_v1_columns``), the same columns
as above (the rows as the legacy trainer would hold them, padding rows left out):

- for every row, only what the keys and the figures over every row read: ``rm_scores`` (the
  score), ``extra_fields`` (reward extras, tool rewards, captured turns), ``num_turns`` when the
  rows have prompt messages, and, when the mismatch figures can be made (both log-probabilities,
  not bypass mode), ``response_mask``, ``rollout_log_probs`` and ``old_log_probs``; the response
  lengths are the rows' ``response_len`` tags;
- for one row per ``uid``: ``prompts``, ``data_source`` and ``raw_prompt``, the dataset row's
  columns, which verl's agent loop copies into each of its n rows;
- for the rows ``vg.log_rollouts`` reads: the rest (response ids, advantages, ground truths, the
  other per-token fields), a prompt's rows at a time: those of the batch's k smallest prompt keys
  in one call beforehand, any other row's prompt when the row is first read;
- the last token of the responses at the length limit not fetched yet (``truncated``).
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
    spans = _spans(tensors, prompts.shape[1])
    found = _token_columns(tensors, responses, spans, tokenizer)
    rows = _row_figures(tensors, prompts.shape[1], advantages=True, spans=spans, model=found.model if found else None)
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
        "tokens": found.columns if found else None,
    }


def _token_columns(tensors: Any, responses: np.ndarray, spans: np.ndarray, tokenizer: Any) -> Any:
    """The batch's per-token columns (``verl._tokens``); None when they cannot be read (counted), the rows sent."""
    from otel_valgen.integrations.verl._tokens import token_columns  # the package imports this module

    try:
        return token_columns(tensors, responses, spans, tokenizer)
    except Exception as error:
        _process.counters.failed("reading the per-token data of verl's rollout batch", error)
        return None


def _spans(tensors: Any, prompt_width: int) -> np.ndarray:
    """Each row's tokens under the response part of the attention mask, ``ROW_BLOCK`` rows at a time."""
    attention = _numpy(tensors["attention_mask"])
    blocks = [
        attention[start : start + ROW_BLOCK, prompt_width:].astype(bool).sum(axis=1)
        for start in range(0, len(attention), ROW_BLOCK)
    ]
    return np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.int64)


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


def _row_figures(
    tensors: Any, prompt_width: int, *, advantages: bool, spans: np.ndarray | None = None, model: Any = None
) -> _RowFigures:
    """Each row's ``_RowFigures``, read ``ROW_BLOCK`` rows at a time (each row's figures are its own).

    ``advantages``: whether to read them (None in the result otherwise, or without ``advantages``);
    their mean is over ``response_mask`` (the tokens trained on). ``spans``: ``_spans``, when known.
    ``model``: the response mask before verl's rollout correction (``verl._correction``), which
    the lengths and gaps count instead of ``response_mask`` (the correction takes out the tokens
    it rejects; they are still the model's).
    """
    from otel_valgen.integrations.verl._conversations import response_gaps as response_gaps_of

    attention = _numpy(tensors["attention_mask"])
    trained = _numpy(tensors["response_mask"]) if _has(tensors, "response_mask") else None
    response_mask = _numpy(model) if model is not None else trained
    values = _numpy(tensors["advantages"]) if advantages and _has(tensors, "advantages") else None
    width = _numpy(tensors["responses"]).shape[1]
    blocks, lengths, gaps, means = [], [], [], []
    for start in range(0, len(attention), ROW_BLOCK):
        end = start + ROW_BLOCK
        span = spans[start:end] if spans is not None else attention[start:end, prompt_width:].astype(bool).sum(axis=1)
        blocks.append(span)
        if response_mask is None:
            mask = _mask(span, width)
            lengths += [int(length) for length in span]
        else:
            mask = response_mask[start:end].astype(bool)
            lengths += [int(length) for length in mask.sum(axis=1)]
            gaps += response_gaps_of(mask, span) or []
        if values is not None:
            means += _advantages(values[start:end], trained[start:end].astype(bool) if trained is not None else mask)
    return _RowFigures(
        np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.int64),
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


V1_PROMPT_FIELDS: Final = ("prompts", "data_source", "raw_prompt")
"""Fetched for one row per prompt, its ``uid``'s first: verl's agent loop copies the dataset row into all n rows."""

V1_ROW_FIELDS: Final = ("rm_scores", "extra_fields", "num_turns")
"""Fetched for every row: scores, reward extras, and what the figures over every trajectory read (``num_turns``)."""

V1_KEPT_FIELDS: Final = ("responses", "response_mask", "advantages", "reward_model")
"""Fetched for the rows ``log_rollouts`` reads, a prompt's rows at a time, with ``verl._tokens.TOKEN_FIELDS``."""

V1_FIELDS: Final = (*V1_PROMPT_FIELDS, *V1_ROW_FIELDS, *V1_KEPT_FIELDS)
"""Every field the v1 hook may fetch from TransferQueue, besides the per-token ones (``verl._tokens.TOKEN_FIELDS``)."""

RAW_PROMPT: Final = "raw_prompt"
"""The prompt's messages (``_layout.RAW_PROMPT_COLUMN``), a dataset column verl's agent loop stores with each row."""

SPAN_TAG: Final = "response_len"
"""The tag verl's agent loop puts on each TransferQueue row: its response's length in tokens."""


def send_v1_step(trainer: Any, batch: Any, global_steps: int) -> int:
    """The v1 ``PPOTrainer._compute_metrics``'s batch (a ``KVBatchMeta``), fetched from TransferQueue in two phases.

    Only when rollouts are on; padding rows (``tags`` with ``is_padding``) are left out; the param
    version is the tags' ``max_global_steps``. First what the keys and the figures over every row
    need, then the rest of the rows ``log_rollouts`` reads (``_v1_columns``).
    """
    if not rollouts_on():
        return 0
    try:
        columns = _v1_columns(trainer, batch)
    except Exception as error:
        _process.counters.failed(
            "fetching the v1 rollout batch from TransferQueue", error, _rows(getattr(batch, "keys", ()))
        )
        return 0
    if columns is None:
        return 0
    return vg.log_rollouts(step=global_steps, source="trainer", **columns)


def _v1_columns(trainer: Any, batch: Any) -> dict[str, Any] | None:
    """The keyword arguments of ``vg.log_rollouts`` for a v1 batch; None when it has no row but padding.

    TransferQueue's cost is per row and field, so each field is fetched for the rows that need it:

    1. one row, every field the hook may read (which ones the batch has);
    2. one row per prompt (its ``uid``'s first): ``V1_PROMPT_FIELDS``, for the prompt ids and texts;
    3. the rows of the prompts ``log_rollouts`` will likely keep (``_likely_kept``): the rest of
       their fields (``V1_KEPT_FIELDS`` and the per-token ones), kept in ``_KeptRows``; a row read
       outside them has its prompt's rows fetched when it is read;
    4. every row, in a thread while this one decodes the prompts and fetches 3: ``V1_ROW_FIELDS``
       (``num_turns`` with prompt messages) and, when the mismatch figures over every response can
       be made, ``verl._tokens.FIGURE_FIELDS``; the response lengths come from the tags;
    5. the responses that reach the length limit and are not fetched yet: their last token.
    """
    from concurrent.futures import ThreadPoolExecutor

    import transfer_queue as tq  # type: ignore[import-untyped]

    store = _V1Store(tq, batch)
    if not store.keys:
        return None
    plan = _v1_plan(store, trainer)
    fetched = _V1PromptRows.fetch(store, plan.present)
    # The fetch of every row is the longest: TransferQueue's storage works on it while this thread
    # decodes the prompts (its storage unit answers one request at a time, so the rows kept wait).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="otel-valgen-v1-fetch") as background:
        every_rows = background.submit(store.fetch, range(len(store.keys)), plan.every)
        prompts = fetched.prompts(trainer.tokenizer)
        kept = _KeptRows(store, plan.kept, prompts.ids)
        likely = _likely_kept(prompts.ids, prompts.data_sources)
        kept.load([row for row, prompt in enumerate(prompts.ids) if prompt in likely])
        every = every_rows.result()
    return _v1_assemble(trainer, store, plan, prompts, kept, every, _v1_spans(plan, every))


class _V1Store:
    """A v1 batch's rows in TransferQueue (its padding rows left out), fetched by field and by row."""

    def __init__(self, tq: Any, batch: Any) -> None:
        rows = [index for index, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
        self.keys: list[str] = [batch.keys[index] for index in rows]
        self.tags: list[Mapping[str, Any]] = [batch.tags[index] for index in rows]
        self._tq = tq
        self._partition = batch.partition_id

    def fetch(self, rows: Sequence[int], fields: Sequence[str]) -> Any:
        """The ``fields`` TransferQueue has of ``rows`` (a TensorDict), in their order; nothing asked: ``{}``."""
        keys = [self.keys[row] for row in rows]
        wanted = list(fields)
        if not keys or not wanted:
            return {}
        return self._tq.kv_batch_get(keys=keys, partition_id=self._partition, select_fields=wanted)


class _V1Plan(NamedTuple):
    """Which fields of a v1 batch are fetched for which rows (``_v1_columns``)."""

    present: frozenset[str]  # the fields the batch's rows have
    every: tuple[str, ...]  # fetched for every row
    kept: tuple[str, ...]  # fetched for the rows log_rollouts reads
    spans: np.ndarray | None  # each row's response length, from the tags (None: from response_mask)


def _v1_plan(store: _V1Store, trainer: Any) -> _V1Plan:
    """Probe the batch's first row for its fields, and split them between every row and the rows kept."""
    token_fields, figure_fields = _token_fields()
    wanted = tuple(dict.fromkeys((*V1_FIELDS, *token_fields)))
    present = frozenset(_field_names(store.fetch([0], wanted)))
    spans = _tag_spans(store.tags)
    conversations = RAW_PROMPT in present
    every: list[str] = [name for name in V1_ROW_FIELDS if name in present and (name != "num_turns" or conversations)]
    if _figures_made(present, figure_fields, trainer):
        every += [name for name in figure_fields if name in present]
    # Every row's response_mask also gives the lengths without tags, and the turns without num_turns.
    if "response_mask" in present and (spans is None or (conversations and "num_turns" not in present)):
        every.append("response_mask")
    elif spans is None:
        every.append("responses")
    every = list(dict.fromkeys(every))
    kept = [
        name
        for name in (*V1_KEPT_FIELDS, *token_fields)
        if name in present and (name not in every or name == "responses")  # every row's only for its length
    ]
    return _V1Plan(present, tuple(every), tuple(dict.fromkeys(kept)), spans)


def _token_fields() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``verl._tokens``' ``TOKEN_FIELDS`` and ``FIGURE_FIELDS``; none without the per-token capture."""
    try:
        from otel_valgen.integrations.verl._tokens import FIGURE_FIELDS, TOKEN_FIELDS  # the package imports us
    except ImportError:
        return (), ()
    return tuple(TOKEN_FIELDS), tuple(FIGURE_FIELDS)


def _figures_made(present: frozenset[str], figure_fields: tuple[str, ...], trainer: Any) -> bool:
    """Whether the mismatch figures over every response can be made: both log-probabilities, not bypass mode."""
    if not figure_fields or not {"rollout_log_probs", "old_log_probs"} <= present:
        return False
    from otel_valgen.integrations.verl._tokens import settings_of

    settings = settings_of(trainer)
    return settings is None or not settings.bypass  # bypass: old_log_probs are the rollout's, no figures


def _field_names(fetched: Any) -> list[str]:
    """The fields a fetch returned (TensorDict refuses iteration over its keys as ``in`` does)."""
    return [str(name) for name in fetched.keys()]  # noqa: SIM118


def _tag_spans(tags: Sequence[Mapping[str, Any]]) -> np.ndarray | None:
    """Each row's response length from its ``SPAN_TAG``; None when a row has none."""
    spans = [tag.get(SPAN_TAG) for tag in tags]
    if not all(type(span) is int and span >= 0 for span in spans):
        return None
    return np.array(spans, dtype=np.int64)


class _V1Prompts(NamedTuple):
    """Each row's prompt id and text, and its prompt's dataset columns."""

    ids: list[str]
    texts: list[str]
    data_sources: list[Any] | None
    raw: list[Any] | None  # the prompt's messages (raw_prompt)


class _V1PromptRows(NamedTuple):
    """``V1_PROMPT_FIELDS`` of each uid's first row (of every row without uids), as fetched."""

    fetched: Any
    uids: list[str] | None
    firsts: list[int]  # the rows fetched
    slots: list[int]  # each row's place among them

    @classmethod
    def fetch(cls, store: _V1Store, present: frozenset[str]) -> _V1PromptRows:
        """Fetch the prompt fields of one row per uid."""
        uids = _v1_uids(store.keys)
        if uids is None:
            firsts, slots = list(range(len(store.keys))), list(range(len(store.keys)))
        else:
            first: dict[str, int] = {}
            for row, uid in enumerate(uids):
                first.setdefault(uid, row)
            place = {uid: slot for slot, uid in enumerate(first)}
            firsts, slots = list(first.values()), [place[uid] for uid in uids]
        fetched = store.fetch(firsts, [name for name in V1_PROMPT_FIELDS if name in present])
        return cls(fetched, uids, firsts, slots)

    def prompts(self, tokenizer: Any) -> _V1Prompts:
        """Each row's prompt id and text (``prompt_groups`` of the rows fetched), and its prompt's columns."""
        tokens, lengths = _padded(self.fetched["prompts"], None)
        array = _numpy(tokens)
        uids = self.uids
        non_tensor = {UID_KEY: _objects([uids[row] for row in self.firsts])} if uids is not None else {}
        ids, texts = prompt_groups(array, _numpy(_lengths_mask(lengths, array.shape[1])), non_tensor, tokenizer)
        return _V1Prompts(
            [ids[slot] for slot in self.slots],
            [texts[slot] for slot in self.slots],
            self.spread("data_source"),
            self.spread(RAW_PROMPT),
        )

    def spread(self, name: str) -> list[Any] | None:
        """Field ``name`` of each row: its uid's first row's (None when not fetched)."""
        if name not in _field_names(self.fetched):
            return None
        values = _values(self.fetched[name])
        return [values[slot] for slot in self.slots]


def _likely_kept(prompt_ids: Sequence[str], data_sources: Sequence[Any] | None) -> set[str]:
    """The prompts ``log_rollouts`` will likely keep, fetched in one call: the batch's k smallest keys.

    k is ``rollout_count``, per data source with ``sample_by = data_source``; every prompt with
    presampling off. Only a guess (earlier calls of the step, a rate, the extremes or the most
    mismatched change what is kept): a row read outside it has its prompt's rows fetched then.
    """
    import heapq

    from otel_valgen import contract

    emitter = _process.active_emitter()
    if emitter is None:
        return set()
    settings = emitter.settings
    if not settings.presample:
        return set(prompt_ids)
    split = settings.sample_by == contract.SAMPLE_BY_DATA_SOURCE and data_sources is not None
    ranked: dict[str, list[tuple[int, str]]] = {}
    seen: set[str] = set()
    for row, prompt in enumerate(prompt_ids):
        if prompt not in seen:
            seen.add(prompt)
            source = str(data_sources[row]) if split and data_sources is not None else ""
            ranked.setdefault(source, []).append((vg.sample_key(settings.seed, prompt), prompt))
    k = settings.rollout_count
    return {prompt for members in ranked.values() for _, prompt in heapq.nsmallest(k, members)}


class _KeptRows:
    """Fields of the rows ``log_rollouts`` reads, fetched a prompt's rows at a time: by ``load``, else when read.

    A fetch that fails fails every read of its rows (``log_rollouts`` counts each such record as dropped).
    """

    def __init__(self, store: _V1Store, fields: Sequence[str], groups: Sequence[str]) -> None:
        self._store = store
        self._fields = tuple(fields)
        self._group_of = list(groups)
        self._members: dict[str, list[int]] = {}
        for row, group in enumerate(groups):
            self._members.setdefault(group, []).append(row)
        self._values: dict[str, dict[int, Any]] = {name: {} for name in self._fields}
        self._loaded: set[str] = set()
        self._failed: dict[str, Exception] = {}

    def load(self, rows: Sequence[int]) -> None:
        """Fetch, in one call, the rows of the prompts of ``rows`` not fetched yet."""
        groups = {self._group_of[row] for row in rows} - self._loaded - set(self._failed)
        if not groups:
            return
        members = sorted(row for group in groups for row in self._members[group])
        try:
            fetched = self._store.fetch(members, self._fields)
            names = _field_names(fetched)
            for name in self._fields:
                if name in names:
                    self._values[name].update(zip(members, _row_values(fetched[name]), strict=True))
        except Exception as error:
            self._failed.update(dict.fromkeys(groups, error))
            raise
        self._loaded |= groups

    def has(self, name: str) -> bool:
        """Whether field ``name`` is among those fetched for the kept rows."""
        return name in self._fields

    def loaded(self, row: int) -> bool:
        """Whether row ``row`` is fetched."""
        return self._group_of[row] in self._loaded

    def get(self, name: str, row: int) -> Any:
        """Field ``name`` of row ``row`` (None when the row has not that field); fetched with its prompt's rows."""
        group = self._group_of[row]
        if group in self._failed:
            raise self._failed[group]
        if group not in self._loaded:
            self.load([row])
        return self._values[name].get(row) if name in self._values else None


def _row_values(field: Any) -> list[Any]:
    """A fetched field's value for each row: a tensor (a nested tensor's own length), else the object."""
    if getattr(field, "is_nested", False):
        return list(field.unbind())
    if callable(getattr(field, "unbind", None)) and hasattr(field, "dtype"):  # a plain tensor
        return list(field.unbind(0))
    return _values(field)


def _row_array(value: Any) -> np.ndarray:
    """One row of a tensor field as numpy (bf16 and fp16 as float32, which have no numpy view)."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.dtype in (torch.bfloat16, torch.float16):
            value = value.float()
        return value.detach().cpu().numpy()  # type: ignore[no-any-return]
    return np.asarray(value)


def _v1_spans(plan: _V1Plan, every: Any) -> np.ndarray:
    """Each row's response length: its tag, else the length of its fetched ``response_mask`` (or ``responses``)."""
    if plan.spans is not None:
        return plan.spans
    lengths = _padded(every["response_mask" if "response_mask" in plan.every else "responses"], None)[1]
    return np.asarray(_numpy(lengths), dtype=np.int64)


def _v1_assemble(
    trainer: Any,
    store: _V1Store,
    plan: _V1Plan,
    prompts: _V1Prompts,
    kept: _KeptRows,
    every: Any,
    spans: np.ndarray,
) -> dict[str, Any]:
    """The columns of ``log_rollouts`` from what ``_v1_columns`` fetched; what only kept rows need is lazy."""
    import otel_valgen.integrations.verl._conversations as chats

    size, tokenizer = len(store.keys), trainer.tokenizer
    names = _field_names(every)
    width = int(spans.max()) if size else 0
    tensors = {
        name: _dense(every[name], width, mask=name == "response_mask")
        for name in plan.every
        if name in names and name in _TENSORS
    }
    tensors.update(
        {name: _kept_column(kept, name, size) for name in plan.kept if name not in ("advantages", "reward_model")}
    )
    responses = tensors.pop("responses", None)
    found = _v1_token_columns(trainer, store.keys, tensors, responses, spans, tokenizer)
    extra_fields = _values(every["extra_fields"]) if "extra_fields" in names else None
    non_tensor = _v1_non_tensor(prompts, every, extra_fields)
    masks = _v1_masks(tensors.get("response_mask"), found, kept, spans, need_gaps=_needs_gaps(non_tensor))

    def decode(row: int) -> str:
        ids = _v1_row(kept, "responses", row)
        return "" if ids is None else str(tokenizer.decode(ids[: spans[row]].tolist(), skip_special_tokens=True))

    inputs, outputs = _conversations(non_tensor, prompts.texts, decode, masks.gaps)
    present = plan.present
    return {
        "prompts": inputs,
        "responses": outputs,
        "rewards": _row_sums(every["rm_scores"], width) if "rm_scores" in names else None,
        "prompt_ids": prompts.ids,
        "advantages": chats.Lazy(size, lambda row: _v1_advantage(kept, masks, row, int(spans[row])))
        if "advantages" in present
        else None,
        "response_lengths": masks.lengths,
        "truncated": _v1_truncated(store, kept, spans, max_response_length(trainer) or width, _eos_ids(tokenizer)),
        "param_versions": [tag.get(PARAM_VERSION_KEY) for tag in store.tags],
        "ground_truths": chats.Lazy(size, lambda row: _ground_truth(kept.get("reward_model", row)))
        if "reward_model" in present
        else None,
        "data_sources": prompts.data_sources,
        "extra": _v1_extra(extra_fields),
        **{name: list(values) for name, values in _v1_reward_lists(extra_fields or []).items()},
        "tokens": found.columns if found is not None else None,
    }


_TENSORS: Final = ("response_mask", "rollout_log_probs", "old_log_probs", "ref_log_prob", "rollout_is_weights")
"""Fields fetched for every row that are handed on as one padded array (``_dense``; the others row by row)."""


def _dense(field: Any, width: int, *, mask: bool = False) -> Any:
    """A fetched tensor field of every row as one array right-padded with zeros to ``width``.

    From a nested tensor's flat values at once (much faster than ``to_padded_tensor``): numpy
    (bf16, fp16 as float32), a ``mask`` as a torch bool tensor (``verl._correction`` compares masks).
    """
    import torch

    values = field.values() if getattr(field, "is_nested", False) else None
    if values is None or values.dim() != 1:
        padded = _padded(field, width)[0]
        return padded.bool() if mask else _row_array(padded)
    flat = _row_array(values)
    lengths = _numpy(field.offsets().diff())
    width = max(width, int(lengths.max(initial=0)))
    out = np.zeros((len(lengths), width), dtype=bool if mask else flat.dtype)
    out[np.arange(width)[None, :] < lengths[:, None]] = flat != 0 if mask else flat
    return torch.from_numpy(out) if mask else out


def _kept_column(kept: _KeptRows, name: str, size: int) -> Any:
    """Field ``name`` of every row as a sequence that fetches a row (``_KeptRows``) when it is read."""
    import otel_valgen.integrations.verl._conversations as chats

    return chats.Lazy(size, lambda row: _v1_row(kept, name, row))


def _v1_row(kept: _KeptRows, name: str, row: int) -> np.ndarray | None:
    """Field ``name`` of kept row ``row`` as numpy; None when the row has none."""
    value = kept.get(name, row)
    return None if value is None else _row_array(value)


def _v1_non_tensor(prompts: _V1Prompts, every: Any, extra_fields: list[Any] | None) -> dict[str, Any]:
    """The conversation columns (``verl._conversations.from_columns``) of the v1 rows that were fetched."""
    from otel_valgen.integrations.verl._layout import MESSAGES_COLUMN  # the package imports this module

    columns: dict[str, Any] = {}
    if prompts.raw is not None:
        columns[RAW_PROMPT] = prompts.raw
    if "num_turns" in _field_names(every):
        columns["num_turns"] = _values(every["num_turns"])
    if extra_fields is not None:
        columns[MESSAGES_COLUMN] = [_messages(row) for row in extra_fields]
    return columns


def _needs_gaps(non_tensor: Mapping[str, Any]) -> bool:
    """Whether the rows' turns are told by their masks' gaps: prompt messages and no turn count."""
    from otel_valgen.integrations.verl._layout import NUM_TURNS_COLUMNS  # the package imports this module

    return RAW_PROMPT in non_tensor and not any(name in non_tensor for name in NUM_TURNS_COLUMNS)


def _v1_token_columns(
    trainer: Any, keys: list[str], tensors: dict[str, Any], responses: Any, spans: np.ndarray, tokenizer: Any
) -> Any:
    """The per-token columns (``verl._tokens.token_columns``) of the v1 rows; None without the capture."""
    try:
        from otel_valgen.integrations.verl._tokens import trainer_batch  # the package imports this module
    except ImportError:
        return None
    with trainer_batch(trainer, keys):
        return _token_columns(tensors, responses, spans, tokenizer)


class _V1Masks(NamedTuple):
    """What the hook reads of the v1 rows' masks (``_RowFigures`` of the legacy rows)."""

    lengths: Sequence[int]  # the model's tokens (the mask before verl's correction when captured), else the span
    gaps: list[bool] | None  # a token of the span that the mask leaves out; None when not needed or not fetched
    trained: Any  # every row's response_mask (the tokens trained on) when fetched for every row, else None


def _v1_masks(mask: Any, found: Any, kept: _KeptRows, spans: np.ndarray, *, need_gaps: bool) -> _V1Masks:
    """Lengths (and gaps) from every row's mask when it was fetched, else each kept row's length when read."""
    import otel_valgen.integrations.verl._conversations as chats

    if mask is not None and hasattr(mask, "shape"):
        model = getattr(found, "model", None)
        counted = _numpy(model if model is not None else mask)
        lengths = [int(length) for length in np.count_nonzero(counted, axis=1)]
        gaps = chats.response_gaps(counted, spans) if need_gaps else None
        return _V1Masks(lengths, gaps, mask)
    if not kept.has("response_mask"):
        return _V1Masks([int(span) for span in spans], None, None)

    def length(row: int) -> int:
        fetched = _v1_row(kept, "response_mask", row)
        return int(np.count_nonzero(fetched[: spans[row]])) if fetched is not None else int(spans[row])

    return _V1Masks(chats.Lazy(len(spans), length), None, None)


def _v1_advantage(kept: _KeptRows, masks: _V1Masks, row: int, span: int) -> float | None:
    """The mean advantage over the row's trained tokens (``response_mask``); None for an empty response."""
    values = _v1_row(kept, "advantages", row)
    if values is None:
        return None
    mask = _row_array(masks.trained[row]) if masks.trained is not None else _v1_row(kept, "response_mask", row)
    trained = mask.astype(bool) if mask is not None else np.arange(len(values)) < span
    shared = min(len(values), len(trained))
    return _advantages(values[None, :shared], trained[None, :shared])[0]


def _v1_truncated(store: _V1Store, kept: _KeptRows, spans: np.ndarray, limit: int, eos: set[int]) -> list[bool]:
    """``cut_at_limit`` of every row: the last token of those at the limit, fetched unless already kept."""
    at_limit = [row for row, span in enumerate(spans) if span >= limit]
    last: dict[int, int | None] = {}
    for row in at_limit:
        if kept.loaded(row):
            last[row] = _last_token(kept.get("responses", row), int(spans[row]))
    missing = [row for row in at_limit if row not in last]
    fetched = store.fetch(missing, ["responses"])
    if missing:
        for row, value in zip(missing, _row_values(fetched["responses"]), strict=True):
            last[row] = _last_token(value, int(spans[row]))
    return [cut_at_limit(int(span), last.get(row), limit, eos) for row, span in enumerate(spans)]


def _last_token(value: Any, span: int) -> int | None:
    if value is None or span <= 0:
        return None
    return int(_row_array(value)[span - 1])


def _row_sums(field: Any, width: int) -> list[float]:
    """Each row's sum of a fetched tensor field in float64, over the row padded to ``width`` as the legacy rows are."""
    return np.asarray(_dense(field, width)).sum(axis=1, dtype=np.float64).tolist()  # type: ignore[no-any-return]


def _ground_truth(reward_model: Any) -> Any:
    return reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None


def _v1_extra(extra_fields: list[Any] | None) -> dict[str, list[Any]] | None:
    """The reward's extra columns: every key of the rows' ``reward_extra_info``, in order of appearance."""
    if not extra_fields:
        return None
    infos = [_reward_extra_info(row) for row in extra_fields]
    keys = dict.fromkeys(key for info in infos for key in info)
    return {key: [info.get(key) for info in infos] for key in keys} or None


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
