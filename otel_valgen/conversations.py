"""Conversations: chat messages as OpenTelemetry GenAI message values, their readable text and their id.

A generation's input may be the prompt's chat messages and its output the generated turns, in
the OpenAI / Hugging Face chat format that agent loops keep (``{"role", "content",
"reasoning_content"?, "tool_calls"?, "tool_call_id"?, "name"?}``). A kept record carries them
under ``gen_ai.input.messages`` / ``gen_ai.output.messages`` as the GenAI conventions spell them:
each message ``{"role", "parts", "name"?}``, each part one of

| part                   | keys                                        | from                                      |
|------------------------|---------------------------------------------|-------------------------------------------|
| ``text``               | ``content``                                 | ``content`` (a text, or its text items)   |
| ``reasoning``          | ``content``                                 | ``reasoning_content``, thinking items      |
| ``tool_call``          | ``id``, ``name``, ``arguments`` (a map)     | each of ``tool_calls``                    |
| ``tool_call_response`` | ``id``, ``response``                        | a ``tool`` message's content              |
| ``uri``                | ``modality``, ``uri`` or ``omitted_bytes``  | image / audio / video / file items        |

Media travel as a typed reference, never as their bytes: a ``data:`` URI or inline data becomes
``{"type": "uri", "modality", "mime_type"?, "omitted_bytes"}``.

Bad input gets a treatment and a counted reason (``Converted.repairs``), never an exception:

| input                                  | treatment                                     | reason                    |
|----------------------------------------|-----------------------------------------------|---------------------------|
| a message that is not a map            | role ``unknown``, its text                    | ``message_not_a_map``     |
| a message without a role               | role ``unknown``                              | ``message_without_role``  |
| tool-call arguments that are not JSON  | sent as their text                            | ``tool_arguments_not_json`` |
| a tool result that is a map or a list  | its JSON text                                 | ``tool_response_not_text`` |
| a content item of an unknown type      | ``{"type": <its type>, "content": JSON text}``  | ``unknown_part``          |
| bytes (any text)                       | decoded as UTF-8, bad bytes as U+FFFD         | (``replaced_chars``)      |

**The id of a message prompt** is, like a text prompt's, the 16 hex digits of the XXH64 of a
text: here ``canonical_text`` of its GenAI messages, their compact JSON with sorted keys
(separators ``,`` and ``:``, non-ASCII characters as they are). The same messages give the same id
at every step and in every process, whichever chat format spelled them.

**Cuts** (``fit``): every text of a conversation (text, reasoning, tool arguments, tool results)
is cut on its own by the head-and-tail rule (``_sanitize.cut_middle``) to at most the per-part
limit; and a record's texts together get a budget: when they exceed it, only the longest are cut,
to one common length, so the short turns stay whole. A cut part says so: ``original_length``
(UTF-8 bytes) beside the cut text, whose marker gives the characters left out.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from otel_valgen._sanitize import _unwrap_scalar, clean_text, cut_middle

ROLE_UNKNOWN: Final = "unknown"
PART_TEXT: Final = "text"
PART_REASONING: Final = "reasoning"
PART_TOOL_CALL: Final = "tool_call"
PART_TOOL_RESPONSE: Final = "tool_call_response"
PART_URI: Final = "uri"
ORIGINAL_LENGTH: Final = "original_length"  # on a cut part: its text's UTF-8 bytes before the cut

# The key of each part's text that a cut may shorten.
_TEXT_KEYS: Final = {
    PART_TEXT: "content",
    PART_REASONING: "content",
    PART_TOOL_CALL: "arguments",
    PART_TOOL_RESPONSE: "response",
}
_MEDIA: Final = {
    "image": "image",
    "image_url": "image",
    "input_image": "image",
    "audio": "audio",
    "input_audio": "audio",
    "audio_url": "audio",
    "video": "video",
    "video_url": "video",
    "file": "file",
    "input_file": "file",
}
_REASONING_ITEMS: Final = frozenset({"reasoning", "thinking"})
_TEXT_ITEMS: Final = frozenset({"text", "input_text", "output_text"})
_JSON_DEPTH: Final = 32


@dataclass
class Converted:
    """Messages in the GenAI form, and what had to be repaired to get there."""

    messages: list[dict[str, Any]]
    repairs: Counter[str] = field(default_factory=Counter)  # reason -> count
    replaced_chars: int = 0


def is_conversation(value: object) -> bool:
    """Whether ``value`` is a list of chat messages.

    That is a non-empty list, tuple or 1-d array of maps, or one holding a map with a ``role``
    beside other items (those are repaired: ``message_not_a_map``).
    """
    if isinstance(value, str | bytes | bytearray | Mapping):
        return False
    if not isinstance(value, list | tuple):
        tolist = getattr(value, "tolist", None)  # a numpy object array (verl's raw_prompt column)
        if not callable(tolist) or getattr(value, "ndim", 0) != 1:
            return False
        value = tolist()
    messages: Sequence[object] = value if isinstance(value, list | tuple) else ()
    maps = [isinstance(message, Mapping) for message in messages]
    if not maps or not any(maps):
        return False
    return all(maps) or any(isinstance(m, Mapping) and "role" in m for m in messages)


def _as_list(value: object) -> list[Any]:
    if isinstance(value, list | tuple):
        return list(value)
    tolist = getattr(value, "tolist", None)
    return list(tolist()) if callable(tolist) else [value]


class _Converter:
    """Converts one conversation, tallying repairs."""

    def __init__(self) -> None:
        self.repairs: Counter[str] = Counter()
        self.replaced = 0

    def text(self, value: object) -> str:
        cleaned = clean_text(value, 1 << 62)  # no cut here: ``fit`` cuts with the record's budget
        self.replaced += cleaned.replaced_chars
        return cleaned.text

    def json_value(self, value: object, depth: int = 0) -> Any:  # noqa: PLR0911 (one return per kind)
        """A JSON-like value an OTLP AnyValue can hold (maps with text keys, lists, scalars, None)."""
        value = _unwrap_scalar(value)
        if value is None or isinstance(value, bool | int | str):
            return value if not isinstance(value, str) else self.text(value)
        if isinstance(value, float):
            return value if math.isfinite(value) else str(value)
        if isinstance(value, bytes | bytearray):
            return self.text(value)
        if depth >= _JSON_DEPTH:
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(key): self.json_value(inner, depth + 1) for key, inner in value.items()}
        if isinstance(value, list | tuple) or (callable(getattr(value, "tolist", None)) and hasattr(value, "ndim")):
            return [self.json_value(inner, depth + 1) for inner in _as_list(value)]
        return self.text(value)

    def json_text(self, value: object) -> str:
        return json.dumps(self.json_value(value), ensure_ascii=False, sort_keys=True)

    def message(self, raw: object) -> dict[str, Any]:
        if not isinstance(raw, Mapping):
            self.repairs["message_not_a_map"] += 1
            return {"role": ROLE_UNKNOWN, "parts": [{"type": PART_TEXT, "content": self.text(raw)}]}
        role = raw.get("role")
        if not role:
            self.repairs["message_without_role"] += 1
        role_text = self.text(role) if role else ROLE_UNKNOWN
        parts: list[dict[str, Any]] = []
        reasoning = raw.get("reasoning_content")
        if reasoning:
            parts.append({"type": PART_REASONING, "content": self.text(reasoning)})
        if role_text == "tool":
            parts.append(self.tool_response(raw.get("tool_call_id"), raw.get("content")))
        else:
            parts.extend(self.content(raw.get("content")))
        for call in _as_list(raw.get("tool_calls") or []):
            parts.append(self.tool_call(call))
        message: dict[str, Any] = {"role": role_text, "parts": parts}
        name = raw.get("name")
        if name:
            message["name"] = self.text(name)
        return message

    def content(self, content: object) -> Iterable[dict[str, Any]]:
        if content is None or content == "":
            return []
        if isinstance(content, str | bytes | bytearray) or not isinstance(content, list | tuple | Sequence):
            if isinstance(content, Mapping):
                return [self.item(content)]
            return [{"type": PART_TEXT, "content": self.text(content)}]
        return [self.item(item) for item in content]

    def item(self, item: object) -> dict[str, Any]:
        """One content item of a message (OpenAI / Hugging Face content lists)."""
        if not isinstance(item, Mapping):
            return {"type": PART_TEXT, "content": self.text(item)}
        kind = str(item.get("type") or PART_TEXT)
        if kind in _TEXT_ITEMS:
            return {"type": PART_TEXT, "content": self.text(item.get("text", item.get("content", "")))}
        if kind in _REASONING_ITEMS:
            return {"type": PART_REASONING, "content": self.text(item.get(kind, item.get("content", "")))}
        if kind in _MEDIA:
            return self.media(kind, item)
        self.repairs["unknown_part"] += 1
        return {"type": self.text(kind), "content": self.json_text({k: v for k, v in item.items() if k != "type"})}

    def media(self, kind: str, item: Mapping[str, Any]) -> dict[str, Any]:
        part: dict[str, Any] = {"type": PART_URI, "modality": _MEDIA[kind]}
        reference = item.get(kind)
        if isinstance(reference, Mapping):
            reference = reference.get("url", reference.get("data"))
        if reference is None:
            reference = item.get("url", item.get("path"))
        if isinstance(reference, str) and not reference.startswith("data:"):
            part["uri"] = self.text(reference)
            return part
        if isinstance(reference, str):  # data:<mime>;base64,<bytes>: the type only
            header = reference[5:].split(",", 1)[0]
            mime = header.split(";", 1)[0]
            if mime:
                part["mime_type"] = self.text(mime)
            part["omitted_bytes"] = len(reference.encode("utf-8", "replace"))
        elif isinstance(reference, bytes | bytearray):
            part["omitted_bytes"] = len(reference)
        return part

    def tool_call(self, call: object) -> dict[str, Any]:
        if not isinstance(call, Mapping):
            self.repairs["unknown_part"] += 1
            return {"type": PART_TOOL_CALL, "id": "", "name": "", "arguments": self.text(call)}
        function = call.get("function")
        source = function if isinstance(function, Mapping) else call
        arguments = source.get("arguments", source.get("args"))
        if isinstance(arguments, str | bytes | bytearray):
            text = self.text(arguments)
            try:
                parsed = json.loads(text) if text.strip() else {}
            except ValueError:
                self.repairs["tool_arguments_not_json"] += 1
                parsed = text
            arguments = parsed
        return {
            "type": PART_TOOL_CALL,
            "id": self.text(call.get("id") or ""),
            "name": self.text(source.get("name") or ""),
            "arguments": self.json_value(arguments),
        }

    def tool_response(self, call_id: object, content: object) -> dict[str, Any]:
        if isinstance(content, list | tuple) and all(
            isinstance(item, Mapping) and item.get("type", PART_TEXT) in _TEXT_ITEMS for item in content
        ):
            response = "".join(self.text(item.get("text", item.get("content", ""))) for item in content)
        elif isinstance(content, Mapping | list | tuple):
            self.repairs["tool_response_not_text"] += 1
            response = self.json_text(content)
        else:
            response = self.text(content)
        return {"type": PART_TOOL_RESPONSE, "id": self.text(call_id or ""), "response": response}


def to_messages(value: object) -> Converted:
    """The GenAI messages of a conversation (``is_conversation``), uncut, with its repairs."""
    converter = _Converter()
    messages = [converter.message(raw) for raw in _as_list(value)]
    return Converted(messages, converter.repairs, converter.replaced)


def canonical_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text a message prompt's id hashes: compact JSON of its GenAI messages, keys sorted."""
    return json.dumps(messages, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def prompt_text(value: object) -> str:
    """``canonical_text`` of a conversation's GenAI messages (the input of a message prompt's id)."""
    return canonical_text(to_messages(value).messages)


# -- cuts ----------------------------------------------------------------------------------------


def _texts(messages: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str, str]]:
    """(part, key, text) of every cuttable text; a non-text argument map counts as its JSON text."""
    found = []
    for message in messages:
        for part in message["parts"]:
            key = _TEXT_KEYS.get(part.get("type", ""))
            if key is None or key not in part:
                continue
            value = part[key]
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
            found.append((part, key, text))
    return found


