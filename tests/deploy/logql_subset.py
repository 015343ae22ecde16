"""A parser and evaluator for the subset of LogQL the dashboard uses, over `loki_model.Entry` lists.

Ours, written from Loki's LogQL documentation ("Log queries", "Metric queries"), not from
Loki's code. It is not a LogQL implementation: it knows exactly these forms and rejects
everything else with `LogQLError`, so a typo in a query, or a query that grows a stage the
tests cannot evaluate, fails a test instead of passing unnoticed.

- log query: a stream selector ``{name op "value", ...}`` followed by stages ``| stage``;
- matchers and label filters: ``=``, ``!=``, ``=~``, ``!~`` with a double-quoted or backtick
  string; regular expressions are fully anchored, as in LogQL, and must compile;
- ``| json`` (all fields) or ``| json a, b="path"`` (short and expression forms);
- ``| line_format "text {{.label}}"`` (literal text and label actions: tests/deploy/logql_line_format.py);
- ``| unwrap name`` (only in a metric query; afterwards only label filters, e.g.
  ``| __error__=""``);
- metric query: ``agg by (l) (fn_over_time(<log query> [range]))`` or
  ``agg (...) by (l)`` with agg one of sum, avg, min, max and fn one of
  sum, avg, min, max (over unwrapped values).

Checks Loki documents and this parser enforces too: a selector needs at least one matcher
that does not match the empty string; label names are ``[A-Za-z_][A-Za-z0-9_]*``.
The evaluator ignores time: every entry is in range (the tests send their records just before
they query).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tests.deploy.logql_line_format import LineFormat, LineFormatError
from tests.deploy.logql_line_format import parse as parse_line_format
from tests.deploy.loki_model import Entry

AGGREGATIONS: dict[str, Callable[[list[float]], float]] = {
    "avg": lambda values: sum(values) / len(values),
    "max": max,
    "min": min,
    "sum": sum,
}
RANGE_FUNCTIONS = {f"{name}_over_time": name for name in AGGREGATIONS}
ERROR_LABEL = "__error__"

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
    |(?P<string>"(?:[^"\\]|\\.)*"|`[^`]*`)
    |(?P<duration>(?:\d+(?:ms|s|m|h|d|w|y))+)
    |(?P<op>=~|!~|!=|\|=|\|~|==|=|\|)
    |(?P<punct>[{}()\[\],])
    |(?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    """,
    re.VERBOSE,
)
_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r"}


class LogQLError(ValueError):
    """The query is not LogQL, or uses a form outside this subset."""


@dataclass(frozen=True)
class Matcher:
    """``name op "value"``: a stream matcher or a label filter."""

    name: str
    op: str
    value: str

    def matches(self, actual: str) -> bool:
        """Whether a label's value (``""`` when absent) passes."""
        if self.op in ("=", "=="):
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        matched = re.fullmatch(self.value, actual) is not None
        return matched if self.op == "=~" else not matched


@dataclass(frozen=True)
class Json:
    """``| json``: all fields (``fields`` empty) or only (label, path) pairs."""

    fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Unwrap:
    """``| unwrap label``: the label's value becomes the sample value."""

    label: str


Stage = Matcher | Json | Unwrap | LineFormat


@dataclass(frozen=True)
class LogQuery:
    """A stream selector and its pipeline."""

    selector: tuple[Matcher, ...]
    pipeline: tuple[Stage, ...] = ()

    def unwrap(self) -> Unwrap | None:
        """The pipeline's unwrap stage, if any."""
        return next((stage for stage in self.pipeline if isinstance(stage, Unwrap)), None)


@dataclass(frozen=True)
class MetricQuery:
    """``aggregation by (by) (range_function(inner [range]))``."""

    aggregation: str
    by: tuple[str, ...]
    range_function: str
    inner: LogQuery
    range: str


@dataclass
class _Tokens:
    query: str
    items: list[tuple[str, str, int]]
    index: int = 0

    def peek(self, offset: int = 0) -> tuple[str, str, int]:
        position = self.index + offset
        return self.items[position] if position < len(self.items) else ("end", "", len(self.query))

    def take(self, kind: str, text: str | None = None) -> str:
        token_kind, token_text, position = self.peek()
        if token_kind != kind or (text is not None and token_text != text):
            wanted = repr(text) if text is not None else kind
            raise LogQLError(f"expected {wanted} at {position}, found {token_text or 'the end'!r} in {self.query!r}")
        self.index += 1
        return token_text

    def at(self, kind: str, text: str | None = None) -> bool:
        token_kind, token_text, _ = self.peek()
        return token_kind == kind and (text is None or token_text == text)


def _tokenize(query: str) -> _Tokens:
    items, position = [], 0
    while position < len(query):
        found = _TOKEN.match(query, position)
        if not found:
            raise LogQLError(f"unexpected {query[position]!r} at {position} in {query!r}")
        kind = found.lastgroup or ""
        if kind != "space":
            items.append((kind, found.group(), position))
        position = found.end()
    return _Tokens(query, items)


