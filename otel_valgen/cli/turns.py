"""Two conversations compared turn by turn: where they first part, which tool calls one adds or drops.

A *turn* is an assistant message and what follows it up to the next one (its tool results): turn
1 is the first assistant message. Two generated conversations (``gen_ai.output.messages``) first
differ at the first message whose role or parts differ, reported as the turn that holds it (0 when
they part before the first assistant message, None when they are equal). Tool calls compare by
name and arguments, counted with multiplicity: ``added`` are B's calls beyond A's, ``dropped``
A's beyond B's, each ``name(arguments)`` in B's (or A's) order.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["TurnDiff", "compare_turns", "tool_call_text"]


@dataclass(frozen=True)
class TurnDiff:
    """How two generated conversations differ."""

    turns_a: int
    turns_b: int
    first_difference: int | None  # the turn where they first differ (0: before the first turn), None: equal
    added: tuple[str, ...]  # B's tool calls that A does not make
    dropped: tuple[str, ...]  # A's tool calls that B does not make

    def summary(self) -> str:
        """One cell: ``turns 3→4 · differs at turn 2 · +search({...}) · -calc({...})``, or ``same turns``."""
        if self.first_difference is None:
            return f"same {self.turns_a} turns"
        parts = [f"turns {self.turns_a}→{self.turns_b}", f"differs at turn {self.first_difference}"]
        parts += [f"+{call}" for call in self.added] + [f"-{call}" for call in self.dropped]
        return " · ".join(parts)

    def as_json(self) -> dict[str, object]:
        """The comparison as ``show --prompt`` and ``diff`` give it in JSON."""
        return {
            "turns_a": self.turns_a,
            "turns_b": self.turns_b,
            "first_difference": self.first_difference,
            "tool_calls_added": list(self.added),
            "tool_calls_dropped": list(self.dropped),
        }


def tool_call_text(part: Mapping[str, Any]) -> str:
    """A tool call as ``name(arguments)``, arguments as compact JSON with sorted keys."""
    arguments = part.get("arguments")
    shown = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    return f"{part.get('name', '')}({shown})"


def _calls(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    return [
        tool_call_text(part)
        for message in messages
        for part in message.get("parts", ()) or ()
        if isinstance(part, Mapping) and part.get("type") == "tool_call"
    ]


def _turns(messages: Sequence[Mapping[str, Any]]) -> int:
    return sum(1 for message in messages if message.get("role") == "assistant")


def _beyond(calls: list[str], other: Counter[str]) -> tuple[str, ...]:
    left = Counter(other)
    out = []
    for call in calls:
        if left[call]:
            left[call] -= 1
        else:
            out.append(call)
    return tuple(out)


def compare_turns(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> TurnDiff:
    """Compare two generated conversations (GenAI messages) turn by turn."""
    first: int | None = None
    turn = 0
    for index in range(max(len(a), len(b))):
        message = a[index] if index < len(a) else b[index]
        turn += message.get("role") == "assistant"
        if index >= len(a) or index >= len(b) or a[index] != b[index]:
            first = turn
            break
    calls_a, calls_b = _calls(a), _calls(b)
    return TurnDiff(
        turns_a=_turns(a),
        turns_b=_turns(b),
        first_difference=first,
        added=_beyond(calls_b, Counter(calls_a)),
        dropped=_beyond(calls_a, Counter(calls_b)),
    )
