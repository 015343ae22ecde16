"""Bottom-k per (run, step) over records read from files: the CLI's merge and the tests' oracle."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from otel_valgen._settings import DEFAULT_COUNT, DEFAULT_SEED
from otel_valgen.reader import EndRecord, Generation, Record, Summary
from otel_valgen.sampling import BottomK, SortKey, sample_key

__all__ = ["StepSelection", "select_steps"]


@dataclass
class StepSelection:
    """The kept generations of one (run, step), ascending by sort key, and its counts."""

    run_id: str
    step: int
    k: int
    read: int = 0
    seen_reported: int | None = None
    summary: dict[str, object] | None = None
    generations: list[Generation] = field(default_factory=list)

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


@dataclass
class _Group:
    run_id: str
    step: int
    k: int | None = None
    selector: BottomK[Generation] | None = None
    ends: dict[tuple[str, str], EndRecord] = field(default_factory=dict)
    summary: Summary | None = None
    read: int = 0


def sort_key_of(generation: Generation, seed: int) -> SortKey:
    """A record's sort key; records lacking ``sample_key`` get it from the seed."""
    key = generation.sample_key
    if key is None:
        key = sample_key(generation.seed if generation.seed is not None else seed, generation.sample_id)
    return SortKey.of(key, generation.sample_id)


def select_steps(
    records: Iterable[Record],
    *,
    count: int | None = None,
    max_count: int | None = None,
    seed: int = DEFAULT_SEED,
) -> list[StepSelection]:
    """Group by (run, step) and keep the bottom-k of each.

    k is ``count`` if given, else the smallest ``valgen.sample_count`` among the step's
    records (capped by ``max_count``), else the default.
    """
    groups: dict[tuple[str, int], _Group] = {}
    for record in records:
        group = groups.setdefault((record.run_id, record.step), _Group(record.run_id, record.step))
        if isinstance(record, Summary):
            group.summary = record
        elif isinstance(record, EndRecord):
            group.ends[(record.source, record.instance)] = record
        else:
            group.read += 1
            k = count if count is not None else (record.sample_count or DEFAULT_COUNT)
            k = min(k, max_count) if max_count is not None else k
            if group.selector is None or group.k is None or k < group.k:
                # Records asking for different k: the smallest wins, as in the collector, so
                # the result does not depend on the order the records are read in.
                previous = group.selector.items() if group.selector is not None else []
                group.k, group.selector = k, BottomK(k)
                for order, item in previous:
                    group.selector.offer(order, item)
            group.selector.offer(sort_key_of(record, seed), record)
    selections = []
    for (run_id, step), group in sorted(groups.items()):
        kept = [item for _, item in group.selector.items()] if group.selector is not None else []
        selections.append(
            StepSelection(
                run_id=run_id,
                step=step,
                k=group.k if group.k is not None else (count or DEFAULT_COUNT),
                read=group.read,
                seen_reported=sum(end.seen for end in group.ends.values()) if group.ends else None,
                summary=group.summary.attributes if group.summary is not None else None,
                generations=kept,
            )
        )
    return selections
