"""Figures over every trajectory of a step: turns, tool calls, tool errors, where they stopped.

A source counts, over every generation it saw whose output was a conversation (not only the kept
ones), the figures below, and sends them cumulatively on each end record as ``valgen.trajectories``
(a map, like ``valgen.seen``: the end record with the largest seen holds them). A summary adds up
its ended sources' figures and derives the means and shares. One rule merges them, here and in the
collector (``trajectories.go``), so partial groups and files merge exactly: a key ending in
``.max`` takes the largest value, a map merges key by key, any other number adds up. The shared
cases are ``testdata/sampling/trajectories.json``.

| Key                  | End record                                             | Summary adds           |
|----------------------|--------------------------------------------------------|------------------------|
| ``count``            | trajectories (outputs that were chat messages)          |                        |
| ``turns.sum/.max``   | assistant messages, added up / the most in one          | ``turns.mean``         |
| ``tool_calls.sum``   | tool calls                                              | ``tool_calls.mean``    |
| ``tool_calls.by_name`` | tool calls per tool name (a map)                      |                        |
| ``tool_errors``      | tool messages marked ``is_error`` (or with an ``error``) |                        |
| ``turn_limit``       | ended on a tool call or result (no final answer), not cut | ``turn_limit.share`` |
| ``length_limit``     | cut at the length limit (``truncated``)                 | ``length_limit.share`` |
| ``by_data_source``   | k per data source: the figures per data source (maps) | the same, each |
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard

from otel_valgen.conversations import is_conversation

COUNT: Final = "count"
TURNS_SUM: Final = "turns.sum"
TURNS_MAX: Final = "turns.max"
TURNS_MEAN: Final = "turns.mean"
TOOL_CALLS_SUM: Final = "tool_calls.sum"
TOOL_CALLS_MEAN: Final = "tool_calls.mean"
TOOL_CALLS_BY_NAME: Final = "tool_calls.by_name"
TOOL_ERRORS: Final = "tool_errors"
TURN_LIMIT: Final = "turn_limit"
LENGTH_LIMIT: Final = "length_limit"
BY_DATA_SOURCE: Final = "by_data_source"
_SHARE: Final = ".share"
_MAX: Final = ".max"
_TEXTS_ONLY: Final = frozenset({str})


@dataclass
class TrajectoryFigures:
    """A source's running figures over the trajectories it saw."""

    count: int = 0
    turns_sum: int = 0
    turns_max: int = 0
    tool_calls: Counter[str] = field(default_factory=Counter)
    tool_errors: int = 0
    turn_limit: int = 0
    length_limit: int = 0
    by_data_source: dict[str, TrajectoryFigures] | None = None  # the same figures per data source, when asked

    def add(
        self, outputs: Sequence[Any], truncated: Sequence[Any] | None, data_sources: Sequence[str] | None = None
    ) -> None:
        """Count the trajectories among ``outputs`` (``truncated``: one flag per output, or None).

        ``data_sources`` (one cleaned name per output) counts them per data source too. A column
        that is not a list or tuple makes its rows when read (an integration's lazy rows): it is
        counted through its ``messages_for_figures(index)``, which gives a row's messages without
        decoding any text, and not at all without one (it is then a column of texts).
        """
        if not isinstance(outputs, list | tuple):
            peek = getattr(outputs, "messages_for_figures", None)
            if not callable(peek):
                return
            outputs = [peek(index) for index in range(len(outputs))]
        if _TEXTS_ONLY.issuperset(map(type, outputs)):  # plain texts (the usual column): no trajectory
            return
        for index, output in enumerate(outputs):
            if type(output) is str or not is_conversation(output):
                continue
            cut = truncated is not None and truncated[index] is not None and bool(truncated[index])
            messages = list(output) if not isinstance(output, list) else output
            self._add_one(messages, cut)
            if data_sources is not None:
                if self.by_data_source is None:
                    self.by_data_source = {}
                self.by_data_source.setdefault(data_sources[index], TrajectoryFigures())._add_one(messages, cut)

    def _add_one(self, messages: list[Any], cut: bool) -> None:
        turns = 0
        finished = False
        for message in messages:
            if not isinstance(message, Mapping):
                continue
            role = message.get("role")
            calls = message.get("tool_calls") or ()
            if role == "assistant":
                turns += 1
                finished = not calls
            elif role == "tool":
                finished = False
                if message.get("is_error") or message.get("error"):
                    self.tool_errors += 1
            for call in calls if isinstance(calls, list | tuple) else ():
                self.tool_calls[_tool_name(call)] += 1
        self.count += 1
        self.turns_sum += turns
        self.turns_max = max(self.turns_max, turns)
        if cut:
            self.length_limit += 1
        elif not finished:
            self.turn_limit += 1

    def absorb(self, other: TrajectoryFigures) -> None:
        """Add ``other``'s trajectories (one call's) to these."""
        self.count += other.count
        self.turns_sum += other.turns_sum
        self.turns_max = max(self.turns_max, other.turns_max)
        self.tool_calls.update(other.tool_calls)
        self.tool_errors += other.tool_errors
        self.turn_limit += other.turn_limit
        self.length_limit += other.length_limit
        for name, figures in (other.by_data_source or {}).items():
            if self.by_data_source is None:
                self.by_data_source = {}
            self.by_data_source.setdefault(name, TrajectoryFigures()).absorb(figures)

    def attribute(self) -> dict[str, Any] | None:
        """The end record's ``valgen.trajectories``; None before the first trajectory."""
        if not self.count:
            return None
        out: dict[str, Any] = {
            COUNT: self.count,
            TURNS_SUM: self.turns_sum,
            TURNS_MAX: self.turns_max,
            TOOL_CALLS_SUM: sum(self.tool_calls.values()),
            TOOL_CALLS_BY_NAME: dict(sorted(self.tool_calls.items())),
            TOOL_ERRORS: self.tool_errors,
            TURN_LIMIT: self.turn_limit,
            LENGTH_LIMIT: self.length_limit,
        }
        if self.by_data_source:
            out[BY_DATA_SOURCE] = {
                name: figures.attribute() for name, figures in sorted(self.by_data_source.items()) if figures.count
            }
        return out


