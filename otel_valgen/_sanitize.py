"""The treatment of bad input: every value the training loop passes becomes a valid record.

| input                                 | treatment                                                  |
|---------------------------------------|------------------------------------------------------------|
| ``bytes`` text                        | decoded as UTF-8, undecodable bytes replaced by U+FFFD     |
| ``str`` with lone surrogates          | each surrogate replaced by U+FFFD                           |
| text longer than ``max_field_bytes``  | cut at a character boundary, ``TRUNCATION_MARKER`` added,  |
|                                       | original UTF-8 length kept in ``valgen.<field>.original_length`` |
| ``None`` text                         | empty string                                               |
| other objects as text                 | ``str(value)``                                             |
| score ``None``                        | no score attribute                                         |
| score NaN / inf / not a number        | no score attribute, ``valgen.score_invalid`` says why      |
| numpy / torch scalars, 0-d arrays     | converted with ``.item()``                                  |
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

TRUNCATION_MARKER: Final = "…[truncated]"
_MARKER_BYTES: Final = len(TRUNCATION_MARKER.encode("utf-8"))
_REPLACEMENT: Final = "\ufffd"


@dataclass(frozen=True)
class CleanText:
    """A text made safe to send, with what was repaired."""

    text: str
    replaced_chars: int = 0
    original_length: int | None = None  # UTF-8 bytes, set when truncated


def _replace_surrogates(text: str) -> tuple[str, int]:
    replaced = sum(1 for char in text if "\ud800" <= char <= "\udfff")
    cleaned = "".join(_REPLACEMENT if "\ud800" <= char <= "\udfff" else char for char in text)
    return cleaned, replaced


def clean_text(value: object, max_bytes: int) -> CleanText:
    """Return ``value`` as valid Unicode of at most ``max_bytes`` UTF-8 bytes."""
    replaced = 0
    if value is None:
        text = ""
    elif isinstance(value, str):
        text = value
    elif isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        text = raw.decode("utf-8", "replace")
        replaced = text.count(_REPLACEMENT) - raw.count(_REPLACEMENT.encode("utf-8"))
    else:
        text = str(_unwrap_scalar(value))
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        text, surrogates = _replace_surrogates(text)
        replaced += surrogates
        encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return CleanText(text, replaced)
    budget = max(0, max_bytes - _MARKER_BYTES)
    cut = encoded[:budget].decode("utf-8", "ignore")
    return CleanText(cut + TRUNCATION_MARKER, replaced, original_length=len(encoded))


def _unwrap_scalar(value: object) -> object:
    """numpy/torch scalars and 0-d arrays or tensors to plain Python values."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", 0) == 0:
        try:
            return item()
        except (TypeError, ValueError, RuntimeError):
            return value
    return value


@dataclass(frozen=True)
class CleanScore:
    """A score ready for the ``valgen.score`` attribute, or why there is none."""

    value: float | None
    invalid: str | None = None
    coerced: bool = False


def clean_score(value: object) -> CleanScore:
    """Return ``value`` as a finite float, or None with the reason it is invalid."""
    if value is None:
        return CleanScore(None)
    if isinstance(value, float):
        number = value
        coerced = False
    else:
        plain = _unwrap_scalar(value)
        coerced = True
        if isinstance(plain, str):
            try:
                number = float(plain)
            except ValueError:
                return CleanScore(None, "not_a_number", coerced)
        else:
            try:
                number = float(plain)  # type: ignore[arg-type]
            except (TypeError, ValueError, OverflowError):
                return CleanScore(None, "not_a_number", coerced)
    if math.isnan(number):
        return CleanScore(None, "nan", coerced)
    if math.isinf(number):
        return CleanScore(None, "inf" if number > 0 else "-inf", coerced)
    return CleanScore(number, None, coerced)


def clean_step(value: object) -> int | None:
    """Return ``value`` as an int step, or None when it is missing or not integral."""
    if value is None or isinstance(value, bool):
        return None
    plain = _unwrap_scalar(value)
    if isinstance(plain, int):
        return plain
    if isinstance(plain, float) and plain.is_integer():
        return int(plain)
    if isinstance(plain, str):
        try:
            return int(plain.strip())
        except ValueError:
            return None
    return None