def _common_cap(sizes: list[int], budget: int) -> int:
    """The largest length c with sum(min(size, c)) <= budget (every size is kept when they fit)."""
    if sum(sizes) <= budget:
        return max(sizes, default=0)
    remaining, count = budget, len(sizes)
    for size in sorted(sizes):
        if size * count > remaining:
            return remaining // count
        remaining -= size
        count -= 1
    return remaining


def fit(conversations: Sequence[list[dict[str, Any]]], part_limit: int, budget: int) -> int:
    """Cut the texts of a record's conversations in place to ``part_limit`` each and ``budget`` together.

    Returns how many texts were cut. A cut argument map is sent as its cut JSON text.
    """
    found = [entry for messages in conversations for entry in _texts(messages)]
    if not found:
        return 0
    encoded = [text.encode("utf-8") for _, _, text in found]
    cap = min(part_limit, _common_cap([len(raw) for raw in encoded], budget))
    cut = 0
    for (part, key, text), raw in zip(found, encoded, strict=True):
        if len(raw) > cap:
            part[key] = cut_middle(text, raw, cap)
            part[ORIGINAL_LENGTH] = len(raw)
            cut += 1
    return cut


# -- the readable text -----------------------------------------------------------------------------


def render(messages: Sequence[Mapping[str, Any]]) -> str:
    """A conversation as a text a person reads: one paragraph per message, ``[role]`` first.

    Tool calls read ``→ name(arguments) #id``, a tool result's message ``[tool #id]``, reasoning
    ``(thinking) ...``, media ``<image: uri>``.
    """
    lines = []
    for message in messages:
        label = str(message.get("role", ROLE_UNKNOWN))
        if message.get("name"):
            label += f" {message['name']}"
        parts = message.get("parts", ())
        for part in parts:
            if part.get("type") == PART_TOOL_RESPONSE and part.get("id"):
                label += f" #{part['id']}"
        lines.append(f"[{label}] " + "\n".join(_render_part(part) for part in parts))
    return "\n".join(lines)


def _render_part(part: Mapping[str, Any]) -> str:
    kind = part.get("type")
    if kind == PART_TOOL_CALL:
        arguments = part.get("arguments")
        shown = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        call_id = f" #{part['id']}" if part.get("id") else ""
        return f"→ {part.get('name', '')}({shown}){call_id}"
    if kind == PART_TOOL_RESPONSE:
        response = part.get("response", "")
        return response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
    if kind == PART_REASONING:
        return f"(thinking) {part.get('content', '')}"
    if kind == PART_URI:
        return f"<{part.get('modality', 'media')}: {part.get('uri', part.get('mime_type', 'inline data'))}>"
    content = part.get("content", "")
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
