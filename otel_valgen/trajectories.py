"""Figures over every trajectory of a step: turns, tool calls, tool errors, where they stopped.

A source counts, over every generation it saw whose output was a conversation (not only the kept
ones), the figures below, and sends them cumulatively on each end record as ``valgen.trajectories``
(a map, like ``valgen.seen``: the end record with the largest seen holds them). A summary adds up
its ended sources' figures and derives the means and shares. One rule merges them, here and in the
collector (``trajectories.go``), so partial groups and files merge exactly: a key ending in
``.max`` takes the largest value, one ending in ``.min`` the smallest, a map merges key by key,
any other number adds up. The shared cases are ``testdata/sampling/trajectories.json``.

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

Rewards given per trajectory (verl's agent loop fills both in each output's ``extra_fields``):
``tool_rewards``, what each tool call's ``execute`` returned as its reward, and ``turn_scores``,
one score per turn an interaction (a simulated user) scored. Each is a list per trajectory; the
figures count the trajectories with at least one valid value (an empty list, None or a column
not given: left out, never counted as a zero), so a source that never had such rewards sends no
such keys. ``P`` is ``tool_rewards`` or ``turn_scores``:

| Key                      | End record                                  | Summary adds              |
|--------------------------|---------------------------------------------|---------------------------|
| ``P.trajectories``       | trajectories with at least one value        |                           |
| ``P.count``, ``P.sum``   | the values, counted / added up              | ``P.mean`` (sum / count), |
|                          |                                             | ``P.per_trajectory``      |
|                          |                                             | (sum / trajectories)      |
| ``P.min``, ``P.max``     | the smallest / largest value                |                           |
| ``turn_scores.last.sum`` | each trajectory's last turn score, added up | ``turn_scores.last.mean`` |

Why these: a tool's reward is judged per call (``tool_rewards.mean``: what a call earns; min and
max show its scale and sign), and what it adds to a trajectory's return by its total
(``.per_trajectory``); an interaction's scores add up to the trajectory's return from its turns
(``turn_scores.per_trajectory``), and its last score is usually the verdict on the final answer
(``turn_scores.last.mean``). ``.min`` keys merge by the smallest value (below).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, TypeGuard

from otel_valgen._sanitize import clean_score
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
TOOL_REWARDS: Final = "tool_rewards"
TURN_SCORES: Final = "turn_scores"
REWARD_COLUMNS: Final = (TOOL_REWARDS, TURN_SCORES)
_SHARE: Final = ".share"
_MAX: Final = ".max"
_MIN: Final = ".min"
_TRAJECTORIES: Final = ".trajectories"
_COUNT: Final = ".count"
_SUM: Final = ".sum"
_MEAN: Final = ".mean"
_PER_TRAJECTORY: Final = ".per_trajectory"
_LAST_SUM: Final = ".last.sum"
_LAST_MEAN: Final = ".last.mean"
_TEXTS_ONLY: Final = frozenset({str})


@dataclass
class RewardFigures:
    """One reward column's figures (``tool_rewards`` or ``turn_scores``) over the trajectories with values."""

    trajectories: int = 0
    count: int = 0
    total: float = 0.0
    smallest: float = math.inf
    largest: float = -math.inf
    last: float = 0.0  # each trajectory's last value, added up

    def add(self, values: list[float]) -> None:
        """Count one trajectory's valid values (none: the trajectory is left out)."""
        if not values:
            return
        self.trajectories += 1
        self.count += len(values)
        self.total += math.fsum(values)
        self.smallest = min(self.smallest, *values)
        self.largest = max(self.largest, *values)
        self.last += values[-1]

    def absorb(self, other: RewardFigures) -> None:
        """Add ``other``'s values (one call's) to these."""
        self.trajectories += other.trajectories
        self.count += other.count
        self.total += other.total
        self.smallest = min(self.smallest, other.smallest)
        self.largest = max(self.largest, other.largest)
        self.last += other.last

    def attribute(self, prefix: str, last: bool) -> dict[str, Any]:
        """The ``<prefix>.*`` keys; none before the first value, or when a sum overflowed a double."""
        if not self.count or not (math.isfinite(self.total) and math.isfinite(self.last)):
            return {}
        out: dict[str, Any] = {
            prefix + _TRAJECTORIES: self.trajectories,
            prefix + _COUNT: self.count,
            prefix + _SUM: self.total,
            prefix + _MIN: self.smallest,
            prefix + _MAX: self.largest,
        }
        if last:
            out[prefix + _LAST_SUM] = self.last
        return out


