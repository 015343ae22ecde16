"""The treatment of bad input: every value the training loop passes becomes a valid record.

| input                                 | treatment                                                  |
|---------------------------------------|------------------------------------------------------------|
| ``bytes`` text                        | decoded as UTF-8, undecodable bytes replaced by U+FFFD     |
| ``str`` with lone surrogates          | each surrogate replaced by U+FFFD                           |
| text longer than ``max_field_bytes``  | head and tail kept around ``TRUNCATION_MARKER`` and the     |
|                                       | count of characters left out (``cut_middle``); the original |
|                                       | UTF-8 length kept in ``valgen.<field>.original_length``     |
| ``None`` text                         | empty string                                               |
| other objects as text                 | ``str(value)``                                             |
| score ``None``                        | no score attribute                                         |
| score NaN / inf / not a number        | no score attribute, ``valgen.score_invalid`` says why      |
| numpy / torch scalars, 0-d arrays     | converted with ``.item()``                                  |
| extra value bool / int / finite float | sent as it is (an int beyond int64 is invalid)             |
| extra value text (``str``, ``bytes``) | like the text fields above                                 |
| extra value list / tuple / dict /     | its JSON text (``json_text``), then like the text fields:  |
| set, array or tensor (ndim > 0)       | repaired, its middle cut out like a text's                 |
| extra value NaN / inf / None / other  | omitted from the record (``invalid`` says why)             |

The cut keeps a text's head and its tail, half of the byte budget each, because what a reader
needs sits at both ends: an output ends with the final answer the reward graded (a head-only cut
lost it for a long chain of thought), and a chat-templated input opens with the system prompt and
ends with the question. Each half (32 KiB by default) is far longer than an answer or a question.
A JSON extra is cut the same way, not head only: cut anywhere it is no longer valid JSON, and its
tail holds the last list items (the last turn, the last tokens) and the last keys.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

# A cut text is head + TRUNCATION_MARKER.format(omitted=N) + tail, N the characters (code points
# of the repaired text) left out: len(original) == len(head) + N + len(tail).
TRUNCATION_MARKER: Final = "\n…[{omitted} characters omitted]…\n"
TRUNCATION_PATTERN: Final = re.compile(r"\n…\[([0-9]+) characters omitted\]…\n")
_MARKER_BYTES: Final = len(TRUNCATION_MARKER.format(omitted="").encode("utf-8"))  # 29, without the digits
_REPLACEMENT: Final = "\ufffd"
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_JSON_DEPTH: Final = 64  # containers nested deeper are sent as their str()
_FLOATS_ONLY: Final = frozenset({float})


class CleanText(NamedTuple):
    """A text made safe to send, with what was repaired.

    The results of the cleaning functions are named tuples: immutable like a frozen dataclass,
    built for several values of every record kept, at half the cost of a frozen dataclass.
    """

    text: str
    replaced_chars: int = 0
    original_length: int | None = None  # UTF-8 bytes, set when truncated


def _replace_surrogates(text: str) -> tuple[str, int]:
    replaced = sum(1 for char in text if "\ud800" <= char <= "\udfff")
    cleaned = "".join(_REPLACEMENT if "\ud800" <= char <= "\udfff" else char for char in text)
    return cleaned, replaced


def clean_text(value: object, max_bytes: int) -> CleanText:
    """Return ``value`` as valid Unicode of at most ``max_bytes`` UTF-8 bytes (a longer text: ``cut_middle``)."""
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
    return CleanText(cut_middle(text, encoded, max_bytes), replaced, original_length=len(encoded))


def _head_end(encoded: bytes, end: int) -> int:
    """The last character boundary of ``encoded`` (valid UTF-8) at or before byte ``end``."""
    while 0 < end < len(encoded) and (encoded[end] & 0xC0) == 0x80:  # a continuation byte: inside a character
        end -= 1
    return end


def _tail_start(encoded: bytes, start: int) -> int:
    """The first character boundary of ``encoded`` (valid UTF-8) at or after byte ``start``."""
    while start < len(encoded) and (encoded[start] & 0xC0) == 0x80:
        start += 1
    return start


def cut_middle(text: str, encoded: bytes, max_bytes: int) -> str:
    """``text`` (valid Unicode, ``encoded`` its UTF-8, longer than ``max_bytes``) with its middle cut out.

    Returns the head, ``TRUNCATION_MARKER`` with the count of characters left out, and the tail,
    together at most ``max_bytes`` UTF-8 bytes. Head and tail share the bytes the marker leaves,
    half each (the tail also gets the up to 3 bytes the head's cut leaves before a character it
    would split); no character is split. The marker's count is first given as many digits as the
    whole text's length, then as few as the count has, so that the cut uses the whole budget.
    A limit too small for the marker keeps the head alone.
    """
    digits = len(str(len(text)))
    while True:
        budget = max_bytes - _MARKER_BYTES - digits
        if budget < 0:
            return encoded[: _head_end(encoded, max_bytes)].decode("utf-8")
        head_end = _head_end(encoded, budget // 2)
        tail_start = _tail_start(encoded, len(encoded) - (budget - head_end))
        head, tail = encoded[:head_end].decode("utf-8"), encoded[tail_start:].decode("utf-8")
        omitted = len(text) - len(head) - len(tail)
        if len(str(omitted)) == digits:  # never more digits: the budget only grows, so the count only falls
            return head + TRUNCATION_MARKER.format(omitted=omitted) + tail
        digits = len(str(omitted))


def _unwrap_scalar(value: object) -> object:
    """numpy/torch scalars and 0-d arrays or tensors to plain Python values."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", 0) == 0:
        try:
            return item()
        except (TypeError, ValueError, RuntimeError):
            return value
    return value


