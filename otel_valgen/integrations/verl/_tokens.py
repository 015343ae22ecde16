"""verl's training batch as per-token columns (``otel_valgen.tokens``), with no code change.

| Column | From the batch | There when |
| --- | --- | --- |
| ``ids`` | ``responses`` | always |
| ``pieces`` | each id of a kept row decoded (``token_pieces``), only when the row is read | always |
| ``rollout`` | ``rollout_log_probs`` | ``actor_rollout_ref.rollout.calculate_log_probs=True`` |
| ``trainer`` | ``old_log_probs`` | not in bypass mode, where they are the rollout's |
| ``reference`` | ``ref_log_prob`` | a reference policy (``use_kl_loss``, ``use_kl_in_reward``) |
| ``weight`` | ``rollout_is_weights`` | ``algorithm.rollout_correction.rollout_is`` (decoupled mode) |
| ``model`` | ``response_mask`` before the correction (``_correction``) | always |
| ``masked`` | the tokens of that mask the correction took out of ``response_mask`` | ``rollout_rs`` (decoupled) |

Rows are read up to the response part of the attention mask (``tokens.LENGTH``), which holds a
multi-turn tool's tokens too. The columns are the batch's 2-D tensors themselves (no copies), so the
figures over every response are computed at once. A column the batch lacks is left out, counted
(``verl_token_columns_missing``) and warned about once per column and reason.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, overload

import numpy as np

from otel_valgen import _process, _stats, tokens
from otel_valgen.integrations.verl import _correction

TOKEN_FIELDS: Final = (
    "responses",
    "response_mask",
    "rollout_log_probs",
    "old_log_probs",
    "ref_log_prob",
    "rollout_is_weights",
)
"""The batch fields (``DataProto.batch`` keys; v1: TransferQueue fields of the same names) the columns read."""

FIGURE_FIELDS: Final = ("response_mask", "rollout_log_probs", "old_log_probs")
"""Of ``TOKEN_FIELDS``, those the figures over every response read (every row's, not only the kept ones')."""

FLOAT_FIELDS: Final = {
    tokens.ROLLOUT: "rollout_log_probs",
    tokens.TRAINER: "old_log_probs",
    tokens.REFERENCE: "ref_log_prob",
    tokens.WEIGHT: "rollout_is_weights",
}

_logger = logging.getLogger("otel_valgen")

CHARACTER_TOKENS: Final = 4  # a UTF-8 character spans at most 4 byte-level tokens


@dataclass(frozen=True)
class TrainerSettings:
    """What the trainer's config says of a step's batch (``algorithm.rollout_correction``)."""

    correction: bool  # the correction runs on a batch with rollout log-probs (set, not in bypass mode)
    bypass: bool  # bypass mode: old_log_probs are the rollout's, the rejection is in the actor's loss
    rejection: bool  # rollout_rs is set: the correction masks tokens
    row_keys: tuple[str, ...] | None = None  # v1: each row's TransferQueue key, in the batch's order


_settings: contextvars.ContextVar[TrainerSettings | None] = contextvars.ContextVar(
    "otel_valgen_verl_trainer_settings", default=None
)


@contextmanager
def trainer_batch(trainer: Any, row_keys: Sequence[str] | None = None) -> Iterator[None]:
    """While a rollout hook sends ``trainer``'s batch: its settings (and v1's row keys) for ``token_columns``."""
    token = _settings.set(settings_of(trainer, row_keys))
    try:
        yield
    finally:
        _settings.reset(token)


def settings_of(trainer: Any, row_keys: Sequence[str] | None = None) -> TrainerSettings | None:
    """The trainer's ``TrainerSettings``; None when its config cannot be read (then nothing is assumed)."""
    try:
        algorithm = trainer.config.get("algorithm")
        config = algorithm.get("rollout_correction", None) if algorithm is not None else None
        bypass = bool(config is not None and config.get("bypass_mode", False))
        rejection = config is not None and config.get("rollout_rs", None) is not None
    except Exception:
        _logger.debug("otel_valgen: no rollout correction config on %r", type(trainer), exc_info=True)
        return None
    return TrainerSettings(
        correction=config is not None and not bypass,
        bypass=bypass,
        rejection=rejection,
        row_keys=tuple(row_keys) if row_keys is not None else None,
    )


class TokenColumns(NamedTuple):
    """``log_rollouts``' ``tokens`` of a batch, and the mask of the model's tokens when it differs from the batch's."""

    columns: dict[str, Any]
    model: Any  # the response mask before the correction (a bool tensor), None when not captured


