"""Token by token: what the rollout engine and the trainer each thought of a response.

A rollout response may carry per-token columns (``log_rollouts(..., tokens={...})``), each one
value per response token:

| Column      | What                                                        | verl's batch field    |
|-------------|-------------------------------------------------------------|-----------------------|
| ``ids``     | the token id                                                | ``responses``         |
| ``pieces``  | the token's text                                            | decoded per id        |
| ``rollout`` | the rollout engine's log-probability (vLLM, SGLang)         | ``rollout_log_probs`` |
| ``trainer`` | the trainer's recomputation (FSDP, Megatron)                | ``old_log_probs``     |
| ``reference`` | the reference policy's                                    | ``ref_log_prob``      |
| ``weight``  | the importance weight the correction applied                | ``rollout_is_weights``|
| ``masked``  | whether the correction masked (rejected) the token          | the rejection mask    |
| ``model``   | whether the token is the model's (a tool's tokens are not)  | ``response_mask``     |

**Figures of a response** (every response of the step, kept or not), over its model tokens where
both log-probabilities are finite, with ``d = trainer - rollout``:

- ``mean_abs``: the mean of ``|d|``; ``max_abs``: the largest ``|d|``;
- ``kl``: the k3 estimate of KL(rollout || trainer), the mean of ``exp(d) - 1 - d`` (the tokens
  were drawn from the rollout engine's policy, so this is unbiased and never negative);
- ``masked``: the share of its model tokens the correction masked (with a ``masked`` column).

A kept record carries them as ``valgen.mismatch.<figure>`` and its tokens as ``valgen.tokens``
(``encode``). The step's end record carries their distribution over every response as
``valgen.mismatch`` (``MismatchFigures``), merged across sources by the figures' rule
(``trajectories.merge``): ``count`` and ``tokens`` add up, ``<figure>.sum`` adds up,
``<figure>.max`` takes the largest, ``<figure>.buckets`` (a map of log-bucket index to count)
adds key by key. So the merged mean and max are exact in any merge order; the quantiles a
summary derives (``<figure>.p50``, ``.p90``, ``.p99``) are estimates within 1% of the value
(``RELATIVE_ACCURACY``), from buckets whose bounds grow by ``GAMMA``.
"""

from __future__ import annotations

import json
import math
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from isal import isal_zlib  # type: ignore[import-untyped]

from otel_valgen._sanitize import clean_text
from otel_valgen.trajectories import BY_DATA_SOURCE, metric_name

IDS: Final = "ids"
PIECES: Final = "pieces"
ROLLOUT: Final = "rollout"
TRAINER: Final = "trainer"
REFERENCE: Final = "reference"
WEIGHT: Final = "weight"
MASKED: Final = "masked"
MODEL: Final = "model"
FLOAT_COLUMNS: Final = (ROLLOUT, TRAINER, REFERENCE, WEIGHT)
MASK_COLUMNS: Final = (MASKED, MODEL)
COLUMNS: Final = (IDS, PIECES, *FLOAT_COLUMNS, *MASK_COLUMNS)
LENGTH: Final = "length"
"""Not a column: each response's count of tokens in the rows (the rest is padding), for rows that
hold more than its ``response_lengths`` counts (verl's hold a multi-turn tool's tokens too)."""

# valgen.tokens: the encoding's version, the response's token count, where a cut was made.
VERSION: Final = "version"
ENCODING_VERSION: Final = 1
COUNT: Final = "count"
CUT_FROM: Final = "cut_from"  # tokens [cut_from, cut_from + cut_count) were left out
CUT_COUNT: Final = "cut_count"
_LEVEL: Final = 1  # a fast level: on log-probabilities zlib's best packs only a few % smaller
MAX_PIECE_BYTES: Final = 256  # a token's text longer than this is cut (a tokenizer's pieces are short)

# The figures of a response, and of a step.
MEAN_ABS: Final = "mean_abs"
MAX_ABS: Final = "max_abs"
KL: Final = "kl"
MASKED_SHARE: Final = "masked"
FIGURES: Final = (MEAN_ABS, MAX_ABS, KL, MASKED_SHARE)
TOKENS: Final = "tokens"  # model tokens compared (a response's, a step's sum)
STEP_COUNT: Final = "count"  # responses with figures

QUANTILES: Final = ((".p50", 0.5), (".p90", 0.9), (".p99", 0.99))
BUCKETS: Final = ".buckets"