def _unquote(token: str) -> str:
    if token.startswith("`"):
        return token[1:-1]
    out, chars = [], iter(token[1:-1])
    for char in chars:
        if char == "\\":
            escaped = next(chars)
            if escaped not in _ESCAPES:
                raise LogQLError(f"unknown escape \\{escaped} in {token}")
            out.append(_ESCAPES[escaped])
        else:
            out.append(char)
    return "".join(out)


def _matcher(tokens: _Tokens, name: str) -> Matcher:
    op = tokens.take("op")
    if op not in ("=", "==", "!=", "=~", "!~"):
        raise LogQLError(f"{op!r} after {name!r} is not a label matcher in {tokens.query!r}")
    value = _unquote(tokens.take("string"))
    if op in ("=~", "!~"):
        try:
            re.compile(value)
        except re.error as error:
            raise LogQLError(f"invalid regular expression {value!r}: {error}") from error
    return Matcher(name, op, value)


def _selector(tokens: _Tokens) -> tuple[Matcher, ...]:
    tokens.take("punct", "{")
    matchers = [_matcher(tokens, tokens.take("ident"))]
    while tokens.at("punct", ","):
        tokens.take("punct", ",")
        matchers.append(_matcher(tokens, tokens.take("ident")))
    tokens.take("punct", "}")
    if any(m.op == "==" for m in matchers):
        raise LogQLError(f"'==' is a label filter operator, not a stream matcher: {tokens.query!r}")
    if all(m.matches("") for m in matchers):
        raise LogQLError(f"the selector needs a matcher that does not match the empty string: {tokens.query!r}")
    return tuple(matchers)


def _json(tokens: _Tokens) -> Json:
    fields = []
    while tokens.at("ident"):
        label = tokens.take("ident")
        path = label
        if tokens.at("op", "="):
            tokens.take("op", "=")
            path = _unquote(tokens.take("string"))
        fields.append((label, path))
        if not tokens.at("punct", ","):
            break
        tokens.take("punct", ",")
        if not tokens.at("ident"):
            raise LogQLError(f"a json parameter must follow ',' in {tokens.query!r}")
    return Json(tuple(fields))


def _log_query(tokens: _Tokens, in_metric: bool) -> LogQuery:
    selector = _selector(tokens)
    pipeline: list[Stage] = []
    while tokens.at("op", "|"):
        tokens.take("op", "|")
        name = tokens.take("ident")
        unwrapped = any(isinstance(stage, Unwrap) for stage in pipeline)
        if name == "json" and not unwrapped:
            pipeline.append(_json(tokens))
        elif name == "line_format" and not in_metric:
            try:
                pipeline.append(parse_line_format(_unquote(tokens.take("string"))))
            except LineFormatError as error:
                raise LogQLError(f"{error} in {tokens.query!r}") from error
        elif name == "unwrap" and in_metric and not unwrapped:
            pipeline.append(Unwrap(tokens.take("ident")))
        elif tokens.at("op"):
            pipeline.append(_matcher(tokens, name))
        else:
            raise LogQLError(f"unsupported stage {name!r} in {tokens.query!r}")
    if tokens.at("op") and not tokens.at("op", "|"):
        raise LogQLError(f"line filters ({tokens.peek()[1]!r}) are outside this subset: {tokens.query!r}")
    return LogQuery(selector, tuple(pipeline))


def _by(tokens: _Tokens) -> tuple[str, ...]:
    tokens.take("ident", "by")
    tokens.take("punct", "(")
    labels = [tokens.take("ident")]
    while tokens.at("punct", ","):
        tokens.take("punct", ",")
        labels.append(tokens.take("ident"))
    tokens.take("punct", ")")
    return tuple(labels)


def _metric_query(tokens: _Tokens) -> MetricQuery:
    aggregation = tokens.take("ident")
    if aggregation not in AGGREGATIONS:
        raise LogQLError(f"unsupported aggregation {aggregation!r} in {tokens.query!r}")
    by = _by(tokens) if tokens.at("ident", "by") else ()
    tokens.take("punct", "(")
    function = tokens.take("ident")
    if function not in RANGE_FUNCTIONS:
        raise LogQLError(f"unsupported range function {function!r} in {tokens.query!r}")
    tokens.take("punct", "(")
    inner = _log_query(tokens, in_metric=True)
    if inner.unwrap() is None:
        raise LogQLError(f"{function} needs an unwrap stage: {tokens.query!r}")
    tokens.take("punct", "[")
    range_ = tokens.take("duration")
    tokens.take("punct", "]")
    tokens.take("punct", ")")
    tokens.take("punct", ")")
    if tokens.at("ident", "by"):
        if by:
            raise LogQLError(f"two by clauses in {tokens.query!r}")
        by = _by(tokens)
    return MetricQuery(aggregation, by, function, inner, range_)


def parse(query: str) -> LogQuery | MetricQuery:
    """The query's syntax tree; `LogQLError` when it is not LogQL of this subset."""
    tokens = _tokenize(query)
    parsed = _log_query(tokens, in_metric=False) if tokens.at("punct", "{") else _metric_query(tokens)
    tokens.take("end")
    return parsed


