"""Partial groups: one step closed in parts by different samplers, merged into the exact step.

When agents re-route a step mid-way (a sampler lost, added or replaced), each sampler that
received part of it closes a group of its own. Each summary names its sampler
(``valgen.sampler``) and lists what it knew of each source (``valgen.source_figures``). The
parts merge exactly:

- the kept set: the bottom-k of the union of the parts' kept records is the bottom-k of
  everything the sources sent, because each part's kept set is the bottom-k of what it received
  (``otel_valgen.selection.cut_kept`` takes it, in prompts for rollouts);
- each source: the end and progress counts are cumulative, so the largest wins; arrivals are
  disjoint across samplers, so they add up;
- the balance is then ``otel_valgen.balance.step_balance`` over the merged sources, the same
  rule the sampler applies to one group;
- with k per data source, the bottom-k of each data source's union, and its figures
  (``valgen.data_sources``) from each source's largest end record (``otel_valgen.data_sources``).

A source that ended in no part is listed in ``valgen.sources_missing``; records an ended source
emitted that reached no part (a sampler's stored state lost for good) are ``valgen.missing``.
The merged summary says ``complete`` when every source ended, none expected is missing and
nothing is missing; it lists the samplers it merged in ``valgen.samplers``. The exporter service
and ``otel-valgen show`` / ``push`` merge parts the same way (docs/deployment.md, *Failure cases*).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from otel_valgen import contract, tokens, trajectories
from otel_valgen.balance import SourceFigures, step_balance
from otel_valgen.data_sources import DataSourceFigures, parse_figures, step_figures
from otel_valgen.distinct import PROMPTS_SEEN_ERROR, distinct_count, merge_keys, parse_keys
from otel_valgen.reader import Generation
from otel_valgen.sampling import rate_of, rate_threshold

__all__ = [
    "MergedFigures",
    "keyed_prompts",
    "merge_figures",
    "merge_summaries",
    "parts_extremes",
    "parts_mismatched",
    "parts_split",
    "sampler_of",
    "samplers_of",
]

COMPLETE = "complete"


def sampler_of(summary: Mapping[str, Any] | None) -> str:
    """The sampler that closed a summary's group ("" for a collector that does not say)."""
    value = summary.get(contract.SAMPLER) if summary else None
    return value if isinstance(value, str) else ""


def samplers_of(summary: Mapping[str, Any] | None) -> frozenset[str]:
    """The samplers whose parts a summary holds: its ``valgen.samplers``, else its one sampler."""
    merged = summary.get(contract.SAMPLERS) if summary else None
    if isinstance(merged, list):
        return frozenset(str(name) for name in merged)
    name = sampler_of(summary)
    return frozenset({name}) if name else frozenset()