RELATIVE_ACCURACY: Final = 0.01
GAMMA: Final = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_LOG_GAMMA: Final = math.log(GAMMA)
ZERO_BUCKET: Final = "z"  # values below MIN_VALUE (an exact match is the usual zero)
MIN_VALUE: Final = 1e-9


@dataclass
class ResponseTokens:
    """One response's columns as arrays of equal length (a missing column is None)."""

    count: int
    ids: np.ndarray | None = None  # int64
    pieces: list[str] | None = None
    floats: dict[str, np.ndarray] = field(default_factory=dict)  # float64, NaN where a value is missing
    masks: dict[str, np.ndarray] = field(default_factory=dict)  # bool
    repaired: int = 0  # values that were not numbers (sent as NaN) or pieces that were not valid text
    cut_from: int | None = None
    cut_count: int = 0


def _as_array(value: Any) -> np.ndarray:
    """A column's row as a 1-D numpy array (lists, numpy arrays, torch tensors on any device)."""
    detach = getattr(value, "detach", None)
    if callable(detach):  # a torch tensor: to the CPU, in float32 as the trainer holds it
        value = detach().cpu().numpy()
    array = np.asarray(value)
    return array.reshape(-1) if array.ndim != 1 else array


def _floats(value: Any) -> tuple[np.ndarray, int]:
    """A row as float64 (values that are no numbers become NaN), and how many were not numbers."""
    try:
        array = _as_array(value).astype(np.float64)
        return array, 0
    except (TypeError, ValueError):
        items = list(value)
        out = np.full(len(items), np.nan)
        bad = 0
        for index, item in enumerate(items):
            try:
                out[index] = float(item)
            except (TypeError, ValueError):
                bad += 1
        return out, bad


def _bools(value: Any) -> np.ndarray:
    return _as_array(value).astype(bool)


Figures = list[dict[str, float | int] | None]
"""``batch_figures``' answer: each response's figures, None for one without both log-probabilities."""


class ColumnsAhead(dict[str, Any]):
    """Per-token columns whose ``batch_figures`` are being computed ahead of the call that reads them.

    An integration starts the figures over its batch's matrices on a worker thread (numpy releases
    the GIL) while it decodes texts, and hands ``log_rollouts`` these columns: ``figures()``
    waits for that answer instead of computing it again. It must be ``batch_figures`` of the same
    columns, which give their own ``LENGTH``; a call that leaves out any of them (``check_columns``)
    computes its figures itself.
    """

    def __init__(self, columns: Mapping[str, Any], figures: Callable[[], Figures]) -> None:
        super().__init__(columns)
        self.figures = figures


def check_columns(columns: object, size: int) -> tuple[dict[str, Any], list[str]]:
    """The columns a call may send (known names, one row per response), and what was left out, why.

    A column is a sequence of rows (lists, arrays, tensors, None for a response without it) or
    one 2-D array or tensor, one row per response. ``ColumnsAhead`` stay so when none is left out.
    """
    if not isinstance(columns, Mapping):
        return {}, [f"tokens must map column names to rows, not a {type(columns).__name__}"]
    kept: dict[str, Any] = {}
    problems = []
    for name, column in columns.items():
        if column is None:
            continue
        if name not in COLUMNS and name != LENGTH:
            problems.append(f"unknown column {name!r} (known: {', '.join(COLUMNS)})")
            continue
        try:
            rows = len(column)
        except TypeError:
            problems.append(f"column {name!r} is a {type(column).__name__}, not rows")
            continue
        if rows != size:
            problems.append(f"column {name!r} has {rows} rows for {size} responses")
            continue
        kept[name] = column
    if isinstance(columns, ColumnsAhead) and not problems:
        return ColumnsAhead(kept, columns.figures), problems
    return kept, problems


def _pieces(row: Any) -> tuple[list[str], int]:
    """A row of token texts as valid, short texts, and how many needed a repair or a cut."""
    pieces = list(row)
    if set(map(type, pieces)) <= {str}:
        try:
            "".join(pieces).encode()
            if max(map(len, pieces), default=0) <= MAX_PIECE_BYTES // 4:  # surely within the bytes
                return pieces, 0
        except UnicodeEncodeError:
            pass
    texts = [clean_text(piece, MAX_PIECE_BYTES) for piece in pieces]
    repaired = sum(1 for text, piece in zip(texts, pieces, strict=True) if text.text != piece)
    return [text.text for text in texts], repaired


