"""The input of ``show`` and ``diff``: its records read once, what it holds per kind, and the "nothing found" line."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import click

from otel_valgen import contract
from otel_valgen.cli._support import report_read_error
from otel_valgen.reader import ReadError, Record, read_paths
from otel_valgen.selection import StepSelection, select_steps
from otel_valgen.splits import split_warning
from otel_valgen.unhooked import unhooked_warning

__all__ = ["EXIT_READ_ERRORS", "Census", "Input", "describe_runs"]

EXIT_READ_ERRORS = 1


def describe_runs(runs: Mapping[str, set[int]], limit: int = 5) -> str:
    """``run-a (steps 1-3), run-b (step 7)``: the runs and steps read, the first ``limit`` runs."""
    parts = []
    for run_id in sorted(runs)[:limit]:
        steps = sorted(runs[run_id])
        if len(steps) == 1:
            parts.append(f"{run_id} (step {steps[0]})")
        elif steps[-1] - steps[0] + 1 == len(steps):
            parts.append(f"{run_id} (steps {steps[0]}-{steps[-1]})")
        else:
            parts.append(f"{run_id} ({len(steps)} steps, {steps[0]} to {steps[-1]})")
    if len(runs) > limit:
        parts.append(f"{len(runs) - limit} more")
    return ", ".join(parts)


@dataclass
class Census:
    """The runs and steps of every record read, per kind (``note`` each record as it streams past)."""

    by_kind: dict[str, dict[str, set[int]]] = field(default_factory=dict)

    def note(self, record: Record) -> None:
        """Count ``record``'s (kind, run, step)."""
        self.by_kind.setdefault(record.kind, {}).setdefault(record.run_id, set()).add(record.step)

    def runs(self) -> dict[str, set[int]]:
        """Every run read, with its steps, whatever the kind."""
        out: dict[str, set[int]] = {}
        for runs in self.by_kind.values():
            for run_id, steps in runs.items():
                out.setdefault(run_id, set()).update(steps)
        return out

    def other_kinds(self, kinds: Iterable[str], runs: set[str] | None, steps: set[int] | None) -> dict[str, str]:
        """Kinds not in ``kinds`` with records of ``runs`` and ``steps`` (None: any): kind -> what they hold."""
        out = {}
        for kind in sorted(contract.KINDS - set(kinds)):
            matching = {
                run_id: {s for s in run_steps if steps is None or s in steps}
                for run_id, run_steps in self.by_kind.get(kind, {}).items()
                if runs is None or run_id in runs
            }
            matching = {run_id: s for run_id, s in matching.items() if s}
            if matching:
                out[kind] = describe_runs(matching)
        return out

    def nothing_found(
        self,
        kind: str,
        paths: Iterable[str],
        filters: Mapping[str, object],
        runs: set[str] | None = None,
        steps: set[int] | None = None,
    ) -> str:
        """Why nothing of ``kind`` was shown: the filters matched nothing, or the input holds only another kind.

        ``filters`` are the command's options as given (name -> value, None when not given);
        ``runs`` and ``steps`` are what they select (None: any).
        """
        given = " ".join(f"--{name} {value}" for name, value in filters.items() if value is not None)
        every = self.runs()
        if given and every:
            steps_read = sum(len(s) for s in every.values())
            line = (
                f"no {kind} generations match {given}; the input holds {len(every)} run(s) and "
                f"{steps_read} step(s): {describe_runs(every)}"
            )
        else:
            line = f"no {kind} generations found in " + ", ".join(paths)
        for other, held in self.other_kinds([kind], runs, steps).items():
            line += f"; it holds {other} records ({held}): use --kind {other}"
        return line


class Input:
    """The records of ``paths`` that pass ``wanted``, streamed once per call of ``records``; read errors reported."""

    def __init__(self, paths: Sequence[str], wanted: Callable[[Record], bool]) -> None:
        self.paths = paths
        self.wanted = wanted
        self.census = Census()
        self.errors: list[ReadError] = []

    def _report(self, error: ReadError) -> None:
        self.errors.append(error)
        report_read_error(error)

    def _records(self) -> Iterator[Record]:
        for record in read_paths(self.paths, self._report):
            self.census.note(record)
            if self.wanted(record):
                yield record

    def select(self, kinds: Sequence[str], count: int | None, seed: int) -> list[StepSelection]:
        """The steps of each kind (one pass over the files for one kind; the records are held for several)."""
        records: Iterable[Record] = self._records() if len(kinds) == 1 else list(self._records())
        selections = [s for kind in kinds for s in select_steps(records, count=count, seed=seed, kind=kind)]
        for selection in selections:
            if selection.split_attempts:
                warning = split_warning(selection.run_id, selection.step, selection.split_attempts)
                click.echo(f"warning: {warning}", err=True)
            if selection.sources_unhooked:
                warning = unhooked_warning(selection.run_id, selection.step, selection.sources_unhooked)
                click.echo(f"warning: {warning}", err=True)
        return selections

    def finish(self) -> None:
        """Exit 1 when some part of the input could not be read (the rest was used)."""
        if self.errors:
            click.echo(f"{len(self.errors)} part(s) of the input could not be read (see the warnings above)", err=True)
            sys.exit(EXIT_READ_ERRORS)
