"""verl's full validation row, with no code change: what its ``validation_data_dir`` dump writes, and more.

verl passes ``_maybe_log_val_generations`` only inputs, outputs and scores. The rest of each row
is in ``_validate`` all the same, one value per generation (``_layout.VALIDATE_LOCALS``):
ground truths, data sources and ``reward_extra_info``'s columns, read from its frame when it
calls the hook. Response lengths and truncation are tallied per batch while ``_validate`` runs:
the legacy trainer hands each whole batch to ``extract_reward``, the v1 trainer fetches each
batch's responses from TransferQueue (``_layout.REWARD_FUNCTION``, ``_layout.V1_STORE``); so are
the agent loop's per-trajectory rewards (``_layout.REWARD_COLUMNS``: ``non_tensor_batch`` columns,
v1 keys of the final outputs' ``extra_fields``), which feed the figures over every trajectory.

What cannot be read leaves its columns out of the row, counted (``verl_row_columns_missing``)
and warned about once; the generations are sent all the same.
"""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from types import FrameType, ModuleType
from typing import Any

from otel_valgen import _process, _stats
from otel_valgen._sanitize import json_text
from otel_valgen.integrations.verl import _conversations
from otel_valgen.integrations.verl._layout import (
    NUM_TURNS_COLUMNS,
    RAW_PROMPT_COLUMN,
    REWARD_COLUMNS,
    REWARD_FUNCTION,
    V1_STORE,
    V1_VALIDATION_PARTITION,
    VALIDATE_LOCALS,
    ValidateLocals,
)

_logger = logging.getLogger("otel_valgen")

SCORE_COLUMN = "reward"
"""``reward_extra_infos_dict``'s copy of the score, which the row carries as its score."""

_FRAMES_UP = 8  # Ray's tracing wrapper may sit between _validate and the hook


@dataclasses.dataclass
class Tallies:
    """One validation's response lengths and truncation, as ``_validate``'s batches go by."""

    tokenizer: Any
    limit: int | None
    lengths: list[int] = dataclasses.field(default_factory=list)  # legacy: in generation order
    truncated: list[bool] = dataclasses.field(default_factory=list)
    by_key: dict[str, tuple[int, bool]] = dataclasses.field(default_factory=dict)  # v1: by TransferQueue key
    failed: bool = False
    chats: _conversations.Tally = dataclasses.field(default_factory=_conversations.Tally)
    # REWARD_COLUMNS: legacy, name -> one value per generation in order (None: absent); v1, by key
    rewards: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    rewards_by_key: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    rewards_failed: bool = False


_tallies: contextvars.ContextVar[Tallies | None] = contextvars.ContextVar("otel_valgen_verl_tallies", default=None)


def open_tallies(trainer: object) -> contextvars.Token[Tallies | None]:
    """Start tallying the batches of ``trainer``'s validation in this context."""
    from otel_valgen.integrations.verl_rollouts import max_response_length

    limit = _process.never_raise(None)(max_response_length)(trainer)
    for cls in type(trainer).__mro__:  # a ValGenerationsMixin subclass without install()
        if cls.__module__ in VALIDATE_LOCALS:
            watch_batches(sys.modules.get(cls.__module__))
    return _tallies.set(Tallies(getattr(trainer, "tokenizer", None), limit))


def close_tallies(token: contextvars.Token[Tallies | None]) -> None:
    _tallies.reset(token)


