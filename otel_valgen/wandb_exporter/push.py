"""Backfill: write steps read from OTLP-JSON files into wandb, the same way the service does.

Files are read with ``otel_valgen.reader.read_paths`` and each (run, step) is reduced to its
bottom-k with ``otel_valgen.selection.select_steps`` (the attempt the shared rule picks, as
``otel-valgen show`` prints it); every step is then written once (the ledger in ``state_dir``
makes a repeated push add nothing, and a later push of a newer attempt replaces the shown one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from otel_valgen import contract
from otel_valgen.reader import ReadError, read_paths
from otel_valgen.selection import StepSelection, select_steps
from otel_valgen.wandb_exporter.ledger import Ledger
from otel_valgen.wandb_exporter.model import ClosedStep, order_generations, run_ref_from_resource
from otel_valgen.wandb_exporter.writer import WandbWriter, WriterConfig

__all__ = ["PushReport", "push_paths", "step_from_selection"]


@dataclass
class PushReport:
    """What a push did."""

    steps: int = 0
    steps_skipped: int = 0
    rows: int = 0
    errors: list[ReadError] = field(default_factory=list)


def step_from_selection(selection: StepSelection, project: str | None, entity: str | None) -> ClosedStep:
    """Make a closed step of a file selection; its target run comes from the records' resource."""
    resources = [generation.resource for generation in selection.generations]
    named = next((r for r in resources if r.get(contract.WANDB_RUN_ID)), resources[0] if resources else {})
    target = run_ref_from_resource(named, selection.run_id, project, entity)
    summary = dict(selection.summary or {})
    summary.setdefault(contract.SEEN, selection.seen)
    summary.setdefault(contract.KEPT, selection.kept)
    if selection.late:
        summary[contract.LATE] = selection.late
    return ClosedStep(
        group_id=selection.run_id,
        run=target,
        step=selection.step,
        generations=order_generations(selection.generations),
        summary=summary,
        complete=True,
        reason="push",
        attempt=selection.attempt,
        attempt_start=selection.attempt_start,
        attempt_complete=selection.complete,
    )


def push_paths(
    paths: Iterable[str | Path],
    config: WriterConfig,
    *,
    count: int | None = None,
    state_dir: str | Path | None = None,
    project: str | None = None,
    entity: str | None = None,
    on_error: Callable[[ReadError], None] | None = None,
    teardown: bool = True,
) -> PushReport:
    """Write every (run, step) found in ``paths`` to wandb; return counts.

    Args:
        paths: OTLP-JSON files or folders (the embedded sink's or the collector's file output).
        config: the writer's layout, table key and mode.
        count: k per step (else the records' ``valgen.sample_count``, else the default).
        state_dir: a folder for the ledger, so that pushing again adds nothing.
        project: wandb project for records without a ``wandb.project`` resource attribute.
        entity: wandb entity for records without a ``wandb.entity`` resource attribute.
        on_error: called with each line that could not be read.
        teardown: wait for wandb's service to write everything out before returning.

    """
    report = PushReport()

    def _error(error: ReadError) -> None:
        report.errors.append(error)
        if on_error is not None:
            on_error(error)

    ledger = Ledger(state_dir)
    writer = WandbWriter(config, ledger)
    try:
        for selection in select_steps(read_paths(paths, _error), count=count):
            if not selection.generations:
                continue
            added = writer.write(step_from_selection(selection, project, entity))
            report.rows += added
            report.steps += 1 if added else 0
            report.steps_skipped += 0 if added else 1
    finally:
        writer.close(teardown=teardown)
    return report
