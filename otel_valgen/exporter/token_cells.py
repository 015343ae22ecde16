"""A kept rollout response's per-token data in the forms the trackers' tables render.

In a rollout step where a kept response carries per-token figures (``valgen.mismatch.<figure>``)
or tokens (``valgen.tokens``; ``otel_valgen.tokens``), every row gets the response's figures as
numbers, ``MISMATCH_COLUMNS``, and a ``tokens`` column (steps without them keep their columns).
The column's value is ``cell(generation)``, ``{"valgen.tokens": <the record's packed tokens>}``,
which each backend renders as its UI shows it:

| form | function | tracker |
| --- | --- | --- |
| an HTML page | ``html`` | wandb (``wandb.Html``) |
| a line of text | ``text`` | MLflow, ClearML, TensorBoard, Trackio |

Why: wandb renders an HTML cell as a page, so there every token is coloured by its
log-probability difference, masked ones struck through, a tool's dimmed, each token's values on
hover. The others show a cell as text (or Markdown): the line gives the count, the tokens the two
disagree on most with their differences, and the masked count; ``otel-valgen show --tokens`` has
the whole view.

A response longer than ``MAX_HTML_TOKENS`` shows its head and tail in the page, with the count
left out between them (a person reads the page; the record keeps every token).
"""

from __future__ import annotations

import math
from html import escape
from typing import Any, Final

import numpy as np

from otel_valgen import contract, tokens
from otel_valgen.exporter.steps import ClosedStep
from otel_valgen.reader import Generation

__all__ = ["COLUMN", "MISMATCH_COLUMNS", "cell", "columns", "has_tokens", "html", "is_cell", "text", "values"]

COLUMN: Final = "tokens"
MISMATCH_COLUMNS: Final = tuple(f"mismatch_{name}" for name in tokens.FIGURES)
MAX_HTML_TOKENS: Final = 16_384
WORST_SHOWN: Final = 5
# |trainer - rollout| at or above each bound takes its colour (as ``show --tokens``).
_COLOURS: Final = ((0.01, "#1a7f37"), (0.1, "#9a6700"), (0.5, "#bc4c00"), (1.0, "#cf222e"))


def _figures_of(generation: Generation) -> list[Any]:
    return [generation.attributes.get(contract.MISMATCH_PREFIX + name) for name in tokens.FIGURES]


def has_tokens(step: ClosedStep) -> bool:
    """Whether a rollout step's rows get the token columns: a kept response has figures or tokens."""
    return any(
        contract.TOKENS in g.attributes or any(value is not None for value in _figures_of(g)) for g in step.generations
    )


def columns(step: ClosedStep) -> list[str]:
    """``MISMATCH_COLUMNS`` and ``tokens`` for a step with per-token data, else nothing."""
    return [*MISMATCH_COLUMNS, COLUMN] if has_tokens(step) else []


def cell(generation: Generation) -> dict[str, Any] | None:
    """The ``tokens`` column's value of a response; None without packed tokens."""
    packed = generation.attributes.get(contract.TOKENS)
    return {contract.TOKENS: packed} if isinstance(packed, dict) else None


def values(step: ClosedStep, generation: Generation) -> list[Any]:
    """A row's values for ``columns(step)``."""
    return [*_figures_of(generation), cell(generation)] if has_tokens(step) else []


def is_cell(value: object) -> bool:
    """Whether a table value is a ``tokens`` cell."""
    return isinstance(value, dict) and set(value) == {contract.TOKENS}


def _read(value: dict[str, Any]) -> tokens.ResponseTokens | None:
    try:
        return tokens.decode(value[contract.TOKENS])
    except (ValueError, KeyError, TypeError):
        return None


def _diffs(read: tokens.ResponseTokens) -> np.ndarray | None:
    rollout, trainer = read.floats.get(tokens.ROLLOUT), read.floats.get(tokens.TRAINER)
    return trainer - rollout if rollout is not None and trainer is not None else None


def _position(read: tokens.ResponseTokens, index: int) -> int:
    """A carried token's index in the whole response (past a cut, shifted by the tokens left out)."""
    return index + read.cut_count if read.cut_from is not None and index >= read.cut_from else index


