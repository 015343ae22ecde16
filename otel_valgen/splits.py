"""Attempts of one step that ran at the same time with no common source: one launch, probably split.

Every record carries ``valgen.attempt`` = ``<launch id>.<n>``. Processes of one launch that do
not share a launch id (plain multi-process jobs whose processes each made up their own) form
one attempt each, and a consumer then shows one process's part as the whole step. Such
attempts run at the same time and share no source (``valgen.source``, resource
``service.instance.id``); a resumed launch's attempt starts after the earlier one stopped.
So two attempts of a step are *concurrent* when the spans of their record times overlap (ends
included) and their sets of sources are disjoint. The collector's sampler applies the same
rule when it closes a group (``valgen.attempts_concurrent`` on the summary); the
``attempts_concurrent`` of each group in ``testdata/lifecycle/*.json`` holds the cases both
suites check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["SPLIT_FIX", "Footprint", "concurrent_counts", "split_warning"]

SPLIT_FIX: Final = (
    "set OTEL_VALGEN_LAUNCH_ID to one new value per launch for all processes, "
    "or launch with torchrun/Slurm/MPI/Ray, which otel-valgen recognises"
)


@dataclass(frozen=True)
class Footprint:
    """An attempt's sources, as (source, instance) pairs, and the span of its record times (unix nanos)."""

    sources: frozenset[tuple[str, str]]
    first: int
    last: int

    def concurrent_with(self, other: Footprint) -> bool:
        """Whether the two attempts overlap in time and share no source."""
        if not self.sources or not other.sources or self.first > other.last or other.first > self.last:
            return False
        return self.sources.isdisjoint(other.sources)


def concurrent_counts(footprints: Mapping[str, Footprint]) -> dict[str, int]:
    """For each attempt of one step, how many of the others were concurrent with it."""
    return {
        attempt: sum(1 for other, theirs in footprints.items() if other != attempt and mine.concurrent_with(theirs))
        for attempt, mine in footprints.items()
    }


def split_warning(run_id: str, step: int, attempts: int) -> str:
    """The warning about a step whose ``attempts`` attempts ran at the same time with no common source."""
    return (
        f"run {run_id} step {step}: {attempts} attempts ran at the same time with no common source, so one "
        f"launch was probably split into attempts and only one part is shown as the step; {SPLIT_FIX}"
    )
