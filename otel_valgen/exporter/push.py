"""Backfill: write steps read from OTLP-JSON files into the backends, the same way the service does.

Files are read with ``otel_valgen.reader.read_paths`` and each (run, step) is reduced to its
bottom-k with ``otel_valgen.selection.select_steps`` (the attempt the shared rule picks, as
``otel-valgen show`` prints it); every step is then written once per backend (each backend's
ledger in ``state_dir`` makes a repeated push add nothing, and a later push of a newer attempt
replaces the shown one).

Both kinds are pushed unless ``kinds`` says otherwise: the validation steps, then the training
rollout steps (each selected as ``otel-valgen show --kind`` selects them, k prompts with all
their responses), each written under its own key in every backend. The files are read once
per kind; a part that cannot be read is reported once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from otel_valgen import contract
from otel_valgen.distinct import PROMPTS_SEEN_ERROR
from otel_valgen.exporter.backends import Backend
from otel_valgen.exporter.steps import ClosedStep, order_generations, run_resource
from otel_valgen.reader import ReadError, read_paths
from otel_valgen.selection import StepSelection, select_steps

__all__ = ["KINDS", "PushCounts", "PushReport", "push_paths", "step_from_selection"]

KINDS: Final = (contract.KIND_VALIDATION, contract.KIND_ROLLOUT)
"""The kinds a push writes by default, in the order it writes them."""


@dataclass
class PushCounts:
    """Steps written, steps skipped (written before, or another attempt is shown) and rows added."""

    steps: int = 0
    steps_skipped: int = 0
    rows: int = 0

    def count(self, added: int | None) -> None:
        """Count one backend's answer to one step: the rows it added, or None when it skipped the step."""
        self.rows += added or 0
        self.steps += 0 if added is None else 1
        self.steps_skipped += 1 if added is None else 0


@dataclass
class PushReport(PushCounts):
    """What a push did (summed over the backends), in total and per kind (``kinds``)."""

    errors: list[ReadError] = field(default_factory=list)
    kinds: dict[str, PushCounts] = field(default_factory=dict)

    def count_kind(self, kind: str, added: int | None) -> None:
        """Count one backend's answer to one step of ``kind``, in total and for its kind."""
        self.count(added)
        self.kinds.setdefault(kind, PushCounts()).count(added)


def step_from_selection(selection: StepSelection) -> ClosedStep:
    """Make a closed step of a file selection; its resource is the first one that names a run."""
    summary = dict(selection.summary or {})
    summary.setdefault(contract.SEEN, selection.seen)
    summary.setdefault(contract.KEPT, selection.kept)
    for key, value in (
        (contract.PROMPTS_SEEN, selection.prompts_seen),
        (contract.PROMPTS_KEPT, selection.prompts_kept),
    ):
        if value is not None:
            summary.setdefault(key, value)
    if selection.prompts_kept is not None:
        summary.setdefault(contract.PROMPTS_INCOMPLETE, selection.prompts_incomplete)
        summary.setdefault(contract.PROMPTS_SEEN_ESTIMATED, selection.prompts_seen_estimated)
        if selection.prompts_seen_estimated:
            summary.setdefault(contract.PROMPTS_SEEN_ERROR, PROMPTS_SEEN_ERROR)
    if selection.sample_rate is not None:
        summary.setdefault(contract.SAMPLE_RATE, selection.sample_rate)
        if selection.prompts_under_rate is not None and selection.prompts_kept is not None:
            summary.setdefault(contract.PROMPTS_UNDER_RATE, selection.prompts_under_rate)
            summary.setdefault(contract.PROMPTS_OVER_CAP, max(selection.prompts_under_rate - selection.prompts_kept, 0))
    if selection.late:
        summary[contract.LATE] = selection.late
    return ClosedStep(
        group_id=selection.run_id,
        step=selection.step,
        generations=order_generations(selection.generations, selection.kind),
        resource=run_resource(generation.resource for generation in selection.generations),
        summary=summary,
        complete=True,
        reason="push",
        attempt=selection.attempt,
        attempt_start=selection.attempt_start,
        attempt_complete=selection.complete,
        kind=selection.kind,
    )


def push_paths(
    paths: Iterable[str | Path],
    backends: list[Backend],
    *,
    count: int | None = None,
    kinds: Collection[str] = KINDS,
    on_error: Callable[[ReadError], None] | None = None,
    teardown: bool = True,
) -> PushReport:
    """Write every (run, step) of each of ``kinds`` found in ``paths`` to each backend; return counts.

    Args:
        paths: OTLP-JSON files or folders (the embedded sink's or the collector's file output).
        backends: where to write (each with its ledger).
        count: k per step (else the records' ``valgen.sample_count``, else the default); prompts for rollouts.
        kinds: which kinds to write (``valgen.kind``): validation, rollout, or both (the default).
        on_error: called with each line that could not be read.
        teardown: the process ends after the push (wandb waits for its service to write everything out).

    Raises:
        ValueError: a kind is not one of ``KINDS``.

    """
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown kind {', '.join(sorted(unknown))}; choose from {', '.join(KINDS)}")
    paths = list(paths)
    report = PushReport()
    read_before = False

    def _error(error: ReadError) -> None:
        if read_before:  # the files are read again for the next kind: reported the first time
            return
        report.errors.append(error)
        if on_error is not None:
            on_error(error)

    try:
        for kind in (kind for kind in KINDS if kind in kinds):
            report.kinds[kind] = PushCounts()
            for selection in select_steps(read_paths(paths, _error), count=count, kind=kind):
                if not selection.generations:
                    continue
                step = step_from_selection(selection)
                for backend in backends:
                    report.count_kind(kind, backend.write(step))
            read_before = True
    finally:
        for backend in backends:
            backend.close(teardown=teardown)
    return report