def token_columns(
    tensors: Any, responses: np.ndarray | Sequence[Any] | None, spans: np.ndarray, tokenizer: Any
) -> TokenColumns:
    """The per-token columns of a batch: ``tensors`` maps ``TOKEN_FIELDS`` to 2-D tensors (or to rows).

    ``responses``: the ids, a numpy matrix or one row per response (None without them); ``spans``:
    each row's tokens under the response part of the attention mask (numpy).
    """
    settings = _settings.get()
    columns: dict[str, Any] = {tokens.LENGTH: spans}
    if responses is None:
        _missing(tokens.IDS, "the batch has no responses")
    else:
        columns[tokens.IDS] = responses
        if tokenizer is not None:
            columns[tokens.PIECES] = Pieces(responses, spans, tokenizer)
        else:
            _missing(tokens.PIECES, "no tokenizer")
    rollout = _field(tensors, FLOAT_FIELDS[tokens.ROLLOUT])
    for name, field in FLOAT_FIELDS.items():
        value = _field(tensors, field)
        if value is None:
            _missing(name, f"the batch has no {field}{_HOW[name]}")
        elif name == tokens.TRAINER and (value is rollout or (settings is not None and settings.bypass)):
            _missing(name, "bypass mode (algorithm.rollout_correction.bypass_mode): old_log_probs are the rollout's")
        else:
            columns[name] = _float32(value)
    model = _masks(columns, _field(tensors, "response_mask"), settings, rollout is not None)
    return TokenColumns(columns, model)


_HOW: Final = {
    tokens.ROLLOUT: " (actor_rollout_ref.rollout.calculate_log_probs=True sends them)",
    tokens.TRAINER: "",
    tokens.REFERENCE: " (no reference policy: actor_rollout_ref.actor.use_kl_loss or algorithm.use_kl_in_reward)",
    tokens.WEIGHT: " (algorithm.rollout_correction.rollout_is, in decoupled mode, sends them)",
}


def _masks(columns: dict[str, Any], mask: Any, settings: TrainerSettings | None, has_rollout: bool) -> Any:
    """``model`` and ``masked`` into ``columns``; returns the mask before the correction when one was captured."""
    if mask is None:
        _missing(tokens.MODEL, "the batch has no response_mask")
        _missing(tokens.MASKED, "the batch has no response_mask")
        return None
    corrected = settings is None or (settings.correction and has_rollout)  # verl may have corrected the mask
    matrix = hasattr(mask, "shape") and len(mask.shape) == 2  # else rows (v1: the kept rows' only)
    keys = settings.row_keys if settings is not None else None
    before = _correction.mask_before(mask, keys) if corrected and matrix else None
    if before is not None:
        columns[tokens.MODEL] = before
        if settings is None or settings.rejection:
            columns[tokens.MASKED] = before & ~mask.bool()
        else:
            _missing(tokens.MASKED, "no rejection is configured (algorithm.rollout_correction.rollout_rs)")
        return before
    if settings is not None and settings.correction and has_rollout:
        why = "verl's rollout correction replaced the response mask, and the mask before it was not captured"
        _missing(tokens.MODEL, why)
        _missing(tokens.MASKED, why)
        return None
    columns[tokens.MODEL] = mask
    _missing(tokens.MASKED, _no_rejection(settings, has_rollout))
    return None


def _no_rejection(settings: TrainerSettings | None, has_rollout: bool) -> str:
    """Why a batch whose correction was not captured has no ``masked`` column."""
    if settings is None:
        return "no rollout correction was seen on the batch"
    if settings.bypass:
        return "bypass mode: the correction masks tokens inside the actor's loss, not in the batch"
    if not settings.correction:
        return "algorithm.rollout_correction is not set"
    if not has_rollout:
        return "no rollout log-probs, so verl runs no rollout correction"
    return "no rejection is configured (algorithm.rollout_correction.rollout_rs)"


def _field(tensors: Any, name: str) -> Any:
    return tensors[name] if name in tensors.keys() else None  # noqa: SIM118 (TensorDict refuses ``in``)


def _float32(value: Any) -> Any:
    """A bf16 or fp16 tensor as float32 (they have no numpy view); others as they are."""
    import torch

    return value.float() if getattr(value, "dtype", None) in (torch.bfloat16, torch.float16) else value


def _missing(column: str, why: str) -> None:
    _process.counters.add(_stats.VERL_TOKEN_COLUMNS_MISSING)
    key = (column, why)
    level = logging.WARNING if key not in _warned else logging.DEBUG
    _warned.add(key)
    _logger.log(level, "otel_valgen: verl's rollouts are sent without their %r tokens: %s", column, why)


_warned: set[tuple[str, str]] = set()


# -- pieces ---------------------------------------------------------------------------------------------


_tables: weakref.WeakKeyDictionary[Any, dict[int, str]] = weakref.WeakKeyDictionary()
_tables_lock = threading.Lock()


def alone_texts(tokenizer: Any) -> dict[int, str]:
    """The texts of ids decoded alone by ``tokenizer``, filled in as ids are decoded, kept across steps.

    An id decodes alone (special tokens kept) to the same text at every step, also after tokens
    are added to the tokenizer (they are new ids), so a training run decodes each id of its
    tokenizer once; a table is at most the vocabulary. A tokenizer that cannot be a weak key gets a
    fresh table each time.
    """
    with _tables_lock:
        try:
            found = _tables.get(tokenizer)
            if found is None:
                found = _tables[tokenizer] = {}
        except TypeError:
            return {}
    return found


