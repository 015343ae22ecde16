"""Backfill: write steps read from OTLP-JSON files into the backends, the same way the service does.

Files are read with ``otel_valgen.reader.read_paths`` and each (run, step) is reduced to its
bottom-k with ``otel_valgen.selection.select_steps`` (the attempt the shared rule picks, as
``otel-valgen show`` prints it); every step is then written once per backend (each backend's
ledger in ``state_dir`` makes a repeated push add nothing, and a later push of a newer attempt
replaces the shown one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from otel_valgen import contract
from otel_valgen.exporter.backends import Backend
from otel_valgen.exporter.steps import ClosedStep, order_generations, run_resource
from otel_valgen.reader import ReadError, read_paths
from otel_valgen.selection import StepSelection, select_steps

__all__ = ["PushReport", "push_paths", "step_from_selection"]


@dataclass
class PushReport:
    """What a push did (steps and rows summed over the backends)."""

    steps: int = 0
    steps_skipped: int = 0
    rows: int = 0
    errors: list[ReadError] = field(default_factory=list)


def step_from_selection(selection: StepSelection) -> ClosedStep:
    """Make a closed step of a file selection; its resource is the first one that names a run."""
    summary = dict(selection.summary or {})
    summary.setdefault(contract.SEEN, selection.seen)
    summary.setdefault(contract.KEPT, selection.kept)
    if selection.late:
        summary[contract.LATE] = selection.late
    return ClosedStep(
        group_id=selection.run_id,
        step=selection.step,
        generations=order_generations(selection.generations),
        resource=run_resource(generation.resource for generation in selection.generations),
        summary=summary,
        complete=True,
        reason="push",
        attempt=selection.attempt,
        attempt_start=selection.attempt_start,
        attempt_complete=selection.complete,
    )


def push_paths(
    paths: Iterable[str | Path],
    backends: list[Backend],
    *,
    count: int | None = None,
    on_error: Callable[[ReadError], None] | None = None,
    teardown: bool = True,
) -> PushReport:
    """Write every (run, step) found in ``paths`` to each backend; return counts.

    Args:
        paths: OTLP-JSON files or folders (the embedded sink's or the collector's file output).
        backends: where to write (each with its ledger).
        count: k per step (else the records' ``valgen.sample_count``, else the default).
        on_error: called with each line that could not be read.
        teardown: the process ends after the push (wandb waits for its service to write everything out).

    """
    report = PushReport()

    def _error(error: ReadError) -> None:
        report.errors.append(error)
        if on_error is not None:
            on_error(error)

    try:
        for selection in select_steps(read_paths(paths, _error), count=count):
            if not selection.generations:
                continue
            step = step_from_selection(selection)
            for backend in backends:
                added = backend.write(step)
                report.rows += added or 0
                report.steps += 0 if added is None else 1
                report.steps_skipped += 1 if added is None else 0
    finally:
        for backend in backends:
            backend.close(teardown=teardown)
    return report