class CleanScore(NamedTuple):
    """A score ready for the ``valgen.score`` attribute, or why there is none."""

    value: float | None
    invalid: str | None = None
    coerced: bool = False


def _non_finite(number: float) -> str | None:
    """Why ``number`` cannot be sent as a finite double (``nan``, ``inf``, ``-inf``), or None."""
    if math.isnan(number):
        return "nan"
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    return None


def _as_float(plain: object) -> float | None:
    """``float(plain)`` for a number-like object (an unwrapped scalar, a numeric string), else None."""
    try:
        return float(plain)  # type: ignore[arg-type]
    except Exception:  # float() of an arbitrary object may raise anything (a torch tensor: RuntimeError)
        return None


def clean_score(value: object) -> CleanScore:
    """Return ``value`` as a finite float, or None with the reason it is invalid."""
    if value is None:
        return CleanScore(None)
    if isinstance(value, float):
        number = value
        coerced = False
    else:
        coerced = True
        converted = _as_float(_unwrap_scalar(value))
        if converted is None:
            return CleanScore(None, "not_a_number", coerced)
        number = converted
    invalid = _non_finite(number)
    if invalid is not None:
        return CleanScore(None, invalid, coerced)
    return CleanScore(number, None, coerced)


def score_stats(scores: Sequence[Any] | None) -> tuple[int, float]:
    """How many of ``scores`` are valid (``clean_score``) and their sum (``math.fsum``).

    One ``math.fsum`` pass in C when every score converts to a finite float, as a column of
    floats, ints, bools or numpy/torch scalars does (``fsum`` converts each with ``float()``,
    as ``clean_score`` does); otherwise (None, NaN, text...) the scores are cleaned one by one.
    The sum is inf when the valid scores overflow a double.
    """
    if not scores:
        return 0, 0.0
    try:
        total = math.fsum(scores)
    except Exception:  # None or text among them, ints beyond a double, inf and -inf together
        total = math.nan
    if math.isfinite(total):  # a NaN or an infinity among them makes the sum non-finite
        return len(scores), total
    valid = [score for score in (clean_score(value).value for value in scores) if score is not None]
    try:
        return len(valid), math.fsum(valid)
    except OverflowError:
        return len(valid), math.inf


def valid_scores(scores: Sequence[Any] | None) -> list[float | None] | None:
    """Each score as ``clean_score`` makes it (None: not valid); the record's own cleaning counts and warns."""
    if scores is None:
        return None
    if _FLOATS_ONLY.issuperset(map(type, scores)):  # the usual column: no conversion to make
        return [value if math.isfinite(value) else None for value in scores]
    return [clean_score(value).value for value in scores]


ExtraValue = bool | int | float | str


class CleanExtra(NamedTuple):
    """An extra column's value ready for its ``valgen.extra.<name>`` attribute, or why there is none."""

    value: ExtraValue | None
    invalid: str | None = None
    text: CleanText | None = None  # set for text values: what was repaired
    coerced: bool = False


def _structured(value: object) -> bool:
    """Whether an extra value is sent as JSON: a list, tuple, mapping, set, or an array or tensor of 1+ dimensions."""
    if isinstance(value, list | tuple | Mapping | set | frozenset):
        return True
    return getattr(value, "ndim", 0) not in (0, None) and callable(getattr(value, "tolist", None))