def settle(prefetched: Any) -> None:
    """Wait for the background prefetch of ``prefetched`` (``verl_rollouts.prefetch_kept``); a failed one is redone."""
    pending = prefetched._pending
    if pending is not None:
        prefetched._pending = None
        try:
            pending.result()
        except Exception:
            _logger.debug("otel_valgen: prefetching the kept rows failed; they are decoded when read", exc_info=True)


class Pieces(Sequence[list[str] | None]):
    """Each row's token texts, decoded only when the row is read (``log_rollouts`` reads the kept ones).

    Each distinct id is decoded once (``alone_texts``): the kept responses share most of their
    tokens, and the steps their tokenizer. ``prefetch`` decodes the rows likely read at once.
    """

    def __init__(self, responses: np.ndarray | Sequence[Any], spans: np.ndarray, tokenizer: Any) -> None:
        self._responses = responses
        self._spans = spans
        self._tokenizer = tokenizer
        self._alone = alone_texts(tokenizer)  # id -> its text decoded alone
        self._done: dict[int, list[str] | None] = {}
        self._pending: Any = None  # a background prefetch (verl_rollouts.prefetch_kept)

    def __len__(self) -> int:
        return len(self._responses)

    @overload
    def __getitem__(self, index: int) -> list[str] | None: ...
    @overload
    def __getitem__(self, index: slice) -> list[list[str] | None]: ...
    def __getitem__(self, index: int | slice) -> list[str] | list[list[str] | None] | None:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        row = index % len(self) if index < 0 else index
        settle(self)
        if row not in self._done:
            self.prefetch([row])
        return self._done[row]

    def prefetch(self, rows: Sequence[int]) -> None:
        """Decode the pieces of ``rows`` (not done yet) together: two Rust ``decode_batch`` calls in all."""
        todo = [row for row in dict.fromkeys(rows) if row not in self._done]
        ids = [self._ids(row) for row in todo]
        present = [(row, row_ids) for row, row_ids in zip(todo, ids, strict=True) if row_ids is not None]
        self._done.update(dict.fromkeys(todo))
        pieces = rows_pieces(self._tokenizer, [row_ids for _, row_ids in present], self._alone)
        self._done.update(zip([row for row, _ in present], pieces, strict=True))

    def _ids(self, row: int) -> list[int] | None:
        values = self._responses[row]
        if values is None:
            return None
        part = values[: int(self._spans[row])]
        ids = part.tolist() if callable(getattr(part, "tolist", None)) else list(part)  # numpy, torch: Python ints
        return [int(token) for token in ids]


def token_pieces(tokenizer: Any, ids: list[int], alone: dict[int, str] | None = None) -> list[str]:
    """The text of each token, special tokens included; joined, they are the response's text (``rows_pieces``)."""
    return rows_pieces(tokenizer, [ids], alone)[0]


def rows_pieces(tokenizer: Any, rows: list[list[int]], alone: dict[int, str] | None = None) -> list[list[str]]:
    """The text of each token of each row of ids, special tokens included; joined, they are the row's text.

    Each id is decoded alone (``alone``: the texts of ids decoded before, filled in). A character
    that a byte-level tokenizer splits over several tokens decodes to U+FFFD piece by piece: the
    run from such a token that completes a character (at most ``CHARACTER_TOKENS``) is decoded
    together, its text the piece of its last token, the others' empty. Two calls of a fast
    tokenizer's Rust ``decode_batch`` in all: the new ids, then the runs.
    """
    known = {} if alone is None else alone
    new = [token for token in {token for ids in rows for token in ids} if token not in known]
    known.update(zip(new, _decode_many(tokenizer, [[token] for token in new]), strict=True))
    out = [list(map(known.__getitem__, ids)) for ids in rows]
    broken = [[index for index, piece in enumerate(pieces) if "\ufffd" in piece] for pieces in out]
    runs = [
        (number, start, end)
        for number, (ids, starts) in enumerate(zip(rows, broken, strict=True))
        for start in starts
        for end in range(start + 1, min(start + CHARACTER_TOKENS, len(ids)))
    ]
    if not runs:
        return out
    texts = _decode_many(tokenizer, [rows[number][start : end + 1] for number, start, end in runs])
    joined = dict(zip(runs, texts, strict=True))
    for number, (pieces, starts) in enumerate(zip(out, broken, strict=True)):
        free = 0  # the first token no joined run has taken
        for start in starts:
            if start < free:
                continue
            ends = range(start + 1, min(start + CHARACTER_TOKENS, len(pieces)))
            end = next((end for end in ends if "\ufffd" not in joined[(number, start, end)]), None)
            if end is not None:
                pieces[start:end] = [""] * (end - start)
                pieces[end] = joined[(number, start, end)]
                free = end + 1
    return out


def _decode_many(tokenizer: Any, rows: list[list[int]]) -> list[str]:
    """Each row of ids decoded with its special tokens and as it is (no clean-up of spaces)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return [str(text) for text in backend.decode_batch(rows, skip_special_tokens=False)]
    return [str(tokenizer.decode(row, skip_special_tokens=False, clean_up_tokenization_spaces=False)) for row in rows]
