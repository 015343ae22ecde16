"""A step's balance: each generation its sources saw was kept, or dropped for one reason.

``seen = kept + dropped``, and ``dropped`` is the sum of the reasons in ``DROP_REASONS``:

- ``sampled``: not among the k: left out by a source's presampler, or ranked out (or
  delivered twice) where the step's bottom-k is taken;
- ``source``: dropped by the source itself (bad input, calls after shutdown): its end
  records' ``valgen.dropped``;
- ``invalid``: reached the sampler but could not be sampled (no sample id, a bad key, ...);
- ``undelivered``: emitted by a source that ended, never arrived (the summary's ``valgen.missing``);
- ``not_ended``: reported seen by the progress records of a source that never ended, never arrived.

The collector's sampler writes the balance on each ``valgen.step.summary`` (``valgen.dropped``
and ``valgen.dropped.<reason>``); ``otel-valgen show`` computes it the same way for embedded-sink
files. Each source is split on its own (``source_balance``), then the step adds them up. The
``dropped`` of each group in ``testdata/lifecycle/*.json`` holds the cases both the Go and the
Python tests check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from otel_valgen import contract

__all__ = ["DROP_REASONS", "SourceFigures", "source_balance", "step_balance", "summary_dropped"]

DROP_REASONS: Final = ("sampled", "source", "invalid", "undelivered", "not_ended")


@dataclass(frozen=True)
class SourceFigures:
    """What a step knows of one source (``valgen.source``, ``service.instance.id``).

    Attributes:
        ended: whether an end record of the source arrived.
        seen, emitted, dropped: its end record's counts (the largest of each, over its end records).
        progress_seen: the largest ``valgen.seen`` of its progress records.
        received: its generation records that arrived and could be sampled (a copy counts again).
        invalid: its generation records that arrived and could not be sampled.
        kept: how many of its records the step keeps.

    """

    ended: bool = False
    seen: int = 0
    emitted: int = 0
    dropped: int = 0
    progress_seen: int = 0
    received: int = 0
    invalid: int = 0
    kept: int = 0


def source_balance(source: SourceFigures) -> tuple[int, dict[str, int]]:
    """One source's seen and its dropped generations by reason, with ``seen = kept + sum(dropped)``.

    A source that ended is taken at its end record, raised where that contradicts what arrived:
    it emitted at least the records kept from it, and saw at least what it emitted plus what it
    dropped. Of its emitted records, those that did not arrive are undelivered, those that arrived
    invalid are invalid, the others not kept were ranked out; arrivals beyond its emitted
    (redeliveries) change nothing. A source that did not end saw the larger of what arrived and
    its last progress figure; what it reported beyond the arrivals is ``not_ended``.
    """
    arrived = source.received + source.invalid
    if not source.ended:
        seen = max(arrived, source.progress_seen)
        return seen, _reasons(sampled=source.received - source.kept, invalid=source.invalid, not_ended=seen - arrived)
    emitted = max(source.emitted, source.kept)
    seen = max(source.seen, emitted + source.dropped)
    not_kept = emitted - source.kept
    undelivered = max(0, emitted - arrived)
    invalid = min(source.invalid, not_kept - undelivered)
    presampled = seen - emitted - source.dropped
    return seen, _reasons(
        sampled=presampled + not_kept - undelivered - invalid,
        source=source.dropped,
        invalid=invalid,
        undelivered=undelivered,
    )


def step_balance(sources: Iterable[SourceFigures]) -> tuple[int, dict[str, int]]:
    """A step's seen and its dropped generations by reason: the sum over its sources."""
    seen, dropped = 0, _reasons()
    for source in sources:
        source_seen, source_dropped = source_balance(source)
        seen += source_seen
        for reason, count in source_dropped.items():
            dropped[reason] += count
    return seen, dropped


def summary_dropped(attributes: Mapping[str, Any]) -> dict[str, int] | None:
    """A summary's dropped generations by reason (every ``valgen.dropped.<reason>``); None when it has none."""
    total = attributes.get(contract.DROPPED)
    if not isinstance(total, int) or isinstance(total, bool):
        return None  # a collector from before the balance
    prefix = contract.DROPPED_PREFIX
    return {
        key[len(prefix) :]: value
        for key, value in attributes.items()
        if key.startswith(prefix) and isinstance(value, int) and not isinstance(value, bool)
    }


def _reasons(**counts: int) -> dict[str, int]:
    return {reason: counts.get(reason, 0) for reason in DROP_REASONS}
