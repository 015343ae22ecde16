"""A tiny evaluator for the LogQL shapes the dashboard uses, over `loki_model.Entry` lists.

It is not a LogQL implementation: it knows exactly the stages the dashboard's queries are
built from (a stream selector with ``=``/``=~`` matchers, label filters ``=``, ``!=``,
``=~``, ``| json a, b``, ``| unwrap f``, ``| __error__=""``, and
``agg by (l) (agg_over_time(... [range]))``) and fails on anything else, so a query that
grows another stage must be checked against a real Loki (tests/deploy/test_loki.py).
Regular expressions are anchored, as in LogQL.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable

from tests.deploy.loki_model import Entry

_SELECTOR = re.compile(r"^\{(?P<matchers>[^}]*)\}\s*(?P<pipeline>.*)$")
_MATCHER = re.compile(r'^\s*(?P<name>\w+)\s*(?P<op>=~|!~|!=|=)\s*"(?P<value>(?:[^"\\]|\\.)*)"\s*$')
_METRIC = re.compile(
    r"^(?P<agg>avg|max|min|sum) by \((?P<by>\w+)\) \((?P<over>avg|max|min|sum)_over_time\((?P<inner>.*) \[[^\]]+\]\)\)$"
)
_AGGREGATE: dict[str, Callable[[list[float]], float]] = {
    "avg": lambda values: sum(values) / len(values),
    "max": max,
    "min": min,
    "sum": sum,
}


class UnsupportedQuery(ValueError):
    """The query uses a stage this evaluator does not know."""


def _match(op: str, actual: str, expected: str) -> bool:
    expected = expected.replace('\\"', '"')
    if op == "=":
        return actual == expected
    if op == "!=":
        return actual != expected
    matched = re.fullmatch(expected, actual) is not None
    return matched if op == "=~" else not matched


def select(query: str, entries: list[Entry]) -> list[dict[str, str]]:
    """The label sets (stream labels, metadata, parsed fields) of the lines a log query returns."""
    found = _SELECTOR.match(query.strip())
    if not found:
        raise UnsupportedQuery(query)
    matchers = [m for m in found["matchers"].split(",") if m.strip()]
    stages = [stage.strip() for stage in found["pipeline"].split("|") if stage.strip()]
    rows = []
    for entry in entries:
        if not all(_matches_selector(matcher, entry.labels) for matcher in matchers):
            continue
        row: dict[str, str] | None = {**entry.labels, **entry.metadata}
        for stage in stages:
            row = _apply(stage, row, entry.line) if row is not None else None
        if row is not None:
            rows.append(row)
    return rows


def _matches_selector(matcher: str, labels: dict[str, str]) -> bool:
    parsed = _MATCHER.match(matcher)
    if not parsed:
        raise UnsupportedQuery(matcher)
    return _match(parsed["op"], labels.get(parsed["name"], ""), parsed["value"])


def _apply(stage: str, row: dict[str, str], line: str) -> dict[str, str] | None:
    if stage.startswith("json"):
        names = [name.strip() for name in stage.removeprefix("json").split(",") if name.strip()]
        body = json.loads(line)
        return {**row, **{name: str(body[name]) for name in names if name in body}}
    if stage.startswith("unwrap "):
        name = stage.removeprefix("unwrap ").strip()
        try:
            float(row.get(name, ""))
        except ValueError:
            return {**row, "__error__": "SampleExtractionErr"}
        return {**row, "__unwrapped__": row[name]}
    parsed = _MATCHER.match(stage)
    if not parsed:
        raise UnsupportedQuery(stage)
    return row if _match(parsed["op"], row.get(parsed["name"], ""), parsed["value"]) else None


def metric(query: str, entries: list[Entry]) -> dict[str, float]:
    """An instant metric query of the dashboard's shape: {value of the `by` label: result}."""
    found = _METRIC.match(query.strip())
    if not found:
        raise UnsupportedQuery(query)
    series: dict[str, list[float]] = defaultdict(list)
    for row in select(found["inner"], entries):
        series[row.get(found["by"], "")].append(float(row["__unwrapped__"]))
    inner, outer = _AGGREGATE[found["over"]], _AGGREGATE[found["agg"]]
    # Loki's range aggregation makes one series per distinct label set; every record here has
    # its own (sample id, trace id, ...), so each series holds one value.
    return {key: outer([inner([value]) for value in values]) for key, values in series.items()}