def reward_values(value: object, invalid: Counter[str]) -> list[float]:
    """A trajectory's rewards as finite floats; each bad one left out and counted in ``invalid`` by reason.

    ``value``: a list, tuple, array or tensor of numbers (numpy/torch scalars converted), a bare
    number (one value), or None / empty (no values). A value that is None, NaN, ±inf or not a
    number (a text, a map, a list inside the list) is bad, and so is a row of another type; bools
    count as 0 and 1, as scores do.
    """
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        tolist = getattr(value, "tolist", None)  # numpy arrays and torch tensors; a numpy scalar gives its number
        if callable(tolist) and not isinstance(value, str | bytes):
            try:
                value = tolist()
            except Exception:
                invalid["not_a_number"] += 1
                return []
    items = value if isinstance(value, list | tuple) else (value,)
    out: list[float] = []
    for item in items:
        if type(item) is float and math.isfinite(item):  # the usual value
            out.append(item)
            continue
        if item is None:
            invalid["none"] += 1
            continue
        if isinstance(item, str | bytes | Mapping | list | tuple | set) or getattr(item, "ndim", 0) not in (0, None):
            invalid["not_a_number"] += 1
            continue
        clean = clean_score(item)
        if clean.value is None:
            invalid[clean.invalid or "not_a_number"] += 1
        else:
            out.append(clean.value)
    return out


class _Shape(NamedTuple):
    """What the figures read of one conversation."""

    turns: int  # assistant messages
    finished: bool  # ended on an assistant message without tool calls
    tool_calls: Counter[str]  # by tool name
    tool_errors: int


def _shape(output: Any) -> _Shape:
    turns = errors = 0
    finished = False
    calls_by_name: Counter[str] = Counter()
    for message in output if isinstance(output, list | tuple) else list(output):
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
                errors += 1
        for call in calls if isinstance(calls, list | tuple) else ():
            calls_by_name[_tool_name(call)] += 1
    return _Shape(turns, finished, calls_by_name, errors)


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
    tool_rewards: RewardFigures = field(default_factory=RewardFigures)
    turn_scores: RewardFigures = field(default_factory=RewardFigures)
    by_data_source: dict[str, TrajectoryFigures] | None = None  # the same figures per data source, when asked

    def add(
        self,
        outputs: Sequence[Any],
        truncated: Sequence[Any] | None,
        data_sources: Sequence[str] | None = None,
        *,
        tool_rewards: Sequence[Any] | None = None,
        turn_scores: Sequence[Any] | None = None,
    ) -> Counter[str]:
        """Count the trajectories among ``outputs`` (``truncated``: one flag per output, or None).

        ``data_sources`` (one cleaned name per output) counts them per data source too;
        ``tool_rewards`` and ``turn_scores`` (one list per output, or None) give their rewards
        (``reward_values``). A column that is not a list or tuple makes its rows when read (an
        integration's lazy rows): it is counted through its ``messages_for_figures(index)``,
        which gives a row's messages without decoding any text, and not at all without one (it
        is then a column of texts). Returns the bad reward values left out, by reason.
        """
        invalid: Counter[str] = Counter()
        if not isinstance(outputs, list | tuple):
            peek = getattr(outputs, "messages_for_figures", None)
            if not callable(peek):
                return invalid
            outputs = [peek(index) for index in range(len(outputs))]
        if _TEXTS_ONLY.issuperset(map(type, outputs)):  # plain texts (the usual column): no trajectory
            return invalid
        shapes: dict[int, _Shape | None] = {}  # by output object: rows often share one (an integration's)
        for index, output in enumerate(outputs):
            if type(output) is str:
                continue
            key = id(output)
            if key in shapes:
                shape = shapes[key]
            else:
                shape = shapes[key] = _shape(output) if is_conversation(output) else None
            if shape is None:
                continue
            cut = truncated is not None and truncated[index] is not None and bool(truncated[index])
            rewards = reward_values(tool_rewards[index], invalid) if tool_rewards is not None else []
            scores = reward_values(turn_scores[index], invalid) if turn_scores is not None else []
            self._add_one(shape, cut, rewards, scores)
            if data_sources is not None:
                if self.by_data_source is None:
                    self.by_data_source = {}
                figures = self.by_data_source.setdefault(data_sources[index], TrajectoryFigures())
                figures._add_one(shape, cut, rewards, scores)
        return invalid

    def _add_one(self, shape: _Shape, cut: bool, tool_rewards: list[float], turn_scores: list[float]) -> None:
        self.tool_rewards.add(tool_rewards)
        self.turn_scores.add(turn_scores)
        if shape.tool_calls:
            self.tool_calls.update(shape.tool_calls)
        self.tool_errors += shape.tool_errors
        self.count += 1
        self.turns_sum += shape.turns
        self.turns_max = max(self.turns_max, shape.turns)
        if cut:
            self.length_limit += 1
        elif not shape.finished:
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
        self.tool_rewards.absorb(other.tool_rewards)
        self.turn_scores.absorb(other.turn_scores)
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
            **self.tool_rewards.attribute(TOOL_REWARDS, last=False),
            **self.turn_scores.attribute(TURN_SCORES, last=True),
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
    """The figures of several sources as one: ``.max`` the largest, ``.min`` the smallest, maps by key, others added.

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
            into[key] = value if known is None else _combine(key, known, value)
    return into


def _combine(key: str, known: int | float, value: int | float) -> int | float:
    """Two sources' values of one figure: ``.max`` the largest, ``.min`` the smallest, else their sum."""
    if key.endswith(_MAX):
        return max(known, value)
    if key.endswith(_MIN):
        return min(known, value)
    return known + value