@dataclass(frozen=True)
class Names:
    """The label names a query refers to."""

    stream_labels: frozenset[str]
    fields: frozenset[str] = field(default_factory=frozenset)  # labels, metadata or parsed (not by json itself)
    parsed: frozenset[str] = field(default_factory=frozenset)  # labels the query's json stages extract


def names(query: LogQuery | MetricQuery) -> Names:
    """The stream labels a query selects by, and the other names it filters, unwraps or groups by."""
    log_query = query.inner if isinstance(query, MetricQuery) else query
    used: set[str] = set()
    parsed: set[str] = set()
    for stage in log_query.pipeline:
        if isinstance(stage, Json):
            parsed |= {label for label, _ in stage.fields}
        elif isinstance(stage, Unwrap):
            used.add(stage.label)
        elif isinstance(stage, LineFormat):
            used |= stage.labels
        elif stage.name != ERROR_LABEL:
            used.add(stage.name)
    if isinstance(query, MetricQuery):
        used |= set(query.by)
    stream = frozenset(matcher.name for matcher in log_query.selector)
    return Names(stream, frozenset(used - parsed), frozenset(parsed))


def _json_fields(stage: Json, line: str, row: dict[str, str]) -> dict[str, str]:
    try:
        body = json.loads(line)
    except ValueError:
        return {**row, ERROR_LABEL: "JSONParserErr"}
    if not isinstance(body, dict):
        return {**row, ERROR_LABEL: "JSONParserErr"}
    if stage.fields:
        wanted = {label: body.get(path) for label, path in stage.fields if "." not in path and "[" not in path}
        if len(wanted) != len(stage.fields):
            raise LogQLError("json paths other than a top-level field are outside this subset")
    else:
        wanted = {re.sub(r"[^A-Za-z0-9_]", "_", key): value for key, value in body.items()}
    extracted = {}
    for label, value in wanted.items():
        if value is None or (not stage.fields and isinstance(value, (dict, list))):
            continue
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        # Loki: a parsed label whose name the line already has is suffixed with _extracted.
        extracted[f"{label}_extracted" if label in row else label] = text
    return {**row, **extracted}


def _run(query: LogQuery, entries: Iterable[Entry]) -> list[tuple[dict[str, str], str]]:
    """(labels, line) of each line the query returns; ``line_format`` replaces the line later stages see."""
    rows = []
    for entry in entries:
        if not all(matcher.matches(entry.labels.get(matcher.name, "")) for matcher in query.selector):
            continue
        row: dict[str, str] | None = {**entry.labels, **entry.metadata}
        line = entry.line
        for stage in query.pipeline:
            if row is None:
                break
            if isinstance(stage, Json):
                row = _json_fields(stage, line, row)
            elif isinstance(stage, LineFormat):
                line = stage.render(row)
            elif isinstance(stage, Unwrap):
                try:
                    float(row.get(stage.label, ""))
                except ValueError:
                    row = {**row, ERROR_LABEL: "SampleExtractionErr"}
            elif not stage.matches(row.get(stage.name, "")):
                row = None
        if row is not None:
            rows.append((row, line))
    return rows


def select(query: str, entries: Iterable[Entry]) -> list[dict[str, str]]:
    """The label sets (stream labels, metadata, parsed fields) of the lines a log query returns."""
    parsed = parse(query)
    if not isinstance(parsed, LogQuery):
        raise LogQLError(f"not a log query: {query!r}")
    return [row for row, _ in _run(parsed, entries)]


def lines(query: str, entries: Iterable[Entry]) -> list[str]:
    """The lines a log query returns, as a logs panel shows them (after its ``line_format``)."""
    parsed = parse(query)
    if not isinstance(parsed, LogQuery):
        raise LogQLError(f"not a log query: {query!r}")
    return [line for _, line in _run(parsed, entries)]


def metric(query: str, entries: Iterable[Entry]) -> dict[str, float]:
    """An instant metric query aggregated by one label: {value of that label: result}.

    As in Loki, the range function makes one series per distinct label set (the unwrapped
    label left out) and the aggregation then combines the series of each `by` value.
    """
    parsed = parse(query)
    if not isinstance(parsed, MetricQuery) or len(parsed.by) != 1:
        raise LogQLError(f"not a metric query aggregated by one label: {query!r}")
    unwrap = parsed.inner.unwrap()
    assert unwrap is not None  # parse() requires it
    series: dict[frozenset[tuple[str, str]], list[float]] = defaultdict(list)
    for row, _ in _run(parsed.inner, entries):
        if ERROR_LABEL in row:
            raise LogQLError(f"a sample has {ERROR_LABEL}={row[ERROR_LABEL]} (Loki fails such a query): {query!r}")
        labels = frozenset((name, value) for name, value in row.items() if name != unwrap.label)
        series[labels].append(float(row[unwrap.label]))
    over, outer = AGGREGATIONS[RANGE_FUNCTIONS[parsed.range_function]], AGGREGATIONS[parsed.aggregation]
    grouped: dict[str, list[float]] = defaultdict(list)
    for labels, values in series.items():
        grouped[dict(labels).get(parsed.by[0], "")].append(over(values))
    return {key: outer(values) for key, values in grouped.items()}