def _piece(read: tokens.ResponseTokens, index: int) -> str:
    if read.pieces is not None:
        return read.pieces[index]
    return f"<{int(read.ids[index])}>" if read.ids is not None else "·"


def text(value: dict[str, Any]) -> str:
    """One line: the tokens, the ones the trainer and the engine disagree on most, the masked count."""
    read = _read(value)
    if read is None:
        return "tokens in an encoding this exporter does not read"
    parts = [f"{read.count + read.cut_count} tokens"]
    diffs = _diffs(read)
    if diffs is not None:
        magnitude = np.where(np.isfinite(diffs), np.abs(diffs), -1.0)
        worst = [int(i) for i in np.argsort(-magnitude, kind="stable")[:WORST_SHOWN] if magnitude[i] >= 0]
        shown = ", ".join(f"{_piece(read, i)!r} #{_position(read, i)} {diffs[i]:+.3g}" for i in worst)
        parts.append(f"largest trainer - rollout: {shown}")
    if tokens.MASKED in read.masks:
        parts.append(f"masked {int(read.masks[tokens.MASKED].sum())}")
    if read.cut_count:
        parts.append(f"{read.cut_count} left out of the record")
    return " · ".join(parts)


_STYLE: Final = (
    "body{font:13px/1.6 ui-monospace,monospace;margin:6px;color:#1f2328;white-space:pre-wrap;word-break:break-word}"
    ".legend{font:11px system-ui,sans-serif;color:#57606a;margin-bottom:6px;white-space:normal}"
    ".m{text-decoration:line-through}.t{opacity:.45;font-style:italic}.gap{background:#eaeef2;color:#57606a}"
)


def _colour(diff: float) -> str:
    colour = ""
    for bound, name in _COLOURS:
        if math.isfinite(diff) and abs(diff) >= bound:
            colour = name
    return colour


def html(value: dict[str, Any]) -> str:
    """The response as an HTML page, each token coloured by its difference, its values on hover."""
    read = _read(value)
    if read is None:
        return f"<!doctype html><html><body>{escape(text(value))}</body></html>"
    diffs = _diffs(read)
    legend = " ".join(f'<span style="color:{c}">|diff| ≥ {b:g}</span>' for b, c in _COLOURS)
    out = [f'<div class="legend">{escape(text(value))}<br>{legend} · <span class="m">masked</span> · ']
    out.append('<span class="t">not the model\'s</span></div>')
    hidden_from = hidden_count = 0
    if read.count > MAX_HTML_TOKENS:
        hidden_from, hidden_count = MAX_HTML_TOKENS // 2, read.count - MAX_HTML_TOKENS
    for index in range(read.count):
        if hidden_count and hidden_from <= index < hidden_from + hidden_count:
            if index == hidden_from:
                out.append(f'<span class="gap"> […{hidden_count} tokens not shown here…] </span>')
            continue
        if read.cut_count and index == read.cut_from:
            out.append(f'<span class="gap"> […{read.cut_count} tokens left out of the record…] </span>')
        classes = []
        if tokens.MASKED in read.masks and read.masks[tokens.MASKED][index]:
            classes.append("m")
        if tokens.MODEL in read.masks and not read.masks[tokens.MODEL][index]:
            classes.append("t")
        title = [f"#{_position(read, index)}"]
        if read.ids is not None:
            title.append(f"id {int(read.ids[index])}")
        for name in tokens.FLOAT_COLUMNS:
            if name in read.floats and math.isfinite(read.floats[name][index]):
                title.append(f"{name} {read.floats[name][index]:.4g}")
        style = ""
        if diffs is not None:
            title.append(f"diff {diffs[index]:+.4g}")
            colour = _colour(float(diffs[index]))
            style = f' style="color:{colour}"' if colour else ""
        attributes = f' class="{" ".join(classes)}"' if classes else ""
        out.append(f'<span{attributes}{style} title="{escape(" · ".join(title))}">{escape(_piece(read, index))}</span>')
    return f"<!doctype html><html><head><style>{_STYLE}</style></head><body>{''.join(out)}</body></html>"