def summary(merged: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A summary's ``valgen.trajectories``: the merged figures with the means and shares over ``count``.

    For each reward column ``P``: ``P.mean`` = ``P.sum`` / ``P.count``, ``P.per_trajectory`` =
    ``P.sum`` / ``P.trajectories``, ``P.last.mean`` = ``P.last.sum`` / ``P.trajectories``.
    """
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
    for prefix in REWARD_COLUMNS:
        added = merged.get(prefix + _SUM)
        if not _number(added):
            continue
        for denominator, derived in ((_COUNT, _MEAN), (_TRAJECTORIES, _PER_TRAJECTORY)):
            n = merged.get(prefix + denominator)
            if _number(n) and n > 0:
                out[prefix + derived] = added / n
        last, n = merged.get(prefix + _LAST_SUM), merged.get(prefix + _TRAJECTORIES)
        if _number(last) and _number(n) and n > 0:
            out[prefix + _LAST_MEAN] = last / n
    return out


def scalars(figures: Mapping[str, Any] | None, prefix: str = "trajectories") -> dict[str, float]:
    """A summary's figures as tracker scalars.

    ``trajectories/<figure>`` (dots as underscores: ``trajectories/tool_rewards_mean``) and
    ``trajectories/tool_calls/<tool>``; per data source (k per data source) the same under
    ``trajectories/by_data_source/<data source>/``.
    """
    if not figures:
        return {}
    out: dict[str, float] = {}
    by_data_source = figures.get(BY_DATA_SOURCE)
    for name, inner in by_data_source.items() if isinstance(by_data_source, Mapping) else ():
        if isinstance(inner, Mapping):
            out.update(scalars(inner, f"{prefix}/{BY_DATA_SOURCE}/{metric_name(str(name))}"))
    for key in (
        COUNT,
        TURNS_MEAN,
        TURNS_MAX,
        TOOL_CALLS_MEAN,
        TOOL_ERRORS,
        TURN_LIMIT + _SHARE,
        LENGTH_LIMIT + _SHARE,
        *_REWARD_SCALARS,
    ):
        value = figures.get(key)
        if _number(value) and math.isfinite(value):
            out[f"{prefix}/{key.replace('.', '_')}"] = float(value)
    by_name = figures.get(TOOL_CALLS_BY_NAME)
    for name, value in by_name.items() if isinstance(by_name, Mapping) else ():
        if _number(value):
            out[f"{prefix}/tool_calls/{metric_name(str(name))}"] = float(value)
    return out


_REWARD_SCALARS: Final = (
    *(prefix + key for prefix in REWARD_COLUMNS for key in (_MEAN, _PER_TRAJECTORY, _MIN, _MAX, _TRAJECTORIES)),
    TURN_SCORES + _LAST_MEAN,
)
"""The reward figures the trackers get (absent ones are left out)."""


def metric_name(name: str) -> str:
    """A tool name as a metric name part every tracker takes (MLflow's characters)."""
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in name) or "_"


def caption(figures: Mapping[str, Any] | None) -> str | None:
    """One line for ``show``: trajectories, turns (mean, max), tool calls (mean, per tool), errors, stops, rewards."""
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
    for prefix, label in ((TOOL_REWARDS, "tool rewards"), (TURN_SCORES, "turn scores")):
        shown = _reward_caption(figures, prefix, label)
        if shown:
            parts.append(shown)
    return " · ".join(parts)


def _reward_caption(figures: Mapping[str, Any], prefix: str, label: str) -> str | None:
    """``tool rewards 0.25 mean [-1, 1], 0.50 per trajectory (3 trajectories)``; None without values."""
    mean, low, high = (figures.get(prefix + key) for key in (_MEAN, _MIN, _MAX))
    if not (_number(mean) and _number(low) and _number(high)):
        return None
    text = f"{label} {mean:.2f} mean [{low:g}, {high:g}]"
    per_trajectory = figures.get(prefix + _PER_TRAJECTORY)
    if _number(per_trajectory):
        text += f", {per_trajectory:.2f} per trajectory"
    last = figures.get(prefix + _LAST_MEAN)
    if _number(last):
        text += f", last {last:.2f}"
    n = figures.get(prefix + _TRAJECTORIES)
    return text + (f" ({n} trajectories)" if _number(n) else "")