def read_response(columns: Mapping[str, Any], index: int, length: int | None = None) -> ResponseTokens | None:
    """Response ``index``'s tokens from per-response ``columns`` (each a sequence of rows); None without any.

    ``length`` (the response length; the columns' ``LENGTH`` when given) cuts rows that are padded
    to the batch's width. Rows of unequal lengths are cut to the shortest; a value that is not a
    number becomes NaN and a piece that is not valid text is repaired, both counted in ``repaired``.
    """
    length = _own_length(columns, index, length)
    rows: dict[str, Any] = {}
    for name in COLUMNS:
        column = columns.get(name)
        if column is None:
            continue
        row = column[index]
        if row is not None:
            rows[name] = row
    if not rows:
        return None
    out = ResponseTokens(0)
    sizes: list[int] = []
    for name, row in rows.items():
        if name == PIECES:
            out.pieces, repaired = _pieces(row)
            out.repaired += repaired
            sizes.append(len(out.pieces))
        elif name == IDS:
            ids, bad = _floats(row)
            out.repaired += bad + int(np.count_nonzero(~np.isfinite(ids)))
            out.ids = np.nan_to_num(ids, nan=-1, posinf=-1, neginf=-1).astype(np.int64)
            sizes.append(len(out.ids))
        elif name in FLOAT_COLUMNS:
            values, bad = _floats(row)
            out.repaired += bad
            out.floats[name] = values
            sizes.append(len(values))
        else:
            out.masks[name] = _bools(row)
            sizes.append(len(out.masks[name]))
    count = min(sizes)
    if length is not None and 0 <= length < count:
        count = length
    out.count = count
    if out.ids is not None:
        out.ids = out.ids[:count]
    if out.pieces is not None:
        out.pieces = out.pieces[:count]
    out.floats = {name: values[:count] for name, values in out.floats.items()}
    out.masks = {name: values[:count] for name, values in out.masks.items()}
    return out


def _own_length(columns: Mapping[str, Any], index: int, length: int | None) -> int | None:
    """Response ``index``'s count of tokens in the rows: the columns' ``LENGTH`` when given, else ``length``."""
    own = columns.get(LENGTH)
    return _length(own[index], 1 << 62) if own is not None else length


def response_figures(tokens: ResponseTokens) -> dict[str, float | int] | None:
    """The figures of one response (module docstring); None without both log-probabilities."""
    rollout, trainer = tokens.floats.get(ROLLOUT), tokens.floats.get(TRAINER)
    if rollout is None or trainer is None:
        return None
    model, masked = tokens.masks.get(MODEL), tokens.masks.get(MASKED)
    return _figures_2d(
        rollout[None, :],
        trainer[None, :],
        model[None, :] if model is not None else None,
        masked[None, :] if masked is not None else None,
    )[0]


def kl_of(figures: Mapping[str, Any] | None) -> float | None:
    """A response's ``kl`` figure when it has a finite one (what the most mismatched rank), else None."""
    value = figures.get(KL) if figures is not None else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def batch_figures(columns: Mapping[str, Any], lengths: Sequence[Any] | None = None) -> Figures:
    """``response_figures`` of every response of a call, at once when the columns are 2-D arrays or tensors.

    ``columns`` as ``read_response`` takes them; ``lengths`` (one per response, or None; the
    columns' ``LENGTH`` when given) leaves out what lies past each response's length. A response
    without both log-probabilities gets None. ``ColumnsAhead`` with a ``LENGTH`` give theirs.
    """
    if isinstance(columns, ColumnsAhead) and columns.get(LENGTH) is not None:
        return columns.figures()
    if columns.get(LENGTH) is not None:
        lengths = columns[LENGTH]
    rollout, trainer = columns.get(ROLLOUT), columns.get(TRAINER)
    if rollout is None or trainer is None:
        return [None] * _rows_of(columns)
    floats = [_matrix(rollout), _matrix(trainer)]
    if floats[0] is None or floats[1] is None or floats[0].shape != floats[1].shape:
        return [_row_figures(columns, index, lengths) for index in range(_rows_of(columns))]
    shape = floats[0].shape
    masks = [_mask_matrix(columns.get(name), shape) for name in (MODEL, MASKED)]
    if any(mask is _UNFIT for mask in masks):
        return [_row_figures(columns, index, lengths) for index in range(_rows_of(columns))]
    model, masked = (mask if isinstance(mask, np.ndarray) else None for mask in masks)
    ends = _ends(lengths, shape) if lengths is not None else None
    return _figures_2d(floats[0], floats[1], model, masked, ends)