def parts_split(summaries: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the parts of a group kept k per data source: every part's summary says so (``valgen.sample_by``).

    A part joined by a generation per step keeps the bottom-k of the whole, which its kept
    records alone no longer show, so the merge follows the summaries.
    """
    return bool(summaries) and all(
        summary.get(contract.SAMPLE_BY) == contract.SAMPLE_BY_DATA_SOURCE for summary in summaries
    )


def parts_extremes(summaries: Sequence[Mapping[str, Any]]) -> int:
    """The n of lowest- and highest-scored the parts of a group kept: the smallest of their summaries' (absent: 0).

    A part that received no generation (no ``valgen.sample_count``) asked for nothing, as ``parts_k`` reads it.
    """
    return _parts_n(summaries, contract.EXTREMES)


def parts_mismatched(summaries: Sequence[Mapping[str, Any]]) -> int:
    """The n of most mismatched responses the parts of a group kept, by the rule of ``parts_extremes``."""
    return _parts_n(summaries, contract.MISMATCHED)


def _parts_n(summaries: Sequence[Mapping[str, Any]], key: str) -> int:
    """The smallest ``key`` of the summaries of parts that received a generation (absent: 0)."""
    asked = [_int(summary, key) for summary in summaries if contract.SAMPLE_COUNT in summary]
    return min(asked, default=0)


def keyed_prompts(kept: Iterable[Generation]) -> int:
    """How many prompts a rollout step's kept records keep as keyed picks (a most mismatched response alone is none)."""
    return len({g.prompt_id for g in kept if g.slots is None or contract.SLOT_KEYED in g.slots})


@dataclass
class MergedFigures:
    """What the parts of a group knew of one source, merged."""

    announced: bool = False
    ended: bool = False
    seen: int = 0
    emitted: int = 0
    dropped: int = 0
    progress_seen: int = 0
    received: int = 0
    invalid: int = 0
    score_count: int | None = None  # from the part with the largest end counts
    score_sum: float | None = None
    prompts_seen: int = 0
    unhooked: str = ""
    data_sources: tuple[DataSourceFigures, ...] | None = None  # from the part with the largest end counts
    raw_data_sources: list[Any] | None = None  # the same, as the part's entry carried it
    trajectories: dict[str, Any] | None = None  # from the part with the largest end counts
    mismatch: dict[str, Any] | None = None  # the same

    def add(self, figure: Mapping[str, Any]) -> None:
        """Add one part's figures of the source."""
        self.announced |= figure.get("announced") is True
        if figure.get("ended") is True:
            # End counts are cumulative: the part with the largest seen holds the latest end record.
            if not self.ended or _int(figure, "seen") >= self.seen:
                count, total = figure.get("score.count"), figure.get("score.sum")
                if isinstance(count, int) and isinstance(total, int | float) and not isinstance(total, bool):
                    self.score_count, self.score_sum = count, float(total)
                raw = figure.get(contract.FIELD_DATA_SOURCES)
                if (parsed := parse_figures(raw)) is not None:
                    self.data_sources, self.raw_data_sources = parsed, list(raw or ())
                if isinstance(figures := figure.get(contract.FIELD_TRAJECTORIES), dict):
                    self.trajectories = figures
                if isinstance(figures := figure.get(contract.FIELD_MISMATCH), dict):
                    self.mismatch = figures
            self.ended = True
            self.seen = max(self.seen, _int(figure, "seen"))
            self.emitted = max(self.emitted, _int(figure, "emitted"))
            self.dropped = max(self.dropped, _int(figure, "dropped"))
            self.prompts_seen = max(self.prompts_seen, _int(figure, "prompts_seen"))
        self.progress_seen = max(self.progress_seen, _int(figure, "progress_seen"))
        self.received += _int(figure, "received")
        self.invalid += _int(figure, "invalid")
        unhooked = figure.get("unhooked")
        if isinstance(unhooked, str) and unhooked:
            self.unhooked = unhooked

    def balance_figures(self, kept: int) -> SourceFigures:
        """The source as ``otel_valgen.balance`` takes it, with ``kept`` of its records kept."""
        return SourceFigures(
            ended=self.ended,
            seen=self.seen,
            emitted=self.emitted,
            dropped=self.dropped,
            progress_seen=self.progress_seen,
            received=self.received,
            invalid=self.invalid,
            kept=kept,
        )

    def as_figure(self, source: str, kept: int) -> dict[str, Any]:
        """The merged source as one entry of ``valgen.source_figures``."""
        figure: dict[str, Any] = {
            "source": source,
            "announced": self.announced,
            "ended": self.ended,
            "seen": self.seen,
            "emitted": self.emitted,
            "dropped": self.dropped,
            "progress_seen": self.progress_seen,
            "received": self.received,
            "invalid": self.invalid,
            "kept": kept,
        }
        if self.score_count is not None and self.score_sum is not None:
            figure["score.count"], figure["score.sum"] = self.score_count, self.score_sum
        if self.ended and self.prompts_seen:
            figure["prompts_seen"] = self.prompts_seen
        if self.unhooked:
            figure["unhooked"] = self.unhooked
        if self.raw_data_sources is not None:
            figure[contract.FIELD_DATA_SOURCES] = self.raw_data_sources
        if self.trajectories is not None:
            figure[contract.FIELD_TRAJECTORIES] = self.trajectories
        if self.mismatch is not None:
            figure[contract.FIELD_MISMATCH] = self.mismatch
        return figure


def merge_figures(summaries: Iterable[Mapping[str, Any]]) -> dict[str, MergedFigures] | None:
    """Each source's figures merged over the parts; None when a part carries none (a collector before them)."""
    merged: dict[str, MergedFigures] = {}
    for summary in summaries:
        figures = summary.get(contract.SOURCE_FIGURES)
        if not isinstance(figures, list):
            return None
        for figure in figures:
            if isinstance(figure, Mapping) and isinstance(figure.get("source"), str):
                merged.setdefault(figure["source"], MergedFigures()).add(figure)
    return merged


def merge_summaries(summaries: Sequence[Mapping[str, Any]], kept: Sequence[Generation]) -> dict[str, Any]:
    """One summary for the parts of one group closed by different samplers, given the merged kept records.

    With one part, or parts without source figures (an older collector: nothing to merge
    exactly), the result is the first part's summary with ``valgen.kept`` counting ``kept`` and,
    for the latter, ``valgen.samplers`` naming every part so that readers see the step came in parts.
    """
    first = dict(summaries[0])
    samplers = sorted({name for summary in summaries for name in samplers_of(summary)})
    sources = merge_figures(summaries) if len(summaries) > 1 else None
    if sources is None:
        if len(summaries) > 1:
            first[contract.SAMPLERS] = samplers
        return first
    kept_by = Counter(f"{g.source or ''}@{g.instance}" for g in kept)
    seen, dropped = step_balance(figures.balance_figures(kept_by[name]) for name, figures in sources.items())
    out = first
    out.pop(contract.SAMPLER, None)
    out[contract.SAMPLERS] = samplers
    out[contract.KEPT] = len(kept)
    out[contract.SEEN] = seen
    out[contract.DROPPED] = sum(dropped.values())
    for reason, count in dropped.items():
        out[contract.DROPPED_PREFIX + reason] = count
    out[contract.MISSING] = dropped["undelivered"]
    ended = {name for name, figures in sources.items() if figures.ended}
    out[contract.SOURCES] = len(sources)
    out[contract.SOURCES_ANNOUNCED] = sum(1 for figures in sources.values() if figures.announced)
    out[contract.SOURCES_ENDED] = len(ended)
    out[contract.SOURCES_MISSING] = sorted(set(sources) - ended)
    out[contract.SOURCES_UNHOOKED] = sorted(name for name, figures in sources.items() if figures.unhooked)
    expected = max((_int(summary, contract.SOURCES_EXPECTED) for summary in summaries), default=0)
    if expected:
        out[contract.SOURCES_EXPECTED] = expected
    out[contract.LATE] = sum(_int(summary, contract.LATE) for summary in summaries)
    starts = [start for summary in summaries if (start := _int(summary, contract.ATTEMPT_START)) > 0]
    out[contract.ATTEMPT_START] = min(starts, default=0)
    out[contract.ATTEMPTS_CONCURRENT] = max(_int(summary, contract.ATTEMPTS_CONCURRENT) for summary in summaries)
    ks = [k for summary in summaries if (k := _int(summary, contract.SAMPLE_COUNT, -1)) >= 0]
    if ks:
        out[contract.SAMPLE_COUNT] = min(ks)
    for key in (contract.EXTREMES, contract.MISMATCHED):
        if n := _parts_n(summaries, key):
            out[key] = n
        else:
            out.pop(key, None)
    _put_scores(out, [figures for figures in sources.values() if figures.ended])
    _put_data_sources(out, [figures for figures in sources.values() if figures.ended], kept)
    _put_trajectories(out, [figures for figures in sources.values() if figures.ended])
    if out.get(contract.KIND) == contract.KIND_ROLLOUT:
        _put_prompts_seen(out, summaries, [figures for figures in sources.values() if figures.ended])
        out[contract.PROMPTS_KEPT] = keyed_prompts(kept)
        out[contract.PROMPTS_INCOMPLETE] = 0 if _complete_sources(out, expected) else out[contract.PROMPTS_KEPT]
        _put_rate(out, summaries)
    complete = bool(sources) and not out[contract.SOURCES_MISSING] and not out[contract.MISSING]
    complete = complete and len(ended) >= expected
    reasons = [str(summary.get(contract.CLOSED_REASON, "")) for summary in summaries]
    out[contract.CLOSED_REASON] = COMPLETE if complete else next((r for r in reasons if r != COMPLETE), reasons[0])
    out[contract.SOURCE_FIGURES] = [figures.as_figure(name, kept_by[name]) for name, figures in sorted(sources.items())]
    return out


def _put_data_sources(out: dict[str, Any], ended: list[MergedFigures], kept: Sequence[Generation]) -> None:
    """The merged step's figures per data source, when it is split or a source reported them."""
    reported = [figures.data_sources for figures in ended if figures.data_sources is not None]
    if reported or out.get(contract.SAMPLE_BY) == contract.SAMPLE_BY_DATA_SOURCE:
        figures = step_figures(reported, (g.data_source for g in kept))
        out[contract.DATA_SOURCES] = [figure.attribute() for figure in figures]


def _put_trajectories(out: dict[str, Any], ended: list[MergedFigures]) -> None:
    """The merged step's figures over every trajectory and every response's tokens, from its ended sources'.

    A figure set no ended source reported is left out.
    """
    for key, merged in (
        (contract.TRAJECTORIES, trajectories.summary(trajectories.merge(figures.trajectories for figures in ended))),
        (contract.MISMATCH, tokens.summary(trajectories.merge(figures.mismatch for figures in ended))),
    ):
        if merged is not None:
            out[key] = merged
        else:
            out.pop(key, None)


def _complete_sources(summary: Mapping[str, Any], expected: int) -> bool:
    """Whether every source of a merged summary ended, and at least the expected number."""
    ended = _int(summary, contract.SOURCES_ENDED)
    return ended >= _int(summary, contract.SOURCES) and ended >= expected


def _put_prompts_seen(out: dict[str, Any], summaries: Sequence[Mapping[str, Any]], ended: list[MergedFigures]) -> None:
    """The distinct prompts of the merged step: the parts' sketches united, else the sources' counts added."""
    for key in (contract.PROMPT_KEYS, contract.PROMPTS_SEEN_ERROR):
        out.pop(key, None)
    sketches = [
        sketch for summary in summaries if (sketch := parse_keys(summary.get(contract.PROMPT_KEYS))) is not None
    ]
    if not sketches:
        out[contract.PROMPTS_SEEN] = sum(figures.prompts_seen for figures in ended)
        out[contract.PROMPTS_SEEN_ESTIMATED] = False
        return
    keys = merge_keys(*sketches)
    count = distinct_count(keys)
    out[contract.PROMPTS_SEEN] = count.value
    out[contract.PROMPTS_SEEN_ESTIMATED] = count.estimated
    if count.estimated:
        out[contract.PROMPTS_SEEN_ERROR] = PROMPTS_SEEN_ERROR
    out[contract.PROMPT_KEYS] = keys


def _put_rate(out: dict[str, Any], summaries: Sequence[Mapping[str, Any]]) -> None:
    """The watch-list of the merged step: the smallest rate, the prompts under it from the united sketch."""
    rates = [rate for summary in summaries if (rate := rate_of(summary.get(contract.SAMPLE_RATE))) is not None]
    if not rates:
        return
    out[contract.SAMPLE_RATE] = min(rates)
    keys = out.get(contract.PROMPT_KEYS)
    if isinstance(keys, list):
        under = bisect.bisect_left(keys, rate_threshold(min(rates)))
        out[contract.PROMPTS_UNDER_RATE] = under
        out[contract.PROMPTS_OVER_CAP] = max(under - out[contract.PROMPTS_KEPT], 0)


def _put_scores(out: dict[str, Any], ended: list[MergedFigures]) -> None:
    reported = [figures for figures in ended if figures.score_count is not None and figures.score_sum is not None]
    for key in (contract.SCORE_COUNT, contract.SCORE_SUM, contract.SCORE_MEAN):
        out.pop(key, None)
    if not reported:
        return
    count = sum(figures.score_count or 0 for figures in reported)
    total = math.fsum(figures.score_sum or 0.0 for figures in reported)
    out[contract.SCORE_COUNT] = count
    if math.isfinite(total):
        out[contract.SCORE_SUM] = total
        if count > 0:
            out[contract.SCORE_MEAN] = total / count


def _int(mapping: Mapping[str, Any], key: str, default: int = 0) -> int:
    value = mapping.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else default