def _json_key(key: object) -> str:
    """A mapping key as a JSON object key: a text as it is, others as their JSON scalar or ``str()``."""
    plain = _unwrap_scalar(key)
    if isinstance(plain, str):
        return plain
    if plain is None or isinstance(plain, bool):
        return json.dumps(plain)
    return str(plain)


def _jsonable(value: object, depth: int = 0) -> object:  # noqa: PLR0911 (one return per kind of value)
    """``value`` as plain JSON data: non-finite floats as ``"nan"``/``"inf"``/``"-inf"``, other objects as ``str()``."""
    plain = _unwrap_scalar(value)
    if plain is None or isinstance(plain, bool | int | str):
        return plain
    if isinstance(plain, float):
        return _non_finite(plain) or plain
    if isinstance(plain, bytes | bytearray | memoryview):
        return bytes(plain).decode("utf-8", "replace")
    if depth >= _JSON_DEPTH:
        return str(plain)
    if isinstance(plain, Mapping):
        return {_json_key(key): _jsonable(item, depth + 1) for key, item in plain.items()}
    if isinstance(plain, list | tuple):
        return [_jsonable(item, depth + 1) for item in plain]
    if isinstance(plain, set | frozenset):  # in the order of the items' JSON texts: the same in every process
        items = [_jsonable(item, depth + 1) for item in plain]
        return [item for _, item in sorted(((_dumps(item), item) for item in items), key=lambda pair: pair[0])]
    if _structured(plain):  # numpy arrays, torch tensors
        return _jsonable(plain.tolist(), depth)  # type: ignore[attr-defined]
    return str(plain)


def _dumps(data: object) -> str:
    return json.dumps(data, sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def json_text(value: object) -> str:
    """An extra list, tuple, dict, set or array as compact JSON text (keys sorted, not ASCII-escaped).

    numpy/torch scalars are unwrapped and arrays/tensors listed (``.tolist()``); NaN and
    infinities become the strings ``"nan"``, ``"inf"``, ``"-inf"`` (JSON has no such numbers);
    bytes are decoded as UTF-8 (bad bytes replaced); a non-text key becomes its ``str()``
    (``true``, ``false``, ``null`` for bools and None); any other object, and containers nested
    deeper than 64, become their ``str()``.
    """
    return _dumps(_jsonable(value))


def clean_extra(value: object, max_bytes: int) -> CleanExtra:  # noqa: PLR0911 (one return per kind of value)
    """Return ``value`` as a bool, int64, finite float or valid text, or None with the reason it is invalid.

    numpy/torch scalars and 0-d arrays are unwrapped (``.item()``) as scores are; text follows
    ``clean_text`` (repaired, cut at ``max_bytes``); a list, tuple, dict, set, array or tensor is
    sent as its ``json_text``, as text; other number-like objects become floats.
    """
    kind = type(value)
    if kind is str:  # the usual kinds first, as the general path below treats them
        text = clean_text(value, max_bytes)
        return CleanExtra(text.text, text=text)
    if kind is float:
        invalid = _non_finite(value)  # type: ignore[arg-type]
        return CleanExtra(value) if invalid is None else CleanExtra(None, invalid)  # type: ignore[arg-type]
    plain = value if kind is bool or kind is int else _unwrap_scalar(value)
    coerced = plain is not value
    if plain is None:
        return CleanExtra(None, "none", coerced=coerced)
    if isinstance(plain, bool):
        return CleanExtra(bool(plain), coerced=coerced)
    if isinstance(plain, int):
        if not _INT64_MIN <= plain <= _INT64_MAX:
            return CleanExtra(None, "int_out_of_range", coerced=coerced)
        return CleanExtra(int(plain), coerced=coerced)
    if isinstance(plain, str | bytes | bytearray | memoryview):
        text = clean_text(plain, max_bytes)
        return CleanExtra(text.text, text=text, coerced=coerced)
    if _structured(plain):
        text = clean_text(json_text(plain), max_bytes)
        return CleanExtra(text.text, text=text, coerced=coerced)
    number = plain if isinstance(plain, float) else None
    if number is None and getattr(plain, "ndim", 0) == 0:  # not an array: a number-like object
        number = _as_float(plain)
        coerced = True
    if number is None:
        return CleanExtra(None, "unsupported_type", coerced=coerced)
    invalid = _non_finite(number)
    if invalid is not None:
        return CleanExtra(None, invalid, coerced=coerced)
    return CleanExtra(float(number), coerced=coerced)


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