def _ends(lengths: Sequence[Any], shape: tuple[int, ...]) -> np.ndarray:
    """Each row's length within the matrix's width (``_length``), as an array."""
    if isinstance(lengths, np.ndarray) and lengths.dtype.kind in "iu" and lengths.shape == shape[:1]:
        return np.clip(lengths, 0, shape[1]).astype(np.int64)
    return np.array([_length(value, shape[1]) for value in lengths], dtype=np.int64)


_UNFIT: Final = object()  # a mask column that does not fit the float columns' matrix


def _mask_matrix(column: Any, shape: tuple[int, ...]) -> np.ndarray | object | None:
    """A mask column as a matrix of ``shape`` (own-length rows padded with False), or _UNFIT; any nonzero is True."""
    if column is None:
        return None
    matrix = _matrix(column)
    if matrix is not None:
        return matrix if matrix.shape == shape else _UNFIT
    out = np.zeros(shape, dtype=bool)
    try:
        for index, row in enumerate(column):
            if row is None:
                continue
            values = _bools(row)
            if len(values) > shape[1]:
                return _UNFIT
            out[index, : len(values)] = values
    except (TypeError, ValueError, IndexError):
        return _UNFIT
    return out


def _rows_of(columns: Mapping[str, Any]) -> int:
    return max((len(column) for column in columns.values() if column is not None), default=0)


def _length(value: Any, width: int) -> int:
    try:
        length = int(value)
    except (TypeError, ValueError):
        return width
    return min(max(length, 0), width)


def _row_figures(
    columns: Mapping[str, Any], index: int, lengths: Sequence[Any] | None
) -> dict[str, float | int] | None:
    length = _length(lengths[index], 1 << 62) if lengths is not None else None
    read = read_response(columns, index, length)
    return response_figures(read) if read is not None else None


def _matrix(column: Any) -> np.ndarray | None:
    """A column as one 2-D array when it is one (a numpy array or a tensor), else None (rows of their own)."""
    if column is None or not hasattr(column, "shape") or len(column.shape) != 2:
        return None
    try:
        return _as_array_2d(column)
    except (TypeError, ValueError):
        return None


def _as_array_2d(value: Any) -> np.ndarray:
    detach = getattr(value, "detach", None)
    if callable(detach):
        value = detach().cpu().numpy()
    return np.asarray(value)


_BLOCK_ROWS: Final = 64
"""Rows of the float matrices worked on at a time: a block's copies stay small (no page faults per call)."""


def _figures_2d(
    rollout: np.ndarray,
    trainer: np.ndarray,
    model: np.ndarray | None,
    masked: np.ndarray | None,
    ends: np.ndarray | None = None,
) -> list[dict[str, float | int] | None]:
    """The figures of each row of [responses, tokens] arrays (the one implementation of the rule).

    ``ends``: each row's length (nothing past it is compared). Rows are taken in order of length,
    ``_BLOCK_ROWS`` at a time and only as wide as the block's longest, so that the work is about
    the responses' tokens, not the padded width.
    """
    rows, width = rollout.shape
    limits = np.full(rows, width, dtype=np.int64) if ends is None else ends
    order = np.argsort(limits, kind="stable")
    counts = np.zeros(rows, dtype=np.int64)
    mean_abs, max_abs, kl = np.zeros(rows), np.zeros(rows), np.zeros(rows)
    share = np.zeros(rows) if masked is not None else None
    for start in range(0, rows, _BLOCK_ROWS):
        pick = order[start : start + _BLOCK_ROWS]
        span = int(limits[pick[-1]])  # the block's longest (ascending order)
        if span <= 0:
            continue
        figures = _block_figures(
            rollout[pick, :span],
            trainer[pick, :span],
            model[pick, :span] if model is not None else None,
            masked[pick, :span] if masked is not None else None,
            limits[pick],
        )
        counts[pick], mean_abs[pick], max_abs[pick], kl[pick] = figures[:4]
        if share is not None:
            share[pick] = figures[4]
    out: list[dict[str, float | int] | None] = []
    for row, count in enumerate(counts.tolist()):
        if not count:
            out.append(None)
            continue
        figures_of_row: dict[str, float | int] = {
            TOKENS: count,
            MEAN_ABS: float(mean_abs[row]),
            MAX_ABS: float(max_abs[row]),
            KL: float(kl[row]),
        }
        if share is not None:
            figures_of_row[MASKED_SHARE] = float(share[row])
        out.append(figures_of_row)
    return out