def validation_row(
    trainer: object, caller: FrameType | None, inputs: Sequence[Any], outputs: Sequence[Any]
) -> dict[str, Any]:
    """``log_generations``'s keyword arguments for the row's other columns; the ones not found are left out.

    ``inputs``, ``outputs`` and ``sample_ids`` among them when the rows are conversations (``_conversations``).
    """
    del trainer
    found = _validate_frame(caller, inputs)
    if found is None:
        _missing("frame", "verl's _validate lists (ground truth, data source, reward columns)")
        return {}
    frame_locals, layout = found
    size = len(outputs)
    row: dict[str, Any] = {}
    truths = _one_per_generation(frame_locals.get(layout.ground_truths), size)
    if truths is None:
        _missing("ground_truths", "ground truths")
    else:
        row["ground_truths"] = [_text(truth) for truth in truths]
    sources = frame_locals.get(layout.data_sources)
    if layout.data_sources_batched and isinstance(sources, list):
        sources = [value for batch in sources for value in _as_list(batch)]
    sources = _one_per_generation(sources, size)
    if sources is None:
        _missing("data_sources", "data sources")
    else:
        row["data_sources"] = sources
    extra = frame_locals.get(layout.reward_extra_info)
    if isinstance(extra, Mapping):
        row["extra"] = {
            name: values
            for name, values in extra.items()
            if name != SCORE_COLUMN and _one_per_generation(values, size) is not None
        }
    else:
        _missing("reward_extra_info", "reward_extra_info columns")
    sizes = _sizes(frame_locals, size)
    if sizes is None:
        _missing("response_lengths", "response lengths and truncation")
    else:
        row["response_lengths"], row["truncated"] = sizes
    row.update(_conversation(frame_locals, inputs, outputs))
    row.update(_rewards(frame_locals, size))
    return row


def _rewards(frame_locals: dict[str, Any], size: int) -> dict[str, list[Any]]:
    """``tool_rewards`` and ``turn_scores``, one value per generation, for those the batches had; else none.

    A verl or agent loop without them is not missing anything: they are simply left out.
    """
    tallies = _tallies.get()
    if tallies is None or tallies.rewards_failed:
        return {}
    found: dict[str, list[Any]] = {}
    keys = _v1_final_keys(frame_locals, size) if tallies.rewards_by_key else None
    for name in REWARD_COLUMNS:
        values = tallies.rewards.get(name)
        if (values is None or len(values) != size) and keys is not None:
            values = [tallies.rewards_by_key.get(key, {}).get(name) if key is not None else None for key in keys]
        if values is not None and len(values) == size and any(value is not None for value in values):
            found[name] = values
    return found


def _conversation(frame_locals: dict[str, Any], inputs: Sequence[Any], outputs: Sequence[Any]) -> dict[str, Any]:
    tallies = _tallies.get()
    if tallies is None:
        return _conversations.validation_columns(None, inputs, outputs)
    keys = _v1_final_keys(frame_locals, len(outputs)) if tallies.chats.by_key else None
    return _conversations.validation_columns(tallies.chats.rows(len(outputs), keys), inputs, outputs)


def _validate_frame(caller: FrameType | None, inputs: Sequence[Any]) -> tuple[dict[str, Any], ValidateLocals] | None:
    """The locals of verl's ``_validate`` that called the hook with ``inputs``, and their layout."""
    frame = caller
    for _ in range(_FRAMES_UP):
        if frame is None:
            return None
        layout = VALIDATE_LOCALS.get(frame.f_globals.get("__name__", ""))
        if layout is not None and frame.f_code.co_name == "_validate":
            frame_locals = frame.f_locals
            if frame_locals.get(layout.inputs) is inputs:
                return frame_locals, layout
        frame = frame.f_back
    return None


def _as_list(values: Any) -> list[Any]:
    tolist = getattr(values, "tolist", None)
    return list(tolist()) if callable(tolist) else list(values)


def _one_per_generation(values: Any, size: int) -> list[Any] | None:
    if values is None or isinstance(values, str | bytes | Mapping):
        return None
    try:
        listed = _as_list(values)
    except TypeError:
        return None
    return listed if len(listed) == size else None


def _text(truth: Any) -> Any:
    """A ground truth as verl's dump writes it: a text as it is, a list or dict as its JSON text."""
    return json_text(truth) if isinstance(truth, list | tuple | dict) else truth


def _sizes(frame_locals: dict[str, Any], size: int) -> tuple[list[int], list[bool]] | None:
    tallies = _tallies.get()
    if tallies is None or tallies.failed:
        return None
    if len(tallies.lengths) == size:
        return tallies.lengths, tallies.truncated
    if tallies.by_key:
        return _v1_sizes(tallies, frame_locals, size)
    return None


