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

The v1 trainer's rows are in TransferQueue; ``verl._v1_fetch.send_v1_step`` reads them as ``verl._v1_fetch`` says,
into the same columns.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar, overload

import numpy as np
import xxhash

import otel_valgen as vg
from otel_valgen import _process, tokens
from otel_valgen._records import _utf8, base_sample_id
from otel_valgen.tokens import PIECES

if TYPE_CHECKING:
    from concurrent.futures import Future

    from verl import DataProto

T = TypeVar("T")

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


_workers: dict[str, Any] = {}
_worker_lock = threading.Lock()


def _forget_workers() -> None:
    """In a forked child: the parent's worker threads are not there (new ones are made when needed)."""
    global _workers, _worker_lock
    _workers, _worker_lock = {}, threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_forget_workers)


def _submit(lane: str, function: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
    with _worker_lock:
        worker = _workers.get(lane)
        if worker is None:
            from concurrent.futures import ThreadPoolExecutor

            worker = _workers[lane] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"otel-valgen-{lane}")
        return worker.submit(function, *args, **kwargs)  # type: ignore[no-any-return]


def in_background(function: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
    """``function(*args, **kwargs)`` on the hook's one worker thread, while the caller goes on.

    For work that releases the GIL (numpy over the batch's matrices, the Rust tokenizer's
    ``decode_batch``): the hook's step then takes less of the training loop's time on a second core.
    One worker: the passes over the padded matrices contend for memory bandwidth, not only cores.
    """
    return _submit("rollouts", function, *args, **kwargs)


def in_side_thread(function: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
    """``in_background`` on a second thread, for work that must not queue behind the worker's passes.

    A fetch that waits on another process (TransferQueue) takes no core; decoding the rows likely
    kept (Rust, without the GIL) is read while the step's figures are still being made.
    """
    return _submit("side", function, *args, **kwargs)


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
    model = found.model if found else None
    # The passes over the padded batch (the masks and advantages, then the mismatch figures) go on
    # on the hook's worker while the prompts are decoded.
    figures = in_background(_row_figures, tensors, prompts.shape[1], advantages=True, spans=spans, model=model)
    token_data = figures_ahead(found)
    non_tensor = batch.non_tensor_batch
    prompt_ids, prompt_texts = prompt_groups(prompts, prompt_mask, non_tensor, tokenizer)
    rows = figures.result()
    decode = _response_decoder(responses, rows.spans, tokenizer)
    inputs, outputs, text_of = _conversations(non_tensor, prompt_texts, decode, rows.gaps)
    data_sources = _column(non_tensor, "data_source")
    prefetch_kept(prompt_ids, data_sources, decode, text_of, token_data)
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
        "data_sources": data_sources,
        "extra": _extra(batch, reward_extra_info),
        **_reward_lists(non_tensor),
        "tokens": token_data,
    }


def _token_columns(
    tensors: Any, responses: np.ndarray | Sequence[Any] | None, spans: np.ndarray, tokenizer: Any
) -> Any:
    """The batch's per-token columns (``verl._tokens``); None when they cannot be read (counted), the rows sent."""
    from otel_valgen.integrations.verl._tokens import token_columns  # the package imports this module

    try:
        return token_columns(tensors, responses, spans, tokenizer)
    except Exception as error:
        _process.counters.failed("reading the per-token data of verl's rollout batch", error)
        return None


def figures_ahead(found: Any) -> dict[str, Any] | None:
    """``found``'s columns, their mismatch figures over every response started on the hook's worker.

    numpy over the matrices, while this thread decodes the prompts (``tokens.ColumnsAhead``).
    """
    if found is None:
        return None
    ahead = in_background(tokens.batch_figures, dict(found.columns))
    return tokens.ColumnsAhead(found.columns, ahead.result)


def _spans(tensors: Any, prompt_width: int) -> np.ndarray:
    """Each row's tokens under the response part of the attention mask, ``ROW_BLOCK`` rows at a time.

    The mask's values added up: its ones, as an attention mask holds only zeros and ones (counting
    nonzero values converts each block to bools first, three times as long).
    """
    attention = _numpy(tensors["attention_mask"])
    blocks = [
        attention[start : start + ROW_BLOCK, prompt_width:].sum(axis=1, dtype=np.int64)
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
    """Each row's ``_RowFigures``, read ``ROW_BLOCK`` rows of about the same span at a time.

    A row's tokens are those under its span: each block is read only as wide as its longest
    span, so the work is about the responses' tokens, not the padded width.
    ``advantages``: whether to read them (None in the result otherwise, or without ``advantages``);
    their mean is over ``response_mask`` (the tokens trained on). ``spans``: ``_spans``, when known.
    ``model``: the response mask before verl's rollout correction (``verl._correction``), which
    the lengths and gaps count instead of ``response_mask`` (the correction takes out the tokens
    it rejects; they are still the model's).
    """
    from otel_valgen.integrations.verl._conversations import response_gaps as response_gaps_of

    if spans is None:
        spans = _spans(tensors, prompt_width)
    trained = _numpy(tensors["response_mask"]) if _has(tensors, "response_mask") else None
    response_mask = _numpy(model) if model is not None else trained
    values = _numpy(tensors["advantages"]) if advantages and _has(tensors, "advantages") else None
    rows = len(spans)
    lengths = spans.astype(np.int64) if response_mask is None else np.zeros(rows, dtype=np.int64)
    gaps = np.zeros(rows, dtype=bool)
    means: list[float | None] = [None] * rows
    order = np.argsort(spans, kind="stable")
    for start in range(0, rows, ROW_BLOCK):
        pick = order[start : start + ROW_BLOCK]
        span = spans[pick]
        wide = int(span[-1])  # the block's longest (ascending order)
        if response_mask is None:
            mask = _mask(span, wide)
        else:
            mask = response_mask[pick, :wide].astype(bool)
            lengths[pick] = mask.sum(axis=1)
            gaps[pick] = response_gaps_of(mask, span) or []
        if values is not None:
            kept = trained[pick, :wide].astype(bool) if trained is not None and trained is not response_mask else mask
            for row, mean in zip(pick.tolist(), _advantages(values[pick, :wide], kept), strict=True):
                means[row] = mean
    return _RowFigures(
        spans,
        lengths.tolist(),
        gaps.tolist() if response_mask is not None else None,
        means if values is not None else None,
    )


def prompt_groups(
    prompts: np.ndarray, mask: np.ndarray, non_tensor: Mapping[str, Any], tokenizer: Any
) -> tuple[list[str], list[str]]:
    """Each row's prompt id and prompt text: one decode (and media digest) per ``uid``, from its first row.

    A later uid whose id an earlier uid of the batch has gets ``<id>.<j>`` (j = 1, 2, ... in
    batch order). Without a ``uid`` column, rows are grouped by their id.
    """
    return prompt_groups_of(len(prompts), lambda row: _kept(prompts, mask, row), non_tensor, tokenizer)


def prompt_groups_of(
    size: int, tokens_of: Callable[[int], np.ndarray], non_tensor: Mapping[str, Any], tokenizer: Any
) -> tuple[list[str], list[str]]:
    """``prompt_groups`` of ``size`` rows whose prompt ids are ``tokens_of(row)`` (numpy), read only as needed."""
    media = [non_tensor.get(name) for name in MEDIA_KEYS]
    uid_column = non_tensor.get(UID_KEY)
    # One decode per uid (its first row), else per distinct token sequence (``decode_rows``).
    if uid_column is not None:
        groups: list[Any] = _values_list(uid_column)
    else:
        groups = [np.ascontiguousarray(tokens_of(row), dtype=np.int64).tobytes() for row in range(size)]
    first: dict[Any, int] = {}
    for row, group in enumerate(groups):
        first.setdefault(group, row)
    firsts = list(first.values())
    decoded = [  # ROW_BLOCK rows at a time: the token lists handed to the tokenizer stay small
        text
        for start in range(0, len(firsts), ROW_BLOCK)
        for text in decode_rows(tokenizer, [tokens_of(row).tolist() for row in firsts[start : start + ROW_BLOCK]])
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


def decode_rows(tokenizer: Any, rows: list[list[int]]) -> list[str]:
    """``tokenizer.decode(row, skip_special_tokens=True)`` of each row of ids, the same texts with less overhead.

    A fast tokenizer that decodes as transformers' own ``decode`` does (no override, no clean-up
    of spaces) is the Rust backend's ``decode`` of the ids: its ``decode_batch`` is called directly,
    without transformers' per-id argument checks (most of the time of a long row's ``decode``).
    """
    backend = _plain_backend(tokenizer)
    if backend is not None:
        return [str(text) for text in backend.decode_batch(rows, skip_special_tokens=True)]
    return [str(text) for text in tokenizer.batch_decode(rows, skip_special_tokens=True)]


def decode_row(tokenizer: Any, ids: list[int]) -> str:
    """``tokenizer.decode(ids, skip_special_tokens=True)`` (``decode_rows`` of one row)."""
    backend = _plain_backend(tokenizer)
    if backend is not None:
        return str(backend.decode(ids, skip_special_tokens=True))
    return str(tokenizer.decode(ids, skip_special_tokens=True))


def _plain_backend(tokenizer: Any) -> Any:
    """The Rust tokenizer that ``tokenizer.decode`` hands the ids to unchanged, else None (then decode is called).

    transformers 5's ``PreTrainedTokenizerBase.decode`` and ``batch_decode`` with
    ``TokenizersBackend._decode``: the backend's ``decode(ids, skip_special_tokens)``, then a
    clean-up of spaces only when ``clean_up_tokenization_spaces`` is set.
    """
    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:
        return None
    kind = type(tokenizer)
    if not (
        isinstance(tokenizer, TokenizersBackend)
        and kind.decode is PreTrainedTokenizerBase.decode
        and kind.batch_decode is PreTrainedTokenizerBase.batch_decode
        and kind._decode is TokenizersBackend._decode
    ):
        return None
    if getattr(tokenizer, "clean_up_tokenization_spaces", True):
        return None
    return getattr(tokenizer, "backend_tokenizer", None)


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
) -> tuple[Sequence[Any], Sequence[Any], Callable[[int], bool]]:
    """Each row's prompt messages and turns (``verl._conversations``), else its texts; rows made when read.

    A row with captured turns decodes no response text: its output is the turns. Also: whether a
    row's output needs its decoded text.
    """
    import otel_valgen.integrations.verl._conversations as chats

    rows = chats.from_columns(non_tensor, len(prompt_texts), gaps)
    if rows is None:
        return prompt_texts, LazyTexts(len(prompt_texts), decode), lambda row: True
    return (
        chats.Lazy(len(prompt_texts), lambda row: rows.input(row, prompt_texts[row])),
        chats.Lazy(len(prompt_texts), lambda row: rows.output_of(row, lambda: decode(row)), rows.figure_output),
        lambda row: not rows.has_turns(row),
    )


class ResponseTexts:
    """Each row's response text (``decode_row`` of ``ids_of(row)``), decoded when read or by ``prefetch``."""

    def __init__(self, ids_of: Callable[[int], list[int]], tokenizer: Any) -> None:
        self._ids_of = ids_of
        self._tokenizer = tokenizer
        self._done: dict[int, str] = {}
        self._pending: Future[Any] | None = None

    def __call__(self, row: int) -> str:
        from otel_valgen.integrations.verl._tokens import settle  # the package imports this module

        settle(self)
        text = self._done.get(row)
        return text if text is not None else decode_row(self._tokenizer, self._ids_of(row))

    def prefetch(self, rows: Sequence[int]) -> None:
        """Decode ``rows`` at once (``decode_rows``: one Rust call, the rows in parallel)."""
        todo = [row for row in dict.fromkeys(rows) if row not in self._done]
        self._done.update(zip(todo, decode_rows(self._tokenizer, [self._ids_of(row) for row in todo]), strict=True))


def _response_decoder(responses: np.ndarray, lengths: np.ndarray, tokenizer: Any) -> ResponseTexts:
    return ResponseTexts(lambda index: responses[index][: lengths[index]].tolist(), tokenizer)


def prefetch_kept(
    prompt_ids: Sequence[str],
    data_sources: Sequence[Any] | None,
    texts: ResponseTexts,
    text_of: Callable[[int], bool],
    token_data: Mapping[str, Any] | None,
) -> None:
    """Decode, at once and in the background, the texts and token pieces of the rows likely kept (``_likely_kept``).

    One Rust call for all of them instead of one per row when each is read (a reader waits for it,
    ``settle``); rows outside the guess are decoded when read.
    """
    likely = _likely_kept(prompt_ids, data_sources)
    rows = [row for row, prompt in enumerate(prompt_ids) if prompt in likely]
    text_rows = [row for row in rows if text_of(row)]
    pieces = token_data.get(PIECES) if token_data is not None else None
    prefetch = getattr(pieces, "prefetch", None)

    def work() -> None:
        texts.prefetch(text_rows)
        if callable(prefetch):
            prefetch(rows)

    # Beside the worker: log_rollouts waits for the step's figures meanwhile, and reads these last.
    pending = in_side_thread(work)
    texts._pending = pending
    if pieces is not None and callable(prefetch):
        pieces._pending = pending


def _likely_kept(prompt_ids: Sequence[str], data_sources: Sequence[Any] | None) -> set[str]:
    """The prompts ``log_rollouts`` will likely keep: the batch's k smallest keys.

    k is ``rollout_count``, per data source with ``sample_by = data_source``; every prompt with
    presampling off. Only a guess (earlier calls of the step, a rate, the extremes or the most
    mismatched change what is kept): what is read outside it is read then.
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


def _scores(tensors: Any) -> list[float] | None:
    for name in ("token_level_scores", "rm_scores"):
        if _has(tensors, name):
            return row_sums(tensors[name])
    return None


def row_sums(matrix: Any) -> list[float]:
    """Each row's sum of a score matrix (tensor or array) in its dtype, as verl's dumps sum it (``sum(-1)``).

    In numpy, on this thread: torch's sum splits over its threads, which wait for cores the hook's
    worker holds (8 ms instead of 0.4 in the bench). With verl's usual rewards (one score per row)
    the sums are the same; with scores on many tokens they may differ in the last bits of a float32.
    """
    try:
        values = _numpy(matrix)
    except TypeError:  # bf16, which numpy has not: float32, as the held rows' matrices are
        values = _numpy(matrix.float())
    return values.sum(-1).tolist()  # type: ignore[no-any-return]


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