def _block_figures(
    rollout: np.ndarray, trainer: np.ndarray, model: np.ndarray | None, masked: np.ndarray | None, ends: np.ndarray
) -> tuple[np.ndarray, ...]:
    """Counts, mean |d|, max |d|, k3 KL (and the masked share) of a block of rows, each cut at its ``ends``."""
    within = np.arange(rollout.shape[1])[None, :] < ends[:, None]
    with np.errstate(all="ignore"):
        # In float64 (the inputs are often float32): d is not finite exactly where either side is not.
        d = np.subtract(trainer, rollout, dtype=np.float64)
        compared = np.isfinite(d)
        compared &= within
        if model is not None:
            compared &= model.astype(bool, copy=False)
        d[~compared] = 0.0  # every figure below is 0 for a token left out
        counts = np.count_nonzero(compared, axis=1)
        denominator = np.maximum(counts, 1)
        k3 = np.expm1(d)
        k3 -= d
        kl = np.maximum(k3.sum(axis=1) / denominator, 0.0)  # e^0 - 1 - 0 = 0
        magnitude = np.abs(d, out=d)  # d is not read again
        mean_abs = magnitude.sum(axis=1) / denominator
        max_abs = magnitude.max(axis=1, initial=0.0)
        if masked is None:
            return counts, mean_abs, max_abs, kl
        own = within & model.astype(bool, copy=False) if model is not None else within
        share = (masked.astype(bool, copy=False) & own).sum(axis=1) / np.maximum(own.sum(axis=1), 1)
    return counts, mean_abs, max_abs, kl, share


# -- the wire encoding (valgen.tokens) ---------------------------------------------------------


_STORED_PLANES: Final = 2
"""A float32's two low bytes, mantissa bits as good as random: zlib's level 1 takes most of the
packing time on them and packs them no smaller, so they travel in stored blocks."""
_ZLIB_HEADER: Final = b"\x78\x01"  # deflate, 32 KiB window, a fast level (zlib.compress(..., 1)'s)


def _deflate(data: bytes) -> bytes:
    """``data`` as a zlib stream, packed by ISA-L (``isal``) at level 1.

    Any zlib decoder reads it; ISA-L packs these columns about as small as zlib's level 1 in about
    half its time (the kept rollouts' packing is on the training thread).
    """
    return isal_zlib.compress(data, _LEVEL)


def _pack_floats(values: np.ndarray) -> bytes:
    """float32, little-endian, byte-shuffled (all first bytes, then all second...), as one zlib stream.

    The low byte planes go in stored blocks, the sign and exponent planes compressed (``_deflate``'s
    ISA-L, level 1), in one stream any zlib decoder reads whole.
    """
    planes = np.ascontiguousarray(values, dtype="<f4").view(np.uint8).reshape(-1, 4).T
    stored, packed = planes[:_STORED_PLANES].tobytes(), planes[_STORED_PLANES:].tobytes()
    first = zlib.compressobj(0, zlib.DEFLATED, -zlib.MAX_WBITS)  # raw deflate: one header and check for both
    rest = isal_zlib.compressobj(_LEVEL, isal_zlib.DEFLATED, -isal_zlib.MAX_WBITS)
    body = first.compress(stored) + first.flush(zlib.Z_FULL_FLUSH) + rest.compress(packed) + rest.flush()
    return _ZLIB_HEADER + body + zlib.adler32(packed, zlib.adler32(stored)).to_bytes(4, "big")


def _unpack_floats(data: bytes, count: int) -> np.ndarray:
    raw = np.frombuffer(zlib.decompress(data), dtype=np.uint8).reshape(4, count).T.copy()
    return raw.view("<f4").reshape(-1).astype(np.float64)