def _v1_sizes(tallies: Tallies, frame_locals: dict[str, Any], size: int) -> tuple[list[int], list[bool]] | None:
    """Each generation's sizes from its session's final TransferQueue key (v1 keeps one output per session)."""
    keys = _v1_final_keys(frame_locals, size)
    if keys is None:
        return None
    lengths: list[int | None] = [None] * size
    truncated: list[bool | None] = [None] * size
    for row, key in enumerate(keys):
        sizes = tallies.by_key.get(key) if key is not None else None
        if sizes is not None:
            lengths[row], truncated[row] = sizes
    if any(length is None for length in lengths):
        return None
    return lengths, truncated  # type: ignore[return-value]


def _v1_final_keys(frame_locals: dict[str, Any], size: int) -> list[str | None] | None:
    """Each generation's session's final TransferQueue key, from v1 ``_validate``'s locals."""
    keys = frame_locals.get("dump_all_keys")
    rows = frame_locals.get("session_to_sample_idx")
    if not isinstance(keys, list) or not isinstance(rows, Mapping):
        return None
    final: dict[str, tuple[int, str]] = {}
    for key in keys:
        parts = str(key).rsplit("_", 2)
        session, index = (f"{parts[0]}_{parts[1]}", int(parts[2])) if len(parts) == 3 else (str(key), 0)
        if session not in final or index > final[session][0]:
            final[session] = (index, str(key))
    found: list[str | None] = [None] * size
    for session, (_, key) in final.items():
        row = rows.get(session)
        if isinstance(row, int) and 0 <= row < size:
            found[row] = key
    return found


def _missing(column: str, what: str) -> None:
    _process.counters.add(_stats.VERL_ROW_COLUMNS_MISSING)
    _logger.log(
        logging.WARNING if _first(column) else logging.DEBUG,
        "otel_valgen: could not read the %s of verl's validation rows; sent without them (a verl release "
        "otel-valgen is not tested with? see _layout.VALIDATE_LOCALS)",
        what,
    )


_warned: set[str] = set()


def _first(key: str) -> bool:
    first = key not in _warned
    _warned.add(key)
    return first


# -- tallying each batch's response sizes while _validate runs ----------------------------------------


def watch_batches(module: ModuleType | None) -> None:
    """Tally response sizes from ``module``'s per-batch call (legacy: the reward; v1: TransferQueue reads)."""
    if module is None:
        return
    try:
        reward = getattr(module, REWARD_FUNCTION, None)
        if callable(reward) and not isinstance(reward, _TallyingReward):
            setattr(module, REWARD_FUNCTION, _TallyingReward(reward))
        store = getattr(module, V1_STORE, None)
        if (
            store is not None
            and not isinstance(store, _TallyingStore)
            and callable(getattr(store, "kv_batch_get", None))
        ):
            setattr(module, V1_STORE, _TallyingStore(store))
    except Exception:
        _logger.exception("otel_valgen: could not watch the batches of verl's %s", getattr(module, "__name__", module))


class _TallyingReward:
    """verl's per-batch reward function: each validation batch it is handed is tallied, then scored as before.

    An object of a module-level class, not a closure: Ray pickles verl's classes (and the module
    globals their methods name) by value, and a closure would carry this module's ContextVar,
    which cannot be pickled; this pickles as a reference to the class and the original function.
    """

    def __init__(self, original: Callable[..., Any]) -> None:
        self.__wrapped__ = original

    def __call__(self, batch: Any, *args: Any, **kwargs: Any) -> Any:
        result = self.__wrapped__(batch, *args, **kwargs)
        tallies = _tallies.get()
        if tallies is not None:
            _tally_batch(tallies, batch)
        return result


@_process.never_raise(None)
def _tally_batch(tallies: Tallies, batch: Any) -> None:
    from otel_valgen.integrations.verl_rollouts import response_gaps, response_sizes

    try:
        lengths, truncated = response_sizes(batch, tallies.tokenizer, tallies.limit)
    except Exception:
        tallies.failed = True
        raise
    tallies.lengths.extend(lengths)
    tallies.truncated.extend(truncated)
    _tally_rewards(tallies, batch)
    try:
        tallies.chats.add_batch(batch, response_gaps(batch))
    except Exception:
        tallies.chats.failed = True
        raise


