"""A kept generation's conversation in the forms the trackers' tables render.

A generation whose input or output was a list of chat messages carries them as GenAI messages
(``Generation.input_messages`` / ``output_messages``; ``otel_valgen.conversations``). In a step
that has such a generation, its rows get one more column, ``conversation`` (as ``slots`` appears
only in steps that keep extremes); text-only steps keep their columns. The column's value is
``cell(generation)``, a JSON-ready map ``{"input": ..., "output": ...}`` holding each side's
messages, or its text where that side was a text (``None`` for a generation without messages).
Each backend turns the value into what its UI renders, with one function per form:

| form | function | tracker |
| --- | --- | --- |
| JSON | the value itself | MLflow (the step's artifact rows) |
| an HTML document | ``html`` | wandb (a ``wandb.Html`` cell) |
| the HTML subset of plotly tables | ``plotly_html`` | ClearML (``report_table``) |
| Markdown | ``markdown`` | TensorBoard (text plugin) |
| plain text | ``text`` | Trackio (table cell) |
| OpenAI chat messages | ``openai_messages`` | Trackio (trace) |

Every form shows the turns in order, the prompt's then the generated ones: each message's role
(and name), texts, reasoning, tool calls with their arguments, tool results with the id of the
call they answer, media references, and a cut mark on a text cut to fit (``original_length``:
its UTF-8 bytes before the cut; the text keeps its head and tail around the omission marker).
Texts are escaped for the form (HTML, plotly, Markdown code fences), never interpreted. The
turns are read by ``conversation_turns``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from html import escape
from typing import Any, Final

from otel_valgen.conversations import PART_REASONING, PART_TOOL_CALL
from otel_valgen.exporter.conversation_turns import RESULT, SIDES, Piece, by_side, cut_note, label, pretty, turns
from otel_valgen.exporter.steps import ClosedStep
from otel_valgen.reader import Generation

__all__ = [
    "COLUMN",
    "Cell",
    "cell",
    "columns",
    "has_conversations",
    "html",
    "is_cell",
    "markdown",
    "openai_messages",
    "plotly_html",
    "text",
    "values",
]

COLUMN: Final = "conversation"
Cell = dict[str, Any]  # {"input": messages | text, "output": messages | text}


def cell(generation: Generation) -> Cell | None:
    """The conversation column's value of a generation; None when neither side was messages."""
    given, produced = generation.input_messages, generation.output_messages
    if given is None and produced is None:
        return None
    return {
        "input": given if given is not None else generation.input,
        "output": produced if produced is not None else generation.output,
    }


def is_cell(value: object) -> bool:
    """Whether a table value is a conversation (``cell``), also read back from a ledger's JSON."""
    return isinstance(value, dict) and set(value) == set(SIDES)


def has_conversations(step: ClosedStep) -> bool:
    """Whether the step's rows get a ``conversation`` column: a generation has messages.

    An extra column of that name (``valgen.extra.conversation``) wins, as over the other row fields.
    """
    generations = step.generations
    if any(COLUMN in g.extra for g in generations):
        return False
    return any(g.input_messages is not None or g.output_messages is not None for g in generations)


def columns(step: ClosedStep) -> list[str]:
    """``[COLUMN]`` for a step with conversations, else nothing."""
    return [COLUMN] if has_conversations(step) else []


def values(step: ClosedStep, generation: Generation) -> list[Cell | None]:
    """A row's values for ``columns(step)``."""
    return [cell(generation)] if has_conversations(step) else []


# -- the forms ----------------------------------------------------------------------------------------

_STYLE: Final = (
    "body{font:13px/1.45 system-ui,sans-serif;margin:6px;color:#1f2328}"
    ".side{font-size:11px;font-weight:600;text-transform:uppercase;color:#57606a;margin:10px 0 4px}"
    ".turn{border-left:3px solid #d0d7de;padding:2px 8px;margin:6px 0}"
    ".turn[data-role=system]{border-color:#9a6700}.turn[data-role=user]{border-color:#1a7f37}"
    ".turn[data-role=assistant]{border-color:#0969da}.turn[data-role=tool]{border-color:#8250df}"
    ".role{font-weight:600}.id{color:#57606a;font-weight:400}"
    "pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font:inherit}"
    ".reasoning pre{color:#57606a;font-style:italic}"
    ".tool_call pre,.tool_result pre{font-family:ui-monospace,monospace;background:#f6f8fa;padding:2px 4px}"
    ".cut{color:#cf222e;font-size:11px}"
)


def _html_piece(piece: Piece) -> str:
    kind = escape(piece.kind)
    head = ""
    if piece.kind == PART_TOOL_CALL:
        call_id = f' <span class="id">#{escape(piece.call_id)}</span>' if piece.call_id else ""
        head = f"<div>→ <b>{escape(piece.name)}</b>{call_id}</div>"
    elif piece.kind == PART_REASONING:
        head = '<div class="id">thinking</div>'
    cut = f'<div class="cut">{cut_note(piece)}</div>' if piece.cut_from is not None else ""
    return f'<div class="{kind}">{head}<pre>{escape(pretty(piece))}</pre>{cut}</div>'