def _pack(tokens: ResponseTokens, keep: slice | None = None) -> dict[str, Any]:
    """The columns (all tokens, or the head and tail ``keep`` leaves) as the attribute's values."""
    pick: Any = slice(None) if keep is None else keep
    out: dict[str, Any] = {}
    if tokens.ids is not None:
        out[IDS] = _deflate(np.ascontiguousarray(tokens.ids[pick], dtype="<i4").tobytes())
    if tokens.pieces is not None:
        pieces = tokens.pieces[pick] if keep is None else [tokens.pieces[i] for i in _indices(pick, tokens.count)]
        out[PIECES] = _deflate(json.dumps(pieces, ensure_ascii=False).encode())
    for name in FLOAT_COLUMNS:
        if name in tokens.floats:
            out[name] = _pack_floats(tokens.floats[name][pick])
    for name in MASK_COLUMNS:
        if name in tokens.masks:
            out[name] = _deflate(np.packbits(tokens.masks[name][pick], bitorder="little").tobytes())
    return out


def _indices(pick: Any, count: int) -> list[int]:
    return list(range(count))[pick] if isinstance(pick, slice) else [int(i) for i in pick]


def encode(tokens: ResponseTokens, max_bytes: int) -> tuple[dict[str, Any], int]:
    """``valgen.tokens`` of a response within ``max_bytes`` of packed columns, and how many tokens were cut.

    The columns are packed whole when they fit; else the middle tokens are left out (the head
    and the tail kept, as texts are cut), and ``cut_from``/``cut_count`` say which.
    """
    packed = _pack(tokens)
    size = sum(len(value) for value in packed.values())
    header: dict[str, Any] = {VERSION: ENCODING_VERSION, COUNT: tokens.count}
    if size <= max_bytes or tokens.count < 2:
        return {**header, **packed}, 0
    keep = max(2, int(tokens.count * max_bytes / size * 0.9))
    while True:
        head = keep // 2
        tail = keep - head
        index = np.r_[0:head, tokens.count - tail : tokens.count]
        packed = _pack(tokens, index)  # type: ignore[arg-type]
        size = sum(len(value) for value in packed.values())
        if size <= max_bytes or keep <= 2:
            break
        keep = max(2, int(keep * 0.8))
    cut = tokens.count - keep
    return {**header, CUT_FROM: head, CUT_COUNT: cut, **packed}, cut


def decode(attribute: Mapping[str, Any]) -> ResponseTokens:
    """A record's ``valgen.tokens`` as arrays (the tokens it carries: all, or the head and tail of a cut one).

    Raises ValueError for an encoding this library does not know.
    """
    if attribute.get(VERSION) != ENCODING_VERSION:
        raise ValueError(f"valgen.tokens version {attribute.get(VERSION)!r} is not {ENCODING_VERSION}")
    total = int(attribute[COUNT])
    cut = int(attribute.get(CUT_COUNT) or 0)
    count = total - cut
    out = ResponseTokens(count, cut_from=attribute.get(CUT_FROM) if cut else None, cut_count=cut)
    if IDS in attribute:
        out.ids = np.frombuffer(zlib.decompress(_bytes(attribute[IDS])), dtype="<i4").astype(np.int64)
    if PIECES in attribute:
        out.pieces = json.loads(zlib.decompress(_bytes(attribute[PIECES])))
    for name in FLOAT_COLUMNS:
        if name in attribute:
            out.floats[name] = _unpack_floats(_bytes(attribute[name]), count)
    for name in MASK_COLUMNS:
        if name in attribute:
            bits = np.frombuffer(zlib.decompress(_bytes(attribute[name])), dtype=np.uint8)
            out.masks[name] = np.unpackbits(bits, count=count, bitorder="little").astype(bool)
    return out


def _bytes(value: Any) -> bytes:
    """A bytes value as the SDK hands it, or as OTLP JSON spells it (base64)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    import base64

    return base64.b64decode(value)


# -- the step's figures (valgen.mismatch) ------------------------------------------------------


def bucket(value: float) -> str:
    """The log bucket of a figure's value: ``ceil(log_GAMMA(value))``, or ``ZERO_BUCKET`` below MIN_VALUE."""
    return _bucket_key(_bucket_index(value))


def _bucket_key(index: int | None) -> str:
    return ZERO_BUCKET if index is None else str(index)


def _bucket_index(value: float) -> int | None:
    if not value >= MIN_VALUE:  # NaN too (never sent: figures are finite)
        return None
    return math.ceil(math.log(value) / _LOG_GAMMA)


