"""The turns of a conversation value, as every form of ``conversation_cells`` shows them.

A conversation value is ``{"input": ..., "output": ...}``: each side's GenAI messages
(``otel_valgen.conversations``), or its text where that side was a text. ``turns`` reads it as
``Turn`` s (a message: side, role, name, pieces) of ``Piece`` s (a part: kind, text, the tool
call's name and id, the size a cut text had), tolerating values read back from JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from otel_valgen.conversations import (
    ORIGINAL_LENGTH,
    PART_TEXT,
    PART_TOOL_CALL,
    PART_TOOL_RESPONSE,
    PART_URI,
    ROLE_UNKNOWN,
)

__all__ = ["MEDIA", "RESULT", "SIDES", "Piece", "Turn", "by_side", "cut_note", "label", "pretty", "turns"]

SIDES: Final = ("input", "output")
SIDE_TITLES: Final = {"input": "prompt", "output": "generated"}
RESULT: Final = "tool_result"  # a tool call's result (a ``tool_call_response`` part)
MEDIA: Final = "media"  # an image, audio, video or file reference (a ``uri`` part)
Cell = dict[str, Any]


@dataclass(frozen=True)
class Piece:
    """One part of a message, as shown: its kind, its text and what labels it."""

    kind: str  # text, reasoning, tool_call, tool_result, media, or an unknown part's own type
    text: str
    name: str = ""  # a tool call's function
    call_id: str = ""  # the id of a tool call, or of the call a tool result answers
    cut_from: int | None = None  # original_length of a text cut to fit


@dataclass(frozen=True)
class Turn:
    """One message: the side it is on (input, output), its role, name and pieces."""

    side: str
    role: str
    name: str
    pieces: tuple[Piece, ...]
    from_text: bool = False  # the side was a text, not messages: its role is the side's name


def _json_text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def pretty(piece: Piece) -> str:
    """A tool call's arguments indented (a cut or non-JSON text as it is); any other text as it is."""
    if piece.kind != PART_TOOL_CALL:
        return piece.text
    try:
        return json.dumps(json.loads(piece.text), ensure_ascii=False, indent=2)
    except ValueError:
        return piece.text


def _piece(part: Mapping[str, Any]) -> Piece:
    kind = str(part.get("type") or PART_TEXT)
    length = part.get(ORIGINAL_LENGTH)
    cut = length if isinstance(length, int) and not isinstance(length, bool) else None
    call_id = str(part.get("id") or "")
    if kind == PART_TOOL_CALL:
        return Piece(kind, _json_text(part.get("arguments", {})), str(part.get("name") or ""), call_id, cut)
    if kind == PART_TOOL_RESPONSE:
        return Piece(RESULT, _json_text(part.get("response", "")), call_id=call_id, cut_from=cut)
    if kind == PART_URI:
        where = part.get("uri") or ", ".join(
            str(v) for v in (part.get("mime_type"), part.get("omitted_bytes")) if v is not None
        )
        return Piece(MEDIA, f"<{part.get('modality', 'media')}: {where or 'inline data'}>")
    return Piece(kind, _json_text(part.get("content", "")), cut_from=cut)


def turns(value: Cell) -> list[Turn]:
    """The messages of both sides in order; a side that was a text is one turn whose role is the side."""
    out = []
    for side in SIDES:
        content = value.get(side)
        if isinstance(content, str):
            out.append(Turn(side, side, "", (Piece(PART_TEXT, content),), from_text=True))
            continue
        for message in content if isinstance(content, list) else []:
            if isinstance(message, Mapping):
                parts = [_piece(p) for p in message.get("parts") or () if isinstance(p, Mapping)]
                role, name = str(message.get("role") or ROLE_UNKNOWN), str(message.get("name") or "")
                out.append(Turn(side, role, name, tuple(parts)))
    return out


def label(turn: Turn) -> str:
    """``role name #id``: the role, its name, and the calls a tool message answers."""
    ids = [f"#{p.call_id}" for p in turn.pieces if p.kind == RESULT and p.call_id]
    return " ".join([turn.role, *([turn.name] if turn.name else []), *ids])


def cut_note(piece: Piece) -> str:
    """What a cut text's mark says: its size before the cut ("" for a whole text)."""
    return f"cut to fit: {piece.cut_from} bytes before the cut" if piece.cut_from is not None else ""


def by_side(value: Cell, sides: Iterable[str]) -> list[tuple[str | None, Turn]]:
    """The turns of ``sides``, each with its side's title when it is the first turn of that side."""
    wanted, shown, out = tuple(sides), None, []
    for turn in turns(value):
        if turn.side in wanted:
            title = SIDE_TITLES[turn.side] if turn.side != shown and len(wanted) > 1 else None
            shown = turn.side
            out.append((title, turn))
    return out
