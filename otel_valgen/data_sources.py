"""Figures per data source (``valgen.data_sources``): what each source saw of each, and the step's sum.

With ``sample_by = data_source`` a step keeps k per data source (``otel_valgen.sampling.DataSourceViews``),
and presampling leaves most generations out before they reach a collector. So each end record
says, per data source, how many generations its source saw and the count and sum of their valid
scores (cumulative, like ``valgen.seen``); a step's figures add those up over its ended sources
(each source's end record with the largest ``valgen.seen``) and count the kept generations. The
collector's summary, ``show`` on embedded files and the merge of partial summaries all apply
``step_figures``; ``testdata/sampling/data_source.json`` holds the choice both suites share.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from otel_valgen import contract
from otel_valgen._sanitize import clean_text, score_stats

__all__ = [
    "DataSourceFigures",
    "DataSourceTally",
    "data_source_of",
    "data_sources_of",
    "parse_figures",
    "step_figures",
]

MAX_DATA_SOURCE_BYTES = 1024
"""Longest data source name sent, in UTF-8 bytes."""


def data_source_of(value: object) -> str:
    """A generation's data source as its record carries it (``valgen.data_source``); ``""`` for none."""
    return "" if value is None else clean_text(value, MAX_DATA_SOURCE_BYTES).text


def data_sources_of(values: Sequence[Any] | None, size: int) -> list[str]:
    """``data_source_of`` of each of a call's ``size`` generations (all ``""`` without the column).

    A call's data sources are a few values repeated, so each distinct one is cleaned once.
    """
    if values is None:
        return [""] * size
    cleaned: dict[Any, str] = {}
    out = []
    for value in values:
        try:
            text = cleaned.get(value)
        except TypeError:  # unhashable: cleaned each time
            out.append(data_source_of(value))
            continue
        if text is None:
            text = cleaned[value] = data_source_of(value)
        out.append(text)
    return out


@dataclass(frozen=True)
class DataSourceFigures:
    """One data source's figures: on an end record (``kept`` None) or of a step."""

    data_source: str
    seen: int = 0
    score_count: int | None = None  # None: no source reported score statistics for it
    score_sum: float | None = None  # None also when the sum overflows a double
    kept: int | None = None

    @property
    def score_mean(self) -> float | None:
        """The mean score over every generation of it seen, or None when none was counted."""
        if not self.score_count or self.score_sum is None:
            return None
        return self.score_sum / self.score_count

    def attribute(self) -> dict[str, Any]:
        """The map of ``valgen.data_sources`` (a step's carries ``kept`` and the mean)."""
        out: dict[str, Any] = {contract.FIGURE_DATA_SOURCE: self.data_source, contract.FIGURE_SEEN: self.seen}
        if self.kept is not None:
            out[contract.FIGURE_KEPT] = self.kept
        if self.score_count is not None:
            out[contract.FIGURE_SCORE_COUNT] = self.score_count
        if self.score_count is not None and self.score_sum is not None:
            out[contract.FIGURE_SCORE_SUM] = self.score_sum
            if self.kept is not None and (mean := self.score_mean) is not None:
                out[contract.FIGURE_SCORE_MEAN] = mean
        return out


class DataSourceTally:
    """A part's running figures per data source, for its end record. The emitter's lock guards it."""

    __slots__ = ("_figures",)

    def __init__(self) -> None:
        self._figures: dict[str, list[Any]] = {}  # data source -> [seen, score count, score sum]

    def add(self, data_sources: Sequence[str], scores: Sequence[Any] | None) -> None:
        """Count one call's generations (``data_sources`` one per generation) and their valid scores."""
        indexes: dict[str, list[int]] = {}
        for index, source in enumerate(data_sources):
            indexes.setdefault(source, []).append(index)
        for source, members in indexes.items():
            figures = self._figures.get(source)
            if figures is None:
                figures = self._figures[source] = [0, 0, 0.0]
            figures[0] += len(members)
            if scores is not None:
                scored, total = score_stats([scores[index] for index in members])
                figures[1] += scored
                figures[2] += total

    def attribute(self) -> list[dict[str, Any]]:
        """The end record's ``valgen.data_sources``; a data source whose score sum overflowed sends none."""
        return [
            DataSourceFigures(
                source,
                seen,
                count if math.isfinite(total) else None,
                total if math.isfinite(total) else None,
            ).attribute()
            for source, (seen, count, total) in sorted(self._figures.items())
        ]


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def parse_figures(value: object) -> tuple[DataSourceFigures, ...] | None:
    """A record's ``valgen.data_sources``; None when absent or not a list. Malformed entries are skipped."""
    if not isinstance(value, list | tuple):
        return None
    out = []
    for entry in value:
        if not isinstance(entry, Mapping) or not isinstance(name := entry.get(contract.FIGURE_DATA_SOURCE), str):
            continue
        seen = _int(entry.get(contract.FIGURE_SEEN))
        count = _int(entry.get(contract.FIGURE_SCORE_COUNT))
        total = entry.get(contract.FIGURE_SCORE_SUM)
        total = float(total) if isinstance(total, int | float) and not isinstance(total, bool) else None
        if count is None or total is None or not math.isfinite(total):
            total = None  # a count without a sum: the sum did not fit a double
        out.append(DataSourceFigures(name, seen or 0, count, total, _int(entry.get(contract.FIGURE_KEPT))))
    return tuple(out)


def step_figures(
    per_source: Iterable[Sequence[DataSourceFigures]], kept: Iterable[str | None]
) -> list[DataSourceFigures]:
    """A step's figures: each ended source's (its largest end record's) added up, with the kept per data source.

    Score sums are added exactly and rounded once, so the result does not depend on the order
    of the sources (as ``otel_valgen.selection.score_totals`` and the collector do). A data
    source seen only among the kept generations gets seen 0. Sorted by the name's UTF-8 bytes.
    """
    seen: Counter[str] = Counter()
    counts: dict[str, int] = {}
    sums: dict[str, Fraction] = {}
    for figures in per_source:
        for figure in figures:
            seen[figure.data_source] += figure.seen
            if figure.score_count is not None and figure.score_sum is not None:  # an end record sends both or none
                counts[figure.data_source] = counts.get(figure.data_source, 0) + figure.score_count
                sums[figure.data_source] = sums.get(figure.data_source, Fraction(0)) + Fraction(figure.score_sum)
    kept_by = Counter(source or "" for source in kept)
    names = sorted(set(seen) | set(kept_by) | set(counts), key=lambda name: name.encode("utf-8", "replace"))
    return [
        DataSourceFigures(name, seen[name], counts.get(name), _rounded(sums.get(name)), kept_by[name]) for name in names
    ]


def _rounded(total: Fraction | None) -> float | None:
    if total is None:
        return None
    try:
        return float(total)
    except OverflowError:
        return None