def bucket_value(key: str) -> float:
    """The value a bucket stands for: within RELATIVE_ACCURACY of every value in it."""
    if key == ZERO_BUCKET:
        return 0.0
    return 2 * GAMMA ** int(key) / (GAMMA + 1)


_Columns = dict[str, tuple[list[float | None], list[int | None]]]
"""A figure's value in each response (None: missing or not finite), and its bucket's index."""


def _figure_column(rows: Sequence[Mapping[str, float | int]], name: str) -> tuple[list[float | None], list[int | None]]:
    values: list[float | None] = []
    for figures in rows:
        value = figures.get(name)
        values.append(value if value is not None and math.isfinite(value) else None)
    return values, [_bucket_index(value) if value is not None else None for value in values]


@dataclass
class MismatchFigures:
    """A source's running distribution of its responses' figures (module docstring)."""

    count: int = 0
    tokens: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    maxima: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, dict[str, int]] = field(default_factory=dict)
    by_data_source: dict[str, MismatchFigures] | None = None

    def add(self, figures: Mapping[str, float | int], data_source: str | None = None) -> None:
        """Count one response's figures (``response_figures``); ``data_source`` counts them there too."""
        self.add_all([figures], [data_source] if data_source is not None else None)

    def add_all(
        self, responses: Sequence[Mapping[str, float | int] | None], data_sources: Sequence[str] | None = None
    ) -> None:
        """Count each response's figures in order (None: a response without), a figure at a time over them all.

        ``data_sources`` (one per response) counts them there too; each value's bucket is found once.
        """
        rows = [figures for figures in responses if figures is not None]
        columns = {name: _figure_column(rows, name) for name in FIGURES}
        self._count(range(len(rows)), rows, columns)
        if data_sources is None:
            return
        groups: dict[str, list[int]] = {}
        sources = (source for figures, source in zip(responses, data_sources, strict=True) if figures is not None)
        for position, source in enumerate(sources):
            groups.setdefault(source, []).append(position)
        if groups and self.by_data_source is None:
            self.by_data_source = {}
        for source, positions in groups.items():
            self.by_data_source.setdefault(source, MismatchFigures())._count(positions, rows, columns)  # type: ignore[union-attr]

    def _count(self, positions: Sequence[int], rows: Sequence[Mapping[str, float | int]], columns: _Columns) -> None:
        """Count the rows at ``positions``: their tokens, then per figure the sum (in order), the maximum (at least 0).

        And the bucket counts, of their finite values.
        """
        if not positions:
            return
        self.count += len(positions)
        self.tokens += sum(int(rows[position].get(TOKENS, 0)) for position in positions)
        for name, (values, indices) in columns.items():
            picked = [position for position in positions if values[position] is not None]
            if not picked:
                continue
            finite: list[float] = [values[position] for position in picked]  # type: ignore[misc]
            self.sums[name] = sum(finite, self.sums.get(name, 0.0))
            self.maxima[name] = max(self.maxima.get(name, 0.0), *finite)
            counts = self.buckets.setdefault(name, {})
            for index, n in Counter(indices[position] for position in picked).items():
                key = _bucket_key(index)
                counts[key] = counts.get(key, 0) + n

    def absorb(self, other: MismatchFigures) -> None:
        """Add ``other``'s responses (one call's) to these."""
        self.count += other.count
        self.tokens += other.tokens
        for name, value in other.sums.items():
            self.sums[name] = self.sums.get(name, 0.0) + value
        for name, value in other.maxima.items():
            self.maxima[name] = max(self.maxima.get(name, 0.0), value)
        for name, counts in other.buckets.items():
            into = self.buckets.setdefault(name, {})
            for key, n in counts.items():
                into[key] = into.get(key, 0) + n
        for name, figures in (other.by_data_source or {}).items():
            if self.by_data_source is None:
                self.by_data_source = {}
            self.by_data_source.setdefault(name, MismatchFigures()).absorb(figures)

    def attribute(self) -> dict[str, Any] | None:
        """The end record's ``valgen.mismatch``; None before the first response with figures."""
        if not self.count:
            return None
        out: dict[str, Any] = {STEP_COUNT: self.count, TOKENS: self.tokens}
        for name in FIGURES:
            if name in self.sums:
                out[f"{name}.sum"] = self.sums[name]
                out[f"{name}.max"] = self.maxima[name]
                out[name + BUCKETS] = dict(sorted(self.buckets[name].items()))
        if self.by_data_source:
            out[BY_DATA_SOURCE] = {
                name: figures.attribute() for name, figures in sorted(self.by_data_source.items()) if figures.count
            }
        return out