@_process.never_raise(None)
def _tally_rewards(tallies: Tallies, batch: Any) -> None:
    """A legacy validation batch's ``REWARD_COLUMNS``, in generation order (None for a row without)."""
    try:
        size = len(batch)
        for name in REWARD_COLUMNS:
            values = batch.non_tensor_batch.get(name)
            listed = _one_per_generation(values, size) if values is not None else None
            tallies.rewards.setdefault(name, []).extend(listed if listed is not None else [None] * size)
    except Exception:
        tallies.rewards_failed = True
        raise


class _TallyingStore:
    """The v1 trainer module's TransferQueue client: a validation's ``responses`` reads are tallied by key."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._signature = _signature(store.kv_batch_get)

    def __getattr__(self, name: str) -> Any:
        store = self.__dict__.get("_store")  # absent while unpickling: no recursion through __getattr__
        if store is None:
            raise AttributeError(name)
        return getattr(store, name)

    def kv_batch_get(self, *args: Any, **kwargs: Any) -> Any:
        data = self._store.kv_batch_get(*args, **kwargs)
        tallies = _tallies.get()
        if tallies is not None:
            _tally_v1(tallies, self._signature, args, kwargs, data)
            _tally_v1_chats(tallies, self._store, self._signature, args, kwargs, data)
            _tally_v1_rewards(tallies, self._signature, args, kwargs, data)
        return data


def _signature(function: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(function)
    except (TypeError, ValueError):
        return None


@_process.never_raise(None)
def _tally_v1(tallies: Tallies, signature: inspect.Signature | None, args: Any, kwargs: Any, data: Any) -> None:
    from otel_valgen.integrations.verl_rollouts import _eos_ids, cut_at_limit

    if signature is None:
        return
    bound = signature.bind(*args, **kwargs).arguments
    fields = bound.get("select_fields") or ()
    if bound.get("partition_id") != V1_VALIDATION_PARTITION or "responses" not in fields:
        return
    responses = data["responses"]
    rows = responses.unbind() if getattr(responses, "is_nested", False) else list(responses)
    eos = _eos_ids(tallies.tokenizer)
    for key, tokens in zip(bound.get("keys") or (), rows, strict=True):
        length = int(tokens.shape[0])
        last = int(tokens[-1]) if length else None
        tallies.by_key[str(key)] = (length, cut_at_limit(length, last, tallies.limit, eos))


@_process.never_raise(None)
def _tally_v1_chats(
    tallies: Tallies, store: Any, signature: inspect.Signature | None, args: Any, kwargs: Any, data: Any
) -> None:
    """v1 ``_validate``'s fetch of the final outputs' ``extra_fields``: their turns, and their prompts' messages."""
    if signature is None:
        return
    bound = signature.bind(*args, **kwargs).arguments
    fields = bound.get("select_fields") or ()
    if bound.get("partition_id") != V1_VALIDATION_PARTITION or "extra_fields" not in fields:
        return
    keys = list(bound.get("keys") or ())
    try:
        prompts = store.kv_batch_get(keys=keys, partition_id=V1_VALIDATION_PARTITION, select_fields=[RAW_PROMPT_COLUMN])
        turns = data[NUM_TURNS_COLUMNS[1]] if NUM_TURNS_COLUMNS[1] in fields else None
        tallies.chats.add_v1(keys, data["extra_fields"], turns, prompts[RAW_PROMPT_COLUMN])
    except Exception:
        tallies.chats.failed = True
        raise


@_process.never_raise(None)
def _tally_v1_rewards(tallies: Tallies, signature: inspect.Signature | None, args: Any, kwargs: Any, data: Any) -> None:
    """v1 ``_validate``'s fetch of the final outputs' ``extra_fields``: their ``REWARD_COLUMNS``, by key."""
    if signature is None:
        return
    bound = signature.bind(*args, **kwargs).arguments
    fields = bound.get("select_fields") or ()
    if bound.get("partition_id") != V1_VALIDATION_PARTITION or "extra_fields" not in fields:
        return
    try:
        for key, extra in zip(bound.get("keys") or (), _as_list(data["extra_fields"]), strict=True):
            if isinstance(extra, Mapping):
                tallies.rewards_by_key[str(key)] = {name: extra.get(name) for name in REWARD_COLUMNS}
    except Exception:
        tallies.rewards_failed = True
        raise