def _tool_name(call: object) -> str:
    if not isinstance(call, Mapping):
        return ""
    function = call.get("function")
    source = function if isinstance(function, Mapping) else call
    name = source.get("name")
    return name if isinstance(name, str) else str(name or "")


def _number(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is a figure's number (an int or float, not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def merge(figures: Iterable[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """The figures of several sources as one: ``.max`` keys the largest, maps key by key, numbers added up.

    A value of another type (a text, a list, a number where another source has a map) is left out.
    None when no source reported figures.
    """
    merged: dict[str, Any] | None = None
    for one in figures:
        if not isinstance(one, Mapping):
            continue
        merged = _merge_into(merged or {}, one)
    return merged


def _merge_into(into: dict[str, Any], one: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in one.items():
        known = into.get(key)
        if isinstance(value, Mapping):
            into[key] = _merge_into(known if isinstance(known, dict) else {}, value)
        elif _number(value) and (known is None or _number(known)):
            into[key] = value if known is None else max(known, value) if key.endswith(_MAX) else known + value
    return into


def summary(merged: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A summary's ``valgen.trajectories``: the merged figures with the means and shares over ``count``."""
    if merged is None:
        return None
    out = dict(merged)
    by_data_source = merged.get(BY_DATA_SOURCE)
    if isinstance(by_data_source, Mapping):
        out[BY_DATA_SOURCE] = {
            name: summary(figures) for name, figures in by_data_source.items() if isinstance(figures, Mapping)
        }
    count = merged.get(COUNT)
    if _number(count) and count > 0:
        for total, derived in ((TURNS_SUM, TURNS_MEAN), (TOOL_CALLS_SUM, TOOL_CALLS_MEAN)):
            if _number(merged.get(total)):
                out[derived] = merged[total] / count
        for key in (TURN_LIMIT, LENGTH_LIMIT):
            if _number(merged.get(key)):
                out[key + _SHARE] = merged[key] / count
    return out


def scalars(figures: Mapping[str, Any] | None, prefix: str = "trajectories") -> dict[str, float]:
    """A summary's figures as tracker scalars.

    ``trajectories/<figure>`` and ``trajectories/tool_calls/<tool>``; per data source (k per data
    source) the same under ``trajectories/by_data_source/<data source>/``.
    """
    if not figures:
        return {}
    out: dict[str, float] = {}
    by_data_source = figures.get(BY_DATA_SOURCE)
    for name, inner in by_data_source.items() if isinstance(by_data_source, Mapping) else ():
        if isinstance(inner, Mapping):
            out.update(scalars(inner, f"{prefix}/{BY_DATA_SOURCE}/{_metric_name(str(name))}"))
    for key in (COUNT, TURNS_MEAN, TURNS_MAX, TOOL_CALLS_MEAN, TOOL_ERRORS, TURN_LIMIT + _SHARE, LENGTH_LIMIT + _SHARE):
        value = figures.get(key)
        if _number(value) and math.isfinite(value):
            out[f"{prefix}/{key.replace('.', '_')}"] = float(value)
    by_name = figures.get(TOOL_CALLS_BY_NAME)
    for name, value in by_name.items() if isinstance(by_name, Mapping) else ():
        if _number(value):
            out[f"{prefix}/tool_calls/{_metric_name(str(name))}"] = float(value)
    return out


def _metric_name(name: str) -> str:
    """A tool name as a metric name part every tracker takes (MLflow's characters)."""
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in name) or "_"


def caption(figures: Mapping[str, Any] | None) -> str | None:
    """One line for ``show``: trajectories, turns (mean, max), tool calls (mean, per tool), errors, stops."""
    if not figures or not figures.get(COUNT):
        return None
    by_name = figures.get(TOOL_CALLS_BY_NAME)
    tools = ", ".join(f"{name} {n}" for name, n in by_name.items()) if isinstance(by_name, Mapping) else ""
    parts = [
        f"{figures[COUNT]} trajectories",
        f"turns {figures.get(TURNS_MEAN, 0):.2f} mean, {figures.get(TURNS_MAX, 0)} max",
        f"tool calls {figures.get(TOOL_CALLS_MEAN, 0):.2f} mean" + (f" ({tools})" if tools else ""),
        f"tool errors {figures.get(TOOL_ERRORS, 0)}",
        f"turn limit {figures.get(TURN_LIMIT + _SHARE, 0):.0%}",
        f"length limit {figures.get(LENGTH_LIMIT + _SHARE, 0):.0%}",
    ]
    return " · ".join(parts)
