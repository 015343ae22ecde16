"""Bottom-k per (run, step) over records read from files: the CLI's merge and the tests' oracle.

Records of one kind are selected at a time (``kind=``, ``valgen.kind``: validation by default,
or rollout), so that a step's validation and its rollouts never share a group: groups are
(run, step, attempt, kind). A rollout attempt keeps its bottom-k prompts with every response of
each (the group view, ``otel_valgen.sampling.GroupView``), and counts prompts seen and kept.
Rollout records that carry a rate (``valgen.sample_rate``, the watch-list) keep only prompts
whose key is below the threshold of the smallest rate of the attempt's records, as the collector.

A step may have several attempts (``valgen.attempt``: a resumed or retried job validates the
same step again). Records are grouped by (run, step, attempt) and one attempt is shown per
(run, step), by the rule every consumer applies (``choose_attempt``): the attempt that started
last among the complete ones; if none is complete, the one that started last; ties go to the
larger attempt string.

Two kinds of files:

- **collector output** (the step has ``valgen.step.summary`` records): the sampler already
  chose; an attempt's generations are its ranked records (``valgen.rank``), completeness and
  start come from its summary.
- **embedded-sink files** (no summary): bottom-k per attempt over its generations; an attempt
  is complete when every source that sent a start record also sent its end record (and at
  least ``valgen.sources_expected`` ended, when a record says so); it starts at its smallest
  record timestamp. A source that sent several end records (block-less parts, each with its
  cumulative counts) counts with the largest of them, as in the collector.

Score statistics (``score_count``, ``score_sum``, ``score_mean``) cover every generation the
sources saw, not only the kept ones: from the summary for collector output, else from the end
records (``score_totals``), by the rule the collector's summary follows. So do ``seen`` and
its balance, ``seen = kept + dropped`` by reason (``otel_valgen.balance``): the summary's, else
computed from each source's end and progress records and the generations read.

Attempts of one step that ran at the same time with no common source (one launch probably
split into attempts, ``otel_valgen.splits``) are counted per attempt: the summary's
``valgen.attempts_concurrent`` when it has one, else from the attempts' sources and record
times as read.

Sources whose validation ran in verl's own table instead of otel-valgen (``otel_valgen.unhooked``)
are listed per attempt: the summary's ``valgen.sources_unhooked`` when it has one, else the
sources any of whose start or end records says ``valgen.integration=unhooked``.

The records of an attempt are compared under one key version (``valgen.key_version``, absent
is 1): that of its first generation; a generation of another version gets its key recomputed
from its seed and sample id, as in the collector.

With k per data source (``valgen.sample_by``, ``otel_valgen.sampling.DataSourceViews``) each
data source of an attempt keeps its own k, and ``data_sources`` gives its figures
(``otel_valgen.data_sources``): the summary's, else from the end records and the kept generations.

Generations tagged ``valgen.late`` (forwarded by a sampler after their step closed) are never
part of a selection.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Protocol, TypeVar

from otel_valgen import contract, tokens, trajectories
from otel_valgen._settings import DEFAULT_COUNT, DEFAULT_SEED
from otel_valgen.balance import SourceFigures, step_balance, summary_dropped
from otel_valgen.data_sources import DataSourceFigures, parse_figures, step_figures
from otel_valgen.distinct import DistinctCount, distinct_count, merge_keys
from otel_valgen.partials import (
    keyed_prompts,
    merge_summaries,
    parts_extremes,
    parts_mismatched,
    parts_split,
    sampler_of,
)
from otel_valgen.reader import EndRecord, Generation, LateReport, ProgressRecord, Record, StartRecord, Summary
from otel_valgen.sampling import (
    LEGACY_KEY_VERSION,
    DataSourceViews,
    SortKey,
    rate_of,
    rate_threshold,
    sample_key,
    step_k,
)
from otel_valgen.splits import Footprint, concurrent_counts

__all__ = [
    "AttemptSelection",
    "StepSelection",
    "attempt_rank",
    "choose_attempt",
    "cut_kept",
    "parts_k",
    "score_totals",
    "select_attempts",
    "select_steps",
]

COMPLETE = "complete"


class _Candidate(Protocol):
    @property
    def attempt(self) -> str: ...
    @property
    def attempt_start(self) -> int: ...
    @property
    def complete(self) -> bool: ...


C = TypeVar("C", bound=_Candidate)


def attempt_rank(candidate: _Candidate) -> tuple[bool, int, str]:
    """The shared order of attempts: complete first, then the latest start, then the larger attempt."""
    return (candidate.complete, candidate.attempt_start, candidate.attempt)


def choose_attempt(candidates: Iterable[C]) -> C | None:
    """The attempt to show: latest start among the complete ones, else latest start; ties: larger attempt."""
    return max(candidates, key=attempt_rank, default=None)


@dataclass
class StepSelection:
    """The kept generations of one (run, step, attempt), ascending by sort key, and its counts.

    ``select_steps`` returns one per (run, step): the chosen attempt, with ``attempts`` the
    number of attempts of the step seen, ``late`` the late records reported for it, and
    ``split_attempts`` how many of the step's attempts ran at the same time as another one with
    no common source (0: no sign of a launch split into attempts; see ``_split_attempts``).
    ``sources_unhooked`` lists the attempt's sources ("source@instance") that ran verl's own
    table instead (``otel_valgen.unhooked``).
    """

    run_id: str
    step: int
    k: int
    read: int = 0
    seen_reported: int | None = None
    summary: dict[str, object] | None = None
    generations: list[Generation] = field(default_factory=list)
    attempt: str = ""
    attempt_start: int = 0
    complete: bool = False
    attempts: int = 1
    late: int = 0
    score_count: int | None = None  # None: no source reported score statistics
    score_sum: float | None = None  # None also when the sum overflows a double
    dropped: dict[str, int] | None = None  # by reason (otel_valgen.balance); None: a summary without it
    attempts_concurrent: int = 0  # the step's other attempts concurrent with this one (otel_valgen.splits)
    split_attempts: int = 0
    sources_unhooked: list[str] = field(default_factory=list)
    kind: str = contract.KIND_VALIDATION
    sample_rate: float | None = None  # rollouts: the watch-list's rate (the smallest of the records), None: off
    prompts_under_rate: int | None = None  # with a rate: distinct prompts under it that the sources saw
    prompts_seen: int | None = None  # rollouts: distinct prompts the ended sources saw (None: unreported)
    prompts_seen_estimated: bool = False  # an estimate (otel_valgen.distinct: PROMPTS_SEEN_ERROR)
    prompts_incomplete: int = 0  # rollouts: kept prompts that a source that never ended may lack responses of
    prompts_kept: int | None = None  # rollouts: prompts kept (k is in prompts too)
    by_data_source: bool = False  # k per (step, data source) (valgen.sample_by)
    extremes: int = 0  # the n lowest- and highest-scored kept beside the keyed picks (valgen.extremes)
    mismatched: int = 0  # rollouts: the n responses of the largest KL kept beside them (valgen.mismatched)
    data_sources: list[DataSourceFigures] | None = None  # per data source (None: none reported, not split)
    trajectories: dict[str, Any] | None = None  # figures over every trajectory (otel_valgen.trajectories)
    mismatch: dict[str, Any] | None = None  # the responses' per-token figures (otel_valgen.tokens)

    @property
    def score_mean(self) -> float | None:
        """The mean score over every generation seen (not only the kept), or None when none was counted."""
        if not self.score_count or self.score_sum is None:
            return None
        return self.score_sum / self.score_count

    @property
    def seen(self) -> int:
        """Generations the sources reported seeing; else what was read."""
        reported = self.summary.get("valgen.seen") if self.summary is not None else None
        if isinstance(reported, int):
            return reported
        return self.seen_reported if self.seen_reported is not None else self.read

    @property
    def kept(self) -> int:
        """How many generations were selected."""
        return len(self.generations)


AttemptSelection = StepSelection
"""One attempt's selection (the same shape as a step's)."""


@dataclass
class _Attempt:
    run_id: str
    step: int
    attempt: str
    kind: str = contract.KIND_VALIDATION
    k: int | None = None
    key_version: int | None = None
    selector: DataSourceViews[Generation] | None = None
    ranked: dict[str, Generation] = field(default_factory=dict)
    starts: set[tuple[str, str]] = field(default_factory=set)
    ends: dict[tuple[str, str], EndRecord] = field(default_factory=dict)
    sources_expected: int | None = None
    summary: Summary | None = None
    parts: dict[str, Summary] = field(default_factory=dict)  # summaries by sampler (otel_valgen.partials)
    late: int = 0
    read: int = 0
    first: int | None = None
    last: int = 0
    sources: set[tuple[str, str]] = field(default_factory=set)
    received: Counter[tuple[str, str]] = field(default_factory=Counter)
    progress: dict[tuple[str, str], int] = field(default_factory=dict)
    unhooked: set[tuple[str, str]] = field(default_factory=set)

    def saw(self, timestamp: int, source: tuple[str, str] | None = None) -> None:
        if timestamp > 0 and (self.first is None or timestamp < self.first):
            self.first = timestamp
        self.last = max(self.last, timestamp)
        if source is not None:
            self.sources.add(source)

    def footprint(self) -> Footprint:
        """Its sources and the span of its record times (starting at its summary's attempt start when earlier)."""
        starts = [t for t in (self.first, self.summary.attempt_start if self.summary is not None else 0) if t]
        first = min(starts, default=0)
        return Footprint(frozenset(self.sources), first, max(self.last, first))

    def expect(self, value: int | None) -> None:
        if value is not None:
            self.sources_expected = max(value, self.sources_expected or 0)


def sort_key_of(generation: Generation, seed: int, version: int | None = None) -> SortKey:
    """A record's sort key under key ``version`` (default: the record's own).

    A record lacking ``sample_key``, or whose key is of another version, gets it from its seed
    (else ``seed``) and its sample id.
    """
    own = generation.key_version or LEGACY_KEY_VERSION
    version = own if version is None else version
    key = generation.sample_key if own == version else None
    if key is None:
        key = sample_key(generation.seed if generation.seed is not None else seed, generation.sample_id, version)
    return SortKey.of(key, generation.sample_id)


def prompt_key_of(generation: Generation, seed: int, version: int) -> SortKey:
    """A rollout's prompt sort key: its ``prompt_key``, else computed from its seed and prompt id.

    A record of another key version than ``version`` gets it computed, as its sample key does.
    """
    prompt_id = generation.prompt_id or ""
    key = generation.prompt_key if (generation.key_version or LEGACY_KEY_VERSION) == version else None
    if key is None:
        key = sample_key(generation.seed if generation.seed is not None else seed, prompt_id, version)
    return SortKey.of(key, prompt_id)


def _offer(group: _Attempt, record: Generation, count: int | None, max_count: int | None, seed: int) -> None:
    k = count if count is not None else (record.sample_count or DEFAULT_COUNT)
    k = min(k, max_count) if max_count is not None else k
    k = step_k(group.k, k)
    if group.selector is None:
        group.selector = DataSourceViews(
            k, extremes=extremes_of(record, group.kind), mismatched=mismatched_of(record, group.kind)
        )
    elif k < group.selector.k:
        group.selector.shrink(k)
    group.k = k
    if group.key_version is None:  # a step's key version is that of its first generation
        group.key_version = record.key_version or LEGACY_KEY_VERSION
    _offer_to(group.selector, record, group.kind, seed, group.key_version)


def asks_data_source(generation: Generation) -> bool:
    """Whether a generation asks for k per (step, data source) (``valgen.sample_by``)."""
    return generation.attributes.get(contract.SAMPLE_BY) == contract.SAMPLE_BY_DATA_SOURCE


def extremes_of(generation: Generation, kind: str) -> int:
    """The n a validation generation asks for (``valgen.extremes``; absent, not an int >= 0, or a rollout: 0)."""
    value = generation.attributes.get(contract.EXTREMES)
    usable = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if usable and kind == contract.KIND_VALIDATION else 0  # type: ignore[return-value]


def mismatched_of(generation: Generation, kind: str) -> int:
    """The n a rollout record asks for (``valgen.mismatched``; absent, not an int >= 0, or validation: 0)."""
    value = generation.attributes.get(contract.MISMATCHED)
    usable = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if usable and kind == contract.KIND_ROLLOUT else 0  # type: ignore[return-value]


def kl_of(generation: Generation) -> float | None:
    """A rollout record's ``valgen.mismatch.kl`` (an int or a double), None without one.

    One that is not finite is no KL either: ``FigureRanks`` leaves it out.
    """
    value = generation.attributes.get(contract.MISMATCH_PREFIX + tokens.KL)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _offer_to(
    views: DataSourceViews[Generation],
    record: Generation,
    kind: str,
    seed: int,
    key_version: int | None,
    decided: bool = False,
) -> None:
    """Offer one generation: its own prompt (validation) or its prompt's (rollouts), in its data source's view.

    Its ``valgen.sample_by``, ``valgen.extremes`` and ``valgen.mismatched`` apply unless they are
    ``decided`` already.
    """
    if not decided:
        views.ask(asks_data_source(record), extremes_of(record, kind), mismatched_of(record, kind))
    order = sort_key_of(record, seed, key_version)
    if kind == contract.KIND_ROLLOUT:
        views.lower_rate(record_rate(record))  # the watch-list: the smallest rate wins
        prompt = prompt_key_of(record, seed, key_version or LEGACY_KEY_VERSION)
    else:
        prompt = order
    kl = kl_of(record) if views.mismatched else None
    views.offer(record.data_source or "", prompt, order, record, record.score, kl)


def record_rate(generation: Generation) -> float | None:
    """A rollout record's watch-list rate (``valgen.sample_rate``), None when it has none (or not a usable one)."""
    return rate_of(generation.attributes.get(contract.SAMPLE_RATE))


def parts_k(k: int | None, parts: Iterable[Mapping[str, object]]) -> int | None:
    """The smallest of ``k`` and the k each part's sampler kept to (``valgen.sample_count``)."""
    asked = [k] if k is not None else []
    asked += [value for part in parts if isinstance(value := part.get(contract.SAMPLE_COUNT), int)]
    return min(asked) if asked else None


def cut_kept(
    generations: Iterable[Generation],
    k: int | None,
    kind: str,
    seed: int,
    key_version: int | None = None,
    by_data_source: bool | None = None,
    extremes: int = 0,
    mismatched: int = 0,
) -> list[Generation]:
    """The bottom-``k`` of kept records (of one group's parts): by sort key, or for rollouts ``k`` prompts whole.

    ``k`` of each data source when ``by_data_source`` (the parts' summaries all say
    ``valgen.sample_by``: a part's kept records no longer show the generation that joined it),
    with the ``extremes`` lowest- and highest-scored and the ``mismatched`` responses of the
    largest KL; None decides them by the records, as a group does. ``k`` None keeps all. A
    record kept only in a ranked slot of a part cannot enter the keyed picks of the union (its
    part's keyed picks are smaller), nor a keyed one such a slot, so every record is offered to all.
    """
    generations = list(generations)
    if kind == contract.KIND_ROLLOUT:
        key_version = key_version or LEGACY_KEY_VERSION
    decided = by_data_source is not None
    if not decided:
        extremes = extremes_of(generations[0], kind) if generations else 0
        mismatched = mismatched_of(generations[0], kind) if generations else 0
    views: DataSourceViews[Generation] = DataSourceViews(
        k if k is not None else len(generations), extremes=extremes, mismatched=mismatched
    )
    if by_data_source is not None:
        views.ask(by_data_source)
    for g in generations:
        _offer_to(views, g, kind, seed, key_version, decided=decided)
    return _selected(views)


def _selected(selector: DataSourceViews[Generation] | None) -> list[Generation]:
    """The kept generations in rank order (by data source when split; a rollout's by prompt, then response).

    With extremes or the most mismatched, each carries its slots (``DataSourceViews.ranked``).
    """
    if selector is None:
        return []
    if not selector.extremes and not selector.mismatched:
        # No slots, also on records a part marked before the merge turned them off.
        return [item if item.slots is None else replace(item, slots=None) for _, _, item in selector.items()]
    return [replace(item, slots=slots) for item, slots in selector.ranked()]


def _prompts_seen(ends: Mapping[tuple[str, str], EndRecord]) -> DistinctCount | None:
    """A rollout attempt's distinct prompts: its ended sources' sketches merged; None if none reported.

    A source without a sketch (a library before it) adds its ``valgen.prompts_seen``, as the
    collector does.
    """
    sketches = [end.prompt_keys for end in ends.values() if end.prompt_keys is not None]
    unsketched = [end.prompts_seen for end in ends.values() if end.prompt_keys is None and end.prompts_seen is not None]
    if not sketches:
        return DistinctCount(sum(unsketched), False) if unsketched else None
    value, estimated = distinct_count(merge_keys(*sketches))
    return DistinctCount(value + sum(unsketched), estimated)


def _score_pair(end: EndRecord) -> tuple[int, float] | None:
    """An end record's (score count, score sum), when it carries both, valid."""
    if end.score_count is None or end.score_sum is None or end.score_count < 0 or not math.isfinite(end.score_sum):
        return None
    return end.score_count, end.score_sum


def _larger_end(known: EndRecord | None, end: EndRecord) -> EndRecord:
    """Repeated end records of one source (block-less parts, redeliveries): the largest counts.

    Each end record of a source counts everything it did so far in that attempt, so the
    largest is the latest whatever order the records are read in (the collector does the same).
    The score count and sum travel as a pair: those of the record with the larger count (on a
    tie, the larger sum), never one record's count with another's sum; so do the figures per data source.
    """
    if known is None:
        return end
    pairs = [pair for pair in (_score_pair(known), _score_pair(end)) if pair is not None]
    score_count, score_sum = max(pairs) if pairs else (None, None)
    return replace(
        end,
        seen=max(known.seen, end.seen),
        emitted=max(known.emitted, end.emitted),
        dropped=max(known.dropped, end.dropped),
        sources_expected=max(known.sources_expected or 0, end.sources_expected or 0) or None,
        timestamp=min(known.timestamp, end.timestamp),
        score_count=score_count,
        score_sum=score_sum,
        prompts_seen=max((n for n in (known.prompts_seen, end.prompts_seen) if n is not None), default=None),
        prompt_keys=_merged_keys(known.prompt_keys, end.prompt_keys),
        # The figures per data source of the record that saw the most (on a tie, the one read last).
        data_sources=(end if end.seen >= known.seen else known).data_sources or known.data_sources or end.data_sources,
        trajectories=(end if end.seen >= known.seen else known).trajectories or known.trajectories or end.trajectories,
        mismatch=(end if end.seen >= known.seen else known).mismatch or known.mismatch or end.mismatch,
    )


def _under_rate(ends: Mapping[tuple[str, str], EndRecord], rate: float) -> int | None:
    """The distinct prompts under ``rate`` that the ended sources saw, from their merged sketches (as the collector).

    Exact while fewer than m keys of the sketch are under the threshold; None without sketches.
    """
    sketches = [end.prompt_keys for end in ends.values() if end.prompt_keys is not None]
    if not sketches:
        return None
    return bisect.bisect_left(merge_keys(*sketches), rate_threshold(rate))


def _all_ended(group: _Attempt) -> bool:
    """Whether every source that sent records of the attempt sent its end record."""
    return group.sources <= set(group.ends)


def _merged_keys(known: tuple[int, ...] | None, end: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """A source's sketches of two end records merged (each is cumulative; their union is exact)."""
    if known is None or end is None:
        return end if known is None else known
    return tuple(merge_keys(known, end))


def score_totals(ends: Mapping[tuple[str, str], EndRecord]) -> tuple[int, float | None] | None:
    """A step's score count and sum over its ended sources (each source's largest end record).

    Sources whose end records carry no score statistics (earlier SDKs) are left out; None when
    none carries them. The sum is the sources' sums added exactly, then rounded to the nearest
    double, so it does not depend on their order (the collector adds them exactly too); None
    when it does not fit a double. testdata/sampling/score_stats.json holds the cases both
    suites check.
    """
    pairs = [pair for pair in map(_score_pair, ends.values()) if pair is not None]
    if not pairs:
        return None
    exact = sum((Fraction(score_sum) for _, score_sum in pairs), Fraction(0))
    try:
        total: float | None = float(exact)  # int / int: correctly rounded, ties to even
    except OverflowError:
        total = None
    return sum(n for n, _ in pairs), total


def _add(group: _Attempt, record: Record, count: int | None, max_count: int | None, seed: int) -> None:
    if isinstance(record, Summary):
        group.summary = record
        group.parts[sampler_of(record.attributes)] = record  # a sampler's repeated summary replaces its part
    elif isinstance(record, LateReport):
        group.late = max(group.late, record.late)  # cumulative counts: the largest is the latest
    elif isinstance(record, StartRecord):
        group.saw(record.timestamp, (record.source, record.instance))
        group.starts.add((record.source, record.instance))
        group.expect(record.sources_expected)
        _note_unhooked(group, record)
    elif isinstance(record, ProgressRecord):
        source = (record.source, record.instance)
        group.saw(record.timestamp, source)
        group.progress[source] = max(group.progress.get(source, 0), record.seen)
    elif isinstance(record, EndRecord):
        source = (record.source, record.instance)
        group.saw(record.timestamp, source)
        group.ends[source] = _larger_end(group.ends.get(source), record)
        group.expect(record.sources_expected)
        _note_unhooked(group, record)
    elif not record.late:
        source = _source_of(record)
        group.saw(record.timestamp, source)
        group.received[source] += 1
        group.read += 1
        if record.rank is not None:
            group.ranked.setdefault(record.sample_id, record)
        _offer(group, record, count, max_count, seed)


def _note_unhooked(group: _Attempt, record: StartRecord | EndRecord) -> None:
    if record.integration == contract.INTEGRATION_UNHOOKED:
        group.unhooked.add((record.source, record.instance))


def _sources_unhooked(group: _Attempt) -> list[str]:
    """The attempt's sources that ran verl's own table: its summary's list, else from its records."""
    listed = group.summary.sources_unhooked if group.summary is not None else None
    if listed is not None:
        return sorted(listed)
    return sorted(f"{source}@{instance}" for source, instance in group.unhooked)


def _source_of(generation: Generation) -> tuple[str, str]:
    return (generation.source or "", generation.instance)


def _embedded_balance(group: _Attempt, kept: Iterable[Generation]) -> tuple[int, dict[str, int]]:
    """Seen and dropped by reason of an attempt read from embedded-sink files (``otel_valgen.balance``)."""
    kept_by = Counter(map(_source_of, kept))
    figures = []
    for source in group.sources:
        end = group.ends.get(source)
        figures.append(
            SourceFigures(
                ended=end is not None,
                seen=end.seen if end is not None else 0,
                emitted=end.emitted if end is not None else 0,
                dropped=end.dropped if end is not None else 0,
                progress_seen=group.progress.get(source, 0),
                received=group.received[source],
                kept=kept_by[source],
            )
        )
    return step_balance(figures)


def _finish(group: _Attempt, collector: bool, count: int | None, seed: int) -> StepSelection:
    summary = group.summary
    if collector:
        # One summary's ranks follow its keys. A collector that forgot a closed group closes a
        # second one for the same attempt (a resumed run under a repeated launch id): the union
        # of both groups' kept records, cut to the step's k by key, is the bottom-k of both.
        # group.k is the k rule over the records and --count (_offer).
        # Parts of the group closed by other samplers (an agent re-routed the step) merge the same way.
        parts = [part.attributes for _, part in sorted(group.parts.items())]
        k, split, extremes = parts_k(group.k, parts), parts_split(parts), parts_extremes(parts)
        mismatched = parts_mismatched(parts)
        kept = cut_kept(group.ranked.values(), k, group.kind, seed, group.key_version, split, extremes, mismatched)
        if len(parts) > 1:
            summary = Summary(group.run_id, group.step, merge_summaries(parts, kept))
        late = group.late
        if not late and summary is not None:
            reported = summary.attributes.get("valgen.late")
            late = reported if isinstance(reported, int) and not isinstance(reported, bool) else 0
        return StepSelection(
            run_id=group.run_id,
            step=group.step,
            k=group.k if group.k is not None else (count or DEFAULT_COUNT),
            read=len(group.ranked),
            seen_reported=sum(end.seen for end in group.ends.values()) if group.ends else None,
            summary=summary.attributes if summary is not None else None,
            generations=kept,
            attempt=group.attempt,
            attempt_start=summary.attempt_start if summary is not None else (group.first or 0),
            complete=summary is not None and summary.closed_reason == COMPLETE,
            late=late,
            score_count=summary.score_count if summary is not None else None,
            score_sum=summary.score_sum if summary is not None else None,
            dropped=summary_dropped(summary.attributes) if summary is not None else None,
            sources_unhooked=_sources_unhooked(group),
            kind=group.kind,
            sample_rate=rate_of(summary.attributes.get(contract.SAMPLE_RATE)) if summary is not None else None,
            prompts_under_rate=summary.prompts_under_rate if summary is not None else None,
            prompts_seen=summary.prompts_seen if summary is not None else None,
            prompts_seen_estimated=summary is not None and summary.prompts_seen_estimated,
            prompts_incomplete=summary.prompts_incomplete if summary is not None else 0,
            prompts_kept=keyed_prompts(kept) if group.kind == contract.KIND_ROLLOUT else None,
            by_data_source=summary is not None
            and summary.attributes.get(contract.SAMPLE_BY) == contract.SAMPLE_BY_DATA_SOURCE,
            data_sources=_summary_figures(summary),
            trajectories=_summary_map(summary, contract.TRAJECTORIES),
            mismatch=_summary_map(summary, contract.MISMATCH),
            extremes=extremes,
            mismatched=mismatched,
        )
    ended = set(group.ends)
    scores = score_totals(group.ends)
    known = group.starts | ended
    complete = bool(known) and group.starts <= ended and len(ended) >= (group.sources_expected or 0)
    generations = _selected(group.selector)
    seen, dropped = _embedded_balance(group, generations)
    rollout = group.kind == contract.KIND_ROLLOUT
    rate = group.selector.rate if rollout and group.selector is not None else None
    prompts = _prompts_seen(group.ends) if rollout else None
    prompts_kept = keyed_prompts(generations) if rollout else None
    split = group.selector is not None and bool(group.selector.split)
    reported = [end.data_sources for end in group.ends.values() if end.data_sources is not None]
    return StepSelection(
        run_id=group.run_id,
        step=group.step,
        k=group.k if group.k is not None else (count or DEFAULT_COUNT),
        read=group.read,
        seen_reported=seen,
        summary=None,
        generations=generations,
        attempt=group.attempt,
        attempt_start=group.first or 0,
        complete=complete,
        late=group.late,
        score_count=scores[0] if scores is not None else None,
        score_sum=scores[1] if scores is not None else None,
        dropped=dropped,
        sources_unhooked=_sources_unhooked(group),
        kind=group.kind,
        sample_rate=rate,
        prompts_under_rate=_under_rate(group.ends, rate) if rate is not None else None,
        prompts_seen=prompts.value if prompts is not None else None,
        prompts_seen_estimated=prompts is not None and prompts.estimated,
        # A source that never ended may hold responses of any kept prompt (the collector's rule).
        prompts_incomplete=prompts_kept if prompts_kept and not (complete and _all_ended(group)) else 0,
        prompts_kept=prompts_kept,
        by_data_source=split,
        data_sources=step_figures(reported, (g.data_source for g in generations)) if split or reported else None,
        trajectories=trajectories.summary(trajectories.merge(end.trajectories for end in group.ends.values())),
        mismatch=tokens.summary(trajectories.merge(end.mismatch for end in group.ends.values())),
        extremes=group.selector.extremes if group.selector is not None else 0,
        mismatched=group.selector.mismatched if group.selector is not None else 0,
    )


def _summary_map(summary: Summary | None, key: str) -> dict[str, Any] | None:
    """A summary's map attribute ``key``, None when absent."""
    value = summary.attributes.get(key) if summary is not None else None
    return value if isinstance(value, dict) else None


def _summary_figures(summary: Summary | None) -> list[DataSourceFigures] | None:
    """A summary's figures per data source (``valgen.data_sources``), None when it has none."""
    figures = parse_figures(summary.attributes.get(contract.DATA_SOURCES)) if summary is not None else None
    return list(figures) if figures is not None else None


def _concurrent(groups: list[_Attempt]) -> dict[str, int]:
    """Per attempt of one step: the summary's ``valgen.attempts_concurrent``, else counted from the footprints."""
    out = concurrent_counts({group.attempt: group.footprint() for group in groups})
    for group in groups:
        if group.summary is not None and group.summary.attempts_concurrent is not None:
            out[group.attempt] = group.summary.attempts_concurrent
    return out


def select_attempts(
    records: Iterable[Record],
    *,
    count: int | None = None,
    max_count: int | None = None,
    seed: int = DEFAULT_SEED,
    kind: str = contract.KIND_VALIDATION,
) -> dict[tuple[str, int], list[StepSelection]]:
    """Every attempt of every (run, step) of one ``kind``, selected on its own (see the module docstring).

    A step is read as collector output when any record of it (of that kind) is a
    ``valgen.step.summary``; then only attempts with a summary are listed.
    """
    groups: dict[tuple[str, int, str, str], _Attempt] = {}
    for record in records:
        if record.kind != kind:
            continue  # a group is (run, step, attempt, kind): the other kind's records are other groups
        key = (record.run_id, record.step, record.attempt, record.kind)
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Attempt(record.run_id, record.step, record.attempt, record.kind)
        _add(group, record, count, max_count, seed)
    collector_steps = {(g.run_id, g.step) for g in groups.values() if g.summary is not None}
    by_step: dict[tuple[str, int], list[_Attempt]] = {}
    for (run_id, step, _, _), group in sorted(groups.items()):
        if (run_id, step) in collector_steps and group.summary is None:
            continue  # ranked or late records of an attempt whose summary is not in these files
        by_step.setdefault((run_id, step), []).append(group)
    steps: dict[tuple[str, int], list[StepSelection]] = {}
    for step_key, attempts in by_step.items():
        concurrent = _concurrent(attempts)
        steps[step_key] = [_finish(group, step_key in collector_steps, count, seed) for group in attempts]
        for selection in steps[step_key]:
            selection.attempts_concurrent = concurrent[selection.attempt]
    return steps


def _split_attempts(attempts: list[StepSelection]) -> int:
    """How many attempts of a step ran at the same time as another with no common source (0: none).

    Each such attempt of the files counts, and an attempt whose summary counts c others stands
    for c + 1 (those others may not be in the files).
    """
    involved = sum(1 for attempt in attempts if attempt.attempts_concurrent > 0)
    most = max((attempt.attempts_concurrent for attempt in attempts), default=0)
    return max(involved, most + 1) if involved else 0


def select_steps(
    records: Iterable[Record],
    *,
    count: int | None = None,
    max_count: int | None = None,
    seed: int = DEFAULT_SEED,
    kind: str = contract.KIND_VALIDATION,
) -> list[StepSelection]:
    """One selection per (run, step) of one ``kind``: the attempt ``choose_attempt`` picks, its sample kept.

    k is ``count`` if given, else the smallest ``valgen.sample_count`` among the attempt's
    records (capped by ``max_count``), else the default; for rollouts it counts prompts.
    """
    selections: list[StepSelection] = []
    chosen_kind = select_attempts(records, count=count, max_count=max_count, seed=seed, kind=kind)
    for _, attempts in sorted(chosen_kind.items()):
        chosen = choose_attempt(attempts)
        if chosen is not None:
            chosen.attempts = len(attempts)
            chosen.split_attempts = _split_attempts(attempts)
            selections.append(chosen)
    return selections
