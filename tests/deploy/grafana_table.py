"""What a table panel's transformations make of the rows its Loki query returns, for the dashboard tests.

Grafana does not run in the tests, so this applies the few transformations the dashboard's
tables use, as Grafana's ``@grafana/data`` implements them (read for Grafana 12):

- ``extractFields`` (source ``labels``): each row's labels (stream labels, structured metadata,
  parsed fields) become columns; the rows given here already are those label sets.
- ``convertFieldType``, ``sortBy``: change values and row order, not which columns there are
  (`sorted_rows`: sortBy by its first field only, as Grafana does, numerically when
  convertFieldType made that field a number).
- ``filterFieldsByName`` with ``include.names`` and/or ``include.pattern``: keep the columns
  named, or whose name the pattern matches (``byRegexpOrNames``).
- ``organize``: ``includeByName`` (when not empty) keeps only those columns, ``excludeByName``
  hides columns, ``indexByName`` orders (columns without an index last, in their order),
  ``renameByName`` renames.
- ``renameByRegex``: ``regex`` over each column name, replaced by ``renamePattern`` (``$1``...).

A pattern that does not start with ``/`` is anchored (Grafana's ``stringToJsRegex``: ``^p$``).
"""

from __future__ import annotations

import re
from typing import Any

Row = dict[str, str]


def _regex(pattern: str) -> re.Pattern[str]:
    if pattern.startswith("/"):
        body, _, flags = pattern[1:].rpartition("/")
        return re.compile(body, re.IGNORECASE if "i" in flags else 0)
    return re.compile(f"^{pattern}$")


def _js_replacement(pattern: str) -> str:
    """A JavaScript replacement string (``$1``) in Python's spelling (``g<1>`` after a backslash)."""
    return re.sub(r"\$(\d+)", r"\\g<\1>", pattern)


def kept_columns(panel: dict[str, Any]) -> set[str]:
    """The columns a table panel names as the ones it keeps (by filterFieldsByName or organize)."""
    names: set[str] = set()
    for transformation in panel["transformations"]:
        options = transformation["options"]
        if transformation["id"] == "filterFieldsByName":
            names |= set(options.get("include", {}).get("names", []))
        elif transformation["id"] == "organize":
            names |= {name for name, keep in options.get("includeByName", {}).items() if keep}
    return names


def columns(panel: dict[str, Any], rows: list[Row]) -> list[str]:
    """The headers of the table `panel` shows for the label sets `rows`, in their order."""
    fields = list(dict.fromkeys(name for row in rows for name in sorted(row)))
    for transformation in panel["transformations"]:
        kind, options = transformation["id"], transformation["options"]
        if kind in ("extractFields", "convertFieldType", "sortBy"):
            continue
        if kind == "filterFieldsByName":
            include = options.get("include", {})
            names, pattern = set(include.get("names", [])), include.get("pattern")
            regex = _regex(pattern) if pattern else None
            fields = [f for f in fields if f in names or (regex is not None and regex.search(f))]
        elif kind == "organize":
            included = {name for name, keep in options.get("includeByName", {}).items() if keep}
            excluded = {name for name, hide in options.get("excludeByName", {}).items() if hide}
            fields = [f for f in fields if (not included or f in included) and f not in excluded]
            index = options.get("indexByName", {})
            if index:
                fields.sort(key=lambda f: index.get(f, float("inf")))  # stable: unindexed keep their order
            renames = options.get("renameByName", {})
            fields = [renames.get(f, f) for f in fields]
        elif kind == "renameByRegex":
            regex = _regex(options["regex"])
            replacement = _js_replacement(options["renamePattern"])
            fields = [regex.sub(replacement, f, count=1) if regex.search(f) else f for f in fields]
        else:
            raise ValueError(f"transformation {kind!r} is not modelled here")
    return fields


def sorted_rows(panel: dict[str, Any], rows: list[Row]) -> list[Row]:
    """`rows` in the order the table shows them; rows without the sort field come last."""
    transformations = panel["transformations"]
    numbers = {
        conversion["targetField"]
        for t in transformations
        if t["id"] == "convertFieldType"
        for conversion in t["options"]["conversions"]
        if conversion["destinationType"] == "number"
    }
    for transformation in transformations:
        sort = transformation["options"].get("sort") if transformation["id"] == "sortBy" else None
        if not sort:
            continue
        name, desc = sort[0]["field"], bool(sort[0].get("desc"))
        present = [row for row in rows if name in row]
        convert: Any = float if name in numbers else str
        rows = sorted(present, key=lambda row: convert(row[name]), reverse=desc) + [r for r in rows if name not in r]
    return rows