def quantile(buckets: Mapping[str, Any], q: float, largest: float | None = None) -> float | None:
    """The nearest-rank ``q`` quantile of a buckets map (rank ``ceil(q * n)``), at most ``largest``."""
    counts = [(key, int(n)) for key, n in buckets.items() if isinstance(n, int | float) and n > 0]
    total = sum(n for _, n in counts)
    if total == 0:
        return None
    counts.sort(key=lambda item: -math.inf if item[0] == ZERO_BUCKET else int(item[0]))
    rank = max(1, math.ceil(q * total))
    seen = 0
    for key, n in counts:
        seen += n
        if seen >= rank:
            value = bucket_value(key)
            return min(value, largest) if largest is not None else value
    return None  # unreachable: rank <= total


def summary(merged: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A summary's ``valgen.mismatch``: the merged figures with each figure's mean and quantiles, without buckets.

    The buckets stay on the end records (and a summary's ``valgen.source_figures``, for merges of
    partial groups): a summary's attributes become Loki's structured metadata, a few per figure.
    """
    if merged is None:
        return None
    out = dict(merged)
    by_data_source = merged.get(BY_DATA_SOURCE)
    if isinstance(by_data_source, Mapping):
        out[BY_DATA_SOURCE] = {
            name: summary(figures) for name, figures in by_data_source.items() if isinstance(figures, Mapping)
        }
    count = merged.get(STEP_COUNT)
    if not isinstance(count, int | float) or count <= 0:
        return {key: value for key, value in out.items() if not key.endswith(BUCKETS)}
    for name in FIGURES:
        total, buckets = merged.get(f"{name}.sum"), merged.get(name + BUCKETS)
        if isinstance(total, int | float):
            out[f"{name}.mean"] = total / count
        if isinstance(buckets, Mapping):
            largest = merged.get(f"{name}.max")
            for suffix, q in QUANTILES:
                value = quantile(buckets, q, largest if isinstance(largest, int | float) else None)
                if value is not None:
                    out[name + suffix] = value
    return {key: value for key, value in out.items() if not key.endswith(BUCKETS)}


def scalars(figures: Mapping[str, Any] | None, prefix: str = "mismatch") -> dict[str, float]:
    """A summary's figures as tracker scalars: ``mismatch/<figure>_<mean|p50|p90|p99|max>``, per data source too."""
    if not figures:
        return {}
    out: dict[str, float] = {}
    by_data_source = figures.get(BY_DATA_SOURCE)
    for name, inner in by_data_source.items() if isinstance(by_data_source, Mapping) else ():
        if isinstance(inner, Mapping):
            out.update(scalars(inner, f"{prefix}/{BY_DATA_SOURCE}/{metric_name(str(name))}"))
    for name in FIGURES:
        for suffix in (".mean", ".p50", ".p90", ".p99", ".max"):
            value = figures.get(name + suffix)
            if isinstance(value, int | float) and math.isfinite(value):
                out[f"{prefix}/{name}_{suffix[1:]}"] = float(value)
    if isinstance(figures.get(STEP_COUNT), int | float):
        out[f"{prefix}/responses"] = float(figures[STEP_COUNT])
    return out


def caption(figures: Mapping[str, Any] | None) -> str | None:
    """One line for ``show``: responses compared, |d| mean/p90/p99/max, KL, masked share."""
    if not figures or not figures.get(STEP_COUNT):
        return None

    def get(key: str) -> float:
        value = figures.get(key)
        return float(value) if isinstance(value, int | float) else math.nan

    parts = [
        f"{figures[STEP_COUNT]} responses compared ({figures.get(TOKENS, 0)} tokens)",
        f"|logprob diff| mean {get('mean_abs.mean'):.3g}, p90 {get('mean_abs.p90'):.3g}, "
        f"p99 {get('mean_abs.p99'):.3g}; largest token {get('max_abs.max'):.3g}",
        f"KL(k3) p50 {get('kl.p50'):.3g}, p99 {get('kl.p99'):.3g}",
    ]
    if f"{MASKED_SHARE}.mean" in figures:
        parts.append(f"masked {get('masked.mean'):.1%} mean, p99 {get('masked.p99'):.1%}")
    return " · ".join(parts)