def html(value: Cell) -> str:
    """The conversation as an HTML document (wandb renders a ``wandb.Html`` table cell as a page)."""
    body = []
    for title, turn in by_side(value, SIDES):
        if title:
            body.append(f'<div class="side">{title}</div>')
        pieces = "".join(_html_piece(piece) for piece in turn.pieces)
        role = f'<div class="role">{escape(label(turn))}</div>'
        body.append(f'<div class="turn" data-role="{escape(turn.role)}">{role}{pieces}</div>')
    head = f'<head><meta charset="utf-8"><style>{_STYLE}</style></head>'
    return f"<!DOCTYPE html><html>{head}<body>{''.join(body)}</body></html>"


def _plain_piece(piece: Piece) -> str:
    note = f" [{cut_note(piece)}]" if piece.cut_from is not None else ""
    if piece.kind == PART_TOOL_CALL:
        call_id = f" #{piece.call_id}" if piece.call_id else ""
        return f"→ {piece.name}({piece.text}){call_id}{note}"
    if piece.kind == PART_REASONING:
        return f"(thinking) {piece.text}{note}"
    return piece.text + note


def text(value: Cell) -> str:
    """The conversation as plain text: a paragraph per message, ``[role]`` first (Trackio's table cells)."""
    lines = []
    for title, turn in by_side(value, SIDES):
        if title:
            lines.append(f"── {title} ──")
        lines.append(f"[{label(turn)}] " + "\n".join(_plain_piece(piece) for piece in turn.pieces))
    return "\n".join(lines)


def plotly_html(value: Cell) -> str:
    """The conversation in the HTML subset plotly renders in table cells (ClearML's tables).

    Plotly knows ``<b>``, ``<i>``, ``<br>`` and the entities ``&lt;``, ``&gt;``, ``&amp;``; texts are
    escaped with those and their line breaks become ``<br>``.
    """

    def safe(raw: str) -> str:
        return escape(raw, quote=False).replace("\n", "<br>")

    lines = []
    for title, turn in by_side(value, SIDES):
        if title:
            lines.append(f"<i>── {title} ──</i>")
        pieces = "<br>".join(safe(_plain_piece(piece)) for piece in turn.pieces)
        lines.append(f"<b>[{safe(label(turn))}]</b> {pieces}")
    return "<br>".join(lines)


def _fence(body: str, info: str = "text") -> str:
    """A fenced code block that ``body`` cannot close (longer than any run of backticks in it)."""
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{body}\n{fence}\n\n"


def _md_inline(raw: str) -> str:
    """A label as Markdown text: HTML characters as entities, Markdown's own characters escaped."""
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|])", r"\\\1", escape(raw, quote=False))


def _md_piece(piece: Piece) -> str:
    head = ""
    if piece.kind == PART_TOOL_CALL:
        call_id = f" \\#{_md_inline(piece.call_id)}" if piece.call_id else ""
        head = f"→ **{_md_inline(piece.name)}**{call_id}\n\n"
    elif piece.kind == PART_REASONING:
        head = "*thinking*\n\n"
    cut = f"*{cut_note(piece)}*\n\n" if piece.cut_from is not None else ""
    return head + _fence(pretty(piece), "json" if piece.kind == PART_TOOL_CALL else "text") + cut


def markdown(value: Cell, sides: Iterable[str] = SIDES) -> str:
    """The conversation (or some sides of it) as Markdown: a bold role line per message, texts fenced.

    Fenced, a text shows as it was written: TensorBoard's Markdown would otherwise format it, and
    drop the tags its sanitizer does not allow (``<tool_call>`` in a model's text, say).
    """
    out = []
    for title, turn in by_side(value, sides):
        if title:
            out.append(f"*{title}*\n\n")
        out.append(f"**[{_md_inline(label(turn))}]**\n\n" + "".join(_md_piece(piece) for piece in turn.pieces))
    return "".join(out)


def openai_messages(value: Cell) -> list[dict[str, Any]]:
    """The conversation as OpenAI chat messages (``role``, ``content``, ``tool_calls``, ``tool_call_id``).

    Trackio's trace view shows these turn by turn and pairs each tool call with its result. A side
    that was a text is one message (the user's input, the assistant's output); reasoning and cut
    marks become lines of the message's content.
    """
    out: list[dict[str, Any]] = []
    for turn in turns(value):
        role = ("user" if turn.side == "input" else "assistant") if turn.from_text else turn.role
        message: dict[str, Any] = {"role": role}
        if turn.name:
            message["name"] = turn.name
        calls = [p for p in turn.pieces if p.kind == PART_TOOL_CALL]
        results = [p for p in turn.pieces if p.kind == RESULT]
        if results and results[0].call_id:
            message["tool_call_id"] = results[0].call_id
        message["content"] = "\n".join(
            (piece.text + (f"\n[{cut_note(piece)}]" if piece.cut_from is not None else ""))
            if piece.kind != PART_REASONING
            else _plain_piece(piece)
            for piece in turn.pieces
            if piece.kind != PART_TOOL_CALL
        )
        if calls:
            message["tool_calls"] = [
                {"id": p.call_id, "type": "function", "function": {"name": p.name, "arguments": p.text}} for p in calls
            ]
        out.append(message)
    return out
